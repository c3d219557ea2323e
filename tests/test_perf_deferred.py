"""perf >= 6.19 recordings with deferred user callchains (shared/spec §2.5), built here from
the Lua fixture recording: samples ending ``USER_DEFERRED, cookie`` and CALLCHAIN_DEFERRED
records. ``sframe script`` stitches them as perf does: held until their thread's next
deferred record, merged when the cookie matches; ``--no-merge-callchains`` prints them
apart; a record that never comes costs the user frames, with a note and exit status 1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.deferred import Plan, deferred_recording
from tests.support.oracles import need_perf7

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real" / "lua-2.46-x86_64"
SFRAME = [sys.executable, "-m", "pysframe"]
#: User ips outside every mapping: printed raw as "[unknown] ([unknown])".
BASE = 0x10000


def ips_for(index: int) -> list[int]:
    return [BASE + 0x100 * index + 1, BASE + 0x100 * index + 2, BASE + 0x100 * index + 3]


def cookie_for(index: int) -> int:
    return make(index, 0)


def make(index: int, cpu: int) -> int:
    return ((2 * index + 3) << 32) | (cpu + 1)


def script(path: Path, *options: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"))
    return subprocess.run([*SFRAME, "script", str(path), "--binaries", str(FIXTURE), *options],
                          capture_output=True, text=True, env=env, timeout=120)


def blocks(text: str) -> list[list[str]]:
    return [block.splitlines() for block in text.split("\n\n") if block.strip()]


def frame_addresses(block: list[str]) -> list[int]:
    return [int(line.split()[0], 16) for line in block[1:]]


@pytest.fixture(scope="module")
def raw() -> bytes:
    path = FIXTURE / "perf.data"
    if not path.exists():
        pytest.skip("fixtures not present")
    return path.read_bytes()


def write(tmp: Path, raw: bytes, plans: dict[int, Plan], limit: int) -> tuple[Path, object]:
    built = deferred_recording(raw, plans.get, limit)
    path = tmp / "defer.perf.data"
    path.write_bytes(built.data)
    return path, built


def test_merged_samples_get_their_user_part(tmp_path: Path, raw: bytes) -> None:
    plans = {index: Plan(cookie_for(index), ips_for(index)) for index in range(40)}
    path, built = write(tmp_path, raw, plans, 40)
    run = script(path, tmp=tmp_path)
    assert run.returncode == 0, run.stderr
    found = blocks(run.stdout)
    assert len(found) == 40
    for block, (_, _, kernel, plan) in zip(found, built.samples, strict=True):  # type: ignore[attr-defined]
        assert block[0].endswith("cpu-clock: ")
        # the kernel part as recorded, then the deferred ips as they are (no "- 1")
        assert frame_addresses(block) == [*kernel, *plan.ips]
        assert all("[unknown] ([unknown])" in line for line in block[1 + len(kernel):])


def test_one_record_serves_every_sample_of_its_entry(tmp_path: Path, raw: bytes) -> None:
    shared = Plan(cookie_for(0), ips_for(0), record=False)
    plans = {0: shared, 1: shared, 2: Plan(cookie_for(0), ips_for(0))}
    path, _ = write(tmp_path, raw, plans, 3)
    run = script(path, tmp=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [frame_addresses(block)[-3:] for block in blocks(run.stdout)] == [ips_for(0)] * 3


def test_held_samples_wait_for_their_threads_record(tmp_path: Path, raw: bytes) -> None:
    # Sample 0 (thread 4000) waits for a record written (and timed) after sample 2 of
    # thread 4001, just before sample 2's own record: sample 1 prints first, then 0, then 2.
    plans = {0: Plan(cookie_for(0), ips_for(0), tid=4000, delay=2),
             1: Plan(cookie_for(1), ips_for(1), tid=4001),
             2: Plan(cookie_for(2), ips_for(2), tid=4001)}
    path, _ = write(tmp_path, raw, plans, 3)
    run = script(path, tmp=tmp_path)
    assert run.returncode == 0, run.stderr
    found = blocks(run.stdout)
    assert [block[0].split()[1] for block in found] == ["4001", "4000", "4001"]
    assert [frame_addresses(block) for block in found] == [ips_for(1), ips_for(0), ips_for(2)]


def test_a_record_that_never_comes(tmp_path: Path, raw: bytes) -> None:
    plans = {index: Plan(cookie_for(index), ips_for(index), record=index != 3)
             for index in range(6)}
    path, _ = write(tmp_path, raw, plans, 6)
    run = script(path, tmp=tmp_path)
    assert run.returncode == 1
    note = [line for line in run.stderr.splitlines() if "deferred user callchain" in line]
    assert len(note) == 1 and "1 sample " in note[0] and f"{cookie_for(3):#x}" in note[0]
    found = blocks(run.stdout)
    assert len(found) == 6
    assert frame_addresses(found[3]) == []  # the kernel part only (none: a user-mode sample)
    assert [frame_addresses(found[i]) for i in (2, 4)] == [ips_for(2), ips_for(4)]
    # The last sample's record missing: the data ends with it waiting.
    plans[5] = Plan(cookie_for(5), ips_for(5), record=False)
    path, _ = write(tmp_path, raw, plans, 6)
    run = script(path, tmp=tmp_path)
    assert run.returncode == 1 and "2 samples " in run.stderr
    assert frame_addresses(blocks(run.stdout)[-1]) == []


def test_no_merge_prints_samples_and_records_apart(tmp_path: Path, raw: bytes) -> None:
    plans = {index: Plan(cookie_for(index), ips_for(index), record=index != 2)
             for index in range(4)}
    path, built = write(tmp_path, raw, plans, 4)
    run = script(path, "--no-merge-callchains", tmp=tmp_path)
    assert run.returncode == 1  # sample 2's record never came
    found = blocks(run.stdout)
    assert len(found) == 4 + 3
    sample, record = found[0], found[1]
    assert sample[-1] == f"\t{cookie_for(0):16x} (cookie) ([unknown])"
    tid, time = built.samples[0][0], built.samples[0][1]  # type: ignore[attr-defined]
    seconds, nanoseconds = divmod(time + 500, 10**9)
    assert record[0] == (f"lua {tid:5d} {seconds:5d}.{nanoseconds // 1000:06d}: "
                         f"DEFERRED CALLCHAIN [cookie: {cookie_for(0):x}]")
    assert frame_addresses(record) == ips_for(0)
    assert [block[0].endswith("cpu-clock: ") for block in found] == [
        True, False, True, False, True, True, False]


def record_at(data: bytes, cookie: int) -> int:
    """Where the CALLCHAIN_DEFERRED record of ``cookie`` starts (the sample before it holds
    the cookie too)."""
    header = (22).to_bytes(4, "little") + (2).to_bytes(2, "little")
    at = data.index(cookie.to_bytes(8, "little"))
    while data[at - 8:at - 2] != header:
        at = data.index(cookie.to_bytes(8, "little"), at + 1)
    return at - 8


def test_a_truncated_recording(tmp_path: Path, raw: bytes) -> None:
    plans = {index: Plan(cookie_for(index), ips_for(index)) for index in range(5)}
    path, _ = write(tmp_path, raw, plans, 5)
    data = path.read_bytes()
    # Cut the file inside the third deferred record's ips.
    cut = record_at(data, cookie_for(2)) + 24
    path.write_bytes(data[:cut])
    run = script(path, tmp=tmp_path)
    assert run.returncode in (1, 2)
    assert "Traceback" not in run.stderr
    assert len([line for line in run.stderr.splitlines() if line.strip()]) >= 1
    assert all(str(path) in line or line.startswith("sframe:") for line in
               run.stderr.splitlines() if line.strip())


def test_a_malformed_deferred_record_is_skipped(tmp_path: Path, raw: bytes) -> None:
    plans = {index: Plan(cookie_for(index), ips_for(index)) for index in range(4)}
    path, _ = write(tmp_path, raw, plans, 4)
    data = bytearray(path.read_bytes())
    at = record_at(bytes(data), cookie_for(1))
    data[at + 16:at + 24] = (1 << 40).to_bytes(8, "little")  # nr far past the record
    path.write_bytes(bytes(data))
    run = script(path, tmp=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "skipped" in run.stderr
    found = blocks(run.stdout)
    assert [frame_addresses(found[i]) for i in (0, 2, 3)] == [ips_for(i) for i in (0, 2, 3)]


def normalized(text: str) -> list[str]:
    """Lines with runs of spaces made one (perf 7 pads the tid to the width of pid_max)."""
    return [re.sub(r" +", " ", line) for line in text.splitlines()]


@pytest.mark.parametrize("merge", [True, False])
def test_perf_7_prints_the_same_stitched_chains(tmp_path: Path, raw: bytes, merge: bool) -> None:
    command = need_perf7()
    # Two threads taking turns; a record may come after the other thread's next sample,
    # never after its own thread's next one (a new kernel entry comes after the return to
    # user space that wrote the record).
    def delay(index: int) -> int:
        return (index // 2) % 2

    plans = {index: Plan(cookie_for(index), ips_for(index), tid=4000 + index % 2,
                         delay=delay(index)) for index in range(30)}
    path, built = write(tmp_path, raw, plans, 30)
    options = [] if merge else ["--no-merge-callchains"]
    theirs = subprocess.run([*command, "script", *options, "-i", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert theirs.returncode == 0, theirs.stderr
    ours = script(path, *options, tmp=tmp_path)
    # Records whose delay reaches past the data never come; perf prints their cookie,
    # we print the kernel part only (and say so): compare the others.
    waiting = [index for index in range(30) if index + delay(index) >= 30]
    assert ours.returncode == (1 if waiting else 0), ours.stderr

    def stamp(time: int) -> str:
        seconds, nanoseconds = divmod(time, 10**9)
        return f" {seconds}.{nanoseconds // 1000:06d}: "

    left_out = {stamp(built.samples[index][1]) for index in waiting}  # type: ignore[attr-defined]

    def kept(text: str) -> list[str]:
        return ["\n".join(normalized("\n".join(block))) for block in blocks(text)
                if not any(time in block[0] for time in left_out)]

    assert len(kept(ours.stdout)) == (30 if merge else 2 * 30) - len(waiting)
    assert kept(ours.stdout) == kept(theirs.stdout)

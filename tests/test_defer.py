"""``sframe defer``: the recording the kernel's deferred SFrame unwinder would have made of a
``--call-graph dwarf`` recording, round-tripped through ``sframe script`` on every dwarf
recording of the fixtures (and through perf >= 6.19 when one is installed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.test_perf_deferred import perf7

from pysframe.cli.script import open_recording
from pysframe.deferred.what_if import WhatIf
from pysframe.errors import Problems

REAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
RECORDINGS = sorted(path.parent for path in REAL.glob("*/perf.data")) if REAL.exists() else []
SFRAME = [sys.executable, "-m", "pysframe"]
TRUNCATED = "ffffffffffffffff [unknown] ([unknown])"


def sframe(*arguments: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp.parent / "defer-cache"))
    return subprocess.run([*SFRAME, *arguments], capture_output=True, text=True, env=env,
                          timeout=300)


def user_frames(text: str) -> dict[tuple[str, str], list[tuple[int, str, str]]]:
    """Per sample (tid, time): its user frames (address, symbol, file); kernel lines and
    perf's truncation line left out."""
    found = {}
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if not lines:
            continue
        head = re.sub(" +", " ", lines[0]).split()
        frames = []
        for line in lines[1:]:
            fields = line.split()
            if line.strip() == TRUNCATED or fields[-1] == "([kernel.kallsyms])":
                continue
            frames.append((int(fields[0], 16), " ".join(fields[1:-1]), fields[-1]))
        found[(head[1], head[2])] = frames
    return found


def verdicts(recording: Path, assume: bool) -> dict[tuple[str, str], str]:
    """Each sample's verdict, by (tid, "seconds.micros:") as the text shows it."""
    data, unwinder = open_recording(str(recording / "perf.data"), [str(recording)],
                                    Problems(lambda _: None))
    with data:
        what_if = WhatIf(unwinder, assume_sframe=assume)
        keys = {}
        for unwound in what_if.run():
            seconds, nanoseconds = divmod(unwound.sample.time, 10**9)
            keys[unwound.sample.offset] = (str(unwound.sample.tid),
                                           f"{seconds}.{nanoseconds // 1000:06d}:")
        return {keys[offset]: outcome.verdict for offset, outcome in what_if.outcomes.items()}


@pytest.mark.skipif(not RECORDINGS, reason="fixtures not present")
@pytest.mark.parametrize("assume", [False, True], ids=["as-built", "assume-sframe"])
@pytest.mark.parametrize("recording", RECORDINGS, ids=[path.name for path in RECORDINGS])
def test_round_trip(tmp_path: Path, recording: Path, assume: bool) -> None:
    out = tmp_path / "defer.perf.data"
    options = ["--assume-sframe"] if assume else []
    made = sframe("defer", str(recording / "perf.data"), "-o", str(out), "--binaries",
                  str(recording), "--report", *options, tmp=tmp_path)
    assert made.returncode == 0, made.stderr
    counts = dict(re.findall(r"^ {4}(unwound|cut short|differs|no user context) +([\d,]+)",
                             made.stdout, re.M))
    samples = int(re.search(r"samples +([\d,]+)", made.stdout)[1].replace(",", ""))  # type: ignore[index]
    assert sum(int(value.replace(",", "")) for value in counts.values()) == samples
    assert out.stat().st_size < (recording / "perf.data").stat().st_size / 10

    original = sframe("script", str(recording / "perf.data"), "--binaries", str(recording),
                      tmp=tmp_path)
    deferred = sframe("script", str(out), "--binaries", str(recording), tmp=tmp_path)
    assert deferred.returncode == 0, deferred.stderr
    before, after = user_frames(original.stdout), user_frames(deferred.stdout)
    assert before.keys() == after.keys() and len(after) == samples
    judged = verdicts(recording, assume)
    unwound = [key for key, verdict in judged.items() if verdict == "unwound"]
    assert len(unwound) == int(counts["unwound"].replace(",", ""))
    if assume:
        assert len(unwound) > 0.9 * samples
    for key in unwound:
        # Deferred frames are kernel-unwound: raw return addresses; ours print callers - 1.
        shifted = [(address - (index > 0), symbol, where) for index, (address, _, where)
                   in enumerate(after[key]) for symbol in [""]]
        assert [(address, where) for address, _, where in shifted] == [
            (address, where) for address, _, where in before[key]], key


@pytest.mark.skipif(not RECORDINGS, reason="fixtures not present")
def test_refuses_what_it_cannot_rewrite(tmp_path: Path) -> None:
    recording = RECORDINGS[0]
    fp = recording / "perf.fp.data"
    if fp.exists():
        run = sframe("defer", str(fp), "-o", str(tmp_path / "x.data"), tmp=tmp_path)
        assert run.returncode == 1 and "not a --call-graph dwarf recording" in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1
    same = sframe("defer", str(recording / "perf.data"), "-o", str(recording / "perf.data"),
                  tmp=tmp_path)
    assert same.returncode != 0 and "Traceback" not in same.stderr


@pytest.mark.skipif(not RECORDINGS, reason="fixtures not present")
def test_a_truncated_recording_gives_what_it_holds(tmp_path: Path) -> None:
    recording = RECORDINGS[0]
    cut = tmp_path / "cut.perf.data"
    cut.write_bytes((recording / "perf.data").read_bytes()[:10_000_000])
    out = tmp_path / "cut.defer.data"
    run = sframe("defer", str(cut), "-o", str(out), "--binaries", str(recording), tmp=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "skipped at offset" in run.stderr
    readable = sframe("script", str(cut), "--binaries", str(recording), tmp=tmp_path)
    again = sframe("script", str(out), "--binaries", str(recording), tmp=tmp_path)
    assert again.returncode == 0, again.stderr
    assert user_frames(again.stdout).keys() == user_frames(readable.stdout).keys()


@pytest.mark.skipif(not RECORDINGS, reason="fixtures not present")
@pytest.mark.parametrize("options", [[], ["--assume-sframe"]], ids=["as-built", "assume"])
def test_perf_7_reads_what_defer_writes(tmp_path: Path, options: list[str]) -> None:
    command = perf7()
    if command is None:
        pytest.skip("no perf >= 6.19 here: ../shared/toolchain/install-perf.sh ../perf-new "
                    "installs one (Debian forky's linux-perf 7.x)")
    recording = next(path for path in RECORDINGS if "2.46" in path.name)
    out = tmp_path / "defer.perf.data"
    made = sframe("defer", str(recording / "perf.data"), "-o", str(out), "--binaries",
                  str(recording), *options, tmp=tmp_path)
    assert made.returncode == 0, made.stderr
    subprocess.run(["perf", "buildid-cache", "--add", str(recording / "lua")],
                   capture_output=True, check=False)
    theirs = subprocess.run([*command, "script", "--no-inline", "-i", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert theirs.returncode == 0, theirs.stderr[-500:]
    ours = sframe("script", str(out), "--binaries", str(recording), tmp=tmp_path)
    # perf 7 prints absolute addresses (6.1 printed file offsets, as we do) and names an
    # IRELATIVE PLT slot after its resolver (`__strchrnul_ifunc@plt`; 6.1, and we: `@plt`):
    # compare the symbols and files of the user frames with PLT slots unnamed. (As built,
    # frame-pointer guesses land in the heap and the stack: named as perf names them.)
    def named(frames: list[tuple[int, str, str]]) -> list[tuple[str, str]]:
        return [(re.sub(r"^\S*@plt\+", "@plt+", symbol), where) for _, symbol, where in frames]

    mine, perfs = user_frames(ours.stdout), user_frames(theirs.stdout)
    assert mine.keys() == perfs.keys()
    assert [key for key in mine if named(mine[key]) != named(perfs[key])] == []

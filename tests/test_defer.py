"""``sframe defer``: the recording the kernel's deferred SFrame unwinder would have made of a
``--call-graph dwarf`` recording. perf is the judge: perf 7 stitches what ``defer`` writes,
and each sample's verdict (unwound, cut short, differs) must be what comparing that chain
with perf's own unwinding of the source recording says; our own reader is checked against
perf 7 on the same file."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_perf7
from tests.support.perf_rewrite import data_extent, records, with_data

from pysframe.cli.script import open_recording
from pysframe.deferred.what_if import WhatIf
from pysframe.errors import Problems

REAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
RECORDINGS = sorted(path.parent for path in REAL.glob("*/perf.data")) if REAL.exists() else []
SFRAME = [sys.executable, "-m", "pysframe"]
TRUNCATED = "ffffffffffffffff [unknown] ([unknown])"
SAMPLE = 9  # PERF_RECORD_SAMPLE


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


def perf_chains(text: str) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Per sample (tid, time) as ``perf script --no-inline`` prints it: the user frames'
    (function, file), without offsets (deferred frames are raw return addresses, perf's own
    DWARF unwinding prints callers less one byte), symbol versions (perf 7 prints
    ``__libc_start_main@@GLIBC_2.34``, 6.1 does not) and PLT slot names (perf 7 names an
    IRELATIVE slot after its resolver)."""
    found = {}
    for key, frames in user_frames(text).items():
        named = []
        for _, symbol, where in frames:
            symbol = re.sub(r"\+0x[0-9a-f]+$", "", symbol)
            symbol = re.sub(r"@@?GLIBC[\w.]*", "", symbol)
            named.append((re.sub(r"^\S*@plt$", "@plt", symbol), where))
        found[key] = named
    return found


def perf_7_script(command: list[str], recording: Path, path: Path, home: Path) -> str:
    """perf 7's text of ``path``, the recording's binaries found by build id in a private
    ``~/.debug`` (the paths inside the fixture recording are those of the machine that made
    it)."""
    env = dict(os.environ, HOME=str(home))
    subprocess.run([*command, "buildid-cache", "--add", str(recording / "lua")], env=env,
                   capture_output=True, check=True, timeout=120)
    run = subprocess.run([*command, "script", "--no-inline", "-i", str(path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-500:]
    return run.stdout


def oracle_verdict(perf_own: list[tuple[str, str]], deferred: list[tuple[str, str]]) -> str:
    """What perf says of one sample: its stitched deferred chain against its own DWARF
    unwinding of the stack copy. perf (libunwind) stops early on some chains; there a
    deferred chain that goes on past perf's last frame is unwound (a longer chain than
    perf's is not checked beyond perf's last frame)."""
    if not perf_own and not deferred:
        return "no user context"
    if deferred[:len(perf_own)] == perf_own:
        return "unwound"
    if perf_own[:len(deferred)] == deferred:
        return "cut short"
    return "differs"


@pytest.mark.skipif(not RECORDINGS, reason="fixtures not present")
@pytest.mark.parametrize("assume", [False, True], ids=["as-built", "assume-sframe"])
@pytest.mark.parametrize("recording", RECORDINGS, ids=[path.name for path in RECORDINGS])
def test_perf_judges_every_verdict(tmp_path: Path, recording: Path, assume: bool) -> None:
    """perf 7 stitches the recording ``defer`` writes; its chains are compared with perf's
    own unwinding of the source recording (``perf-script.no-inline.txt``, printed by perf
    6.1 from the stack copies when the recording was made): every sample's verdict in
    ``--report`` must be perf's, and the counts the report prints must be perf's counts."""
    command = need_perf7()
    out = tmp_path / "defer.perf.data"
    options = ["--assume-sframe"] if assume else []
    made = sframe("defer", str(recording / "perf.data"), "-o", str(out), "--binaries",
                  str(recording), "--report", *options, tmp=tmp_path)
    assert made.returncode == 0, made.stderr
    counts = {name: int(value.replace(",", "")) for name, value in re.findall(
        r"^ {4}(unwound|cut short|differs|no user context) +([\d,]+)", made.stdout, re.M)}
    samples = int(re.search(r"samples +([\d,]+)", made.stdout)[1].replace(",", ""))  # type: ignore[index]
    assert sum(counts.values()) == samples
    assert out.stat().st_size < (recording / "perf.data").stat().st_size / 10

    perf_own = perf_chains((recording / "perf-script.no-inline.txt").read_text())
    stitched = perf_chains(perf_7_script(command, recording, out, tmp_path / "home"))
    assert stitched.keys() == perf_own.keys() and len(stitched) == samples
    theirs = {key: oracle_verdict(perf_own[key], stitched[key]) for key in perf_own}
    ours = verdicts(recording, assume)
    assert ours.keys() == theirs.keys()
    assert [(key, ours[key], theirs[key]) for key in ours if ours[key] != theirs[key]] == []
    assert counts == {name: list(theirs.values()).count(name) for name in counts}
    if assume:
        assert counts["unwound"] > 0.9 * samples


@pytest.mark.skipif(not RECORDINGS, reason="fixtures not present")
def test_our_script_reads_the_deferred_recording_as_the_source(tmp_path: Path) -> None:
    """Our own reader of what ``defer`` wrote gives, for each sample, the frames our unwinder
    gives from the stack copy, where perf says the sample was unwound (a consistency check
    of writer and reader; perf is the judge in the test above)."""
    recording = RECORDINGS[0]
    out = tmp_path / "defer.perf.data"
    made = sframe("defer", str(recording / "perf.data"), "-o", str(out), "--binaries",
                  str(recording), "--assume-sframe", tmp=tmp_path)
    assert made.returncode == 0, made.stderr
    original = sframe("script", str(recording / "perf.data"), "--binaries", str(recording),
                      tmp=tmp_path)
    deferred = sframe("script", str(out), "--binaries", str(recording), tmp=tmp_path)
    assert deferred.returncode == 0, deferred.stderr
    before, after = user_frames(original.stdout), user_frames(deferred.stdout)
    assert before.keys() == after.keys()
    perf_own = perf_chains((recording / "perf-script.no-inline.txt").read_text())
    named_after = perf_chains(deferred.stdout)
    unwound = [key for key in before if oracle_verdict(perf_own[key], named_after[key])
               == "unwound"]
    assert len(unwound) > 0.9 * len(before)
    for key in unwound:
        # Deferred frames are raw return addresses; ours from a stack copy print callers - 1.
        shifted = [address - (index > 0) for index, (address, _, _) in enumerate(after[key])]
        assert shifted[:len(before[key])] == [address for address, _, _ in before[key]], key


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
    command = need_perf7()
    recording = next(path for path in RECORDINGS if "2.46" in path.name)
    out = tmp_path / "defer.perf.data"
    made = sframe("defer", str(recording / "perf.data"), "-o", str(out), "--binaries",
                  str(recording), *options, tmp=tmp_path)
    assert made.returncode == 0, made.stderr
    theirs = perf_7_script(command, recording, out, tmp_path / "home")
    ours = sframe("script", str(out), "--binaries", str(recording), tmp=tmp_path)
    # perf 7 prints absolute addresses (6.1 printed file offsets, as we do): compare the
    # symbols and files of the user frames, PLT stubs included (perf 7 and we name an
    # IRELATIVE one after its resolver: `__strchrnul_ifunc@plt`). (As built, frame-pointer
    # guesses land in the heap and the stack: named as perf names them.)
    def named(frames: list[tuple[int, str, str]]) -> list[tuple[str, str]]:
        return [(symbol, where) for _, symbol, where in frames]

    mine, perfs = user_frames(ours.stdout), user_frames(theirs)
    assert mine.keys() == perfs.keys()
    assert [key for key in mine if named(mine[key]) != named(perfs[key])] == []
    assert any("__strchrnul_ifunc@plt+" in symbol for frames in mine.values()
               for _, symbol, _ in frames)


@pytest.mark.skipif(not RECORDINGS, reason="fixtures not present")
def test_a_repeated_sample_shares_its_entry(tmp_path: Path) -> None:
    """A system-wide 6.18 recording held one sample twice, byte for byte. Given a cookie of
    its own, the copy's sample came before the first one's deferred record and perf 7 printed
    the copy's cookie as its only user frame; as one entry, both copies get the chain."""
    command = need_perf7()
    recording = next(path for path in RECORDINGS if "2.46" in path.name)
    raw = (recording / "perf.data").read_bytes()
    start, size = data_extent(raw)
    user_samples = [(offset, length) for offset, kind, length in records(raw)
                    if kind == SAMPLE and struct.unpack_from("<H", raw, offset + 4)[0] & 7 == 2]
    offset, length = user_samples[len(user_samples) // 2]
    data = raw[start:offset + length] + raw[offset:offset + length] + raw[offset + length:
                                                                          start + size]
    source = tmp_path / "source"
    source.mkdir()
    (source / "perf.data").write_bytes(with_data(raw, data))
    out = tmp_path / "defer.perf.data"
    made = sframe("defer", str(source / "perf.data"), "-o", str(out), "--binaries",
                  str(recording), tmp=tmp_path)
    assert made.returncode == 0, made.stderr
    theirs = perf_7_script(command, recording, out, tmp_path / "home")
    ours = sframe("script", str(out), "--binaries", str(recording), tmp=tmp_path).stdout
    blocks = [block for block in theirs.split("\n\n") if block.strip()]
    mine = [block for block in ours.split("\n\n") if block.strip()]
    assert len(blocks) == len(mine) == 1 + sum(1 for _, kind, _ in records(raw) if kind == SAMPLE)
    heads = [re.sub(" +", " ", block.splitlines()[0]) for block in blocks]
    twice = [index for index in range(1, len(heads)) if heads[index] == heads[index - 1]]
    assert len(twice) == 1
    first, copy = blocks[twice[0] - 1].splitlines()[1:], blocks[twice[0]].splitlines()[1:]
    assert len(first) >= 3 and copy == first
    # Our reader gives the copy the same frames as perf 7 does.
    ours_first = mine[twice[0] - 1].splitlines()[1:]
    assert mine[twice[0]].splitlines()[1:] == ours_first
    assert [line.split()[1:] for line in ours_first] == [line.split()[1:] for line in first]

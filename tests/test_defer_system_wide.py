"""``sframe defer`` on a system-wide recording (``perf record -a --call-graph dwarf``).

perf adds a dummy event for the side band to such a recording; its layout differs from
the sampled event's (no PERIOD) and it has no samples, so it does not stop the rewrite
(it used to: "events with different sample layouts are not rewritten"). perf 7 is the
judge: it stitches each deferred record to the samples of its kernel entry (found through
the record's event id), and every sample's user frames must be what our reader gives.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.support.oracles import need_perf7, unavailable
from tests.support.parity import plt_unnamed, recording_directory
from tests.test_defer_exec import WORK_C

from pysframe.sources.perf_data import open_perf_data
from pysframe.symbolize.demangling import perf_name

SFRAME = [sys.executable, "-m", "pysframe"]
TRUNCATED = "ffffffffffffffff [unknown] ([unknown])"
#: A sample's first line as perf prints a system-wide recording: comm, tid, [cpu], time
#: (tid -1: a task sampled in do_exit after it was unhashed).
HEAD = re.compile(r"\s*(.*?)\s+(-?\d+)\s+\[(\d+)\]\s+([\d.]+):")
#: A task's exit as ``perf script --show-task-events`` prints it: ..., time, (pid:tid).
EXIT = re.compile(r"\s([\d.]+): PERF_RECORD_EXIT\((-?\d+):(-?\d+)\)")
LOST = ("[unknown]", "([unknown])")


def chains(text: str, shown: Callable[[str], str] | None = None
           ) -> dict[tuple[str, str, str], list[list[tuple[str, str]]]]:
    """Per (tid, cpu, time), the user frames (symbol, file) of each sample taken then
    (a recording can hold one sample twice), each symbol's name as ``shown`` gives it. PLT
    stubs unnamed: for an IRELATIVE slot perf 7 takes whichever alias of its resolver it
    finds (`__GI___rawmemchr`, `offset_0x...`)."""
    found: dict[tuple[str, str, str], list[list[tuple[str, str]]]] = {}
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if not lines:
            continue
        head = HEAD.match(lines[0])
        assert head is not None, lines[0]
        frames = []
        for line in lines[1:]:
            fields = line.split()
            if line.strip() == TRUNCATED or fields[-1] == "([kernel.kallsyms])":
                continue
            symbol = " ".join(fields[1:-1])
            name, plus, offset = symbol.rpartition("+0x")
            if shown is not None and plus:
                symbol = shown(name) + plus + offset
            frames.append((plt_unnamed(symbol), fields[-1]))
        found.setdefault((head[2], head[3], head[4]), []).append(frames)
    return found


def exits(text: str) -> dict[str, float]:
    """Each thread's exit time, from perf's ``--show-task-events`` text."""
    return {match[3]: float(match[1]) for match in EXIT.finditer(text)}


def forgotten(key: tuple[str, str, str], exited: dict[str, float]) -> bool:
    """Whether perf 7 no longer knows the sample's thread: it drops a thread's maps and comm
    at its EXIT record, and on 6.18 a task's last samples (in do_exit, before exit_mm) come
    after that record. perf 6.1 keeps them, as we do; the frames are in the sample's maps."""
    tid, _, time = key
    return tid in exited and float(time) >= exited[tid]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    perf, directory = recording_directory(tmp_path_factory, "defer-system-wide")
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("needs gcc")
    (directory / "work.c").write_text(WORK_C)
    work = directory / "work"
    subprocess.run([gcc, "-O2", "-fomit-frame-pointer", "-o", str(work),
                    str(directory / "work.c")], check=True, timeout=120)
    output = directory / "perf.data"
    # As users type it: perf's default event and frequency (its dummy event then has no
    # PERIOD; with -F or -e both have it).
    recorded = subprocess.run([perf, "record", "-q", "-a", "--call-graph", "dwarf", "-o",
                               str(output), "--", str(work), "0.6"],
                              capture_output=True, text=True, timeout=300)
    if recorded.returncode != 0:
        unavailable(f"perf cannot record system-wide here: {recorded.stderr.strip()[-200:]}")
    return output


def sframe(*arguments: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(home / "cache"))
    return subprocess.run([*SFRAME, *arguments], capture_output=True, text=True, env=env,
                          timeout=600)


def test_the_samples_event_is_deferred_and_perf_7_reads_it_as_we_do(recording: Path) -> None:
    command = need_perf7()
    with open_perf_data(str(recording)) as data:  # the case: events of two layouts
        assert len({(attr.sample_type, attr.sample_regs_user) for attr in data.attrs}) > 1
    home = recording.parent
    out = home / "defer.data"
    made = sframe("defer", str(recording), "-o", str(out), "--assume-sframe", home=home)
    assert made.returncode == 0, made.stderr[-500:]
    # perf 7 demangles with parameter lists (`toplev::main(int, char**)`), perf 6.1 and we
    # without (`toplev::main`): perf 7's symbols are taken mangled and shown as we show
    # them (tests/test_demangle.py holds that to perf 6.1's). A system-wide recording
    # holds whatever ran: in CI, a C++ program's samples made this test fail.
    theirs = subprocess.run([*command, "script", "--no-inline", "--no-demangle", "-i",
                             str(out)], capture_output=True, text=True, timeout=300)
    assert theirs.returncode == 0, theirs.stderr[-500:]
    ours = sframe("script", str(out), home=home)
    assert ours.returncode in (0, 1), ours.stderr[-500:]
    tasks = subprocess.run([*command, "script", "--show-task-events", "-F", "tid,time",
                            "-i", str(out)], capture_output=True, text=True, timeout=300)
    assert tasks.returncode == 0, tasks.stderr[-500:]
    exited = exits(tasks.stdout)
    mine, perfs = chains(ours.stdout), chains(theirs.stdout, perf_name)
    assert mine.keys() == perfs.keys()
    known = [key for key in mine if not forgotten(key, exited)]
    differing = [key for key in known if mine[key] != perfs[key]]
    assert differing == [], (f"{len(differing)} samples differ; the first, {differing[0]}: "
                             f"ours {mine[differing[0]]}, perf 7's {perfs[differing[0]]}")
    # Where perf 7 has forgotten the thread it prints each deferred frame unnamed: as many
    # frames as ours.
    lost = [key for key in mine if forgotten(key, exited)]
    assert all(frames == LOST for key in lost for chain in perfs[key] for frames in chain)
    assert [key for key in lost
            if [len(chain) for chain in mine[key]] != [len(chain) for chain in perfs[key]]] == []
    # The workload's samples got their user part from the deferred records: its recursion
    # (middle) under main, stitched by perf 7.
    program = f"({home / 'work'})"
    stitched = [frames for chains_at in perfs.values() for frames in chains_at
                if any(symbol.startswith("main+") and where == program for symbol, where in frames)
                and any(symbol.startswith("middle+") for symbol, _ in frames)]
    assert len(stitched) >= 50, len(stitched)

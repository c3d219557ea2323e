"""The batch pipeline of `sframe script` (arrays in, text built from arrays) prints exactly
what the sample-by-sample scalar path prints, on every recording here it takes; and it
declines, for the record path, the recordings it does not take."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.support.perf_text import held_to_perfs_text

from conftest import FIXTURES, REPO
from pysframe.cli.script import ENGINE_VARIABLE, run_script

pytest.importorskip("numpy")

RECORDINGS = [*sorted(FIXTURES.glob("real/lua-*/perf*.data")),
              *sorted((REPO / "tests" / "data").glob("*.perf.data"))]


def _text(path: Path, engine: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> bytes:
    monkeypatch.setenv(ENGINE_VARIABLE, engine)
    output = tmp_path / f"{path.name}.{engine}.txt"
    run_script(str(path), binaries=[str(path.parent)], output=str(output), show_stops=False,
               report=lambda message: None)
    return output.read_bytes()


def _splits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of ranges of each run split between processes (script._in_jobs spied)."""
    from pysframe.cli import script as script_module

    split: list[int] = []
    real = script_module._in_jobs

    def spied(ranges: list[tuple[int, int]], *args: object, **kwargs: object) -> object:
        split.append(len(ranges))
        return real(ranges, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(script_module, "_in_jobs", spied)
    return split


@pytest.mark.skipif(not RECORDINGS, reason="no recordings here")
@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_batch_pipeline_prints_what_the_scalar_path_prints(
        path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scalar = _text(path, "scalar", monkeypatch, tmp_path)
    assert scalar
    assert _text(path, "vector", monkeypatch, tmp_path) == scalar


def test_the_lua_recording_is_taken_by_the_batch_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    from pysframe.sources.perf_arrays import sample_arrays
    from pysframe.sources.perf_data import open_perf_data

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    if not path.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    with open_perf_data(str(path)) as data:
        assert sample_arrays(data) is not None


SIGNAL_PROGRAM = r"""
#include <signal.h>
#include <stdlib.h>
static volatile unsigned long sink;
__attribute__((noinline)) static unsigned long work(int depth) {
    unsigned long s = 0;
    for (int i = 0; i < 2000; i++) s += (unsigned long)i * (unsigned long)depth;
    return depth > 0 ? s + work(depth - 1) : s;
}
static void handler(int sig) { sink += work(6 + sig % 3); }
int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3000;
    signal(SIGUSR1, handler);
    for (int i = 0; i < rounds; i++) { sink += work(i % 9); raise(SIGUSR1); }
    return 0;
}
"""


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two short recordings made here: signal handlers entered from a loop (signal
    frames: chains the batch hands to the scalar tracer), and a shell starting the same
    program three times (forks, execs and mappings between the samples)."""
    import shutil
    import subprocess

    from support.oracles import unavailable
    from support.parity import perf_can_record, record

    directory = tmp_path_factory.mktemp("vector")
    why = perf_can_record(directory)
    if why is not None:
        unavailable(why)
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    source, program = directory / "signals.c", directory / "signals"
    source.write_text(SIGNAL_PROGRAM)
    subprocess.run(["gcc", "-O2", "-o", str(program), str(source)], check=True, timeout=120)
    return [record(directory / "signals.data", [str(program), "60000"], "-F", "2000",
                   "--call-graph", "dwarf,4096"),
            record(directory / "shell.data", ["sh", "-c", f"{program} 12000; {program} 12000; "
                                              f"{program} 12000"], "-F", "2000",
                   "--call-graph", "dwarf,4096")]


def test_recordings_made_here_print_the_same(recordings: list[Path],
                                             monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    from pysframe.sources.perf_arrays import sample_arrays
    from pysframe.sources.perf_data import open_perf_data

    for path in recordings:
        with open_perf_data(str(path)) as data:
            arrays = sample_arrays(data)
            # The count depends on the machine's speed and perf's sample-rate throttling
            # (CI once saw 99): enough to hold chains of every kind, not a figure.
            assert arrays is not None and len(arrays.offset) > 40
            assert path.name != "shell.data" or len(arrays.events) > 10
        scalar = _text(path, "scalar", monkeypatch, tmp_path)
        assert _text(path, "vector", monkeypatch, tmp_path) == scalar, path.name
    signals = _text(recordings[0], "scalar", monkeypatch, tmp_path).decode()
    assert "handler" in signals  # samples inside the handlers, above a signal frame


@pytest.mark.parametrize("in_memory", [None, 0, 1_000_000],
                         ids=["in-memory", "all-in-the-file", "spilled-midway"])
def test_jobs_print_the_same_text_in_the_same_order(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path, in_memory: int | None
                                                    ) -> None:
    """-j 3 over small chunks (three processes, seven chunks of the Lua recording): the text
    of one process, byte for byte, whether a child's text is held in memory, in its
    temporary file, or in both (spilled to the file past a few chunks' bytes)."""
    from pysframe.cli import jobs as jobs_module
    from pysframe.session import vector as vector_session

    if in_memory is not None:
        monkeypatch.setattr(jobs_module, "IN_MEMORY", in_memory)

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    if not path.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    monkeypatch.setattr(vector_session, "CHUNK", 512)
    monkeypatch.setenv(ENGINE_VARIABLE, "vector")
    texts = []
    for jobs in (1, 3):
        output = tmp_path / f"jobs{jobs}.txt"
        status = run_script(str(path), binaries=[str(path.parent)], output=str(output),
                            show_stops=False, report=lambda message: None, jobs=jobs)
        assert status == 0
        texts.append(output.read_bytes())
    assert texts[0] == texts[1] == _text(path, "scalar", monkeypatch, tmp_path)


def test_a_corrupt_table_costs_the_same_in_both_paths(tmp_path: Path) -> None:
    """The Lua binary with an invalid FRE type in its hottest function: the batch pipeline
    replaces the damaged table as the record path does (by the one generated from its
    .eh_frame), reports it once with its file offset, prints the same text and exits 1
    (with -j 2 too)."""
    import subprocess
    import sys

    from test_hostile_inputs import _bad_fre_type, isolated

    recording = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    if not recording.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    directory = tmp_path / "bin"
    directory.mkdir()
    _, info_at = _bad_fre_type(directory / "lua")
    runs = []
    for engine, jobs in (("scalar", "1"), ("scalar", "2"), ("vector", "1"), ("vector", "2")):
        (tmp_path / engine / jobs).mkdir(parents=True)
        env = {**isolated(tmp_path / engine / jobs), ENGINE_VARIABLE: engine,
               "PATH": "/usr/bin:/bin"}
        runs.append(subprocess.run(
            [sys.executable, "-m", "pysframe", "script", str(recording), "--binaries",
             str(directory), "-j", jobs], capture_output=True, text=True, env=env,
            timeout=300, check=False))
    first = runs[0]
    assert first.returncode == 1 and f"file offset {info_at:#x}" in first.stderr
    assert len(first.stderr.splitlines()) == 1
    for run in runs[1:]:
        assert (run.returncode, run.stdout, run.stderr) == (
            first.returncode, first.stdout, first.stderr)


def test_jobs_text_copied_to_standard_output_in_order(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """-j 3 to standard output that is a file: the children's text is copied to it as
    bytes (cli.jobs.copier), after what this process wrote before it was flushed; the file
    holds the text of one process, byte for byte. A stream without a descriptor gets the
    text as strings, in the same order."""
    import io
    import sys

    from pysframe.cli.jobs import copier
    from pysframe.session import vector as vector_session

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    if not path.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    monkeypatch.setattr(vector_session, "CHUNK", 512)
    monkeypatch.setenv(ENGINE_VARIABLE, "vector")
    expected = _text(path, "scalar", monkeypatch, tmp_path)
    monkeypatch.setenv(ENGINE_VARIABLE, "vector")
    target = tmp_path / "stdout.txt"
    with open(target, "w", encoding="utf-8") as stdout:
        assert copier(stdout) is not None
        monkeypatch.setattr(sys, "stdout", stdout)
        status = run_script(str(path), binaries=[str(path.parent)], output=None,
                            show_stops=False, report=lambda message: None, jobs=3)
        stdout.flush()
    assert status == 0
    assert target.read_bytes() == expected
    captured = io.StringIO()
    assert copier(captured) is None
    monkeypatch.setattr(sys, "stdout", captured)
    assert run_script(str(path), binaries=[str(path.parent)], output=None, show_stops=False,
                      report=lambda message: None, jobs=3) == 0
    assert captured.getvalue().encode() == expected


@pytest.mark.parametrize("path", [p for p in RECORDINGS if p.parent.name.startswith("lua")],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_sample_by_sample_path_split_between_jobs_prints_the_same(
        path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The sample-by-sample path with -j 3 (a recording the batch pipeline does not take):
    each worker follows every record, unwinds and prints its share; the text is that of
    -j 1, byte for byte, and the split happened (three shares of the estimated count)."""
    from pysframe.cli import script as script_module
    from pysframe.sources.perf_data import estimated_samples, open_perf_data

    with open_perf_data(str(path)) as data:
        assert estimated_samples(data) >= script_module.SCALAR_JOBS_FROM
    monkeypatch.setenv(ENGINE_VARIABLE, "scalar")
    split = _splits(monkeypatch)
    texts = []
    for jobs in (1, 3):  # (the first run leaves the cache warm: the second is split)
        output = tmp_path / f"jobs{jobs}.txt"
        assert run_script(str(path), binaries=[str(path.parent)], output=str(output),
                          show_stops=False, report=lambda message: None, jobs=jobs) == 0
        texts.append(output.read_bytes())
    assert split == [3]
    assert texts[0] == texts[1] and texts[0].count(b"cpu-clock") > 1000
    held_to_perfs_text(path, texts[1])


@pytest.mark.parametrize("count", [1000, 3171, 66069])
@pytest.mark.parametrize("jobs", [1, 2, 3, 8, 64])
def test_later_shares_are_smaller_by_what_following_the_earlier_ones_costs(
        count: int, jobs: int) -> None:
    """The sample-by-sample shares of -j: they cover every sample once, in order, none
    empty; each worker's cost (its own samples, plus FOLLOW_COST for each sample of the
    shares before it) is the first worker's, within a sample's rounding each."""
    from pysframe.cli.script import _TO_THE_END, FOLLOW_COST, share_bounds

    bounds = share_bounds(count, jobs)
    assert bounds[0] == 0 and bounds[-1] == _TO_THE_END and len(bounds) <= jobs + 1
    inner = bounds[:-1]
    assert inner == sorted(set(inner)) and inner[-1] < count  # no empty share
    sizes = [b - a for a, b in zip(inner, [*inner[1:], count], strict=True)]
    costs = [size + FOLLOW_COST * first for size, first in zip(sizes, inner, strict=True)]
    assert all(abs(cost - costs[0]) <= len(costs) for cost in costs), costs
    if jobs == 2:  # the parent's share is the larger one: 1 / (1 + 1 - FOLLOW_COST)
        assert 0.54 * count <= sizes[0] <= 0.57 * count


def test_the_estimated_count_of_samples(tmp_path: Path) -> None:
    """Counted exactly when the estimate reads every record, within a quarter when it
    reads the first 512; 0 (no split) for a recording whose first record has size 0."""
    from pysframe.sources.perf_data import Sample, estimated_samples, open_perf_data

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    if not path.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    with open_perf_data(str(path)) as data:
        exact = sum(isinstance(record, Sample) for record in data.records())
        assert estimated_samples(data, records=10**9) == exact
        assert abs(estimated_samples(data) - exact) < exact // 4
        raw = bytearray(path.read_bytes())
        raw[data.data_offset + 6:data.data_offset + 8] = bytes(2)
    damaged = tmp_path / "damaged.data"
    damaged.write_bytes(bytes(raw))
    with open_perf_data(str(damaged)) as data:
        assert estimated_samples(data) == 0


def test_a_first_run_is_split_too_the_tables_read_before_the_fork(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A first run (an empty cache) is split between the -j workers as a warm one is: the
    symbol table and the function index of each file the samples hit are read (made, or
    handed over by the symbols helper) once, in the process the workers fork from, not
    again by each worker. Both runs print the text of -j 1, held to perf's own text."""
    import os

    from pysframe.generate import on_demand
    from pysframe.symbolize import symbolizer as symbolizer_module

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    if not path.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(ENGINE_VARIABLE, "scalar")
    split = _splits(monkeypatch)
    calls = tmp_path / "calls.txt"  # appended to by every process: "pid what file"

    def spy(owner: object, name: str, path_of: Callable[..., str]) -> None:
        real = getattr(owner, name)

        def spied(*args: object, **kwargs: object) -> object:
            with calls.open("a") as out:
                out.write(f"{os.getpid()} {name} {path_of(*args)}\n")
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, spied)

    spy(symbolizer_module, "load_symbols", lambda image, *_: image.path)
    spy(symbolizer_module.Symbolizer, "give_table", lambda _, modules, path, table: path)
    spy(on_demand, "_scan", lambda image, *_: image.path)
    texts = []
    for run in ("first", "warm", "one"):
        output = tmp_path / f"{run}.txt"
        assert run_script(str(path), binaries=[str(path.parent)], output=str(output),
                          show_stops=False, report=lambda message: None,
                          jobs=1 if run == "one" else 2) == 0
        texts.append(output.read_bytes())
        if run == "first":
            first_calls, _ = calls.read_text().splitlines(), calls.unlink()
    assert split == [2, 2] and texts[0] == texts[1] == texts[2]
    held_to_perfs_text(path, texts[0])  # (the first run's text)
    assert {line.split()[0] for line in first_calls} == {str(os.getpid())}, first_calls
    # read (made), or handed over by the first run's helper, which made it in its process
    read = [line.split(" ", 2)[2] for line in first_calls
            if " load_symbols " in line or " give_table " in line]
    assert len(read) == len(set(read)) == 3  # lua, libc, ld.so: each once
    assert [line for line in first_calls if " _scan " in line]  # (libc's index made)


def test_the_record_walk_split_between_two_processes_prints_perfs_text(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The batch pipeline with -j 2, its record walk split between two processes (any size
    of records: pysframe.sources.perf_scan): the halves were joined, and the text is the
    one-process walk's, byte for byte, and perf's own (its `perf script --no-inline`)."""
    from tests.support.sample_arrays import record_joins

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    if not path.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    alone = _text(path, "vector", monkeypatch, tmp_path)
    joins = record_joins(monkeypatch)
    monkeypatch.setenv(ENGINE_VARIABLE, "vector")
    output = tmp_path / "split.txt"
    run_script(str(path), binaries=[str(path.parent)], output=str(output), show_stops=False,
               report=lambda message: None, jobs=2)
    assert joins == [True]
    assert output.read_bytes() == alone
    held_to_perfs_text(path, output.read_bytes())


def test_chains_told_apart_when_their_hashes_collide() -> None:
    """A chunk's samples are grouped by chain (report.perf_script_chunks._chains): rows with
    the same frames and count share a chain; rows whose hashes collide are still told
    apart (multipliers of 0: every row of a count hashes alike)."""
    import numpy as np

    from pysframe.report import perf_script_chunks

    printed = np.array([[5, 7, 0], [5, 7, 0], [5, 8, 0], [5, 7, 9], [6, 0, 0], [5, 7, 0]],
                       np.uint64)
    counts = np.array([2, 2, 2, 3, 1, 2], np.int64)
    expected_rows = [0, 2, 3, 4]
    expected_of = [0, 0, 1, 2, 3, 0]
    chains, chain_of = perf_script_chunks._chains(printed, counts)
    assert (chains.tolist(), chain_of.tolist()) == (expected_rows, expected_of)
    mix = perf_script_chunks._MIX
    try:
        perf_script_chunks._MIX = np.zeros_like(mix)
        chains, chain_of = perf_script_chunks._chains(printed, counts)
    finally:
        perf_script_chunks._MIX = mix
    assert (chains.tolist(), chain_of.tolist()) == (expected_rows, expected_of)


def test_colliding_chain_hashes_print_perfs_text(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """With every chain of a length hashing alike, the batch pipeline's text is still perf's
    own and the sample-by-sample path's, byte for byte: a chain is only shared by samples
    whose frames are the same."""
    import numpy as np

    from pysframe.report import perf_script_chunks

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    if not path.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    scalar = _text(path, "scalar", monkeypatch, tmp_path)
    monkeypatch.setattr(perf_script_chunks, "_MIX", np.zeros_like(perf_script_chunks._MIX))
    colliding = _text(path, "vector", monkeypatch, tmp_path)
    assert colliding == scalar
    held_to_perfs_text(path, colliding)

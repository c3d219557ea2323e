"""The workers of `sframe script -j N` take the functions another worker made instead of
making them again (pysframe.made_exchange): the exchange's records, whole or
half-written, and a first run of the Lua recording with -j 2 that makes each function
once, prints -j 1's text and leaves a cache from which a second run makes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.perf_text import held_to_perfs_text

from conftest import FIXTURES
from pysframe.made_exchange import MadeExchange

LUA = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"


@pytest.fixture
def pair() -> Iterator[tuple[MadeExchange, MadeExchange]]:
    files = MadeExchange.for_workers(2)
    yield MadeExchange(files, 0), MadeExchange(list(files), 1)
    for descriptor in files:
        os.close(descriptor)


def test_what_one_gives_the_other_takes(pair: tuple[MadeExchange, MadeExchange]) -> None:
    first, second = pair
    assert second.take(b"libc", 7) == (False, None)
    first.give(b"libc", 7, b"table seven")
    first.give(b"libc", 8, None)  # made: no rows
    first.give(b"other", 7, b"another binary's")
    assert second.take(b"libc", 7) == (True, b"table seven")
    assert second.take(b"libc", 8) == (True, None)
    assert second.take(b"other", 7) == (True, b"another binary's")
    assert second.take(b"libc", 9) == (False, None)
    assert first.take(b"libc", 7) == (False, None)  # its own file is not read back
    assert second.taken == 3


def test_a_record_half_written_is_taken_once_whole(
        pair: tuple[MadeExchange, MadeExchange]) -> None:
    first, second = pair
    first.give(b"libc", 1, b"x" * 100)
    whole = os.pread(first.files[0], 1000, 0)
    os.ftruncate(first.files[0], 0)
    os.pwrite(first.files[0], whole[:60], 0)  # the writer half-way through
    assert second.take(b"libc", 1) == (False, None)
    os.pwrite(first.files[0], whole[60:], 60)
    assert second.take(b"libc", 1) == (True, b"x" * 100)
    assert not second.broken


def test_a_record_longer_than_a_read_is_taken(pair: tuple[MadeExchange, MadeExchange]) -> None:
    """A binary's index is ~1 MB for cc1 (24 bytes a function): longer than the piece a
    peer's file is read in. (Before, such a record ended the exchange.)"""
    first, second = pair
    first.give(b"libc", 1, b"small")
    first.give(b"cc1", (1 << 64) - 1, bytes(range(256)) * 12_000)  # ~3 MB
    first.give(b"libc", 2, b"after it")
    assert second.take(b"libc", 2) == (True, b"after it")
    assert second.take(b"cc1", (1 << 64) - 1) == (True, bytes(range(256)) * 12_000)
    assert second.take(b"libc", 1) == (True, b"small")
    assert not second.broken


def test_a_record_that_is_not_one_ends_the_exchange(
        pair: tuple[MadeExchange, MadeExchange]) -> None:
    first, second = pair
    os.write(first.files[0], b"\xff" * 64)  # a key longer than any
    assert second.take(b"libc", 1) == (False, None)
    assert second.broken
    first.give(b"libc", 1, b"made")  # the taker makes its own from now on
    assert second.take(b"libc", 1) == (False, None)


_LOGGED = """
import os, sys
import pysframe.generate.on_demand as on_demand
import pysframe.session.vector as vector
from pysframe.cli.script import run_script
log, recording, output, jobs = sys.argv[1:]
make = on_demand.OnDemandTable._make
def logged(self, position):
    with open(log, "a") as out:
        out.write(f"{os.getpid()} {self.cache_id.hex()} {position}\\n")
    return make(self, position)
on_demand.OnDemandTable._make = logged
vector.CHUNK = 512  # seven chunks: both workers unwind
sys.exit(run_script(recording, binaries=[os.path.dirname(recording)], output=output,
                    show_stops=False, report=lambda message: None, jobs=int(jobs)))
"""


def _run(tmp_path: Path, cache: Path, name: str, jobs: int, engine: str = "vector"
         ) -> tuple[list[list[str]], bytes]:
    log, output = tmp_path / f"{name}.log", tmp_path / f"{name}.txt"
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYSFRAME_ENGINE=engine)
    done = subprocess.run([sys.executable, "-c", _LOGGED, str(log), str(LUA), str(output),
                           str(jobs)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-800:]
    made = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return made, output.read_bytes()


@pytest.mark.skipif(not LUA.exists() and os.environ.get("CI") != "true",
                    reason="no fixture recordings (../shared/fixtures) here")
@pytest.mark.parametrize("engine", ["vector", "scalar"])
def test_two_workers_make_each_function_once(tmp_path: Path, engine: str) -> None:
    """Both engines split the Lua recording between the two workers (the batch one by
    chunks, the sample-by-sample one in two shares); the functions of the binaries both
    had indexed before the fork are kept by the parent for both, the cache then holding
    every function either made."""
    pytest.importorskip("numpy")
    alone, alone_text = _run(tmp_path, tmp_path / "alone", "alone", 1, engine)
    shared, shared_text = _run(tmp_path, tmp_path / "shared", "shared", 2, engine)
    assert shared_text == alone_text
    held_to_perfs_text(LUA, shared_text)  # (the oracle: perf's own text of the recording)
    functions = {(key, position) for _, key, position in alone}
    assert len(functions) == len(alone) > 50
    assert {(key, position) for _, key, position in shared} == functions
    workers = {pid for pid, _, _ in shared}
    assert len(workers) == 2, "one worker made every function: nothing was shared"
    # Two workers may start the same function at the same moment; before the exchange
    # each made ~85% of them.
    assert len(shared) - len(functions) <= len(functions) // 20
    again, again_text = _run(tmp_path, tmp_path / "shared", "again", 1, engine)
    assert again_text == alone_text
    assert again == [], "the cache lacks functions a worker took from the other"


def test_a_worker_takes_the_index_and_functions_another_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: one table of libc scans its .eh_frame and makes functions, giving them
    to the exchange; another of the same binary (another worker's) takes the index and
    those functions, scanning and making nothing itself."""
    from pysframe import made_exchange
    from pysframe.elf import ElfImage
    from pysframe.generate import on_demand

    libc = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.exists():
        pytest.fail(f"{libc} is missing: the tests' system binaries are Debian's")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    files = MadeExchange.for_workers(2)
    try:
        made_exchange.share(MadeExchange(files, 0))
        first = on_demand.on_demand_table(ElfImage(str(libc)))
        assert first is not None and first.index_ranges() is not None
        lookups = [first.function(position) for position in range(0, 400, 7)]
        made_exchange.share(MadeExchange(list(files), 1))

        def refused(*_: object) -> None:
            raise AssertionError("scanned or made again")

        monkeypatch.setattr(on_demand, "_scan", refused)
        monkeypatch.setattr(on_demand.OnDemandTable, "_make", refused)
        second = on_demand.on_demand_table(ElfImage(str(libc)))
        assert second is not None
        assert second.index_ranges() == first.index_ranges()
        for position, lookup in zip(range(0, 400, 7), lookups, strict=True):
            taken = second.function(position)
            assert (taken is None) == (lookup is None)
            assert taken is None or lookup is None or taken.reader.data == lookup.reader.data
    finally:
        made_exchange.share(None)
        for descriptor in files:
            os.close(descriptor)


def test_another_file_with_the_same_build_id_takes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another file with libc's build id (a copy; a hostile one could hold other CFI) is
    named apart in the exchange: it scans and makes its functions itself."""
    import shutil

    from pysframe import made_exchange
    from pysframe.elf import ElfImage
    from pysframe.generate import on_demand

    libc = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.exists():
        pytest.fail(f"{libc} is missing: the tests' system binaries are Debian's")
    copy = tmp_path / "libc-copy.so"
    shutil.copyfile(libc, copy)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = MadeExchange.for_workers(2)
    try:
        made_exchange.share(MadeExchange(files, 0))
        first = on_demand.on_demand_table(ElfImage(str(libc)))
        assert first is not None and first.index_ranges() is not None
        assert first.function(10) is not None or first.function(11) is not None
        made_exchange.share(MadeExchange(list(files), 1))
        scans: list[object] = []
        scan = on_demand._scan
        monkeypatch.setattr(on_demand, "_scan", lambda *args: scans.append(args) or scan(*args))
        second = on_demand.on_demand_table(ElfImage(str(copy)))
        assert second is not None and second.index_ranges() == first.index_ranges()
        assert len(scans) == 1, "the copy took libc's index"
        exchange = made_exchange.shared()
        assert exchange is not None
        second.function(10)
        second.function(11)
        assert exchange.taken == 0
    finally:
        made_exchange.share(None)
        for descriptor in files:
            os.close(descriptor)

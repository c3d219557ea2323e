"""Merges into a cache entry, one process at a time (pysframe.cache_merge): processes that
each load an entry, add to it and store it lose nothing of each other's; a merge waits
for another one into the same directory, and gives up waiting after MERGE_WAIT, never
hanging."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pysframe import cache_merge
from pysframe.cache_merge import Merging
from pysframe.cachedir import Source, load, store

KIND = "mergetest/names.v1"
BUILD_ID = bytes(range(20))
SOURCE = Source(1, bytes(32))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


def _add(name: bytes, locked: bool, pause: float) -> None:
    """Load the entry, pause (another process may load it meanwhile), store it plus
    ``name``: with ``locked``, inside Merging."""
    def merge() -> None:
        payload = load(KIND, BUILD_ID, SOURCE)
        names = set(payload.split(b",")) - {b""} if payload is not None else set()
        time.sleep(pause)
        store(KIND, BUILD_ID, b",".join(sorted(names | {name})), SOURCE)

    if locked:
        with Merging(KIND, BUILD_ID):
            merge()
    else:
        merge()


def _in_children(count: int, locked: bool) -> set[bytes]:
    pids = []
    for number in range(count):
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                _add(b"worker%d" % number, locked, 0.2)
                status = 0
            finally:
                os._exit(status)
        pids.append(pid)
    for pid in pids:
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    payload = load(KIND, BUILD_ID, SOURCE)
    assert payload is not None
    return set(payload.split(b","))


def test_merges_into_one_entry_lose_nothing() -> None:
    """Four processes add a name each at once: all four are kept. (Without the lock, the
    same four keep fewer: the race the lock closes, shown here to happen.)"""
    assert _in_children(4, locked=True) == {b"worker%d" % n for n in range(4)}
    store(KIND, BUILD_ID, b"", SOURCE)
    assert len(_in_children(4, locked=False)) < 4


def _holder(seconds: float) -> int:
    """A child holding the merge lock for ``seconds`` (its pid; returned once it holds it)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            with Merging(KIND, BUILD_ID):
                os.write(write_end, b"held")
                time.sleep(seconds)
        finally:
            os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 4) == b"held"
    os.close(read_end)
    return pid


def test_a_merge_waits_for_another_and_gives_up_after_merge_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While another process merges, a merge waits until it is done (and holds the lock
    then); if it takes longer than MERGE_WAIT, the merge goes on without the lock."""
    pid = _holder(0.3)
    begin = time.monotonic()
    with Merging(KIND, BUILD_ID) as held:
        waited = time.monotonic() - begin
    os.waitpid(pid, 0)
    assert held and 0.2 < waited < 2
    monkeypatch.setattr(cache_merge, "MERGE_WAIT", 0.1)
    pid = _holder(3)
    begin = time.monotonic()
    with Merging(KIND, BUILD_ID) as held:
        waited = time.monotonic() - begin
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert not held and 0.1 <= waited < 1


def test_no_cache_to_use_is_no_lock_and_no_error(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache root that cannot be used (a file where the directory should be): the merge
    runs unlocked, without an error."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    with Merging(KIND, BUILD_ID) as held:
        assert not held

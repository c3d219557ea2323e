"""The cache is kept under a bound (``PYSFRAME_CACHE_MB``, 2 GiB by default): at the end of
a command that used it, at most once a day, every kind's entries together lose the
least recently used first, never what this run used; a stamp file says when it was last
done, and is never followed through a link or waited on."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES
from pysframe import cachedir

KINDS = ("sframe/test.v1", "symbols/test.v1", "audit/test.v1")
DAY = 24 * 3600
LUA = FIXTURES / "real" / "lua-2.46-x86_64"
_BUILD_IDS = (number.to_bytes(4, "big") for number in itertools.count(1))


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    monkeypatch.setenv("PYSFRAME_CACHE_MB", "1")
    return root / "pysframe"


def _fill(count: int, size: int, last_used: float) -> list[Path]:
    """``count`` new entries of ``size`` bytes, spread over three kinds, entry i last used
    at ``last_used + i``."""
    source = cachedir.describe(1, [b"x"])
    paths = []
    for index in range(count):
        kind, build_id = KINDS[index % len(KINDS)], next(_BUILD_IDS)
        cachedir.store(kind, build_id, bytes(size), source)
        path = Path(str(cachedir.entry_path(kind, build_id)))
        os.utime(path, (last_used + index, last_used + index))
        paths.append(path)
    return paths


def _sizes(paths: list[Path]) -> int:
    return sum(path.stat().st_size for path in paths if path.exists())


def test_the_least_recently_used_go_first_across_kinds(cache: Path) -> None:
    now = time.time()
    paths = _fill(12, 200_000, now - 30 * DAY)  # ~2.4 MB, three kinds, all old
    freed = cachedir.prune_if_due(now)
    kept = [path for path in paths if path.exists()]
    assert _sizes(paths) <= 1 << 20
    # the newest ones are the ones left, whatever their kind
    assert kept == paths[len(paths) - len(kept):]
    assert len(kept) == (1 << 20) // kept[0].stat().st_size
    assert {path.parent.parent.name for path in kept} == {"sframe", "symbols", "audit"}
    assert freed == (len(paths) - len(kept)) * kept[0].stat().st_size
    assert (cache / "last-pruned").is_file()


def test_a_day_between_prunings(cache: Path) -> None:
    now = time.time()
    _fill(3, 10, now - 30 * DAY)  # makes the root
    cachedir.prune_if_due(now)
    stamp = (cache / "last-pruned").stat().st_mtime
    paths = _fill(12, 200_000, now - 30 * DAY)
    assert cachedir.prune_if_due(now + 3600) == 0  # within the day: not looked at
    assert all(path.exists() for path in paths)
    assert (cache / "last-pruned").stat().st_mtime == stamp
    assert cachedir.prune_if_due(now + 2 * DAY) > 0
    assert _sizes(paths) <= 1 << 20
    assert (cache / "last-pruned").stat().st_mtime == now + 2 * DAY


def test_what_this_run_used_is_kept_even_over_the_bound(cache: Path) -> None:
    now = time.time()
    old = _fill(3, 100_000, now - 30 * DAY)
    fresh = _fill(9, 200_000, cachedir._STARTED + 1)  # used by this run: 1.8 MB
    cachedir.prune_if_due(now)
    assert not any(path.exists() for path in old)
    assert all(path.exists() for path in fresh)


def test_no_bound_when_set_to_zero(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSFRAME_CACHE_MB", "0")
    paths = _fill(12, 200_000, time.time() - 30 * DAY)
    assert cachedir.prune_if_due() == 0
    assert all(path.exists() for path in paths)
    monkeypatch.setenv("PYSFRAME_CACHE_MB", "junk")  # not a number: the default bound
    assert cachedir.cache_budget() == cachedir.CACHE_BYTES


@pytest.mark.parametrize("what", ["symlink", "fifo", "directory"])
def test_a_strange_stamp_is_not_followed_or_waited_on(cache: Path, tmp_path: Path,
                                                      what: str) -> None:
    paths = _fill(12, 200_000, time.time() - 30 * DAY)
    stamp = cache / "last-pruned"
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    os.utime(target, (0, 0))
    if what == "symlink":
        stamp.symlink_to(target)
    elif what == "fifo":
        os.mkfifo(stamp)
    else:
        stamp.mkdir()
    assert cachedir.prune_if_due() == 0  # the bound is off rather than the stamp followed
    assert all(path.exists() for path in paths)
    assert target.stat().st_mtime == 0


def test_kinds_reached_through_a_link_are_left_alone(cache: Path, tmp_path: Path) -> None:
    paths = _fill(3, 10, time.time() - 30 * DAY)
    outside = tmp_path / "outside" / "ab"
    outside.mkdir(parents=True)
    victim = outside / "cd.v1"
    victim.write_bytes(bytes(3 << 20))
    os.utime(victim, (0, 0))
    (cache / "linked").symlink_to(outside.parent)
    cachedir.prune_if_due()
    assert victim.exists()
    assert all(path.exists() for path in paths)  # 3 small entries: under the bound


@pytest.mark.skipif(not LUA.exists(), reason="../shared/fixtures is not present")
def test_a_command_prunes_at_its_end(cache: Path) -> None:
    """Through the console entry point: ``sframe script`` on a recording, with a cache over
    its bound of entries a month old: the oldest go until it is under, what the run made
    stays."""
    old = _fill(12, 200_000, time.time() - 30 * DAY)
    run = subprocess.run([sys.executable, "-m", "pysframe", "script", str(LUA / "perf.data"),
                          "--binaries", str(LUA)], capture_output=True, timeout=300,
                         env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-500:]
    left = [path for path in old if path.exists()]
    assert len(left) < len(old) and left == old[len(old) - len(left):]  # the oldest went
    made = [path for path in cache.rglob("*.ondemand.*") if path.is_file()]
    assert made  # the run's own entries (libc's rows, made on demand), kept
    assert sum(path.stat().st_size for path in cache.rglob("*") if path.is_file()) <= 1 << 20
    assert (cache / "last-pruned").is_file()
    again = subprocess.run([sys.executable, "-m", "pysframe", "script", str(LUA / "perf.data"),
                            "--binaries", str(LUA)], capture_output=True, timeout=300,
                           env=dict(os.environ))
    assert again.stdout == run.stdout
    # The text is perf's: every sample's header line as `perf script --no-inline` printed
    # it for this recording (the frames are held to perf by tests/test_unwind_perf.py).
    theirs = (LUA / "perf-script.no-inline.txt").read_text()
    assert _headers(run.stdout.decode()) == _headers(theirs)


def _headers(text: str) -> list[str]:
    return [block.split("\n")[0] for block in text.split("\n\n") if block.strip()]

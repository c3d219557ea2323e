"""Auditing many files: finding them, judging each once (cached by content), in order, on a
process pool or a Dask cluster, and the running totals.

Files are found in a stable order (each directory's entries sorted; symbolic links and
anything not a regular file are left out, counted) and judged by :func:`audit_path`,
whose results come back in that order whatever runs them: a window of at most
:data:`WINDOW` files per worker is in flight, so memory stays flat however many files
there are. A result is cached under the SHA-256 of the file's bytes (and the facts'
version): a rerun after an interruption or an update judges only what changed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import stat
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import cachedir
from ..elf.archive import THIN_MAGIC
from ..inputs import InputError, load
from .archives import Damage, members
from .facts import FACTS_VERSION, audit_bytes
from .model import FileFacts, FileKind

#: Files in flight per worker; files per Dask task.
WINDOW = 8
DASK_BATCH = 16
#: A file larger than this is not read (reported as such).
MAX_FILE = 2 << 30
CACHE_KIND = f"audit/facts.v{FACTS_VERSION}"
#: The audit's cache is kept under this many bytes (the least recently used go first), however
#: many files are audited over time; ``PYSFRAME_AUDIT_CACHE_MB`` sets it.
CACHE_BYTES = 256 << 20


def prune_cache() -> int:
    """The audit's cache brought under its budget (at the end of a run); bytes freed."""
    megabytes = os.environ.get("PYSFRAME_AUDIT_CACHE_MB", "")
    budget = int(megabytes) << 20 if megabytes.isdigit() else CACHE_BYTES
    return cachedir.prune(CACHE_KIND, budget)


def find_files(paths: Iterable[str], skipped: Counter[str]) -> Iterator[str]:
    """Regular files under ``paths`` (files or directories), in a stable order; what is
    left out is counted in ``skipped`` by kind."""
    for path in paths:
        try:
            status = os.lstat(path)
        except OSError:
            skipped["unreadable"] += 1
            continue
        if stat.S_ISDIR(status.st_mode):
            yield from _walk(path, skipped)
        elif stat.S_ISREG(status.st_mode):
            yield path
        else:
            skipped["not a regular file"] += 1


def _walk(top: str, skipped: Counter[str]) -> Iterator[str]:
    """The regular files under ``top``, depth first, each directory's entries in name
    order. Iterative: a tree thousands of levels deep is walked like any other (one sorted
    listing per open level is held)."""
    pending: list[Iterator[os.DirEntry[str]]] = []
    listing = _listing(top, skipped)
    if listing is not None:
        pending.append(listing)
    while pending:
        entry = next(pending[-1], None)
        if entry is None:
            pending.pop()
            continue
        try:
            if entry.is_symlink():
                skipped["symbolic link"] += 1
            elif entry.is_dir(follow_symlinks=False):
                listing = _listing(entry.path, skipped)
                if listing is not None:
                    pending.append(listing)
            elif entry.is_file(follow_symlinks=False):
                yield entry.path
            else:
                skipped["not a regular file"] += 1
        except OSError:
            skipped["unreadable"] += 1


def _listing(directory: str, skipped: Counter[str]) -> Iterator[os.DirEntry[str]] | None:
    """The directory's entries in name order (None: it cannot be listed, counted)."""
    try:
        with os.scandir(directory) as entries:
            return iter(sorted(entries, key=lambda entry: entry.name))
    except OSError:
        skipped["unreadable"] += 1
        return None


def audit_path(path: str, use_cache: bool = True) -> list[FileFacts]:
    """The facts of the file at ``path``: one per ELF file (an archive or a package gives
    one per member), none for other files; cached by content."""
    try:  # a copy (a mapped file that shrinks is SIGBUS); a symbolic link is not followed
        data = load(path, max_size=MAX_FILE, min_size=0, follow_symlinks=False, private=True)
    except InputError as error:
        return [FileFacts(path, FileKind.UNREADABLE, error=error.message)]
    digest = hashlib.sha256(data).digest()
    key = digest[:20]
    source = cachedir.describe(len(data), [digest, FACTS_VERSION.to_bytes(4, "little")])
    # A thin archive's members are other files: its own bytes do not say what they are.
    use_cache = use_cache and data[:len(THIN_MAGIC)] != THIN_MAGIC
    if use_cache:
        cached = cachedir.load(CACHE_KIND, key, source)
        if cached is not None:
            try:  # stored by member name: the same bytes may sit at another path
                return [FileFacts.from_json(dict(item, path=path + item.pop("member")))
                        for item in json.loads(cached)]
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
    results = []
    for member, contents in members(data, path):
        if isinstance(contents, Damage):
            facts = FileFacts(path + member, FileKind.DAMAGED, error=contents.message)
        else:
            facts = audit_bytes(path + member, contents)
        if facts.kind != FileKind.NOT_ELF:
            results.append((member, facts))
    if use_cache:
        stored = [dict(facts.as_json(), member=member) for member, facts in results]
        for item in stored:
            del item["path"]
        cachedir.store(CACHE_KIND, key, json.dumps(stored).encode(), source)
    return [facts for _, facts in results]


Results = Iterator[tuple[str, list[FileFacts]]]


def on_pool(paths: Iterable[str], jobs: int, use_cache: bool = True) -> Results:
    """(path, results) of ``paths`` in order, from ``jobs`` processes (1: this one).

    A worker that dies (SIGBUS, the kernel's OOM killer) breaks the pool: the files that
    were still in flight are judged again one by one, each in a process of its own, so
    that only the file that kills its process is lost (one unreadable result); the pool is
    started again for the rest."""
    if jobs <= 1:
        for path in paths:
            yield path, audit_path(path, use_cache)
        return
    source = iter(paths)
    while True:
        stranded: list[str] = []
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            window: deque[tuple[str, Future[list[FileFacts]]]] = deque()
            for item in itertools.chain(source, [None]):  # None: drain the window
                if item is not None:
                    window.append((item, pool.submit(audit_path, item, use_cache)))
                while window and (item is None or len(window) >= jobs * WINDOW):
                    done, future = window.popleft()
                    try:
                        found = future.result()
                    except BrokenProcessPool:
                        stranded = [done, *(waiting for waiting, _ in window)]
                        break
                    yield done, found
                if stranded:
                    break
        if not stranded:
            return
        for path in stranded:
            yield path, _alone(path, use_cache)


def _alone(path: str, use_cache: bool) -> list[FileFacts]:
    """:func:`audit_path` in a process of its own: a process that dies costs this file."""
    with ProcessPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(audit_path, path, use_cache).result()
        except BrokenProcessPool:
            return [FileFacts(path, FileKind.UNREADABLE,
                              error="the process judging it died (a file that changed "
                                    "while it was read?)")]


def on_dask(paths: Iterable[str], address: str, jobs: int, use_cache: bool = True) -> Results:
    """(path, results) of ``paths`` in order, from a Dask cluster (``local``: a local one
    of ``jobs`` single-threaded worker processes)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise RuntimeError("--dask needs Dask: pip install 'dask[distributed]'") from None
    cluster = (LocalCluster(n_workers=max(jobs, 1), threads_per_worker=1,  # type: ignore[no-untyped-call]
                            processes=True, dashboard_address=None)
               if address == "local" else None)
    client = Client(cluster if cluster is not None else address)  # type: ignore[no-untyped-call]
    try:
        workers = max(len(client.scheduler_info().get("workers", {})), 1)
        # Batches of files per task: a task's round trip through the scheduler costs more
        # than judging a small file.
        for group, batch in _windowed(
                lambda group: client.submit(audit_batch, group, use_cache, pure=False),
                _batches(paths, DASK_BATCH), workers * 2):
            yield from zip(group, batch, strict=True)
    finally:
        client.close()  # type: ignore[no-untyped-call]
        if cluster is not None:
            cluster.close()


def audit_batch(paths: list[str], use_cache: bool = True) -> list[list[FileFacts]]:
    """:func:`audit_path` of each of ``paths`` (one Dask task)."""
    return [audit_path(path, use_cache) for path in paths]


def _batches(paths: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for path in paths:
        batch.append(path)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _windowed(submit: Callable[[Any], Any], items: Iterable[Any], window: int
              ) -> Iterator[tuple[Any, Any]]:
    """(item, result) in submission order with at most ``window`` in flight."""
    pending: deque[tuple[Any, Future[Any]]] = deque()
    for item in items:
        pending.append((item, submit(item)))
        if len(pending) >= window:
            item, future = pending.popleft()
            yield item, future.result()
    while pending:
        item, future = pending.popleft()
        yield item, future.result()

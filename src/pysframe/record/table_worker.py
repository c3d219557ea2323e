"""The recorder's table work off its polling path: one thread owns the TableLoader.

Loading a process's tables may mean generating a binary's table from its CFI (seconds for
a large library on a first run); meanwhile the ring buffers must be drained, or samples
are lost. So the polling thread only queues work (a process's entry to write or drop, a
sweep) and this thread does it in order; the first tables of ``-a`` are prepared here
after sampling has started (samples of code not loaded yet carry stack copies and are
finished at the end: :mod:`.completion`). The thread does the generation through the
finder's process pool, so the polling thread keeps the interpreter most of the time.

With a ``sampled`` test, ``-a`` prepares only the processes that had a sample in its
first second or while it prepares; the others (idle daemons, a shell, an editor) are left
to be loaded at their first sample (the recorder asks). Preparing every process at once
filled the rows map with idle processes' libraries (numpy's OpenBLAS alone has 370k
rows) before any busy process got its tables.
"""

from __future__ import annotations

import collections
import queue
import sys
import threading
import time
from collections.abc import Callable

#: Work items: ("load", pid), ("drop", pid), ("sweep", 0), ("prepare", pid) (the first
#: tables of a running process: generated in parallel with the others first), ("ready", 0)
#: (tables generated in the background are in the cache: the processes waiting for them
#: are loaded again), ("finish", 0) (the samples waiting for no generation finished).
Work = tuple[str, int]
#: Processes whose tables are prepared together at the start of ``-a``.
ROUND = 16
#: After work, the heap's free memory is given back once the queue is idle this long,
#: and at least this often while it is never idle.
TRIM_AFTER_S = 1.0
TRIM_EVERY_S = 10.0
#: ``-a`` with a ``sampled`` test: how long samples are awaited before the first round
#: (a process sampled in that time is prepared; the others wait for their first sample).
FIRST_SAMPLES_S = 1.0


class TableWorker:
    """Runs ``load(pid)``, ``drop(pid)``, ``sweep()`` and the first preparation of
    ``prefetch(pids)`` in a thread, in the order they were asked for."""

    def __init__(self, load: Callable[[int], None], drop: Callable[[int], None],
                 sweep: Callable[[], None], prefetch: Callable[[list[int]], None],
                 waiting: Callable[[], dict[int, int]] | None = None,
                 loaded: Callable[[int], None] | None = None,
                 trim: Callable[[], None] | None = None,
                 sampled: Callable[[int], bool] | None = None,
                 ready: Callable[[], list[int]] | None = None,
                 finish: Callable[[], None] | None = None) -> None:
        self._load, self._drop, self._sweep, self._prefetch = load, drop, sweep, prefetch
        #: Called once a process's tables are loaded (its waiting samples finished).
        self._loaded = loaded or (lambda pid: None)
        #: The samples waiting for each process's tables (pid -> count), read at each round.
        self._samples_waiting = waiting or dict
        self._queue: queue.Queue[Work | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="sframe-tables", daemon=True)
        self.error: BaseException | None = None
        self.prepared = threading.Event()
        self._abandon = False
        self._lock = threading.Lock()
        #: Processes with a load queued and not started yet.
        self._waiting: set[int] = set()
        #: Processes loaded whose waiting samples are not finished yet (see _finish_loaded).
        self._unfinished: collections.deque[int] = collections.deque()
        self._pids: list[int] = []
        self._progress = False
        #: Gives the heap's free memory back (:func:`.procfs.return_free_memory`).
        self._trim = trim or (lambda: None)
        self._trimmed = time.monotonic()
        #: The processes whose tables were generated in the background since asked.
        self._ready = ready or list
        #: Finishes the waiting samples that can be finished now (("finish", 0), at most
        #: one queued at a time).
        self._finish = finish or (lambda: None)
        self._finish_queued = False
        #: Whether a process had a sample (None: every process is prepared).
        self._sampled = sampled
        #: The processes prepared (their tables loaded) by prepare(), and those left to
        #: be loaded at their first sample.
        self.prepared_pids: set[int] = set()
        self.left_pids: set[int] = set()
        self._thread.start()

    def ask(self, kind: str, pid: int = 0) -> None:
        """Queue work; a load of a process already waiting to be loaded is not queued
        again (an exec reports its binary, the loader and each library: one load does)."""
        if kind == "load":
            with self._lock:
                if pid in self._waiting:
                    return
                self._waiting.add(pid)
        elif kind == "finish":
            with self._lock:
                if self._finish_queued:
                    return
                self._finish_queued = True
        self._queue.put((kind, pid))

    def load_queued(self, pid: int) -> bool:
        """Whether a load of ``pid`` is queued and not started."""
        with self._lock:
            return pid in self._waiting

    def prepare(self, pids: list[int], progress: bool) -> None:
        """The first tables of ``pids`` (``-a``): generated in parallel, then loaded."""
        self._queue.put(("prefetch", len(pids)))
        self._pids = pids
        self._progress = progress

    def close(self) -> None:
        """End the thread once the item at work is done (what is still queued is left:
        the recording is over), its error, if any, re-raised."""
        self._abandon = True
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            worked = False
            while (work := self._next(worked)) is not None:
                worked = True
                if self._abandon:
                    continue
                kind, pid = work
                if kind == "load":
                    with self._lock:
                        self._waiting.discard(pid)  # a mapping reported from now on: again
                    self._load(pid)
                    self._unfinished.append(pid)
                elif kind == "drop":
                    self._drop(pid)
                elif kind == "sweep":
                    self._sweep()
                elif kind == "finish":
                    with self._lock:
                        self._finish_queued = False
                    self._finish()
                elif kind == "ready":
                    for ready_pid in self._ready():
                        self._load(ready_pid)
                        self._unfinished.append(ready_pid)
                elif kind == "prefetch":
                    self._prepare_all()
                self._finish_loaded()
        except BaseException as error:
            self.error = error
            while self._queue.get() is not None:  # let close() end
                pass

    def _finish_loaded(self) -> None:
        """The waiting samples of the processes loaded, finished while no load is queued:
        a process that just ran exec walks to its stack copies until its entry is written,
        so its load goes before unwinding samples in Python (in a make -j2, finishing each
        load's samples at once held the next compiler's entry back by ~8 ms)."""
        while self._unfinished:
            with self._lock:
                if self._waiting:
                    return
            self._loaded(self._unfinished.popleft())

    def _next(self, worked: bool) -> Work | None:
        """The next item; once the queue has been idle for :data:`TRIM_AFTER_S` after
        some work, or at most every :data:`TRIM_EVERY_S` of work without a pause, the
        heap's free memory is given back first."""
        if worked:
            if time.monotonic() - self._trimmed >= TRIM_EVERY_S:
                self._trim_now()
            try:
                return self._queue.get(timeout=TRIM_AFTER_S)
            except queue.Empty:
                self._trim_now()
        return self._queue.get()

    def _trim_now(self) -> None:
        self._trim()
        self._trimmed = time.monotonic()

    def _prepare_all(self) -> None:
        pids, progress = self._pids, self._progress
        if self._sampled is not None:
            self._prepare_sampled(pids, progress)
            return
        if progress:
            sys.stderr.write(f"sframe record: preparing tables for {len(pids)} processes "
                             "(sampling meanwhile) ...\n")
        self._rounds(pids, progress, len(pids))
        if progress:
            sys.stderr.write(f"\rsframe record: tables of {len(pids)} processes loaded\n")
        self.prepared.set()

    def _prepare_sampled(self, pids: list[int], progress: bool) -> None:
        """Rounds of the processes sampled so far (after FIRST_SAMPLES_S), until none of
        those left has had a sample; the rest are loaded at their first sample."""
        sampled = self._sampled
        assert sampled is not None
        self.left_pids = set(pids)
        started = time.monotonic()
        while not self._abandon and time.monotonic() - started < FIRST_SAMPLES_S:
            time.sleep(0.05)
        done = 0
        while not self._abandon:
            chosen = [pid for pid in pids if pid in self.left_pids and sampled(pid)]
            if not chosen:
                break
            if progress and not done:
                sys.stderr.write(f"sframe record: preparing tables for {len(chosen)} of "
                                 f"{len(pids)} processes (those sampled; the others at "
                                 "their first sample) ...\n")
            done += self._rounds(chosen, progress, 0)
        if progress:
            sys.stderr.write(f"\rsframe record: tables of {done} sampled processes loaded; "
                             f"{len(self.left_pids)} idle processes wait for a sample\n")
        self.prepared.set()

    def _rounds(self, pids: list[int], progress: bool, total: int) -> int:
        """Prepare ``pids`` in rounds (``total``: shown as "of N" when given); returns
        how many were prepared."""
        # In rounds of a few processes, so that the end of the recording does not wait
        # for every binary's table (the rest is left when it comes); each round takes the
        # processes with the most samples waiting for their tables (stack copies to
        # finish), the others in the order given.
        left = list(pids)
        done = 0
        while left:
            if self._abandon:
                break
            round_pids = next_round(left, self._samples_waiting())
            taken = set(round_pids)
            left = [pid for pid in left if pid not in taken]
            self._prefetch(round_pids)
            for pid in round_pids:
                self.left_pids.discard(pid)
                self.prepared_pids.add(pid)
                self._load(pid)
                self._loaded(pid)
            done += len(round_pids)
            if progress and total:
                sys.stderr.write(f"\rsframe record: tables of {done} of {total} "
                                 "processes loaded")
            elif progress:
                sys.stderr.write(f"\rsframe record: tables of {len(self.prepared_pids)} "
                                 "processes loaded")
        return done


def next_round(left: list[int], waiting: dict[int, int]) -> list[int]:
    """The next :data:`ROUND` processes to prepare: most samples waiting first, then in
    ``left``'s order."""
    order = sorted(range(len(left)), key=lambda index: (-waiting.get(left[index], 0), index))
    return [left[index] for index in order[:ROUND]]

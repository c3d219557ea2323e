"""Tables generated in helper processes, one per binary: in the background, most wanted
first, or now, waited for (:meth:`BackgroundTables.generate`).

While ``sframe record`` samples, a binary whose table is not in the cache must not hold up
the tables of the processes started meanwhile: its generation (seconds; minutes for a
large library) runs in a process of its own, and the binary has no table until it is done.
The waiting binaries are started in the order of :attr:`BackgroundTables.rank` (the
recorder: the samples waiting for them), at most :data:`JOBS` at once.

A plain process per binary, not a process pool: one that nobody waits for any more (the
recording ended) is killed at once, with no pool's pipes or semaphores left behind.
"""

from __future__ import annotations

import _thread
import itertools
import os
import sys
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:  # imported where a generation starts (~4 ms of every start otherwise:
    import subprocess  # every command makes a GeneratedTables, few generate in background)

#: Generations running at once while the recording runs (one CPU at most taken from the
#: workload); at the end, when the recording waits for them, one per CPU.
JOBS = 1
#: The command name a helper gives itself (as ``ps``, ``top`` and perf show it), so that it
#: is told from the workload: a profile of the machine leaves the recorder's processes out.
HELPER_NAME = "sframe-gen"
#: What a helper runs: the table and the flat rows of one file, into the cache.
_HELPER = ("import sys\n"
           "try:\n"
           "    with open('/proc/self/comm', 'w') as comm:\n"
           f"        comm.write('{HELPER_NAME}')\n"
           "except OSError:\n"
           "    pass\n"
           "from pysframe.session.tables import _make_table\n"
           "_make_table(sys.argv[1], sys.argv[2] or None)")


class BackgroundTables:
    """Files whose tables are queued, being generated, or done and not yet taken."""

    def __init__(self, flat_abi: str | None) -> None:
        self.flat_abi = flat_abi
        #: Called (in a waiting thread) when a generation ends.
        self.on_ready: Callable[[], None] | None = None
        #: The rank of a queued file: the highest is started first (ties: first asked).
        self.rank: Callable[[str], int] = lambda path: 0
        self._queued: dict[str, int] = {}
        self._running: dict[str, subprocess.Popen[bytes]] = {}
        self._order = itertools.count()
        self._done: list[str] = []
        self._lock = _thread.allocate_lock()
        #: Files generated once (not again if the cache still lacks their table).
        self.tried: set[str] = set()

    def add(self, path: str) -> None:
        """Queue the file at ``path`` unless it is queued or under way."""
        if path in self._queued or path in self._running:
            return
        self._queued[path] = next(self._order)
        self._start()

    def __contains__(self, path: object) -> bool:
        return path in self._queued or path in self._running

    def take_ready(self) -> list[str]:
        """The files whose generation ended since the last call; the next ones start."""
        with self._lock:
            done, self._done = self._done, []
        for path in done:
            self._running.pop(path, None)
        self._start()
        return done

    def generate(self, path: str) -> bool:
        """Generate the file at ``path`` now and wait for it (its own helper process, not
        one of the :data:`JOBS`; the one under way if it is already running). False if
        the helper could not be started."""
        import subprocess

        self._queued.pop(path, None)
        running = self._running.get(path)
        try:
            if running is not None:
                running.wait()
            else:
                subprocess.run(self._command(path), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=False)
        except OSError:
            return False
        self.tried.add(path)
        return True

    def only(self, wanted: Callable[[str], bool]) -> int:
        """Keep only the files ``wanted`` (the others leave the queue; their generations
        are killed); returns how many are left to generate."""
        for path in [path for path in self._queued if not wanted(path)]:
            del self._queued[path]
        for path, process in list(self._running.items()):
            if not wanted(path) and process.poll() is None:
                process.kill()
                process.wait()
                del self._running[path]
        return len(self._queued) + sum(process.poll() is None
                                       for process in self._running.values())

    def drain(self) -> None:
        """Generate every file queued, one per CPU, waiting for each (the end of a
        recording)."""
        while self._queued or any(process.poll() is None
                                  for process in self._running.values()):
            self._start(os.cpu_count() or 1)
            running = [process for process in self._running.values()
                       if process.poll() is None]
            if running:
                running[0].wait()

    def close(self) -> None:
        """Kill the generations under way (what they wrote reaches the cache only once
        complete) and forget the queue."""
        self._queued.clear()
        for process in self._running.values():
            if process.poll() is None:
                process.kill()
            process.wait()
        self._running.clear()

    def _start(self, jobs: int = JOBS) -> None:
        if not self._queued:
            return
        import subprocess
        import threading

        while self._queued and sum(process.poll() is None
                                   for process in self._running.values()) < jobs:
            path = max(self._queued, key=lambda queued: (self.rank(queued),
                                                         -self._queued[queued]))
            del self._queued[path]
            self._running[path] = process = subprocess.Popen(
                self._command(path), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
            threading.Thread(target=self._waited, args=(path, process), daemon=True,
                             name="sframe-generation").start()

    def _command(self, path: str) -> list[str]:
        # A fresh interpreter (fork and exec; descriptors closed): the recorder has
        # threads and BPF descriptors a forked child would share.
        return [sys.executable, "-c", _HELPER, path, self.flat_abi or ""]

    def _waited(self, path: str, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        self.tried.add(path)
        with self._lock:
            self._done.append(path)
        if self.on_ready is not None:
            self.on_ready()

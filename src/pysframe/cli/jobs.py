"""``-j N``: a command's text made in ranges by forked processes, delivered in order.

The ranges are independent once each starts from the state before it (the caller's
``produce`` replays what it needs). The first range is made here and streamed at once;
every other one by a child forked before any of them starts, into an unnamed temporary
file, read back in order when its turn comes. Forking (not spawning) shares the opened
recording, the loaded tables and caches at no cost. A child that fails reports its one
line on stderr itself; the run then ends with that child's status.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator

from .errors import EXIT_INVALID, CommandError, guarded

#: Bytes read back from a child's file at a time.
_PIECE = 1 << 20


def in_order(ranges: list[tuple[int, int]], produce: Callable[[int, int], Iterator[str]],
             failed: Callable[[], bool], statuses: list[int],
             finish: Callable[[], None] | None = None) -> Iterator[str]:
    """The texts of ``ranges`` in order; ``statuses`` gets each child's exit status (1 when
    ``failed()`` says it reported a problem). Each child calls ``finish`` (if given) when its
    text is made (it ends without the exit functions: e.g. to keep what it cached)."""
    children: list[tuple[int, int]] = []
    try:
        for start, end in ranges[1:]:
            children.append(_fork(start, end, produce, failed, finish))
        if ranges:
            yield from produce(*ranges[0])
        for pid, fd in children:
            status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            statuses.append(status)
            if status not in (0, EXIT_INVALID):  # 1: problems reported, the text is whole
                raise CommandError(f"a worker process failed (exit status {status})", status
                                   if status > 0 else EXIT_INVALID)
            os.lseek(fd, 0, os.SEEK_SET)
            while piece := os.read(fd, _PIECE):
                yield piece.decode("utf-8", "surrogateescape")
            os.close(fd)
            children = children[1:]
    finally:
        for pid, fd in children:  # stopped early (an error, a closed pipe): end them
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except OSError:
                pass
            os.close(fd)


def _fork(start: int, end: int, produce: Callable[[int, int], Iterator[str]],
          failed: Callable[[], bool], finish: Callable[[], None] | None = None
          ) -> tuple[int, int]:
    """A child making samples ``start`` to ``end`` into an unnamed temporary file."""
    fd = tempfile.TemporaryFile()
    descriptor = os.dup(fd.fileno())
    fd.close()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid, descriptor
    status = EXIT_INVALID
    try:
        def work() -> int:
            with os.fdopen(descriptor, "w", encoding="utf-8", errors="surrogateescape",
                           buffering=_PIECE) as out:
                for text in produce(start, end):
                    out.write(text)
            return 0

        status = guarded(work)
        if finish is not None:
            try:
                finish()
            except Exception:  # keeping a cache is a courtesy: the text is made
                pass
        if status == 0 and failed():
            status = EXIT_INVALID
        sys.stderr.flush()
    finally:
        os._exit(status)

"""A helper child: work done in a forked process while the one that forked it goes on,
for what it leaves in the private cache (a first run's kallsyms:
:func:`pysframe.symbolize.kernel.prefetch`; a first run's larger symbol tables:
:mod:`pysframe.symbolize.symbols_prefetch`).

The child's standard streams are on /dev/null (a reader of the command's output, a pipe,
sees its end when the command ends, not when the child does), it runs no exit handlers
and flushes nothing. It holds the only write end of a pipe, so a read of the other end
returns once it has ended: in the process that forked it, and in any forked from that
one (which cannot reap it).
"""

from __future__ import annotations

import os

from . import c_signal as signal
from .cpus import place_forked

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class HelperChild:
    """A running helper: :meth:`done` asks without waiting, :meth:`wait` waits for its end
    (once) and says whether its work was done."""

    def __init__(self, pid: int, read_end: int) -> None:
        self.pid, self.read_end = pid, read_end
        #: Whether it ended with its work done (known once :meth:`wait` reaped it).
        self.succeeded = False

    def done(self) -> bool:
        """Whether the child has ended (its pipe reads at its end)."""
        if self.read_end < 0:
            return True
        import select

        poller = select.poll()
        poller.register(self.read_end, select.POLLIN)
        return bool(poller.poll(0))  # POLLHUP once the child (the only writer) has ended

    def stop(self) -> None:
        """Ask the child to end now (it leaves nothing half-written: see
        :func:`start_helper`), if it has not ended; :meth:`wait` then reaps it."""
        if self.read_end >= 0 and not self.done():
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def wait(self) -> bool:
        """Wait for the child's end (reaped if it is this process's); whether it did its
        work (False too when it was another process's to reap)."""
        if self.read_end < 0:
            return self.succeeded
        read_end, self.read_end = self.read_end, -1
        try:
            os.read(read_end, 1)  # returns at the child's end: EOF
            _, status = os.waitpid(self.pid, 0)
            self.succeeded = os.waitstatus_to_exitcode(status) == 0
        except ChildProcessError:
            pass  # forked from the process that started it: not ours to reap
        finally:
            os.close(read_end)
        return self.succeeded


def start_helper(work: Callable[[], bool]) -> HelperChild | None:
    """A child doing ``work`` (its exit status 0 when it says True), or None when no
    process can be forked. It forks: call it before any thread is started."""
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:
        status = 1
        try:
            os.close(read_end)
            signal.signal(signal.SIGTERM, _stopped)
            _detach_standard_streams()
            status = 0 if work() else 1
        finally:
            os._exit(status)
    os.close(write_end)
    place_forked(pid)
    return HelperChild(pid, read_end)


def _stopped(_signal: int, _frame: object) -> None:
    """SIGTERM in a helper (:meth:`HelperChild.stop`): an exception, so that what it was
    writing is removed on the way out (a cache entry's temporary file), then its exit."""
    raise SystemExit(1)


def _detach_standard_streams() -> None:
    """Standard input and outputs on /dev/null."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)

"""A helper child: work done in a forked process while the one that forked it goes on,
for what it leaves in the private cache (a first run's kallsyms:
:func:`pysframe.symbolize.kernel.prefetch`; a first run's larger symbol tables:
:mod:`pysframe.symbolize.symbols_prefetch`).

The child's standard streams are on /dev/null (a reader of the command's output, a pipe,
sees its end when the command ends, not when the child does), it runs no exit handlers
and flushes nothing. It holds the only write end of a pipe, on which it writes its status
as it ends, so a read of the other end returns once it has ended (or been killed: EOF):
in the process that forked it, and in any forked from that one (which cannot reap it).
"""

from __future__ import annotations

import os

from . import c_signal as signal
from .cpus import place_forked

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


#: Set when the process ends right after its command (:func:`pysframe.cli.entry.main`,
#: which calls :func:`reap_left` last): a child (a helper, a ``-j`` worker:
#: :mod:`pysframe.cli.jobs`) that has said its status is reaped then, not when its status
#: is taken. Its exit, the kernel freeing its memory, took ~1-2 ms after its last word on
#: the Lua recording, which this process spent waiting before it went on; by the end it
#: has long happened. Otherwise (a library caller) every child is waited for at once.
REAP_AT_END = False

#: The children whose status was taken from their word, to reap at the end.
_left: list[int] = []


def say_status(write_end: int, status: int) -> None:
    """A child's last word: its exit status, one byte on its pipe (read by
    :func:`status_of`), written just before it ends."""
    try:
        os.write(write_end, bytes((status & 0xFF,)))
    except OSError:
        pass


def status_of(pid: int, read_end: int) -> int:
    """The exit status of the child ``pid``: the byte it said on the pipe ``read_end``
    (read until it says it, or ends), the child then reaped at the end
    (:data:`REAP_AT_END`); else (it said nothing: killed; or a library caller) waited for
    now. Raises ChildProcessError for a child that is not this process's."""
    word = os.read(read_end, 1)
    if word and REAP_AT_END:
        _left.append(pid)
        return word[0]
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def reap_left() -> None:
    """Reap the children whose status was taken from their word (each has ended, or is
    ending: its memory being freed)."""
    while _left:
        try:
            os.waitpid(_left.pop(), 0)
        except ChildProcessError:
            pass


class HelperChild:
    """A running helper: :meth:`done` asks without waiting, :meth:`wait` waits for its end
    (once) and says whether its work was done."""

    def __init__(self, pid: int, read_end: int) -> None:
        self.pid, self.read_end = pid, read_end
        #: Whether it ended with its work done (known once :meth:`wait` reaped it).
        self.succeeded = False

    def done(self) -> bool:
        """Whether the child has ended (its pipe has its status, or its end)."""
        if self.read_end < 0:
            return True
        import select

        poller = select.poll()
        poller.register(self.read_end, select.POLLIN)
        return bool(poller.poll(0))  # its word, or POLLHUP once it (the only writer) ended

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
            self.succeeded = status_of(self.pid, read_end) == 0
        except ChildProcessError:
            pass  # forked from the process that started it: not ours to reap
        finally:
            os.close(read_end)
        return self.succeeded


def start_helper(work: Callable[[], bool], then: Callable[[], None] | None = None
                 ) -> HelperChild | None:
    """A child doing ``work`` (its exit status 0 when it says True), or None when no
    process can be forked; ``then``: what it does after it has said its status (what the
    process that forked it does not wait for: its failure is the child's alone). It forks:
    call it before any thread is started."""
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
            say_status(write_end, status)
            if then is not None and status == 0:
                try:
                    then()
                except BaseException:  # (stopped, or a full disk: nothing more to do)
                    pass
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

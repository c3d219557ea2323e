"""The command ``sframe record`` starts: forked and held before its exec until its events
exist, ended at the end of the recording as perf record ends it.

A held command never runs unless released: the end of the pipe (the recorder died or
gave up) ends it, and so does the recorder's death (``PR_SET_PDEATHSIG``) while it waits.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable

from ..blas import user_environment
from ..errors import PysframeError
from .procfs import libc_function

#: How long a command sent SIGTERM at the end is waited for before SIGKILL.
WORKLOAD_GRACE_S = 5.0


def held_child(command: list[str]) -> tuple[int, Callable[[], None]]:
    """Fork ``command``, held before exec until the returned function is called; that
    function raises :class:`CommandFailed` if the exec fails. The held child never runs
    the command unless told to: the end of the pipe (the recorder died or gave up) ends
    it, and so does the recorder's death (``PR_SET_PDEATHSIG``) while it waits."""
    prctl = _prctl()  # looked up before the fork: the child only calls it
    environment = user_environment()  # the user's, without the recorder's own settings
    read_end, write_end = os.pipe()
    status_read, status_write = os.pipe2(os.O_CLOEXEC)  # closed by a successful exec
    pid = os.fork()
    if pid == 0:  # the child: wait for the go, then become the command
        code = 127
        try:
            os.close(write_end)
            os.close(status_read)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.read(read_end, 1) != b"g":
                os._exit(code)
            os.close(read_end)
            prctl(PR_SET_PDEATHSIG, 0)  # released: its life is its own from here, as under perf
            os.execvpe(command[0], command, environment)
        except OSError as error:
            os.write(status_write, (error.errno or 0).to_bytes(4, "little"))
            code = 126 if error.errno not in (errno.ENOENT, errno.ENOTDIR) else 127
        os._exit(code)
    os.close(read_end)
    os.close(status_write)

    def release() -> None:
        os.write(write_end, b"g")
        os.close(write_end)
        with os.fdopen(status_read, "rb") as status:
            failed = status.read(4)
        if len(failed) == 4:
            number = int.from_bytes(failed, "little")
            os.waitpid(pid, 0)
            raise CommandFailed(command[0], number)

    return pid, release


class CommandFailed(PysframeError):
    """The command to record could not be executed (``errno``)."""

    def __init__(self, name: str, number: int) -> None:
        super().__init__(f"{name}: {os.strerror(number)}")
        self.errno = number


PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[[int, int], object]:
    """libc's prctl(option, value), or a no-op where it cannot be found."""
    function = libc_function("prctl")
    if function is None:
        return lambda option, value: None
    return lambda option, value: function(option, value, 0, 0, 0)


def end_command(child: int, number: int) -> int | None:
    """The command's wait status once it has ended: sent ``number`` if it still runs, then
    SIGKILL after :data:`WORKLOAD_GRACE_S` (never left running, never waited for forever)."""
    status = exit_status(child)
    if status is not None:
        return status
    try:
        os.kill(child, number)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + WORKLOAD_GRACE_S
    while time.monotonic() < deadline:
        status = exit_status(child)
        if status is not None:
            return status
        time.sleep(0.02)
    try:
        os.kill(child, signal.SIGKILL)
        return os.waitpid(child, 0)[1]
    except (ProcessLookupError, ChildProcessError):
        return None


def exit_status(child: int) -> int | None:
    """The child's wait status if it has ended (reaped now), else None."""
    try:
        done, status = os.waitpid(child, os.WNOHANG)
    except ChildProcessError:
        return 0
    return status if done == child else None

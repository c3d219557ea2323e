"""Exit codes and the one-line error reporting shared by every command.

Exit codes are decided here and nowhere else: an error from any stage is a
:class:`~pysframe.errors.PysframeError`, and :func:`exit_code_for` maps it (unreadable
input 2, invalid data 1).
"""

from __future__ import annotations

import os
import sys

from ..errors import PysframeError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: Everything went well (``validate``: no problem found).
EXIT_OK = 0
#: The input was read but holds invalid data (or ``validate`` found problems).
EXIT_INVALID = 1
#: The input could not be read, or the command line was wrong.
EXIT_UNREADABLE = 2
#: Set in the environment (to anything), ``sframe script`` and ``sframe stack`` print the
#: time of each phase on stderr at the end (bench/perf_script.py and bench/stack.py read it).
PHASES_VARIABLE = "PYSFRAME_PHASE_TIMES"


class CommandError(PysframeError):
    """A failure of a command itself (not of one input), with the exit code to use."""

    def __init__(self, message: str, exit_code: int = EXIT_INVALID) -> None:
        super().__init__(message, unreadable=exit_code == EXIT_UNREADABLE)
        self.exit_code = exit_code


class Whereabouts:
    """The input being worked on (file, and byte offset when known), so that even an
    internal error names where it happened."""

    __slots__ = ("offset", "path")

    def __init__(self) -> None:
        self.path: str | None = None
        self.offset: int | None = None

    def at(self, path: str, offset: int | None = None) -> None:
        self.path, self.offset = path, offset

    def __str__(self) -> str:
        if self.path is None:
            return ""
        offset = f" at offset {self.offset:#x}" if self.offset is not None else ""
        return f" in {self.path}{offset}"


#: Where the command is (one command per process).
WHERE = Whereabouts()


def exit_code_for(error: PysframeError) -> int:
    """The exit status for ``error``: its own for a :class:`CommandError`, else 2 when the
    input could not be read and 1 when it was read and found invalid."""
    if isinstance(error, CommandError):
        return error.exit_code
    return EXIT_UNREADABLE if error.unreadable else EXIT_INVALID


def naming(path: str, error: PysframeError) -> PysframeError:
    """``error`` about the input ``path``: a stage's error that names no file is given it
    (so the line says which input), then re-raised by the caller."""
    if error.path is None and not isinstance(error, CommandError):
        error.path = path
    return error


#: What begins every line the commands write on stderr.
PREFIX = "sframe: "


def report(message: str) -> None:
    """Print one error line on stderr (newlines in ``message`` are flattened)."""
    sys.stderr.write(PREFIX + " ".join(message.split("\n")) + "\n")


def guarded(run: Callable[[], int]) -> int:
    """The exit status of ``run``, every failure turned into one line on stderr."""
    try:
        try:
            status = run()
        except SystemExit as done:
            status = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        sys.stdout.flush()  # a full disk shows here, as an error, not at interpreter exit
        return status
    except PysframeError as error:
        report(str(error))
        status = exit_code_for(error)
    except KeyboardInterrupt:
        report("interrupted")
        status = 130
    except MemoryError:
        report(f"out of memory{WHERE}")
        status = EXIT_INVALID
    except OSError as error:  # reading or writing failed where no stage could say more
        report(f"{error.filename or 'standard output'}: {error.strerror or error}")
        status = EXIT_UNREADABLE
    except Exception as error:  # a bug: still one line, never a traceback
        report(f"internal error{WHERE}: {type(error).__name__}: {error} (please report this)")
        status = EXIT_INVALID
    drop_unwritable_output()
    return status


def drop_unwritable_output() -> None:
    """Drop what standard output holds when it cannot be written (a full disk, an I/O
    error): its descriptor is pointed at /dev/null and the rest flushed there.

    A block-buffered ``sys.stdout`` (any stdout that is not a terminal, unless
    PYTHONUNBUFFERED is set) keeps the bytes a failed write could not write; the
    interpreter flushes them again at exit, fails again, prints "Exception ignored ...
    OSError" with a traceback, and exits 120 instead of the status decided here."""
    stdout = sys.stdout
    if stdout is None:
        return
    try:
        stdout.flush()
        return
    except OSError:
        pass
    try:
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, stdout.fileno())
        finally:
            os.close(null)
        stdout.flush()
    except (OSError, ValueError):  # not a file (io.UnsupportedOperation), or closed
        pass

"""An output file as a text stream with a descriptor of its own, for ``script -o``.

``-o`` had the text written by :func:`.files.write_output` from the chunks given to it:
the text of the ``-j`` workers came back here from their memfds as strings and was
encoded again (the deep recording: 0.47-0.51 s with ``-o``, 0.35-0.45 with the shell's
``>``). Given a descriptor, the workers write their own text to it in their turn
(:mod:`.jobs_turns`), as they do to standard output. The file's rules are
:mod:`.files`' own: a regular file (or nothing) at the path is replaced through a
temporary file beside it and a rename once the run has succeeded (removed on any
failure), anything else (a link, a device, a FIFO) is written through, a directory is
refused. The temporary file is made with ``os`` (``tempfile`` costs ~4.5 ms of imports).
"""

from __future__ import annotations

import io
import os
import stat

from .errors import EXIT_UNREADABLE, CommandError
from .files import refuse_inputs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType


class OutputStream:
    """``with OutputStream(path, inputs) as stream``: ``stream`` is UTF-8 text (surrogates
    written back as the bytes they stand for) on a descriptor of its own."""

    def __init__(self, path: str, inputs: Iterable[str] = ()) -> None:
        refuse_inputs(path, inputs)
        self.path = path
        #: The temporary file renamed over ``path`` at the end (None: written through).
        self.temporary: str | None = None
        self.stream: io.TextIOWrapper | None = None

    def __enter__(self) -> io.TextIOWrapper:
        try:
            fd = self._open()
        except OSError as error:
            raise _cannot_write(self.path, error) from None
        self.stream = open(fd, "w", encoding="utf-8", errors="surrogateescape",
                           closefd=True)
        self.stream.output_name = self.path  # type: ignore[attr-defined]  # (see Copier)
        return self.stream

    def _open(self) -> int:
        """The descriptor to write to: a new temporary file beside a regular file (or
        nothing), else what is at the path, opened for writing (and emptied if it is a
        regular file reached through a link)."""
        try:
            status = os.lstat(self.path)
        except FileNotFoundError:
            status = None
        if status is not None and stat.S_ISDIR(status.st_mode):
            raise CommandError(f"{self.path}: cannot write: is a directory", EXIT_UNREADABLE)
        if status is None or stat.S_ISREG(status.st_mode):
            directory = os.path.dirname(os.path.abspath(self.path))
            name = os.path.join(directory, f".sframe-tmp-{os.getpid()}-{os.urandom(6).hex()}")
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            self.temporary = name
            return fd
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise CommandError(f"{self.path}: cannot write: a symbolic link to nothing",
                               EXIT_UNREADABLE) from None
        through = os.fstat(fd)
        if stat.S_ISREG(through.st_mode):
            os.ftruncate(fd, 0)
        return fd

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        assert self.stream is not None
        temporary, self.temporary = self.temporary, None
        try:
            if kind is None:
                self.stream.flush()
                if temporary is not None:
                    umask = os.umask(0)
                    os.umask(umask)
                    os.fchmod(self.stream.fileno(), 0o666 & ~umask)
                self.stream.close()
                if temporary is not None:
                    os.replace(temporary, self.path)
                    temporary = None
            else:
                _close_quietly(self.stream)  # (the run's own error is the one to say)
        except OSError as failure:
            _close_quietly(self.stream)
            raise _cannot_write(self.path, failure) from None
        finally:
            self._drop(temporary)
        if isinstance(error, OSError) and error.filename is None:
            # (a write to the file failed during the run: said of the file, as write_output
            # says it; an error that names a file is another file's)
            raise _cannot_write(self.path, error) from None

    def _drop(self, temporary: str | None) -> None:
        if temporary is not None:  # (a failed run, or a failed write: nothing kept)
            try:
                os.unlink(temporary)
            except OSError:
                pass


def _close_quietly(stream: io.TextIOWrapper) -> None:
    try:
        stream.close()
    except (OSError, ValueError):
        pass


def _cannot_write(path: str, error: OSError) -> CommandError:
    return CommandError(f"{path}: cannot write: {error.strerror or error}", EXIT_UNREADABLE)

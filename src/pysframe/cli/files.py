"""Reading the files named on the command line and writing the commands' outputs.

Outputs never replace what they should not: a regular file (or nothing) at the output
path is replaced atomically (a temporary file beside it, then a rename, so a reader never
sees half a file); anything else there (a symbolic link, ``/dev/stdout``, a device, a
FIFO) is written through, as a shell redirection would, and never replaced by a regular
file; an output that is one of the command's inputs is refused.
"""

from __future__ import annotations

import mmap
import os
import stat

from ..cachedir import give_owner, write_chunks
from ..errors import PysframeError
from ..inputs import kind_of, load
from .errors import EXIT_UNREADABLE, CommandError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType
    from typing import IO, Any


def read_file(path: str) -> bytes | mmap.mmap:
    """A command-line input: a regular file only (never a FIFO or a device, which could
    hang or never end), read whole when small and mapped when large."""
    return load(path)


def write_output(path: str, data: bytes | Iterable[bytes], inputs: Iterable[str] = (),
                 mode: int | None = None, owner: tuple[int, int] | None = None) -> None:
    """Write an output file whole or not at all; see the module docstring and
    :class:`Output` (``mode``, ``owner``)."""
    with Output(path, inputs, mode, owner) as out:
        write_chunks(out, data)


class Output:
    """``with Output(path, inputs) as out``: the output ``path`` open for writing on a
    descriptor of its own (bytes, or with ``text`` UTF-8 text whose surrogates are written
    back as the bytes they stand for), kept once the block ends without an error: a
    regular file (or nothing) at the path is replaced through a temporary file beside it
    and a rename (removed on any failure), anything else (a link, a device, a FIFO) is
    written through, a directory is refused. ``mode``: the permissions of a new or
    replaced file (default 0666 less the umask); ``owner``: its (uid, gid) where this
    process may give them (:func:`~pysframe.cachedir.give_owner`); what is written
    through keeps its own. A write that fails in the block (an ``OSError`` naming no
    file) is said of the output, in one line. The temporary file is made with ``os``
    (``tempfile`` costs ~4.5 ms of imports)."""

    def __init__(self, path: str, inputs: Iterable[str] = (), mode: int | None = None,
                 owner: tuple[int, int] | None = None, text: bool = False) -> None:
        refuse_inputs(path, inputs)
        self.path, self.mode, self.owner, self.text = path, mode, owner, text
        #: The temporary file renamed over ``path`` at the end (None: written through).
        self.temporary: str | None = None
        self.out: IO[Any] | None = None

    def __enter__(self) -> IO[Any]:
        try:
            fd = self._open()
        except OSError as error:
            raise _cannot_write(self.path, error) from None
        if self.text:
            self.out = open(fd, "w", encoding="utf-8", errors="surrogateescape")
            # (the -j workers' failed writes name it: jobs.Copier)
            self.out.output_name = self.path  # type: ignore[attr-defined]
        else:
            self.out = os.fdopen(fd, "wb")
        return self.out

    def _open(self) -> int:
        """A new temporary file beside a regular file (or nothing), else what is at the
        path, opened for writing (and emptied if it is a regular file reached through a
        link); a link to nothing is refused rather than followed to create a file."""
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
        if stat.S_ISDIR(through.st_mode):
            os.close(fd)
            raise CommandError(f"{self.path}: cannot write: {kind_of(through.st_mode)}",
                               EXIT_UNREADABLE)
        if stat.S_ISREG(through.st_mode):
            os.ftruncate(fd, 0)
        return fd

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        assert self.out is not None
        temporary, self.temporary = self.temporary, None
        try:
            if kind is None:
                self.out.flush()
                if temporary is not None:
                    self._set_mode()
                self.out.close()
                if temporary is not None:
                    os.replace(temporary, self.path)
                    temporary = None
            else:
                _close_quietly(self.out)  # (the block's own error is the one to say)
        except OSError as failure:
            _close_quietly(self.out)
            raise _cannot_write(self.path, failure) from None
        finally:
            if temporary is not None:  # (a failed block, or a failed write: nothing kept)
                try:
                    os.unlink(temporary)
                except OSError:
                    pass
        if isinstance(error, OSError) and error.filename is None:
            # (a write to the output failed in the block; an error naming a file is another
            # file's)
            raise _cannot_write(self.path, error) from None

    def _set_mode(self) -> None:
        assert self.out is not None
        mode = self.mode
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        if self.owner is not None:
            mode = give_owner(self.out.fileno(), self.owner, mode)
        os.fchmod(self.out.fileno(), mode)  # after fchown, which clears set-ID bits


def _close_quietly(out: IO[Any]) -> None:
    try:
        out.close()
    except (OSError, ValueError):
        pass


def refuse_inputs(path: str, inputs: Iterable[str]) -> None:
    """An output may not be one of the inputs (the same file, however it is named)."""
    try:
        target = os.stat(path)
    except OSError:
        return  # nothing there yet: it cannot be an input
    for name in inputs:
        try:
            source = os.stat(name)
        except OSError:
            continue
        if (source.st_dev, source.st_ino) == (target.st_dev, target.st_ino):
            raise CommandError(f"{path}: refusing to overwrite an input ({name})",
                               EXIT_UNREADABLE)


def _cannot_write(path: str, error: OSError) -> PysframeError:
    return CommandError(f"{path}: cannot write: {error.strerror or error}", EXIT_UNREADABLE)

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

from ..cachedir import write_atomically, write_chunks
from ..errors import PysframeError
from ..inputs import kind_of, load
from .errors import EXIT_UNREADABLE, CommandError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


def read_file(path: str) -> bytes | mmap.mmap:
    """A command-line input: a regular file only (never a FIFO or a device, which could
    hang or never end), read whole when small and mapped when large."""
    return load(path)


def write_output(path: str, data: bytes | Iterable[bytes], inputs: Iterable[str] = (),
                 mode: int | None = None, owner: tuple[int, int] | None = None) -> None:
    """Write an output file whole or not at all; see the module docstring. ``mode``: the
    permissions of a new or replaced regular file (default 0666 less the umask), ``owner``
    its (uid, gid) where this process may give them
    (:func:`~pysframe.cachedir.write_atomically`); what is written through (a device, a
    link's target) keeps its own."""
    refuse_inputs(path, inputs)
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        status = None
    except OSError as error:
        raise _cannot_write(path, error) from None
    try:
        if status is None or stat.S_ISREG(status.st_mode):
            write_atomically(path, data, mode, owner)
        elif stat.S_ISDIR(status.st_mode):
            raise CommandError(f"{path}: cannot write: is a directory", EXIT_UNREADABLE)
        else:
            _write_through(path, data)
    except OSError as error:
        raise _cannot_write(path, error) from None


def _write_through(path: str, data: bytes | Iterable[bytes]) -> None:
    """Write into what is at ``path`` (a link's target, a device, a FIFO) without
    replacing it; a link to nothing is refused rather than followed to create a file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise CommandError(f"{path}: cannot write: a symbolic link to nothing",
                           EXIT_UNREADABLE) from None
    with os.fdopen(fd, "wb") as out:
        status = os.fstat(fd)
        if stat.S_ISREG(status.st_mode):
            out.truncate(0)
        elif stat.S_ISDIR(status.st_mode):
            raise CommandError(f"{path}: cannot write: {kind_of(status.st_mode)}",
                               EXIT_UNREADABLE)
        write_chunks(out, data)


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

"""Opening the files that inputs name, as hostile input: regular files only, sizes checked
before anything is read, large files mapped rather than read.

Every file pysframe reads because a user or an input named it (a command-line argument,
a path in a perf.data MMAP record, a core's NT_FILE note, a process's maps, a debug link)
goes through here. A FIFO, a device, a directory or a socket is refused before any read
(the open itself uses ``O_NONBLOCK``, so opening a FIFO cannot hang either); a regular
file that reports size 0 (``/proc/kmsg``, any procfs file) is refused for mapping, and
read only with a bound and without blocking when a caller asks for that.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat

from .errors import PysframeError

#: Files up to this size are read into memory; larger ones are mapped (the pages a reader
#: never touches cost nothing, so a 3 GB file named in a recording costs what is read).
READ_WHOLE_LIMIT = 1 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class InputError(PysframeError):
    """A file that cannot be used as input (not readable, not a regular file, too large,
    empty): always an unreadable input."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message, path=path, unreadable=True)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO", "a directory", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str, *, follow_symlinks: bool = True) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file ``path`` and its status. Without
    ``follow_symlinks`` a symbolic link is refused (``O_NOFOLLOW``)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow_symlinks:
            raise InputError(path, "is a symbolic link") from None
        raise InputError(path, f"cannot read: {error.strerror or error}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise InputError(path, f"not a regular file ({kind_of(status.st_mode)})")
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def load(path: str, *, max_size: int | None = None, min_size: int = 1,
         follow_symlinks: bool = True, private: bool = False) -> bytes | mmap.mmap:
    """See :func:`load_with_status` (the contents alone)."""
    return load_with_status(path, max_size=max_size, min_size=min_size,
                            follow_symlinks=follow_symlinks, private=private)[0]


def load_with_status(path: str, *, max_size: int | None = None, min_size: int = 1,
                     follow_symlinks: bool = True, private: bool = False
                     ) -> tuple[bytes | mmap.mmap, os.stat_result]:
    """The contents of the regular file ``path`` (read whole when small, else mapped
    read-only) and the status of the descriptor they came from. Refused: sizes below
    ``min_size`` (by default an empty file, which is also what procfs files report) or
    above ``max_size``.

    ``private``: always a copy in this process's memory, never a mapping of the file: a
    mapped file that shrinks (a log rotated with copytruncate, a package being upgraded)
    kills the process with SIGBUS at the next access, where a copy is one unreadable
    input (a file that shrinks while it is read is refused)."""
    fd, status = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        size = status.st_size
        if size < min_size:
            raise InputError(path, "empty file" if size == 0 else
                             f"too short ({size} bytes)")
        if max_size is not None and size > max_size:
            raise InputError(path, f"too large ({size} bytes, at most {max_size})")
        if private:
            return _copy(path, fd, size), status
        if size <= READ_WHOLE_LIMIT:
            return _read_exactly(path, fd, size), status
        try:
            return mmap.mmap(fd, size, access=mmap.ACCESS_READ), status
        except (OSError, ValueError) as error:
            raise InputError(path, f"cannot map: {error}") from None
    finally:
        os.close(fd)


def _copy(path: str, fd: int, size: int) -> bytes | mmap.mmap:
    """``size`` bytes of the file read into memory (an anonymous mapping when large, so
    that it costs no more than its pages); fewer bytes than the file said: refused."""
    if size <= READ_WHOLE_LIMIT:
        data = _read_exactly(path, fd, size)
        if len(data) != size:
            raise InputError(path, f"changed while read ({len(data)} of {size} bytes)")
        return data
    copy = mmap.mmap(-1, size)
    view = memoryview(copy)
    done = 0
    try:
        while done < size:
            count = os.preadv(fd, [view[done:done + (8 << 20)]], done)
            if count == 0:
                raise InputError(path, f"changed while read ({done} of {size} bytes)")
            done += count
    except OSError as error:
        raise InputError(path, f"cannot read: {error.strerror or error}") from None
    finally:
        view.release()
    return copy


def _read_exactly(path: str, fd: int, size: int) -> bytes:
    chunks = []
    left = size
    try:
        while left:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break  # the file shrank under us: use what is there
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as error:
        raise InputError(path, f"cannot read: {error.strerror or error}") from None
    return b"".join(chunks)


def read_text(path: str, limit: int) -> str:
    """A small text file read whole (procfs files included, which report size 0), at most
    ``limit`` bytes; a read that would block (``/proc/kmsg``) is refused."""
    fd, _ = open_regular(path)
    try:
        chunks = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                raise InputError(path, "reading it would block") from None
            except OSError as error:
                raise InputError(path, f"cannot read: {error.strerror or error}") from None
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise InputError(path, f"larger than {limit} bytes")
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")

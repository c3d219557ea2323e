"""Writing whole to a descriptor: ``os.write`` may take part of what it is given (a pipe,
a socket, a signal), so every writer of raw descriptors loops; this is that loop, once."""

from __future__ import annotations

import os


def write_all(target: int, data: bytes | bytearray | memoryview) -> None:
    """``data`` written whole to the descriptor ``target``."""
    view = memoryview(data)
    while view:
        view = view[os.write(target, view):]


#: Bytes read back at a time where the kernel cannot copy a file itself.
PIECE = 1 << 20


def copy_file(source: int, target: int) -> None:
    """The whole file ``source`` written to the descriptor ``target``: copied by the kernel
    (``os.sendfile``), and what it refuses (a target it cannot send to) read and written."""
    import errno

    size, done = os.fstat(source).st_size, 0
    try:
        while done < size:
            sent = os.sendfile(target, source, done, size - done)
            if not sent:
                break
            done += sent
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOSYS):
            raise  # EPIPE and the like: as a write would fail
    os.lseek(source, done, os.SEEK_SET)
    while piece := os.read(source, PIECE):
        write_all(target, piece)

"""Reading the files named on the command line and writing the commands' outputs."""

from __future__ import annotations

from ..cachedir import write_atomically
from .errors import EXIT_UNREADABLE, CommandError


def read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise CommandError(f"{path}: cannot read: {error.strerror or error}",
                           EXIT_UNREADABLE) from None


def write_output(path: str, data: bytes) -> None:
    """Write an output file whole or not at all (a temporary file and a rename)."""
    try:
        write_atomically(path, data)
    except OSError as error:
        raise CommandError(f"{path}: cannot write: {error.strerror or error}",
                           EXIT_UNREADABLE) from None

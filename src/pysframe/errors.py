"""The one error model of pysframe: every error an input can cause derives from
:class:`PysframeError`.

An error carries its message, the byte offset where the problem was found (``None`` when
it is not about one place), the file it is about (``None`` when the message already says,
or there is no file), and whether the input could not be read at all (as opposed to read
and found invalid). Exit codes are not decided here: the ``cli`` stage maps ``unreadable``
to its exit status, so a library caller never sees a CLI convention.
"""

from __future__ import annotations


class PysframeError(Exception):
    """Bad or unreadable input, described in one line: ``[path: ]message[ at offset 0x..]``."""

    def __init__(self, message: str, offset: int | None = None, *, path: str | None = None,
                 unreadable: bool = False) -> None:
        self.message = message
        self.offset = offset
        self.path = path
        self.unreadable = unreadable
        super().__init__(message)

    def __str__(self) -> str:
        text = self.message if self.path is None else f"{self.path}: {self.message}"
        return text if self.offset is None else f"{text} at offset {self.offset:#x}"

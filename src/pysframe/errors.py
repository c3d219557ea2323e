"""The one error model of pysframe: every error an input can cause derives from
:class:`PysframeError`.

An error carries its message, the byte offset where the problem was found (``None`` when
it is not about one place), the file it is about (``None`` when the message already says,
or there is no file), and whether the input could not be read at all (as opposed to read
and found invalid). Exit codes are not decided here: the ``cli`` stage maps ``unreadable``
to its exit status, so a library caller never sees a CLI convention.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


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


class Problems:
    """Errors in one input that cost that input's frames, not the run (a corrupt table, a
    bad symbol table, an unreadable binary named by a recording): each distinct one is
    reported once, as it happens, and counted, so the command can end with exit status 1.
    """

    __slots__ = ("_report", "_seen")

    def __init__(self, report: Callable[[str], None] | None = None) -> None:
        self._report = report
        self._seen: dict[str, PysframeError] = {}

    def add(self, error: PysframeError, path: str | None = None) -> None:
        """Note ``error`` (about ``path`` when it names no file itself)."""
        if error.path is None and path is not None:
            error.path = path
        text = str(error)
        if text in self._seen:
            return
        self._seen[text] = error
        if self._report is not None:
            self._report(text)

    def reported(self, line: str) -> bool:
        """Whether the problem ``line`` says (as one line, with newlines flattened) was
        noted here."""
        return any(" ".join(text.split("\n")) == line for text in self._seen)

    def __bool__(self) -> bool:
        return bool(self._seen)

    def __len__(self) -> int:
        return len(self._seen)

    def __iter__(self) -> Iterator[PysframeError]:
        return iter(self._seen.values())


#: Problems of one kind listed one line each before they are summed up in one.
LISTED_PROBLEMS = 10


def summarized(lines: list[str], what: str, limit: int = LISTED_PROBLEMS) -> list[str]:
    """``lines`` as they are when there are at most ``limit``; else one line that counts
    them and quotes the first (100,000 bogus entries of a hostile target are one line)."""
    if len(lines) <= limit:
        return lines
    return [f"{what}: {len(lines):,} problems, the first: {lines[0]}"]

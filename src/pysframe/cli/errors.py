"""Exit codes and the one-line error reporting shared by every command."""

from __future__ import annotations

import sys

#: Everything went well (``validate``: no problem found).
EXIT_OK = 0
#: The input was read but holds invalid data (or ``validate`` found problems).
EXIT_INVALID = 1
#: The input could not be read, or the command line was wrong.
EXIT_UNREADABLE = 2


class CommandError(Exception):
    """A failure to report as one line on stderr, with the exit code to use."""

    def __init__(self, message: str, exit_code: int = EXIT_INVALID) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def report(message: str) -> None:
    """Print one error line on stderr (newlines in ``message`` are flattened)."""
    sys.stderr.write("sframe: " + " ".join(message.split("\n")) + "\n")

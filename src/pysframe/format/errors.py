"""Errors raised for SFrame data that cannot be read or written.

Every reader in pysframe raises only subclasses of :class:`SFrameError` for bad
bytes, so callers (the CLI, the fuzz targets) can catch one type.
"""

from __future__ import annotations

from ..errors import PysframeError


class SFrameError(PysframeError, ValueError):
    """Invalid or unsupported SFrame data.

    ``offset`` is the byte offset in the section where the problem was found
    (``None`` when it is not about one place).
    """


class TruncatedError(SFrameError):
    """A structure extends past the end of the section or of its sub-section."""


class BadMagicError(SFrameError):
    """The section does not start with the SFrame magic number."""


class UnsupportedVersionError(SFrameError):
    """The version byte is not 1, 2 or 3."""


class CorruptError(SFrameError):
    """A field holds a value the format does not allow."""


class EncodeError(SFrameError):
    """The object model cannot be written in the requested version or form."""

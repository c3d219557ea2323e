"""The error of this stage, apart so that catching it imports no decoder."""

from __future__ import annotations

from ..errors import PysframeError


class CFIError(PysframeError, ValueError):
    """Invalid call-frame information (with the section offset where it was found)."""

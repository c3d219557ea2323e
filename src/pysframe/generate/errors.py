"""The generator's error, importable without loading the generator (the unwinder's start-up
path reads cached tables and needs only this)."""

from __future__ import annotations

from ..errors import PysframeError


class GenerateError(PysframeError):
    """The file cannot get an SFrame section (no CFI, unsupported machine)."""


class IrregularFunction(PysframeError):
    """A function of an on-demand table whose rows the whole table might not give as made
    on its own (:mod:`.function_maker`): the table is then made whole."""

"""ELF container: the headers of any ELF file, its SFrame sections and their relocations.

The API is the names below (:class:`ElfImage` and its :class:`SFrameSectionData`,
:func:`is_elf`, :class:`ElfError`), plus the header readers of :mod:`.headers`, the
pyelftools-free section finder of :mod:`.quick` and the debug-file locator of
:mod:`.debuginfo`. Names are loaded on first use (PEP 562), so the start-up-bound paths
that need only the headers do not import pyelftools with :class:`ElfImage`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = ["ElfError", "ElfImage", "SFrameSectionData", "is_elf"]

if TYPE_CHECKING:
    from .headers import ElfError, is_elf
    from .sections import ElfImage, SFrameSectionData

_HOMES = {"ElfError": ".headers", "is_elf": ".headers", "ElfImage": ".sections",
          "SFrameSectionData": ".sections"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home, __name__), name)

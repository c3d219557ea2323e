"""ELF container: locating .sframe sections and applying their relocations.

``ElfImage`` (pyelftools) is imported on first use, so the start-up-bound
dump path can use :mod:`.quick` without paying for pyelftools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["ElfError", "ElfImage", "SFrameSectionData", "is_elf"]

if TYPE_CHECKING:
    from .sections import ElfError, ElfImage, SFrameSectionData, is_elf


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import sections

        return getattr(sections, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""ELF container: locating .sframe sections and applying their relocations."""

from .sections import ElfError, ElfImage, SFrameSectionData, is_elf

__all__ = ["ElfError", "ElfImage", "SFrameSectionData", "is_elf"]

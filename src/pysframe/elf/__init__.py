"""ELF container: the headers of any ELF file, its SFrame sections and their relocations,
and where a binary's symbols and DWARF are (:class:`DebugFiles`, with the debuginfod
client :class:`Debuginfod`).

The API is the names below, imported from here. They are loaded on first use (PEP 562),
so the start-up-bound paths that need only the headers (:mod:`.headers`, :mod:`.quick`)
do not import pyelftools with :class:`ElfImage`.
"""

from ..exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .debuginfo import DebugFiles, build_id_path, debug_file
    from .debuginfod import Debuginfod
    from .headers import (
        ElfError,
        FileHeader,
        Note,
        ProgramHeader,
        SectionHeader,
        find_build_id,
        is_elf,
        iter_notes,
        read_file_header,
        read_program_headers,
        read_section_headers,
    )
    from .quick import QuickSection, quick_sframe_sections
    from .sections import ElfImage, SFrameSectionData

_HOMES = {
    "DebugFiles": ".debuginfo",
    "Debuginfod": ".debuginfod",
    "build_id_path": ".debuginfo",
    "debug_file": ".debuginfo",
    "ElfError": ".headers",
    "FileHeader": ".headers",
    "Note": ".headers",
    "ProgramHeader": ".headers",
    "SectionHeader": ".headers",
    "find_build_id": ".headers",
    "is_elf": ".headers",
    "iter_notes": ".headers",
    "read_file_header": ".headers",
    "read_program_headers": ".headers",
    "read_section_headers": ".headers",
    "QuickSection": ".quick",
    "quick_sframe_sections": ".quick",
    "ElfImage": ".sections",
    "SFrameSectionData": ".sections",
}

__all__ = [
    "DebugFiles",
    "Debuginfod",
    "ElfError",
    "ElfImage",
    "FileHeader",
    "Note",
    "ProgramHeader",
    "QuickSection",
    "SFrameSectionData",
    "SectionHeader",
    "build_id_path",
    "debug_file",
    "find_build_id",
    "is_elf",
    "iter_notes",
    "quick_sframe_sections",
    "read_file_header",
    "read_program_headers",
    "read_section_headers",
]

__getattr__ = lazy_exports(__name__, _HOMES)

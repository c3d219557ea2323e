"""Generating SFrame from DWARF CFI, with the rules of GNU as (per function) and GNU ld
(PLT entries, merging, sorting).

Modules: :mod:`.gas` (one function's CFI to an FDE, or gas's reason to skip it),
:mod:`.plt` (ld's PLT FDEs), :mod:`.section` (a whole section for an ELF file),
:mod:`.cache` (generated sections by build id), :mod:`.inject` (a copy of a file with the
section added), :mod:`.compare` (a section against the file's CFI) and :mod:`.errors`.
Nothing is exported at the package level: those modules are the API.
"""

__all__: list[str] = []

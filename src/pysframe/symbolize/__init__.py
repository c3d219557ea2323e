"""Names for code addresses: :mod:`.symbols` (ELF symbols, chosen as perf chooses them),
:mod:`.dwarf_names` (functions and inline frames from DWARF, as gdb names them, with
the per-build-id memo of :mod:`.dwarf_cache`), :mod:`.kernel` (``/proc/kallsyms``) and
:mod:`.symbolizer` (frames to ``sym+0xoff`` text).

Nothing is exported at the package level: those modules are the API.
"""

__all__: list[str] = []

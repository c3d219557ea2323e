"""Function names and inline frames for a code address, from DWARF, named as gdb names
them; and gdb's tail-call frames (:class:`DwarfNames`).

Why by hand on top of pyelftools: pyelftools parses DIEs, attributes, forms, strings and
supplementary (dwz) files, but it has no query "which inlined subroutines and which
function contain this address", gdb's naming rules are not DWARF's ``DW_AT_name``, and
its convenience paths are slow for this use (``get_dwarf_info`` decompresses every debug
section and searches relocations; reference lookups parse unit headers one by one;
``ARanges`` and every DIE go through ``construct``). So this package reads the section
headers itself, inflates only the sections a lookup needs and ``.debug_info`` only as far
as it is read, builds pyelftools' ``DWARFInfo`` from them, reads ``.debug_aranges``,
range lists and the top level of a unit with ``struct`` (pyelftools parses only the
DIEs of the function that contains the address, and siblings are skipped through
``DW_AT_sibling``).

The modules, bottom up:

* :mod:`.forms`: the DWARF forms, by code and by pyelftools' name;
* :mod:`.stream`: the section table and lazily decompressed section streams;
* :mod:`.intervals`: an index of address intervals;
* :mod:`.info`: one file's DWARF (pyelftools' ``DWARFInfo``), unit offsets, aranges,
  abbreviations, range lists, the dwz supplementary file;
* :mod:`.scan`: the byte-level scanners of a unit's top-level functions and call sites;
* :mod:`.units`: the units by address and the ranges of DIEs;
* :mod:`.names`: gdb 13's naming rules;
* :mod:`.frames`: the inline frames and function at an address;
* :mod:`.call_sites`: call-site targets and the tail-call chain search;
* :mod:`.facade`: :class:`DwarfNames`, which composes them.

Nothing is read until the first :meth:`DwarfNames.frames_at` (or call-site lookup) except
the ELF section headers that decide where the DWARF is. Bad or missing DWARF gives
``None``, never an exception.
"""

from __future__ import annotations

from .facade import DwarfNames

__all__ = ["DwarfNames"]

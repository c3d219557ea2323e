"""Names for x86-64 PLT code, which has no symbols of its own: ``.plt`` for the lazy-binding
header, ``name@plt`` for each stub of ``.plt``, ``.plt.sec`` and ``.plt.got``, as perf 6.3
and later (and objdump) name them.

A stub is named after the relocation of the GOT slot it jumps through (``jmp
*disp32(%rip)``, decoded here), not after its index: ld orders a shared library's
``.rela.plt`` otherwise than its stubs when some slots are IRELATIVE (libc: every one of its
53 stubs was misnamed by index, as perf 6.1 misnames them). An IRELATIVE slot has no
symbol: its stub is named after the function its resolver's address starts, else
``offset_0x<stub>@plt`` (perf 7's forms). Written by hand (pyelftools would parse every
relocation into a dict): tables are read with ``struct``, every index checked; a bad table
raises :class:`ElfError` naming the entry's file offset.
"""

from __future__ import annotations

import sys

from ..elf import ElfError, ElfImage
from ..elf.headers import SectionHeader, relocation_symbol

TYPE_CHECKING = False
if TYPE_CHECKING:  # (collections.abc imports collections: ~1 ms of a first run)
    from collections.abc import Callable

#: (start, end, name) of one piece of PLT code.
PltSymbol = tuple[int, int, str]

#: ``jmp *disp32(%rip)``: at the start of a stub, after ``endbr64`` (4 bytes), or after
#: ``endbr64`` and a ``bnd`` prefix (5 bytes) in the 16-byte stubs of IBT-enabled links.
_JMP_GOT = b"\xff\x25"
_JMP_GOT_AT = (0, 4, 5)
_R_X86_64_IRELATIVE = 37


def plt_symbols(image: ElfImage,
                resolver_names: Callable[[set[int]], dict[int, str]] | None = None
                ) -> list[PltSymbol]:
    """The header and stubs of the lazy-binding PLT (the 16-byte ``.plt.sec`` stubs when
    there is a second PLT), named from ``.rela.plt``. ``resolver_names`` names the functions
    starting at some addresses (the IRELATIVE slots' resolvers)."""
    relocations = image.section_header(".rela.plt")
    header = image.section_header(".plt")
    plt = image.section_header(".plt.sec") or header
    if relocations is None or plt is None or image.machine != "EM_X86_64":
        return []
    table = _RelocatedNames(image, relocations)
    slots = table.by_slot()
    resolvers = {addend for name, addend in slots.values() if name is None}
    names = resolver_names(resolvers) if resolver_names is not None and resolvers else {}
    first = plt.address + (0 if plt.name == ".plt.sec" else 16)
    code = image.section_bytes(plt)
    # PLT0, named after its section (perf 6.1: after a zero-sized symbol before it, if any).
    out = [] if header is None else [(header.address, header.address + 16, ".plt")]
    for index in range(table.count):
        start = first + index * 16
        slot = _stub_slot(code, start - plt.address, 16, start)
        name, addend = slots.get(slot, (None, 0)) if slot is not None else table.entry(index)
        if name is None:  # IRELATIVE: its resolver's function, without a symbol version
            name = names.get(addend, "").split("@", 1)[0] or f"offset_{start:#x}"
        out.append((start, start + 16, f"{name}@plt"))
    return out


def plt_got_symbols(image: ElfImage) -> list[PltSymbol]:
    """Each ``.plt.got`` stub (a function whose PLT slot ld merged with the GOT slot of its
    address, bound at load time) named after the ``.rela.dyn`` symbol of its slot; a stub
    whose jump or slot is not found stays unnamed."""
    stubs = image.section_header(".plt.got")
    relocations = image.section_header(".rela.dyn")
    if stubs is None or relocations is None or image.machine != "EM_X86_64":
        return []
    size = stubs.entsize if stubs.entsize in (8, 16) else 8
    code = image.section_bytes(stubs)
    jumps = [(stubs.address + offset, _stub_slot(code, offset, size, stubs.address + offset))
             for offset in range(0, len(code) - size + 1, size)]
    # Only the stubs' slots are looked up: .rela.dyn holds every relocation of the file
    # (libpython's 36k took 28 ms to read whole).
    slots = _RelocatedNames(image, relocations).at_places(
        {slot for _, slot in jumps if slot is not None})
    out = []
    for address, slot in jumps:
        name = slots.get(slot, (None, 0))[0] if slot is not None else None
        if name:
            out.append((address, address + size, f"{name}@plt"))
    return out


def _stub_slot(code: bytes, offset: int, size: int, address: int) -> int | None:
    """The GOT slot the stub at ``offset`` of ``code`` (at ``address``) jumps through, or
    None when it holds no ``jmp *disp32(%rip)`` where one is expected."""
    for at in _JMP_GOT_AT:
        if at + 6 <= size and code[offset + at:offset + at + 2] == _JMP_GOT:
            if offset + at + 6 > len(code):
                return None
            displacement = int.from_bytes(code[offset + at + 2:offset + at + 6], "little",
                                          signed=True)
            return address + at + 6 + displacement
    return None


class _RelocatedNames:
    """A RELA section's entries as (place, symbol name or None, addend), read by hand from
    its linked symbol table, every index checked."""

    def __init__(self, image: ElfImage, relocations: SectionHeader) -> None:
        sections = image.section_headers()
        if not relocations.link < len(sections):
            raise ElfError(image.path, f"{relocations.name} links to section "
                           f"{relocations.link} of {len(sections)}", relocations.offset)
        symtab = sections[relocations.link]
        self._image, self._relocations = image, relocations
        self._names = _string_table(image, symtab, sections)
        layout = image.header.layout
        self._wide = layout.wide
        self._entry, self._symbol = layout.rela, layout.symbol
        self._table = image.section_bytes(relocations)
        self._symbols = image.section_bytes(symtab)
        self.count = len(self._table) // self._entry.size

    def entry(self, index: int) -> tuple[str | None, int]:
        """Entry ``index``'s symbol name ("" for an unnamed symbol; None for none: an
        IRELATIVE slot, whose resolver is the addend) and addend."""
        return self._read(index)[1:]

    def by_slot(self) -> dict[int, tuple[str | None, int]]:
        """(name, addend) by the place each entry relocates (the first entry for a place)."""
        found: dict[int, tuple[str | None, int]] = {}
        for index in range(self.count):
            place, name, addend = self._read(index)
            found.setdefault(place, (name, addend))
        return found

    def at_places(self, places: set[int]) -> dict[int, tuple[str | None, int]]:
        """(name, addend) of the first entry relocating each of ``places`` that has one."""
        width = 8 if self._wide else 4
        if sys.byteorder == "big":  # (an x86-64 file is little-endian): entry by entry
            return {place: value for place, value in self.by_slot().items() if place in places}
        # (a view of words, not an array: importing array imports collections, ~1-2 ms
        # of a first run)
        words = memoryview(bytes(self._table[:self.count * self._entry.size])).cast(
            "Q" if self._wide else "I")
        offsets = words[::self._entry.size // width].tolist()
        # Built from the last entry back, so each place keeps its first entry.
        first = dict(zip(reversed(offsets), range(len(offsets) - 1, -1, -1), strict=True))
        return {place: self._read(first[place])[1:] for place in places if place in first}

    def _read(self, index: int) -> tuple[int, str | None, int]:
        place, info, addend = self._entry.unpack_from(self._table, index * self._entry.size)
        number = relocation_symbol(info, self._wide)
        if not number:
            kind = info & (0xFFFFFFFF if self._wide else 0xFF)
            return place, (None if kind == _R_X86_64_IRELATIVE else ""), addend
        count = len(self._symbols) // self._symbol.size
        if number >= count:
            raise ElfError(self._image.path, f"{self._relocations.name} entry {index} names "
                           f"symbol {number} of {count}",
                           self._relocations.offset + index * self._entry.size)
        name_offset = self._symbol.unpack_from(self._symbols, number * self._symbol.size)[0]
        return place, _name_at(self._names, name_offset), addend


def _string_table(image: ElfImage, symtab: SectionHeader,
                 sections: list[SectionHeader]) -> bytes:
    """The string table ``symtab`` links to."""
    if not symtab.link < len(sections):
        raise ElfError(image.path, f"symbol table {symtab.name} links to section {symtab.link} "
                       f"of {len(sections)}", symtab.offset)
    return bytes(image.section_bytes(sections[symtab.link]))


def _name_at(names: bytes, offset: int) -> str:
    """The NUL-terminated name at ``offset`` of a string table."""
    end = names.find(b"\0", offset)
    return names[offset:end if end >= 0 else None].decode("utf-8", "replace")

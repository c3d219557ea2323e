"""Function symbols of an ELF file, named and chosen the way ``perf`` does it.

Sources, in perf's order of preference: the separate debug file under
``/usr/lib/debug/.build-id/`` (its ``.symtab``), the file's own ``.symtab``,
else ``.dynsym``; plus ``name@plt`` entries synthesized from ``.rela.plt``.
When several symbols start at one address, perf's rule picks one: a sized
symbol over an empty one, non-weak over weak, global over local, fewer
leading underscores, then the longer name. Symbols without a size end where
the next one starts.
"""

from __future__ import annotations

import itertools
import os
import struct
from bisect import bisect_right
from dataclasses import dataclass

from ..elf import ElfError, ElfImage

DEBUG_ROOT = "/usr/lib/debug/.build-id"


@dataclass(slots=True)
class Symbol:
    start: int
    end: int
    name: str
    binding: str
    size: int


def _leading_underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


def _better(a: Symbol, b: Symbol) -> bool:
    """Whether perf keeps ``a`` rather than ``b`` for the same start address."""
    if (a.size > 0) != (b.size > 0):
        return a.size > 0
    if (a.binding == "STB_WEAK") != (b.binding == "STB_WEAK"):
        return b.binding == "STB_WEAK"
    if (a.binding == "STB_GLOBAL") != (b.binding == "STB_GLOBAL"):
        return a.binding == "STB_GLOBAL"
    if _leading_underscores(a.name) != _leading_underscores(b.name):
        return _leading_underscores(a.name) < _leading_underscores(b.name)
    return len(a.name) > len(b.name)  # a full tie keeps the earlier symbol, as perf does


class SymbolTable:
    """Address (link-time) -> (name, offset)."""

    def __init__(self, symbols: list[Symbol]) -> None:
        best: dict[int, Symbol] = {}
        for symbol in symbols:
            kept = best.get(symbol.start)
            if kept is None or _better(symbol, kept):
                best[symbol.start] = symbol
        ordered = sorted(best.values(), key=lambda s: s.start)
        for current, following in itertools.pairwise(ordered):
            if current.size == 0:
                current.end = following.start
        if ordered and ordered[-1].size == 0:
            ordered[-1].end = ordered[-1].start + 1
        self.symbols = ordered
        self.starts = [s.start for s in ordered]

    def lookup(self, address: int) -> tuple[str, int] | None:
        index = bisect_right(self.starts, address) - 1
        if index < 0:
            return None
        symbol = self.symbols[index]
        if address >= symbol.end:
            return None
        return symbol.name, address - symbol.start


_BINDINGS = {0: "STB_LOCAL", 1: "STB_GLOBAL", 2: "STB_WEAK"}
_STT_FUNC = 2
_STT_GNU_IFUNC = 10


def _function_symbols(image: ElfImage, section_name: str) -> list[Symbol]:
    """FUNC and IFUNC symbols of a symbol table, read with ``struct`` (pyelftools' per-symbol
    parsing takes 0.2 s for libc's debug symbols, the bulk of a whole ``sframe script`` run)."""
    section = image.elf.get_section_by_name(section_name)
    if section is None or section["sh_type"] not in ("SHT_SYMTAB", "SHT_DYNSYM"):
        return []
    strtab = image.elf.get_section(section["sh_link"])
    data = image.data
    order = ">" if image.big_endian else "<"
    if image.elf_class == 64:
        entry = struct.Struct(order + "IBBHQQ")
    else:
        entry = struct.Struct(order + "IIIBBH")
    start, size = section["sh_offset"], section["sh_size"]
    names_at, names_size = strtab["sh_offset"], strtab["sh_size"]
    if start + size > len(data) or names_at + names_size > len(data) or size % entry.size:
        return []
    names = data[names_at:names_at + names_size]
    out = []
    for fields in entry.iter_unpack(data[start:start + size]):
        if image.elf_class == 64:
            name_offset, info, _, shndx, value, length = fields
        else:
            name_offset, value, length, info, _, shndx = fields
        if info & 0xF not in (_STT_FUNC, _STT_GNU_IFUNC) or shndx == 0:
            continue
        end = names.find(b"\0", name_offset)
        name = names[name_offset:end if end >= 0 else None].decode("utf-8", "replace")
        out.append(Symbol(value, value + length, name, _BINDINGS.get(info >> 4, "STB_LOCAL"),
                          length))
    return out


def _plt_symbols(image: ElfImage) -> list[Symbol]:
    """``name@plt`` for every lazy-binding PLT entry (x86-64 layout: 16-byte entries after
    a 16-byte PLT0, or the .plt.sec entries when there is a second PLT)."""
    elf = image.elf
    relocations = elf.get_section_by_name(".rela.plt")
    plt = elf.get_section_by_name(".plt.sec") or elf.get_section_by_name(".plt")
    if relocations is None or plt is None or image.machine != "EM_X86_64":
        return []
    symbols = elf.get_section(relocations["sh_link"])
    first = plt["sh_addr"] + (0 if plt.name == ".plt.sec" else 16)
    entry = 16
    out = []
    for index, relocation in enumerate(relocations.iter_relocations()):
        name = symbols.get_symbol(relocation["r_info_sym"]).name if relocation["r_info_sym"] else ""
        start = first + index * entry
        out.append(Symbol(start, start + entry, f"{name}@plt", "STB_GLOBAL", entry))
    return out


def debug_file(build_id: bytes | None) -> str | None:
    if not build_id:
        return None
    text = build_id.hex()
    path = os.path.join(DEBUG_ROOT, text[:2], text[2:] + ".debug")
    return path if os.path.isfile(path) else None


def load_symbols(image: ElfImage) -> SymbolTable:
    """The symbol table perf would use for ``image``."""
    symbols: list[Symbol] = []
    debug = debug_file(image.build_id())
    if debug is not None:
        try:
            debug_image = ElfImage(debug)
            if debug_image.build_id() == image.build_id():
                symbols = _function_symbols(debug_image, ".symtab")
        except ElfError:
            symbols = []
    if not symbols:
        symbols = _function_symbols(image, ".symtab") or _function_symbols(image, ".dynsym")
    symbols += _plt_symbols(image)
    return SymbolTable(symbols)

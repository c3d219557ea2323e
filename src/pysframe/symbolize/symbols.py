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


def _function_symbols(image: ElfImage, section_name: str) -> list[Symbol]:
    section = image.elf.get_section_by_name(section_name)
    if section is None or not hasattr(section, "iter_symbols"):
        return []
    out = []
    for symbol in section.iter_symbols():
        info = symbol["st_info"]
        if info["type"] not in ("STT_FUNC", "STT_GNU_IFUNC") or symbol["st_shndx"] == "SHN_UNDEF":
            continue
        start = symbol["st_value"]
        size = symbol["st_size"]
        out.append(Symbol(start, start + size, symbol.name, info["bind"], size))
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

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
import marshal
from bisect import bisect_right
from dataclasses import dataclass

from ..cachedir import entry_path, store
from ..elf import ElfError, ElfImage
from ..elf.debuginfo import debug_file
from ..elf.headers import SHT_DYNSYM, SHT_SYMTAB


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
        self.starts = [s.start for s in ordered]
        self.ends = [s.end for s in ordered]
        self.names = [s.name for s in ordered]

    @classmethod
    def from_arrays(cls, starts: list[int], ends: list[int], names: list[str]) -> SymbolTable:
        """A table whose choices were made before (read back from the cache)."""
        table = cls.__new__(cls)
        table.starts, table.ends, table.names = starts, ends, names
        return table

    def lookup(self, address: int) -> tuple[str, int] | None:
        index = bisect_right(self.starts, address) - 1
        if index < 0 or address >= self.ends[index]:
            return None
        return self.names[index], address - self.starts[index]


_BINDINGS = {0: "STB_LOCAL", 1: "STB_GLOBAL", 2: "STB_WEAK"}
_STT_FUNC = 2
_STT_GNU_IFUNC = 10


def _function_symbols(image: ElfImage, section_name: str) -> list[Symbol]:
    """FUNC and IFUNC symbols of a symbol table, read with ``struct`` (pyelftools' per-symbol
    parsing takes 0.2 s for libc's debug symbols, the bulk of a whole ``sframe script`` run)."""
    section = image.section_header(section_name)
    if section is None or section.type not in (SHT_SYMTAB, SHT_DYNSYM):
        return []
    sections = image.section_headers()
    if section.link >= len(sections):
        return []
    strtab = sections[section.link]
    data = image.data
    entry = image.header.layout.symbol
    wide = image.header.layout.wide
    start, size = section.offset, section.size
    names_at, names_size = strtab.offset, strtab.size
    if start + size > len(data) or names_at + names_size > len(data) or size % entry.size:
        return []
    names = data[names_at:names_at + names_size]
    out = []
    for fields in entry.iter_unpack(data[start:start + size]):
        if wide:
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


def _best_function_symbols(image: ElfImage) -> list[Symbol]:
    """Function symbols from the best source: the separate debug file's .symtab (same
    build id), else the file's own .symtab, else its .dynsym."""
    debug = debug_file(image.build_id())
    if debug is not None:
        try:
            debug_image = ElfImage(debug)
            if debug_image.build_id() == image.build_id():
                found = _function_symbols(debug_image, ".symtab")
                if found:
                    return found
        except ElfError:
            pass
    return _function_symbols(image, ".symtab") or _function_symbols(image, ".dynsym")


def function_addresses(image: ElfImage) -> tuple[dict[str, int], dict[str, int]]:
    """(global, local) name -> address of the function symbols of ``image`` (its debug
    file's .symtab, else its own .symtab, else .dynsym), for gdb's minimal-symbol lookup
    by name. A versioned definition ("name@@VERSION", "name@VERSION") is also found as
    "name", the default version first."""
    symbols = _best_function_symbols(image)
    global_names: dict[str, int] = {}
    local_names: dict[str, int] = {}
    for symbol in symbols:
        table = local_names if symbol.binding == "STB_LOCAL" else global_names
        table.setdefault(symbol.name, symbol.start)
    for table in (global_names, local_names):
        for name in sorted(table, key=lambda text: "@@" not in text):
            if "@" in name:
                table.setdefault(name.split("@", 1)[0], table[name])
    return global_names, local_names


def _plt_symbols(image: ElfImage) -> list[Symbol]:
    """``name@plt`` for every lazy-binding PLT entry (x86-64 layout: 16-byte entries after
    a 16-byte PLT0, or the .plt.sec entries when there is a second PLT)."""
    elf = image.elf
    relocations = image.section_by_name(".rela.plt")
    plt = image.section_by_name(".plt.sec") or image.section_by_name(".plt")
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


def load_symbols(image: ElfImage, *, use_cache: bool = True) -> SymbolTable:
    """The symbol table perf would use for ``image``; cached by build id (reading libc's
    debug symbols takes ~50 ms, the cached table ~2 ms)."""
    build_id = image.build_id() if use_cache else None
    path = _cache_path(build_id) if build_id else None
    if path is not None:
        cached = _read_cached(path)
        if cached is not None:
            return cached
    table = _load_symbols(image)
    if path is not None:
        _write_cached(path, table)
    return table


def _load_symbols(image: ElfImage) -> SymbolTable:
    symbols = _best_function_symbols(image) + _plt_symbols(image)
    return SymbolTable(symbols)


_CACHE_FORMAT = 1


def cache_entry(kind: str, build_id: bytes, suffix: str) -> str:
    """A cache file for what is derived from ``build_id``'s symbols or DWARF. It is keyed
    also on whether the separate debug file exists: installing one (apt install
    libc6-dbg) after a first run changes the answers."""
    return entry_path(kind, build_id, f".{'d' if debug_file(build_id) else 'n'}{suffix}")


def _cache_path(build_id: bytes) -> str:
    return cache_entry("symbols", build_id, f".s{_CACHE_FORMAT}.marshal")


def _read_cached(path: str) -> SymbolTable | None:
    try:
        with open(path, "rb") as handle:
            starts, ends, names = marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not (isinstance(starts, list) and isinstance(ends, list) and isinstance(names, list)
            and len(starts) == len(ends) == len(names)):
        return None
    return SymbolTable.from_arrays(starts, ends, names)


def _write_cached(path: str, table: SymbolTable) -> None:
    store(path, marshal.dumps((table.starts, table.ends, table.names)))

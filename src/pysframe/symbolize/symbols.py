"""Function symbols of an ELF file, named and chosen the way ``perf`` does it.

Sources: the first ``.symtab`` that :class:`~pysframe.elf.debuginfo.DebugFiles` finds
(the file's own, a twin with the same build id, a separate debug file, debuginfod),
else the file's ``.dynsym``; plus ``name@plt`` entries synthesized from ``.rela.plt`` (and
for ``.plt.got``, from ``.rela.dyn``).
perf takes functions, objects and NOTYPE labels (see :mod:`.perf_rules`).
When several symbols start at one address, perf's rule picks one: a sized
symbol over an empty one, non-weak over weak, global over local, fewer
leading underscores, then the longer name (of the demangled names). Symbols
without a size end where the next one starts, which perf works out first (so of
several empty symbols at one address, the last in the file wins). Names stay
mangled here; the
:class:`~pysframe.symbolize.symbolizer.Symbolizer` demangles those it shows.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import compress

from ..cachedir import Source, combine, entry_path, load, store
from ..elf import ElfError, ElfImage
from ..elf.debuginfo import DebugFiles
from ..elf.headers import (
    BINDING_NAMES,
    LAST_ADDRESS,
    SHT_DYNSYM,
    SHT_NOBITS,
    SHT_SYMTAB,
    STT_FILE,
    STT_FUNC,
    STT_GNU_IFUNC,
    STT_SECTION,
    Layout,
    SectionHeader,
    read_file_header,
    read_section_headers,
)
from ..errors import Problems, PysframeError
from ..records import record_class

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeVar

    from .perf_rules import Facts
    from .perf_symbols import PerfSymbols
    from .symbol_lists import SymbolLists

    #: What a symbol table is read into (records, lists or columns).
    _Read = TypeVar("_Read", list["Symbol"], PerfSymbols, SymbolLists)


@record_class
class Symbol:
    start: int
    end: int
    name: str
    binding: str
    size: int


def _fixed_ends(starts: list[int], ends: list[int]) -> list[int]:
    """perf's ``symbols__fixup_end`` (``ends`` changed in place, and returned), symbols in
    address order (file order among equal addresses): an empty symbol ends where the next
    one starts; the last one, one page past the page it starts in. Done before
    duplicates are removed, as perf does, so of several empty symbols at one address only
    the last one gets a size (and so is kept)."""
    from .perf_rules import last_end  # (a warm run reads tables made before)

    last = len(starts) - 1
    for i in [i for i, (start, end) in enumerate(zip(starts, ends, strict=True))
              if start == end]:
        ends[i] = starts[i + 1] if i < last else last_end(starts[i])
    return ends


def _start_of(symbol: Symbol) -> int:
    return symbol.start


class SymbolTable:
    """Address (link-time) -> (name, offset). ``shown``: how perf prints a name (its
    demangler), when the symbols are ones perf demangles (not the kernel's)."""

    def __init__(self, symbols: list[Symbol],
                 shown: Callable[[str], str] | None = None) -> None:
        from .perf_rules import better  # (a warm run reads tables made before)

        # Parallel lists, each symbol's fields read once: cc1's 29k symbols took 70 ms
        # when the symbols themselves were sorted, fixed and compared.
        ordered = sorted(symbols, key=_start_of)  # stable: file order kept
        starts = [symbol.start for symbol in ordered]
        ends = _fixed_ends(starts, [symbol.end for symbol in ordered])
        kept_starts: list[int] = []
        kept_ends: list[int] = []
        kept_names: list[str] = []
        kept = -1  # the symbol kept for the last start (perf's symbols__fixup_duplicate)
        for i, start in enumerate(starts):
            if kept >= 0 and starts[kept] == start:
                if not better(self._facts(ordered, ends, kept),
                               self._facts(ordered, ends, i), shown):
                    kept = i
                    kept_ends[-1], kept_names[-1] = ends[i], ordered[i].name
            else:
                kept = i
                kept_starts.append(start)
                kept_ends.append(ends[i])
                kept_names.append(ordered[i].name)
        self.starts: Sequence[int] = kept_starts
        self.ends: Sequence[int] = kept_ends
        self.names: Sequence[str] = kept_names

    @staticmethod
    def _facts(ordered: list[Symbol], ends: list[int], i: int) -> Facts:
        symbol = ordered[i]
        return ends[i] > symbol.start, symbol.binding, symbol.name

    #: The cache entry's bytes the table was read from (see :mod:`.table_bytes`), or None.
    payload: bytes | memoryview | None = None

    @classmethod
    def from_entry(cls, payload: bytes | memoryview, *, empty_ok: bool = False
                   ) -> SymbolTable | None:
        """The table a cache entry holds, its arrays views of ``payload``, or None when it
        is not shaped as one (see :func:`.table_bytes.arrays_from`)."""
        from .table_bytes import arrays_from

        return cls._read_in_place(payload, arrays_from(payload, empty_ok=empty_ok))

    @classmethod
    def from_spans(cls, payload: bytes | memoryview) -> SymbolTable | None:
        """The table an entry of the kernel's layout holds (names as spans of an area: see
        :func:`.table_bytes.spans_from`), its arrays views of ``payload``, or None when it
        is not shaped as one."""
        from .table_bytes import spans_from

        return cls._read_in_place(payload, spans_from(payload))

    @classmethod
    def _read_in_place(cls, payload: bytes | memoryview,
                       arrays: tuple[Sequence[int], Sequence[int], Sequence[str]] | None
                       ) -> SymbolTable | None:
        if arrays is None:
            return None
        table = cls.from_arrays(*arrays)
        table.payload = payload
        return table

    def entry(self) -> bytes:
        """The cache entry's bytes of this table (those it was read from, when it was)."""
        if self.payload is not None:
            return bytes(self.payload)
        from array import array

        from .table_bytes import entry

        return entry(array("Q", self.starts), array("Q", self.ends),
                     [name.encode() for name in self.names])

    @classmethod
    def from_arrays(cls, starts: Sequence[int], ends: Sequence[int], names: Sequence[str]
                    ) -> SymbolTable:
        """A table whose choices were made before (read back from the cache; any sequences:
        lists, or arrays read in place)."""
        table = cls.__new__(cls)
        table.starts, table.ends, table.names = starts, ends, names
        return table

    def lookup(self, address: int) -> tuple[str, int] | None:
        index = bisect_right(self.starts, address) - 1
        if index < 0 or address >= self.ends[index]:
            return None
        return self.names[index], address - self.starts[index]


def _binding(value: int) -> str:
    return BINDING_NAMES[value] if value < len(BINDING_NAMES) else "STB_LOCAL"


def _function_symbols(image: ElfImage, section_name: str, *, strict: bool = False
                      ) -> list[Symbol]:
    """FUNC and IFUNC symbols of a symbol table, read with ``struct`` (pyelftools' per-symbol
    parsing takes 0.2 s for libc's debug symbols). The symbols perf takes (functions,
    objects, labels: :mod:`.perf_rules`) are read by :mod:`.symbol_lists` and
    :mod:`.perf_symbols`."""
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
        if strict:  # a damaged table, said as such (names only skip it)
            raise ElfError(image.path, f"{section_name} (offset {start:#x}, size {size:#x}) "
                           f"or its string table runs past the end of the file or is not "
                           f"a whole number of entries", start)
        return []
    names = data[names_at:names_at + names_size]
    out = []
    for fields in entry.iter_unpack(data[start:start + size]):
        if wide:
            name_offset, info, _other, shndx, value, length = fields
        else:
            name_offset, value, length, info, _other, shndx = fields
        if shndx == 0 or info & 0xF not in (STT_FUNC, STT_GNU_IFUNC):
            continue
        end = names.find(b"\0", name_offset)
        name = names[name_offset:end if end >= 0 else None].decode("utf-8", "replace")
        # An end past 2**64 (a hostile size) is the last address: a table keeps uint64s.
        out.append(Symbol(value, min(value + length, LAST_ADDRESS), name, _binding(info >> 4),
                          length))
    return out


def _search(debug: DebugFiles | None) -> DebugFiles:
    """``debug``, or (None) the local search: :meth:`DebugFiles.from_environment` without
    network. Made once by a table's maker, so that the files it opens serve the whole
    table (its check, its cache source, its symbols)."""
    return debug if debug is not None else DebugFiles.from_environment(network=False)


def symbols_file(image: ElfImage, debug: DebugFiles | None) -> str | None:
    """The file whose ``.symtab`` names ``image``'s functions when it is not ``image``
    itself (a twin, a separate debug file, a download), else None. ``debug``: the search
    (None: the local one, :func:`_search`)."""
    found = _search(debug).find(image.path, image.build_id(), "symbols", image)
    return found if found is not None and found != image.path else None


def _best_function_symbols(image: ElfImage, separate: str | None,
                           debug: DebugFiles | None = None) -> list[Symbol]:
    """Function symbols (:func:`_function_symbols`) from the best source (see
    :func:`_best_source`)."""
    return _best_source(image, separate, _function_symbols, debug)


def _separate_image(path: str, debug: DebugFiles | None) -> ElfImage:
    """The separate file ``path`` as ``debug``'s search opened it when it found it (its
    check, its cache source and its symbols then read one copy: libc's debug file was
    opened three times on a first run), else opened here. Raises :class:`ElfError`."""
    image = debug.opened(path) if debug is not None else None
    return image if image is not None else ElfImage(path)


def _best_source(image: ElfImage, separate: str | None,
                 read: Callable[[ElfImage, str], _Read],
                 debug: DebugFiles | None = None) -> _Read:
    """What ``read`` gives of the best source that has any symbols: the ``separate``
    file's .symtab (see :func:`symbols_file`; opened by ``debug``'s search), else the
    file's own .symtab, else its .dynsym."""
    if separate is not None:
        try:
            found = read(_separate_image(separate, debug), ".symtab")
            if len(found):
                return found
        except ElfError:
            pass
    found = read(image, ".symtab")
    return found if len(found) else read(image, ".dynsym")


def defined_functions(image: ElfImage) -> list[Symbol]:
    """The FUNC and IFUNC symbols the file itself defines: its .symtab, else its .dynsym
    (no separate debug file: what the file says of itself). A table that runs past the
    file raises :class:`ElfError`."""
    return (_function_symbols(image, ".symtab", strict=True)
            or _function_symbols(image, ".dynsym", strict=True))


def function_addresses(image: ElfImage, debug: DebugFiles | None = None
                       ) -> tuple[dict[str, int], dict[str, int]]:
    """(global, local) name -> address of the function symbols of ``image`` (as
    :func:`_best_function_symbols` finds them), for gdb's minimal-symbol lookup by name.
    A versioned definition ("name@@VERSION", "name@VERSION") is also found as "name",
    the default version first."""
    debug = _search(debug)
    symbols = _best_function_symbols(image, symbols_file(image, debug), debug)
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


def load_symbols(image: ElfImage, *, use_cache: bool = True,
                 problems: Problems | None = None, debug: DebugFiles | None = None,
                 kept_later: list[Callable[[], None]] | None = None) -> SymbolTable:
    """The symbol table perf would use for ``image`` (its ``.symtab`` found through
    ``debug``, see :func:`symbols_file`); cached by build id (reading libc's debug symbols
    takes ~50 ms, the cached table ~2 ms). A malformed PLT relocation table costs only
    the ``name@plt`` symbols (reported to ``problems``); a malformed symbol table raises
    :class:`ElfError`. ``kept_later``: a table made here is kept in the cache by the
    function appended to it, not now."""
    debug = _search(debug)
    separate = symbols_file(image, debug)
    build_id = image.build_id() if use_cache else None
    source = _cache_source(image, separate, debug) if build_id else None
    if build_id and source is not None:
        cached = _read_cached(build_id, source, separate)
        if cached is not None:
            return cached
    table, complete = _load_symbols(image, separate, problems, debug)
    if build_id and source is not None and complete:  # a damaged file's table: not kept
        if kept_later is not None:
            kept_later.append(lambda: _write_cached(build_id, source, table, separate))
        else:
            _write_cached(build_id, source, table, separate)
    return table


def _load_symbols(image: ElfImage, separate: str | None, problems: Problems | None,
                  debug: DebugFiles | None = None) -> tuple[SymbolTable, bool]:
    """The table, and whether every part of it could be read. With numpy loaded already
    (a batch run), the symbols are read and chosen as columns (:mod:`.perf_symbols`: cc1's
    table in 31 ms rather than 113); otherwise as lists (:mod:`.symbol_lists`: importing
    numpy takes longer than most tables, ~50 ms). Both readings give the same table."""
    from .plt import plt_got_symbols, plt_symbols  # not on the warm path (cached tables)

    reading = (_AsColumns if _as_columns() else _AsLists)(image, separate, debug)
    complete = True
    try:
        reading.add(plt_symbols(image, reading.names_at) + plt_got_symbols(image))
    except ElfError as error:
        if problems is not None:
            problems.add(error)
        complete = False
    return reading.table(), complete


def _as_columns() -> bool:
    """Whether symbols are read as columns (numpy is loaded already)."""
    import sys

    return "numpy" in sys.modules


def _stub_binding(name: str) -> int:
    """The binding a PLT symbol gets (an index into ``BINDING_NAMES``): the header is
    local."""
    return 0 if name == ".plt" else 1


class _AsLists:
    """perf's symbols of ``image`` read as parallel lists (:mod:`.symbol_lists`)."""

    def __init__(self, image: ElfImage, separate: str | None,
                 debug: DebugFiles | None = None) -> None:
        from .symbol_lists import symbol_lists

        self.symbols = _best_source(image, separate, symbol_lists, debug)

    def names_at(self, addresses: set[int]) -> dict[int, str]:
        from .demangling import perf_name
        from .symbol_lists import SymbolLists, chosen_names

        symbols = self.symbols
        at = [start in addresses for start in symbols.starts]
        return chosen_names(SymbolLists(list(compress(symbols.starts, at)),
                                        list(compress(symbols.ends, at)),
                                        list(compress(symbols.bindings, at)),
                                        list(compress(symbols.names, at))), perf_name)

    def add(self, stubs: list[tuple[int, int, str]]) -> None:
        self.symbols = self.symbols.plus((start, end, name, _stub_binding(name))
                                         for start, end, name in stubs)

    def table(self) -> SymbolTable:
        from .demangling import perf_name
        from .symbol_lists import chosen_entry

        table = SymbolTable.from_entry(chosen_entry(self.symbols, perf_name), empty_ok=True)
        assert table is not None  # an entry of our making is shaped as one
        return table


class _AsColumns:
    """perf's symbols of ``image`` read as columns (:mod:`.perf_symbols`)."""

    def __init__(self, image: ElfImage, separate: str | None,
                 debug: DebugFiles | None = None) -> None:
        from .perf_symbols import perf_symbols

        self.symbols = _best_source(image, separate, perf_symbols, debug)

    def names_at(self, addresses: set[int]) -> dict[int, str]:
        import numpy as np

        from .demangling import perf_name
        from .perf_symbols import chosen_names

        wanted = np.fromiter(addresses, np.uint64, len(addresses))
        return chosen_names(self.symbols.only(np.isin(self.symbols.starts, wanted)),
                            perf_name)

    def add(self, stubs: list[tuple[int, int, str]]) -> None:
        self.symbols = self.symbols.plus((start, end, name, _stub_binding(name))
                                         for start, end, name in stubs)

    def table(self) -> SymbolTable:
        from .demangling import perf_name
        from .perf_symbols import chosen_entry

        table = SymbolTable.from_entry(chosen_entry(self.symbols, perf_name), empty_ok=True)
        assert table is not None  # an entry of our making is shaped as one
        return table


#: Bumped whenever the table's contents or layout change, so old entries are not reused.
_CACHE_FORMAT = 9
#: The sections a symbol table is made from (with the ELF headers and linked strings).
_SYMBOL_SECTIONS = (".symtab", ".strtab", ".dynsym", ".dynstr", ".rela.plt", ".plt", ".plt.sec",
                    ".rela.dyn", ".plt.got")
#: Of the separate file: its symbols, and its build id (a file of another build is not
#: used).
_DEBUG_SECTIONS = (".symtab", ".note.gnu.build-id")


def cache_entry(kind: str, separate: bool, variant: str) -> str:
    """The cache kind (see :mod:`pysframe.cachedir`) of what is derived from a build id's
    symbols or DWARF. It is keyed also on whether they come from a separate file, so
    installing a debug file (apt install libc6-dbg) after a first run and removing it
    again do not overwrite each other's entries."""
    return f"{kind}/{'d' if separate else 'n'}.{variant}"


def _cache_kind(separate: str | None) -> str:
    return cache_entry("symbols", separate is not None, f"s{_CACHE_FORMAT}")


def symbols_cache_kinds() -> tuple[str, str]:
    """The cache kinds a table may be kept as (from a separate debug file, or not)."""
    return _cache_kind("separate"), _cache_kind(None)


def _cache_path(build_id: bytes, separate: str | None = None) -> str | None:
    """Where the symbol table of ``build_id`` is kept (it may not exist)."""
    return entry_path(_cache_kind(separate), build_id)


def _cache_source(image: ElfImage, separate: str | None, debug: DebugFiles | None = None
                  ) -> Source | None:
    """The bytes a symbol table of ``image`` is made from: its symbol tables, strings and
    PLT relocations, and the symbols of the ``separate`` file they come from (None when
    that file cannot be read: nothing is cached then)."""
    from ..generate.cache import image_source

    source = image_source(image, _SYMBOL_SECTIONS, linked=True)
    if separate is None:
        return source
    try:
        return combine(source, image_source(_separate_image(separate, debug), _DEBUG_SECTIONS,
                                            linked=True))
    except PysframeError:
        return None


def _read_cached(build_id: bytes, source: Source, separate: str | None) -> SymbolTable | None:
    """The cached table, its arrays views of the entry's bytes (see :mod:`.table_bytes`),
    if its entry verifies and holds a table: starts strictly ascending, ends not below
    them (anything else is treated as absent)."""
    payload = load(_cache_kind(separate), build_id, source)
    table = SymbolTable.from_entry(payload, empty_ok=True) if payload is not None else None
    if table is None:
        return None
    # Ascending as sorting finds them (a sorted list is one run to it), none twice; then
    # int's own comparisons (the operator module is not imported for them, ~0.2 ms of a
    # `sframe stack`). libc's 8,113: 0.62 ms, against 0.89 pairwise over the views.
    starts = _listed(table.starts)
    if not (starts == sorted(starts) and len(set(starts)) == len(starts)
            and all(map(int.__le__, starts, _listed(table.ends)))):
        return None
    return table


def _listed(values: Sequence[int]) -> list[int]:
    """``values`` as a list (a view's made in one go)."""
    return values.tolist() if isinstance(values, memoryview) else list(values)


def _write_cached(build_id: bytes, source: Source, table: SymbolTable,
                  separate: str | None) -> None:
    store(_cache_kind(separate), build_id, table.entry(), source)


# ----------------------------------------------------------------------------- by name

_EXTERNAL_BINDINGS = (1, 2, 10)     # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE


class NamedSymbols:
    """The defined symbols of one symbol table, looked up by name the way gdb's
    ``lookup_minimal_symbol`` finds a minimal symbol in one object file (see
    :func:`named_symbols`). The table is searched, not indexed: the name's offsets in the
    string table (suffixes of longer names included), then the entries that point there."""

    __slots__ = ("_cache", "entries", "layout", "strings")

    def __init__(self, layout: Layout, entries: bytes, strings: bytes) -> None:
        self.layout = layout
        self.entries = entries
        self.strings = strings
        self._cache: dict[str, tuple[int, bool] | None] = {}

    def lookup(self, name: str) -> tuple[int, bool] | None:
        """(value, external) of the symbol ``name``, or None when it is not defined here.

        A default-versioned ``name@@VERSION`` also answers to ``name`` (gdb installs it
        so); ``name@VERSION`` does not. Defined means in a section, and section and file
        symbols do not count. Of several external (global, weak, unique) symbols gdb
        meets the highest address first, of several file-local ones it keeps the lowest;
        an external one wins over a local one."""
        if name in self._cache:
            return self._cache[name]
        found: tuple[int, bool] | None = None
        encoded = name.encode("utf-8", "replace")
        for suffix in (b"\0", b"@@"):
            needle = encoded + suffix
            position = self.strings.find(needle, 1) if encoded else -1
            while position > 0:
                for value, external in self._defined_at(position):
                    if found is None or (external and not found[1]) or (
                            external == found[1]
                            and (value > found[0] if external else value < found[0])):
                        found = (value, external)
                position = self.strings.find(needle, position + 1)
        self._cache[name] = found
        return found

    def _defined_at(self, position: int) -> list[tuple[int, bool]]:
        """(value, external) of the defined symbols whose name is at ``position`` of the
        string table."""
        entries = self.entries
        layout = self.layout.symbol
        size = layout.size
        key = position.to_bytes(4, "little" if self.layout.order == "<" else "big")
        out: list[tuple[int, bool]] = []
        index = entries.find(key)
        while index >= 0:
            # st_name comes first in both classes: a match counts at an entry's start.
            if index % size == 0 and index + size <= len(entries):
                row = layout.unpack_from(entries, index)
                if self.layout.wide:
                    _name, info, _other, shndx, value, _size = row
                else:
                    _name, value, _size, info, _other, shndx = row
                if shndx != 0 and (info & 0xF) not in (STT_SECTION, STT_FILE):
                    out.append((value, (info >> 4) in _EXTERNAL_BINDINGS))
            index = entries.find(key, index + 1)
        return out


def named_symbols(path: str) -> NamedSymbols:
    """The symbols of ``path`` to look up by name: its ``.symtab``, else its ``.dynsym``
    (an empty table when it has neither). Only the ELF headers and those two sections are
    read (through an mmap). Raises :class:`ElfError` for a bad file, ``OSError`` for an
    unreadable one and ``ValueError`` for an empty one."""
    import mmap  # here: only the DWARF tail-call search needs it

    with open(path, "rb") as handle, \
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        header = read_file_header(data, path)
        sections = read_section_headers(data, header)
        by_name: dict[str, SectionHeader] = {}
        for section in sections:
            by_name.setdefault(section.name, section)
        for name, kind in ((".symtab", SHT_SYMTAB), (".dynsym", SHT_DYNSYM)):
            table = by_name.get(name)
            if table is None or table.type != kind or not table.size \
                    or table.link >= len(sections):
                continue
            strings = sections[table.link]
            if strings.type == SHT_NOBITS or not strings.size:
                continue
            for section in (table, strings):
                if section.offset + section.size > len(data):
                    raise ElfError(path, f"section {section.name} runs past the end of "
                                   f"the file", section.offset)
            return NamedSymbols(
                header.layout, bytes(data[table.offset:table.offset + table.size]),
                bytes(data[strings.offset:strings.offset + strings.size]))
    return NamedSymbols(header.layout, b"", b"")

"""SFrame rows made per function when the unwinder first needs them, instead of a whole
table generated before unwinding (a recording touches a few hundred of libc's thousands
of functions).

The rows of a function are the ones the whole generated table
(:func:`~pysframe.generate.cache.table_for`) holds for it: its CFI FDE translated with
:func:`~.section.translate_entry` (or ld's PLT rules, :func:`~.plt.plt_fdes`), kept by
the same placement rule (:func:`~.section._placeable`) and validated by the same
validator (its fast reading first: :func:`~pysframe.format.validation.encoded_errors`),
each function encoded as a section of its own with the whole table's header.
That holds when no function's choice depends on another's: the index of functions
(:class:`FunctionIndex`) must be sorted with no two ranges overlapping, addresses well
inside the signed 64-bit range. A binary with its own ``.sframe`` (version 3, no fault
anywhere: :func:`~.cache.own_fault`) is merged with its CFI the same way: its own FDEs
join the index (:mod:`.merged_index`), each read and validated when first needed, and
an own FDE the validator would leave out turns the table whole (the whole merge then
makes that function from the CFI). A binary whose index is not like that (damaged or
odd CFI), an older or damaged own table, a relocatable file or one without ``.eh_frame``
gets the whole table, as before; so does ``sframe generate``, ``inject``, ``audit`` and
``record`` (its BPF map holds whole tables). The workers of one ``-j`` run take the
functions another made (:mod:`pysframe.made_exchange`).

The index comes from one pass over ``.eh_frame`` (the same parser the whole generator
uses, so the same FDEs, errors and all), not from ``.eh_frame_hdr``: the search table
gives starts only, and whether it lists every FDE with its true start (a hostile or stale
one need not) can only be checked by that pass, which is ~5 us per FDE.

The index and the functions made so far are kept in the private cache by build id
(kind :data:`KIND`), verified as every entry is (:mod:`pysframe.cachedir`: the payload's
digest and the bytes the table is made from, :func:`~.cache.table_source`), then checked
for shape: an entry whose index or layout does not pass is ignored and made again; a
function's table is checked (one FDE inside its range) when it is first used, and made
again if it does not pass. Checking each one on loading cost more than a whole
``sframe stack`` walk (libc: ~570 functions made, 3.5 ms). Each run that made new
functions stores the union of its own and the entry's (another run may have added some
meanwhile).
"""

from __future__ import annotations

import struct
import sys
from itertools import accumulate

from ..cache_merge import merge_into
from ..cachedir import Source, load
from ..errors import PysframeError
from ..format.constants import VERSION_3
from ..format.decode import SFrameReader
from ..format.errors import SFrameError
from ..format.lookup import FrameRow, MadeLookup, SFrameLookup
from .cache import _STUBS, GENERATOR_VERSION, _cached, cache_key, table_for, table_source
from .errors import GenerateError, IrregularFunction
from .function_index import FunctionIndex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..cfi.fde_columns import I64, U64
    from ..elf import ElfImage
    from ..elf.sections import SFrameSectionData
    from ..format.constants import ABI
    from ..format.model import FDE
    from ..made_exchange import MadeExchange
    from .function_maker import FunctionMaker

#: The cache kind of on-demand tables (the index and the functions made so far).
KIND = f"sframe/ondemand.g{GENERATOR_VERSION}.v3"
_PAYLOAD_FORMAT = 2
#: format, index entries (n), functions made (m); then the index as columns: n starts,
#: n ends (u64), n refs (s64: an .eh_frame offset; ~k: PLT FDE k); the functions made as
#: columns: m index positions, m sizes (u32; 0: the function has no rows); then their
#: tables, one after another.
_HEAD = struct.Struct("<III")
#: The index of a binary in the exchange of a ``-j`` run's workers (a function's place
#: there is its index position: never this).
_INDEX = (1 << 64) - 1


def on_demand_possible(image: ElfImage) -> bool:
    """Whether ``image`` may get an on-demand table (a linked file with ``.eh_frame`` and
    no ``.sframe`` of its own, or one whose preamble says version 3): the index decides
    the rest."""
    own = image.sframe_sections()
    return (image.elf_type != "REL" and image.section_header(".eh_frame") is not None
            and (not own or (len(own) == 1 and own[0].raw[2:3] == bytes([VERSION_3]))))


class OnDemandTable:
    """A binary's SFrame rows, made per function on first use (see the module docstring).

    Looks a pc up as :class:`~pysframe.format.lookup.SFrameLookup` does over the whole
    table; :attr:`generation` changes whenever functions are made (or the table turns
    whole), so flat copies of it know when they are stale."""

    def __init__(self, image: ElfImage, abi: ABI, *, use_cache: bool = True) -> None:
        self.image = image
        self.abi = abi
        self.use_cache = use_cache
        self.generation = 0
        #: The functions (None until first needed: a binary mapped but never sampled
        #: costs nothing).
        self.index: FunctionIndex | None = None
        #: Functions made: index position -> their single-function table (None: no rows).
        self._made: dict[int, bytes | None] = {}
        #: Functions from the cache whose table has not been checked yet (on first use).
        self._unchecked: set[int] = set()
        self._lookups: dict[int, SFrameLookup | None] = {}
        #: The positions of :attr:`_lookups` in the order they were made.
        self._order: list[int] = []
        self._making: FunctionMaker | None = None
        self._key: bytes | None = None
        self._source: Source | None = None
        self._dirty = False
        self._text = image.executable_ranges()
        #: The whole table's lookup once this table had to be made whole (None: not).
        self.whole: SFrameLookup | None = None
        self._whole_none = False
        #: The file's own table, merged with the CFI (None: none).
        own = image.sframe_sections()
        self.own: SFrameSectionData | None = own[0] if own else None
        self._damaged = False

    def _prepare(self) -> FunctionIndex | None:
        """The index, from the cache or one pass over .eh_frame (made whole instead when
        it is not regular, or when the cache has the whole table); None once whole."""
        if self.index is not None or self.whole is not None or self._whole_none:
            return self.index
        image = self.image
        if self.use_cache:
            source = self._source = table_source(image)
            key = self._key = cache_key(image, source)
            payload = load(KIND, key, source)
            found = _decoded(payload) if payload is not None else None
            if found is not None:
                self.index, self._made = found
                self._unchecked = set(self._made)
                return self.index
            whole = _cached(image, [self.own] if self.own else [], key, source, VERSION_3)
            if whole is not None and whole.damage is not None:
                self._own_damaged()
                return None
            if whole is not None:  # made before (e.g. by an older version): complete
                self.whole = SFrameLookup(SFrameReader(whole.data, whole.address))
                self.generation += 1
                return None
        scanned = self._index_elsewhere()
        if scanned is None:
            if self.own is not None:
                scanned = self._merged_scan(self.own)
            else:
                maker = self._maker()
                scanned = _scan(image, maker.plt_fdes(),
                                list(image.section_ranges(*_STUBS).values()), maker.crt_from,
                                maker.eh_frame())
            if self._damaged:
                return None
            if scanned is None:
                self._turn_whole()
                return None
            exchange = _exchange()
            if exchange is not None and self._exchanged is not None:
                exchange.give(self._exchanged, _INDEX, _encoded(_index_columns(scanned), {}))
        self.index = scanned
        self._dirty = True  # the index is worth keeping, even with no function made
        return self.index

    @property
    def cache_id(self) -> bytes | None:
        """The binary's key in the private cache (None without the cache, or before the
        index was asked for)."""
        return self._key

    def own_damaged(self) -> bool:
        """Whether the file's own table faults: its table is then the one generated from
        its CFI, with the fault reported (:func:`~.cache.table_for`), not this one."""
        self._prepare()
        return self._damaged

    def _own_damaged(self) -> None:
        self._damaged = self._whole_none = True

    def _merged_scan(self, own: SFrameSectionData) -> FunctionIndex | None:
        """The index of the file's own table merged with its CFI (see
        :mod:`.merged_index`), or None when it is not regular or the own table is not
        one merged per function (not version 3, or a header other than the one the
        functions are made with); :meth:`_own_damaged` when the own table faults."""
        from .cache import own_fault
        from .function_maker import header as function_header
        from .merged_index import merged_entries
        from .section import _placeable

        if own_fault(self.image, own) is not None:
            self._own_damaged()
            return None
        reader = SFrameReader(own.raw, own.address)
        header, made_with = reader.header, function_header(self.abi)
        if (header.version != VERSION_3 or reader.abi() != self.abi
                or header.cfa_fixed_fp_offset != made_with.cfa_fixed_fp_offset
                or header.cfa_fixed_ra_offset != made_with.cfa_fixed_ra_offset):
            return None
        maker = self._maker()
        maker.own_reader = reader
        stubs = list(self.image.section_ranges(*_STUBS).values())
        try:
            cfi = _cfi_entries(self.image, stubs, maker.eh_frame())
            plt = maker.plt_fdes()
        except PysframeError:  # the whole merge decides (and says why)
            return None
        if cfi is None:
            return None
        crt_from = maker.crt_from
        ld_rules = sorted(plt[:crt_from], key=lambda fde: fde.start)
        entries = merged_entries(  # (every FDE read by own_fault: its ranges suffice)
            [(start, end, number) for number, (start, end) in enumerate(reader.fde_ranges())],
            cfi, _refs(plt[:crt_from], 0), _refs(plt[crt_from:], crt_from),
            stubs, bool(_placeable(ld_rules, 0, VERSION_3, self._text, [])))
        return _regular_index(entries) if entries is not None else None

    # --- the lookup the unwinder uses --------------------------------------------------

    def find_fre(self, pc: int) -> FrameRow | None:
        """The row for link-time ``pc``, as the whole table's lookup would find it."""
        index = self.index or self._prepare()
        if index is None:
            return self.whole.find_fre(pc) if self.whole is not None else None
        position = index.position(pc)
        if position is None:
            return None
        lookup = self.function(position)
        if self.whole is not None:
            return self.whole.find_fre(pc)
        return lookup.find_fre(pc) if lookup is not None else None

    def ensure(self, pc: int) -> None:
        """Make the rows of the function covering link-time ``pc``, if not made yet."""
        index = self.index or self._prepare()
        if index is not None:
            position = index.position(pc)
            if position is not None:
                self.function(position)

    def function(self, position: int) -> SFrameLookup | None:
        """The single-function lookup of the function at ``position`` (None: no rows)."""
        if position in self._lookups:
            return self._lookups[position]
        reader: SFrameReader | None = None  # (the table's, once read)
        if position in self._unchecked:
            self._unchecked.discard(position)
            data, index = self._made[position], self.index
            assert index is not None
            if data is not None:
                reader = _one_function(data, index.starts[position], index.ends[position])
                if reader is None:
                    del self._made[position]  # not what this version keeps: made again
        model: FDE | None = None
        if position in self._made:
            data = self._made[position]
        else:
            found, data, reader = self._made_elsewhere(position)
            if not found:
                try:
                    made = self._make(position)
                except IrregularFunction:
                    self._turn_whole()
                    return None
                data, model = made if made is not None else (None, None)
                exchange = _exchange()
                if exchange is not None and self._exchanged is not None:
                    exchange.give(self._exchanged, position, data)
            self._made[position] = data
            self._dirty = True
            self.generation += 1
        lookup = None
        if data is not None:
            lookup = MadeLookup(reader or SFrameReader(data, 0), model)
        self._lookups[position] = lookup
        self._order.append(position)
        return lookup

    @property
    def _exchanged(self) -> bytes | None:
        """This binary's name among the workers of a ``-j`` run (:mod:`~pysframe.made_exchange`):
        its cache key and the identity of its file, so that two files with one build id
        (a hostile copy) never hand each other functions."""
        if self._key is None or self._source is None:
            return None
        return self._key + self._source.stamp + self._source.digest

    def _index_elsewhere(self) -> FunctionIndex | None:
        """The index another worker of this run made of this binary (:mod:`~pysframe.made_exchange`;
        it gives only a regular one of a table not made whole), or None."""
        exchange = _exchange()
        if exchange is None or self._exchanged is None:
            return None
        found, payload = exchange.take(self._exchanged, _INDEX)
        taken = _decoded(payload) if found and payload is not None else None
        return taken[0] if taken is not None else None

    def _made_elsewhere(self, position: int
                        ) -> tuple[bool, bytes | None, SFrameReader | None]:
        """(True, its table, its reader) when another worker of this run made the function
        at ``position`` (:mod:`~pysframe.made_exchange`) and its table is one function
        there (None, None: it has no rows)."""
        exchange, index = _exchange(), self.index
        if exchange is None or self._exchanged is None or index is None:
            return False, None, None
        found, data = exchange.take(self._exchanged, position)
        if not found or data is None:
            return found, None, None
        reader = _one_function(data, index.starts[position], index.ends[position])
        return (True, data, reader) if reader is not None else (False, None, None)

    def index_ranges(self) -> tuple[list[int], list[int]] | None:
        """(starts, ends) of every function of the index, in address order; None when
        the table is whole (:attr:`whole`: known only once this or a lookup was asked)."""
        index = self._prepare()
        return (index.starts, index.ends) if index is not None else None

    def made_after(self, count: int) -> list[tuple[int, SFrameLookup | None]]:
        """The functions made after the first ``count``, in the order they were made, each
        once: (index position, its lookup; None: no rows). The batch engine's flat copy
        takes in only these. The functions the cache kept are made at the first call."""
        if self._prepare() is None:
            return []
        if count == 0:
            for position in sorted(self._made):
                if position not in self._lookups:
                    self.function(position)
        return [(position, self._lookups[position]) for position in self._order[count:]]

    # --- making one function -----------------------------------------------------------

    def _maker(self) -> FunctionMaker:
        """What makes this table's functions (imported and made on first use)."""
        if self._making is None:
            from .function_maker import FunctionMaker

            self._making = FunctionMaker(self.image, self.abi, self.own, self._text)
        return self._making

    def _make(self, position: int) -> tuple[bytes, FDE | None] | None:
        """The single-function table of the function at ``position`` and the FDE it
        encodes (see :meth:`FunctionMaker.make <.function_maker.FunctionMaker.make>`)."""
        assert self.index is not None
        return self._maker().make(self.index, position)

    def whole_table(self) -> SFrameLookup | None:
        """The whole table's lookup, made (or taken from the cache) now if not yet: for
        what needs every row at once (the recorder's walker loads them all)."""
        if self.whole is None and not self._whole_none:
            self._turn_whole()
        return self.whole

    def _turn_whole(self) -> None:
        """From now on, the whole table (something made this function's rows depend on
        others')."""
        try:
            table = table_for(self.image, use_cache=self.use_cache)
            self.whole = SFrameLookup(SFrameReader(table.data, table.address))
        except (GenerateError, SFrameError):
            self._whole_none = True
        self.generation += 1

    # --- the cache ---------------------------------------------------------------------

    def adopt(self, given: dict[tuple[bytes, int], bytes | None]) -> int:
        """Take in the functions of this table that the other workers of a ``-j`` run made
        (``given``: what they gave the exchange, :meth:`MadeExchange.given
        <pysframe.made_exchange.MadeExchange.given>`), so that :meth:`save` keeps them with
        this worker's; the number taken in. Each is checked on its first use by a later
        run, as every function from the cache is."""
        key, index = self._exchanged, self.index
        if key is None or index is None or self.whole is not None:
            return 0
        count, taken = len(index.starts), 0
        for (owner, position), data in given.items():
            if owner == key and 0 <= position < count and position not in self._made:
                self._made[position] = data
                taken += 1
        self._dirty = self._dirty or taken > 0
        return taken

    def save(self) -> None:
        """Keep the functions made so far in the cache (with the ones another run kept
        meanwhile), if any are new."""
        if (not self._dirty or self._key is None or self._source is None
                or self.index is None or self.whole is not None):
            return
        self._dirty = False
        columns = _index_columns(self.index)
        made = dict(self._made)

        def merged(payload: bytes | None) -> bytes:
            # Another run's functions join these when its entry has this very index
            # (compared as bytes: decoding and checking a large one again, cc1's 45k
            # functions, cost a -j worker ~10 ms of its save, after its text).
            theirs = _made_with(payload, columns) if payload is not None else None
            for position, data in (theirs or {}).items():
                made.setdefault(position, data)
            return _encoded(columns, made)

        merge_into(KIND, self._key, self._source, merged)  # (-j workers: one at a time)


def _exchange() -> MadeExchange | None:
    """This worker's exchange of made functions (:mod:`pysframe.made_exchange`: imported only by
    a ``-j`` run that sets one up, never by ``sframe stack``)."""
    module = sys.modules.get("pysframe.made_exchange")
    return module.shared() if module is not None else None


def on_demand_table(image: ElfImage, *, use_cache: bool = True) -> OnDemandTable | None:
    """The on-demand table of ``image``, or None when it must have a whole table from the
    start (see the module docstring). Raises :class:`GenerateError` as the whole
    generator would (an unsupported machine)."""
    from .abi import abi_of

    if not on_demand_possible(image):
        return None
    return OnDemandTable(image, abi_of(image), use_cache=use_cache)


def _scan(image: ElfImage, plt: list[FDE], stubs: list[tuple[int, int]], crt_from: int,
          eh_frame: tuple[bytes, int] | None) -> FunctionIndex | None:
    """The index from one pass over .eh_frame (the FDEs the generator's parser gives) and
    the FDEs made from no CFI (``plt``; from ``crt_from`` on, crti/crtn's, left out where
    a CFI FDE overlaps them), or None when it is not regular: the merge of
    :mod:`.merged_index` with no own FDE. ``eh_frame``: the section (bytes, address), as
    the functions are made from it (:meth:`~.function_maker.FunctionMaker.eh_frame`)."""
    from .merged_index import merged_entries

    ld_rules, crt = _refs(plt[:crt_from], 0), _refs(plt[crt_from:], crt_from)
    columns = _cfi_columns(image, stubs, eh_frame)
    if columns is not None:
        from .column_index import column_index

        return column_index(*columns, ld_rules, crt)
    cfi = _cfi_entries(image, stubs, eh_frame, as_columns=False)  # (read one by one)
    if cfi is None:
        return None
    entries = merged_entries([], cfi, ld_rules, crt, stubs, False)
    return _regular_index(entries) if entries is not None else None


def _refs(fdes: list[FDE], first: int) -> list[tuple[int, int, int]]:
    """(start, end, ref) of the FDEs made from no CFI, the k-th of
    :meth:`~.function_maker.FunctionMaker.plt_fdes`'s list (from ``first`` on) with ref
    ``~k``."""
    return [(fde.start, fde.end, ~k) for k, fde in enumerate(fdes, first)]


def _regular_index(entries: list[tuple[int, int, int]]) -> FunctionIndex | None:
    """The index of (start, end, ref) entries sorted by start, or None if not regular."""
    index = FunctionIndex([e[0] for e in entries], [e[1] for e in entries],
                          [e[2] for e in entries])
    return index if index.regular() else None


def _cfi_entries(image: ElfImage, stubs: list[tuple[int, int]],
                 eh_frame: tuple[bytes, int] | None, as_columns: bool = True
                 ) -> list[tuple[int, int, int]] | None:
    """(start, end, .eh_frame offset) of the CFI FDEs that can be in the table: none in
    the stub sections (their rows are ld's), sizes of 1 to 2**32-1 (translate_entry skips
    others: they hold no pc); None without .eh_frame. Read as columns where they can be
    (:func:`_cfi_columns`), unless ``as_columns`` is off (they could not). ``eh_frame``:
    as for :func:`_scan`."""
    from ..cfi.eh_frame import fde_ranges

    columns = _cfi_columns(image, stubs, eh_frame) if as_columns else None
    if columns is not None:
        first, sizes, offsets = (column.tolist() for column in columns)
        return list(zip(first, map(int.__add__, first, sizes), offsets, strict=True))
    if eh_frame is None:
        return None
    data, address = eh_frame
    entries: list[tuple[int, int, int]] = []
    # Where the stubs lie at all (one test per FDE; each stub only for those in there).
    low = min((lo for lo, _ in stubs), default=0)
    high = max((hi for _, hi in stubs), default=0)
    for start, size, offset in fde_ranges(data, address, big_endian=image.big_endian,
                                          address_size=image.elf_class // 8):
        if low <= start < high and any(lo <= start < hi for lo, hi in stubs):
            continue
        if not 0 < size <= 0xFFFFFFFF:
            continue
        entries.append((start, start + size, offset))
    return entries


def _cfi_columns(image: ElfImage, stubs: list[tuple[int, int]],
                 eh_frame: tuple[bytes, int] | None) -> tuple[U64, U64, I64] | None:
    """What :func:`_cfi_entries` gives, as (starts, sizes, offsets) columns, where numpy is
    loaded already (the batch engine's runs) and :mod:`~pysframe.cfi.fde_columns` reads the
    section; None otherwise."""
    if "numpy" not in sys.modules:
        return None
    import numpy as np

    from ..cfi.fde_columns import fde_columns, hinted_offsets

    if eh_frame is None:
        return None
    data, address = eh_frame
    hdr = image.section(".eh_frame_hdr", relocated=True)  # (where FDEs start: hints)
    hints = (hinted_offsets(hdr[0], hdr[1], address, big_endian=image.big_endian)
             if hdr is not None else None)
    columns = fde_columns(data, address, big_endian=image.big_endian,
                          address_size=image.elf_class // 8, hints=hints)
    if columns is None:
        return None
    starts, sizes, offsets = columns
    kept = (sizes > 0) & (sizes <= np.uint64(0xFFFFFFFF))
    for low, high in stubs:
        kept &= (starts < np.uint64(low)) | (starts >= np.uint64(high))
    return starts[kept], sizes[kept], offsets[kept]


def _index_columns(index: FunctionIndex) -> bytes:
    """The index as an entry holds it (see :data:`_HEAD`)."""
    count = len(index.starts)
    return struct.pack(f"<{count}Q{count}Q{count}q", *index.starts, *index.ends, *index.refs)


def _encoded(columns: bytes, made: dict[int, bytes | None]) -> bytes:
    """An entry: the index (:func:`_index_columns`) and the functions ``made``."""
    positions = sorted(made)
    tables = [made[position] or b"" for position in positions]
    return b"".join([
        _HEAD.pack(_PAYLOAD_FORMAT, len(columns) // 24, len(positions)), columns,
        struct.pack(f"<{len(positions)}I{len(positions)}I", *positions,
                    *(len(table) for table in tables)),
        *tables])


def _decoded(payload: bytes) -> tuple[FunctionIndex, dict[int, bytes | None]] | None:
    """The index and functions of a cache entry, or None when it is not a well-formed one
    (a regular index; each function made once, its table where the sizes say). Whether
    each table is one FDE inside its range is checked on its first use (the module
    docstring)."""
    try:
        form, count, made_count = _HEAD.unpack_from(payload)
        if form != _PAYLOAD_FORMAT:
            return None
        columns = struct.unpack_from(f"<{count}Q{count}Q{count}q", payload, _HEAD.size)
    except struct.error:
        return None
    index = FunctionIndex(list(columns[:count]), list(columns[count:2 * count]),
                          list(columns[2 * count:]))
    made = _made_part(payload, count, made_count)
    return (index, made) if made is not None and index.regular() else None


def _made_with(payload: bytes, columns: bytes) -> dict[int, bytes | None] | None:
    """The functions of a cache entry whose index is ``columns`` (:func:`_index_columns`
    of an index checked already), or None when its index differs or it is not well
    formed (as :func:`_decoded` reads it)."""
    try:
        form, count, made_count = _HEAD.unpack_from(payload)
    except struct.error:
        return None
    if (form != _PAYLOAD_FORMAT or 24 * count != len(columns)
            or payload[_HEAD.size:_HEAD.size + len(columns)] != columns):
        return None
    return _made_part(payload, count, made_count)


def _made_part(payload: bytes, count: int, made_count: int) -> dict[int, bytes | None] | None:
    """The functions after an index of ``count`` entries: each made once, at a position
    of the index, its table where the sizes say (None if not so)."""
    try:
        columns = struct.unpack_from(f"<{made_count}I{made_count}I", payload,
                                     _HEAD.size + 24 * count)
    except struct.error:
        return None
    positions, sizes = columns[:made_count], columns[made_count:]
    ends = list(accumulate(sizes, initial=_HEAD.size + 24 * count + 8 * made_count))
    if (ends[-1] != len(payload) or len(set(positions)) != made_count
            or any(position >= count for position in positions)):
        return None
    return {position: payload[start:end] or None
            for position, start, end in zip(positions, ends, ends[1:], strict=False)}


def _one_function(data: bytes, start: int, end: int) -> SFrameReader | None:
    """The reader of ``data`` if it is a table of one FDE inside [start, end), else None."""
    try:
        reader = SFrameReader(data, 0)
        if reader.num_fdes != 1:
            return None
        entry = reader.fde(0)
    except SFrameError:
        return None
    return reader if start <= entry.start and entry.start + entry.size <= end else None

"""Breadth-first unwinding of many samples at once, with numpy.

Every sample of one address-space snapshot (perf's user registers and stack copy)
is stepped one frame per iteration: mapping, module and rule row found with
``searchsorted``, the CFA computed, the return address and saved frame pointer read
by index from the samples' stack copies (one uint64 array, each copy 8-aligned in
it, reads masked to the copy). The checks and stop reasons are the scalar
:class:`~.unwinder.Unwinder`'s, in the same order. A sample that meets anything the
batch does not handle (a rare SFrame rule, a return into the signal trampoline, a
stack word not 8-aligned in the copy, an address at or above 2^62 where arithmetic
would need care) is unwound again by the scalar tracer from its first frame, so its
chain is the scalar one by construction.

Addresses are kept in int64 where they take part in arithmetic: the guard above keeps
every such value and its offsets (below 2^19) far from overflow; pcs read from the
stack stay uint64 and are only compared.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..format.constants import ABI
from ..format.lookup import SFrameLookup
from ..records import record_class
from .address_space import AddressSpace, Mapping, Module
from .flat import (
    CFA_SHIFT,
    FP_BASED,
    FP_SAVED,
    KIND_DEFAULT,
    KIND_MASK,
    KIND_NONE,
    KIND_RARE,
    OUTERMOST,
    PENDING,
    FlatTable,
    MaskFunction,
    unpack_offsets,
    with_masks_from,
)
from .flat_cache import cached_flat, function_rows
from .flat_on_demand import OnDemandFlat
from .memory import StackMemory
from .provider import OnDemand
from .step import PAC_MASK
from .unwinder import (
    X86_64_SIGRETURN,
    FrameMethod,
    Registers,
    Stop,
    Unwind,
    Unwinder,
    sigreturn_offsets,
)

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

#: Values at or above this (registers, frame bases) go to the scalar tracer.
GUARD = 1 << 62

#: Stop codes in the result arrays (0: still running or handed to the scalar tracer).
STOPS = (None, Stop.OUTERMOST, Stop.DEPTH, Stop.MEMORY, Stop.COPY_ENDED, Stop.ZERO_PC, Stop.BACKWARDS,
         Stop.NO_ADVANCE, Stop.NO_RULE, Stop.NO_MODULE, Stop.BAD_RA)
_CODE = {stop: code for code, stop in enumerate(STOPS) if stop is not None}
METHODS = (FrameMethod.IP, FrameMethod.SFRAME, FrameMethod.FP)
_SFRAME_CODE, _FP_CODE = 1, 2


@record_class
class BatchSample:
    """One sample to unwind: its user registers and stack copy (taken at ``registers.sp``)."""

    registers: Registers
    stack: bytes | memoryview
    #: The copy's place in ``buffer`` (a perf.data mapping it is a view of); -1: unknown.
    offset: int = -1
    buffer: npt.NDArray[np.uint8] | None = None


@record_class
class BatchResult:
    """Frames as arrays: ``pcs[i, :count[i]]`` (and ``methods``, ``mappings``: indices into
    ``space_mappings``, -1 none), ``stops[i]`` (a :data:`STOPS` code); samples the scalar
    tracer unwound have their :class:`Unwind` in ``scalar``."""

    pcs: U64
    methods: npt.NDArray[np.int8]
    mappings: npt.NDArray[np.int32]
    count: npt.NDArray[np.int32]
    stops: npt.NDArray[np.int8]
    scalar: dict[int, Unwind]
    space_mappings: list[Mapping]

    def unwind(self, i: int) -> Unwind:
        """Sample ``i``'s chain as the scalar tracer's :class:`Unwind`."""
        found = self.scalar.get(i)
        if found is not None:
            return found
        n = int(self.count[i])
        maps = self.space_mappings
        stop = STOPS[int(self.stops[i])]
        assert stop is not None
        methods = METHODS
        return Unwind(self.pcs[i, :n].tolist(), [methods[m] for m in self.methods[i, :n].tolist()],
                      stop, [maps[k] if k >= 0 else None for k in self.mappings[i, :n].tolist()])


    def unwinds(self) -> list[Unwind]:
        """Every sample's chain as :class:`Unwind`. (Per sample: converting the whole
        depth-wide matrices at once is several times slower, most of it padding.)"""
        return [self.unwind(i) for i in range(len(self.count))]


class _Space:
    """One address-space snapshot as arrays: its mappings, and one table of rows in runtime
    addresses over all of them (each mapping's share of its module's flat table, bias
    added; a "no rule" row where a mapping has no table, an unmapped row after each
    mapping), so one ``searchsorted`` gives any pc's mapping and rule word; the addresses
    of signal trampolines."""

    def __init__(self, owner: BatchUnwinder, mappings: list[Mapping], sigreturns: list[int],
                 version: int) -> None:
        self.mappings = mappings
        self.version = version
        self.sigreturn_list = sigreturns
        self.sigreturns = np.array(sorted(sigreturns), dtype=np.uint64)
        #: The on-demand tables whose rows this snapshot holds, with their generation.
        self.on_demand: list[tuple[OnDemand, int]] = []
        starts: list[U64] = [np.zeros(1, np.uint64)]
        words: list[U64] = [np.full(1, KIND_NONE, np.uint64)]
        owners: list[npt.NDArray[np.int64]] = [np.full(1, -1, np.int64)]
        #: PCMASK functions of every table (a MASK word's field indexes this list), and
        #: the bias of the module each belongs to.
        self.masks: list[tuple[MaskFunction, int]] = []
        for index, mapping in enumerate(self.mappings):
            rows, row_words = self._rows(owner, mapping)
            starts += [rows, np.array([mapping.end], np.uint64)]
            words += [row_words, np.full(1, KIND_NONE, np.uint64)]
            owners += [np.full(len(rows), index, np.int64), np.full(1, -1, np.int64)]
        self.starts = np.concatenate(starts)
        self.words = np.concatenate(words)
        self.owner = np.concatenate(owners)
        #: The words of pcs this snapshot holds as PENDING, once made (sorted by pc).
        self._resolved_pcs: U64 = np.zeros(0, np.uint64)
        self._resolved_words: U64 = np.zeros(0, np.uint64)

    def _rows(self, owner: BatchUnwinder, mapping: Mapping) -> tuple[U64, U64]:
        """The rows of ``mapping`` in runtime addresses (first row at its start)."""
        start = np.array([mapping.start], np.uint64)
        module = mapping.module
        table = owner.table(module)
        if module is not None and module.lookup is not None and not isinstance(
                module.lookup, SFrameLookup):
            self.on_demand.append((module.lookup, module.lookup.generation))
        whole = _whole_mapping(table, mapping)
        if whole is not None:
            return start, np.full(1, whole, np.uint64)
        assert table is not None and module is not None
        bias = module.bias
        low, high = mapping.start - bias, mapping.end - bias
        first = int(np.searchsorted(table.starts, np.uint64(low), "right")) - 1
        last = int(np.searchsorted(table.starts, np.uint64(high), "left"))
        rows = table.starts[max(first, 0):last].astype(np.uint64, copy=True)
        row_words = table.words[max(first, 0):last].copy()
        if first < 0:  # the mapping starts before the table's first row
            rows = np.concatenate([np.array([low], np.uint64), rows])
            row_words = np.concatenate([np.full(1, KIND_NONE, np.uint64), row_words])
        rows[0] = low
        if table.masks:
            row_words = with_masks_from(row_words, len(self.masks))
            self.masks += [(mask, bias) for mask in table.masks]
        return rows + np.uint64(bias % (1 << 64)), row_words  # wraps like the addresses

    def pending_words(self, owner: BatchUnwinder, mappings: npt.NDArray[np.int64], pcs: U64
                      ) -> U64:
        """The rule words of ``pcs`` (at the mapping indices ``mappings``), each PENDING in
        this snapshot: those of pcs met before in it as it kept them, the others from
        :meth:`BatchUnwinder.made` (and kept). A first run's batch meets the same few
        functions pending at each of its steps (a deep recursion: one step a frame): asking
        ``made`` at every step (~0.2 ms: two passes over every table's words) took ~30 ms
        of a CPU for the deep bench recording's 146 steps."""
        words = np.full(len(pcs), PENDING, np.uint64)
        rest = np.arange(len(pcs))
        known = self._resolved_pcs
        if known.size:
            at = np.minimum(np.searchsorted(known, pcs), known.size - 1)
            hit = known[at] == pcs
            words[hit] = self._resolved_words[at[hit]]
            rest = rest[~hit]
        if rest.size:
            found = owner.made(self, mappings[rest], pcs[rest])
            words[rest] = found
            settled = found != PENDING  # (a table dropped meanwhile: asked again)
            new_pcs, first = np.unique(pcs[rest][settled], return_index=True)
            every = np.concatenate([known, new_pcs])
            order = np.argsort(every, kind="stable")
            self._resolved_pcs = every[order]
            self._resolved_words = np.concatenate(
                [self._resolved_words, found[settled][first]])[order]
        return words

    def stale(self) -> bool:
        """Whether an on-demand table made functions since this snapshot was made."""
        return any(table.generation != generation for table, generation in self.on_demand)

    def find(self, pcs: U64) -> tuple[npt.NDArray[np.int64], U64]:
        """The mapping index (-1: unmapped) and rule word of each pc (MASK words resolved)."""
        row = np.searchsorted(self.starts, pcs, side="right").astype(np.int64) - 1
        words = self.words[row]
        masked = np.flatnonzero((words & np.uint64(3)) == KIND_MASK)
        for i in masked.tolist():
            mask, bias = self.masks[int(words[i]) >> CFA_SHIFT]
            words[i] = mask.word(int(pcs[i]) - bias)
        return self.owner[row], words

    def mapped(self, pcs: U64) -> npt.NDArray[np.bool_]:
        """Whether each pc is in a mapping."""
        return self.owner[np.searchsorted(self.starts, pcs, side="right") - 1] >= 0


def _whole_mapping(table: FlatTable | None, mapping: Mapping) -> int | None:
    """The one rule word of every pc of ``mapping`` when its rows do not tell them apart:
    no table (the frame-pointer fallback), a table that could not be flattened, or
    link-time addresses outside what flat tables hold; None: its rows do."""
    module = mapping.module
    if table is None or module is None:
        return KIND_NONE
    if (table.rare_all or mapping.start - module.bias < 0
            or mapping.end - module.bias > 1 << 63):
        return KIND_RARE
    return None


def _shared_buffer(samples: Sequence[BatchSample]
                   ) -> tuple[npt.NDArray[np.uint8], list[int]] | None:
    """The one buffer every copy is a view of, and each copy's offset in it (None if not)."""
    if not samples or samples[0].buffer is None:
        return None
    buffer = samples[0].buffer
    positions = []
    for sample in samples:
        if sample.buffer is not buffer or sample.offset < 0:
            return None
        positions.append(sample.offset)
    return buffer, positions


def _stacks(samples: Sequence[BatchSample]) -> tuple[I64, I64, npt.NDArray[np.uint8]]:
    """Where each stack copy lies in one buffer (positions in bytes, lengths, buffer): the
    mapped file the copies are views of, read in place, or else all copies copied into
    one buffer, each 8-aligned."""
    length = np.array([len(s.stack) for s in samples], dtype=np.int64)
    shared = _shared_buffer(samples)
    if shared is not None:
        buffer, positions = shared
        return np.array(positions, dtype=np.int64), length, buffer
    padded = (length + 7) & ~7
    pos = np.zeros(len(samples), np.int64)
    if len(samples):
        pos[1:] = np.cumsum(padded[:-1])
    copy = bytearray(int(padded.sum()))
    for sample, at in zip(samples, pos.tolist(), strict=True):
        copy[at:at + len(sample.stack)] = sample.stack
    return pos, length, np.frombuffer(copy, np.uint8)


#: Address-space layouts whose arrays are kept (a recording of many processes cycles
#: through layouts; each costs a few hundred KB for a libc-sized table).
SPACES_KEPT = 8


class BatchUnwinder:
    """Unwinds samples in bulk; the scalar ``unwinder`` handles what the batch does not."""

    def __init__(self, unwinder: Unwinder) -> None:
        self.scalar = unwinder
        self.abi = unwinder.abi
        #: Flat tables by SFrame lookup, built on first use (lookups kept, so ids stay unique).
        self._tables: dict[int, tuple[SFrameLookup, FlatTable]] = {}
        #: Flat copies of on-demand tables, by table (kept up to date as it makes functions).
        self._on_demand: dict[int, tuple[OnDemand, OnDemandFlat]] = {}
        #: The flat rows of each function an on-demand table made, by its lookup.
        self._functions: dict[int, tuple[SFrameLookup, FlatTable]] = {}
        #: Snapshot arrays by address-space layout.
        self._spaces: dict[int, _Space] = {}
        #: Signal-trampoline addresses by (module id, mapping start, pgoff).
        self._sigreturns: dict[tuple[int, int, int, int], list[int]] = {}

    def table(self, module: Module | None) -> FlatTable | None:
        """The module's flat table; None: no usable table (the frame-pointer fallback)."""
        if module is None or module.lookup is None or module.guard.fault is not None:
            return None
        # By table, not by module: the modules of one file mapped by many processes (each
        # rebased) share its lookup, and so one flat table.
        lookup = module.lookup
        if not isinstance(lookup, SFrameLookup):
            made = self._on_demand.get(id(lookup))
            if made is None:
                lookup.index_ranges()  # (its cache key is known after this)
                rows = function_rows(lookup.cache_id, self.abi)
                made = self._on_demand[id(lookup)] = (
                    lookup, OnDemandFlat(lookup, self.abi, self._functions, rows.flat))
            return made[1].update()  # (only the functions made since the last call)
        found = self._tables.get(id(lookup))
        if found is None:
            found = self._tables[id(lookup)] = (
                lookup, cached_flat(lookup, self.abi, module.build_id))
        return found[1]

    def made(self, space: _Space, mappings: npt.NDArray[np.int64], pcs: U64) -> U64:
        """The rule words of ``pcs`` (in the mappings of ``space`` at the indices
        ``mappings``; each a PENDING word in ``space``), the functions of on-demand tables
        they fall in made first. Read from the tables' flat copies, not from a fresh
        snapshot: ``space`` is only remade at the next batch (:meth:`_space`), since
        remaking it at each step that met a function not made yet (a first run's
        hundreds of steps) copied every mapping's rows each time."""
        words = self._words_now(space, mappings, pcs)
        missing = np.flatnonzero(words == PENDING)
        if missing.size:
            for index, pc in dict.fromkeys(zip(mappings[missing].tolist(),
                                               pcs[missing].tolist(), strict=True)):
                module = space.mappings[index].module
                if module is not None and module.lookup is not None and not isinstance(
                        module.lookup, SFrameLookup) and module.guard.fault is None:
                    module.lookup.ensure(pc - module.bias)
            words[missing] = self._words_now(space, mappings[missing], pcs[missing])
        return words

    def _words_now(self, space: _Space, mappings: npt.NDArray[np.int64], pcs: U64) -> U64:
        """The rule words of ``pcs`` as a snapshot made now would give them (MASK words
        resolved), from each mapping's table as it is now."""
        words = np.full(len(pcs), KIND_NONE, np.uint64)
        # (return_index: np.unique then skips its masked-array test, which imports numpy.ma,
        # ~5 ms of a process's first chunk)
        for index in np.unique(mappings, return_index=True)[0].tolist():
            at = np.flatnonzero(mappings == index)
            mapping = space.mappings[index]
            module = mapping.module
            on_demand = self._on_demand_flat(module)
            table = self.table(module) if on_demand is None else on_demand.current()
            whole = _whole_mapping(table, mapping)
            if whole is not None:
                words[at] = whole
                continue
            assert table is not None and module is not None
            # Link-time pcs: each is in the mapping, so at or after the row covering its
            # start (which a snapshot extends down to it), and before its end.
            link = pcs[at] - np.uint64(module.bias % (1 << 64))
            # (an on-demand table's functions made since the snapshot: not spliced yet)
            words[at] = table.lookup(link) if on_demand is None else on_demand.words_now(link)
        return words

    def _on_demand_flat(self, module: Module | None) -> OnDemandFlat | None:
        """The flat copy of ``module``'s on-demand table, once made (None: none)."""
        if module is None or module.lookup is None or module.guard.fault is not None:
            return None
        made = self._on_demand.get(id(module.lookup))
        return made[1] if made is not None else None

    def _trampolines(self, mapping: Mapping) -> list[int]:
        """Addresses in ``mapping`` whose code is the x86-64 sigreturn trampoline."""
        module = mapping.module
        if self.abi is not ABI.AMD64_ENDIAN_LITTLE or module is None or module.image is None:
            return []
        key = (id(module), mapping.start, mapping.end, mapping.pgoff)
        found = self._sigreturns.get(key)
        if found is None:
            found = [at - mapping.pgoff + mapping.start for at in sigreturn_offsets(
                module.image.data, mapping.pgoff, mapping.pgoff + mapping.end - mapping.start)]
            self._sigreturns[key] = found
        return found

    def _space(self, space: AddressSpace) -> _Space:
        """The snapshot's arrays (kept per layout: chunks of one layout share them)."""
        found = self._spaces.get(space.version)
        if found is not None and found.stale():
            found = self._spaces[space.version] = _Space(
                self, found.mappings, found.sigreturn_list, found.version)
        if found is None:
            if len(self._spaces) >= SPACES_KEPT:
                self._spaces.clear()
            sigreturns: list[int] = []
            for mapping in space.mappings:
                sigreturns.extend(self._trampolines(mapping))
            found = self._spaces[space.version] = _Space(self, list(space.mappings), sigreturns,
                                                         space.version)
        return found

    def unwind(self, space: AddressSpace, samples: Sequence[BatchSample]) -> BatchResult:
        """Unwind ``samples``, all taken in ``space`` as it is now."""
        state = _Batch.of_samples(self, self._space(space), samples)
        state.run()
        for i in np.flatnonzero(state.handoff).tolist():
            sample = samples[i]
            memory = StackMemory(sample.registers.sp, sample.stack, False)
            state.result.scalar[i] = self.scalar.unwind(sample.registers, memory, space)
        return state.result

    def unwind_arrays(self, space: AddressSpace, pc: U64, sp: U64, fp: U64,
                      stacks: tuple[I64, I64, npt.NDArray[np.uint8]]
                      ) -> tuple[BatchResult, I64]:
        """Unwind samples given as arrays (registers; stack copies as positions and lengths
        in ``stacks[2]``), all taken in ``space``. Returns the result and the indices of the
        samples left to the scalar tracer (the caller has what it needs for them)."""
        state = _Batch(self, self._space(space), pc, sp, fp, stacks)
        state.run()
        return state.result, np.flatnonzero(state.handoff)


class _Batch:
    """The arrays of one batch run (see :meth:`BatchUnwinder.unwind`)."""

    def __init__(self, owner: BatchUnwinder, space: _Space, pc: U64, sp: U64, fp: U64,
                 stacks: tuple[I64, I64, npt.NDArray[np.uint8]]) -> None:
        """``stacks``: each sample's stack copy as (position in ``buffer``, length) arrays
        and the buffer; each copy was taken at the sample's sp."""
        self.owner = owner
        self.space = space
        self.depth = owner.scalar.max_depth
        self.user_limit = owner.scalar.user_limit
        self.little = owner.abi in (ABI.AMD64_ENDIAN_LITTLE, ABI.AARCH64_ENDIAN_LITTLE)
        #: AArch64: a frame record's saved x30 may be signed (step()'s policy says so).
        self.signed_records = owner.scalar.policy.signed_frame_records
        n = len(pc)
        width = max(self.depth, 1)
        self.result = BatchResult(np.zeros((n, width), np.uint64), np.zeros((n, width), np.int8),
                                  np.full((n, width), -1, np.int32), np.ones(n, np.int32),
                                  np.zeros(n, np.int8), {}, space.mappings)
        guard = np.uint64(GUARD)
        big = (sp >= guard) | (fp >= guard) | (pc >= guard)
        self.pc = pc.astype(np.uint64, copy=True)
        self.sp = np.where(big, 0, sp).astype(np.int64)
        self.fp = fp.astype(np.uint64, copy=True)
        self.handoff = big | (not self.little)
        self.base = self.sp.copy()
        self.pos, self.length, buffer = stacks
        self.shift = self.pos & 7
        self.views = {k: np.frombuffer(buffer, "<u8", count=(len(buffer) - k) // 8, offset=k)
                      for k in np.flatnonzero(np.bincount(self.shift, minlength=8)).tolist()
                      if len(buffer) >= k + 8}
        self.result.pcs[:, 0] = self.pc

    @classmethod
    def of_samples(cls, owner: BatchUnwinder, space: _Space,
                   samples: Sequence[BatchSample]) -> _Batch:
        regs = [s.registers for s in samples]
        pc = np.array([r.pc for r in regs], dtype=np.uint64)
        sp = np.array([r.sp for r in regs], dtype=np.uint64)
        fp = np.array([r.fp for r in regs], dtype=np.uint64)
        return cls(owner, space, pc, sp, fp, _stacks(samples))

    def read(self, rows: I64, address: I64) -> tuple[U64, BOOL, BOOL]:
        """The word at ``address`` in each sample's copy: value, readable, unaligned."""
        offset = address - self.base[rows]
        ok = (offset >= 0) & (offset + 8 <= self.length[rows])
        unaligned = ok & ((offset & 7) != 0)
        good = ok & ~unaligned
        value = np.zeros(len(rows), np.uint64)
        if len(self.views) == 1 and good.all():  # the common case: every word readable
            (k, view), = self.views.items()
            value[:] = view[(self.pos[rows] + offset) >> 3]
            return value, good, unaligned
        at = np.flatnonzero(good)
        where = self.pos[rows[at]] + offset[at]
        if len(self.views) == 1:
            (k, view), = self.views.items()
            value[at] = view[where >> 3]
        else:
            shift = where & 7
            for k, view in self.views.items():
                part = shift == k
                value[at[part]] = view[where[part] >> 3]
        return value, good, unaligned

    def unreadable(self, rows: I64, address: I64) -> npt.NDArray[np.int8]:
        """Stop codes for unreadable words: COPY_ENDED past the copy's end, else MEMORY."""
        past = address + 8 > self.base[rows] + self.length[rows]
        return np.where(past, _CODE[Stop.COPY_ENDED], _CODE[Stop.MEMORY]).astype(np.int8)

    def run(self) -> None:
        active = np.flatnonzero(~self.handoff)
        d = 0
        while active.size:
            active = self.step(active, d)
            d += 1

    def step(self, rows: I64, d: int) -> I64:
        """Frame ``d`` of each sample in ``rows``: its mapping, then its caller (or a stop).
        Returns the rows still running."""
        result, space = self.result, self.space
        pc = self.pc[rows]
        lookup = pc - np.uint64(1) if d else pc
        mapping, words = space.find(lookup)
        pending = np.flatnonzero(words == PENDING)
        if pending.size:  # functions of on-demand tables not made yet: made now
            words[pending] = space.pending_words(self.owner, mapping[pending], lookup[pending])
        result.mappings[rows, d] = mapping
        if d + 1 >= self.depth:
            result.stops[rows] = _CODE[Stop.DEPTH]
            return rows[:0]
        handoff = np.zeros(len(rows), np.bool_)
        if space.sigreturns.size:
            for trampoline in space.sigreturns:  # one or two: cheaper than np.isin
                handoff |= pc == trampoline
                if not d:  # sampled in its rt_sigreturn system call (the scalar tracer's)
                    handoff |= pc == trampoline + np.uint64(len(X86_64_SIGRETURN))
        taken = self.step_plain(rows, d, words, handoff)
        if taken is None:
            return rows[self.step_mask(rows, d, mapping, words, handoff)]
        if taken.all():
            return rows
        # The rows the plain step did not take, row by row; the running rows stay in order.
        rest = np.flatnonzero(~taken)
        running = taken
        # Most of them end at an outermost frame (_start, clone3): stopped here, as the
        # general step stops them, without its ~40 array passes over a handful of rows
        # (in nearly every step of a deep recording: ~45 ms of its 66k samples' 750).
        outer = (words[rest] == OUTERMOST) & ~handoff[rest]
        if outer.any():
            self.result.stops[rows[rest[outer]]] = _CODE[Stop.OUTERMOST]
            rest = rest[~outer]
            if not rest.size:
                return rows[running]
        running[rest] = self.step_mask(rows[rest], d, mapping[rest], words[rest], handoff[rest])
        return rows[running]

    def step_plain(self, rows: I64, d: int, words: U64, handoff: BOOL) -> BOOL | None:
        """The common case in a third of the general step's array passes: the rows whose rule
        is a default one (no large frame pointer), whose words are read in their copies and
        8-aligned, and whose caller is plausible (pc not 0, CFA above the frame's sp) take
        their caller here, as the general step would; the mask of those rows (the others
        are left untouched), or None when most rows are not of that kind."""
        fine: BOOL = ((words & np.uint64(3)) == KIND_DEFAULT) & ~handoff
        if len(self.views) != 1 or 2 * np.count_nonzero(fine) < len(rows):
            return None
        sp, fp = self.sp[rows], self.fp[rows]
        cfa_off, ra_off, fp_off = unpack_offsets(words)
        fp_based = (words & np.uint64(FP_BASED)) != 0
        if fp_based.any():
            fine &= ~(fp_based & (fp >= np.uint64(GUARD)))
            cfa = np.where(fp_based, fp.astype(np.int64), sp) + cfa_off
        else:
            cfa = sp + cfa_off
        fine &= (cfa > sp) if d else (cfa >= sp)
        copy_at, length, pos = self.base[rows], self.length[rows], self.pos[rows]
        ra_at = cfa + ra_off - copy_at
        fine &= (ra_at >= 0) & (ra_at + 8 <= length) & ((ra_at & 7) == 0)
        (view,) = self.views.values()
        ra = view[np.where(fine, pos + ra_at, 0) >> 3]
        fine &= ra != 0
        saved = np.flatnonzero(fine & ((words & np.uint64(FP_SAVED)) != 0))
        if saved.size:
            fp_at = (cfa + fp_off - copy_at)[saved]
            readable = (fp_at >= 0) & (fp_at + 8 <= length[saved])
            fine[saved[readable & ((fp_at & 7) != 0)]] = False  # (the scalar tracer's)
            good = readable & ((fp_at & 7) == 0)
            # An unreadable saved fp is no stop: the caller keeps this frame's fp.
            fp[saved[good]] = view[(pos[saved[good]] + fp_at[good]) >> 3]
        go = rows[fine]
        self.pc[go], self.sp[go], self.fp[go] = ra[fine], cfa[fine], fp[fine]
        result = self.result
        # (through the depth's column: half the time of a [rows, depth] scatter)
        result.pcs[:, d + 1][go] = ra[fine]
        result.methods[:, d + 1][go] = _SFRAME_CODE
        result.count[go] = d + 2
        return fine

    def step_mask(self, rows: I64, d: int, mapping: npt.NDArray[np.int64], words: U64,
                  handoff: BOOL) -> BOOL:
        """The general step: each row's caller by its rule (default, frame-pointer
        fallback), a stop, or a handoff to the scalar tracer (``handoff`` given: rows at a
        signal trampoline); which rows are still running."""
        result = self.result
        outermost = words == OUTERMOST
        handoff = handoff | (((words & np.uint64(3)) == KIND_RARE) & ~outermost)
        new_pc = np.zeros(len(rows), np.uint64)
        new_sp = np.zeros(len(rows), np.int64)
        new_fp = self.fp[rows].copy()
        method = np.zeros(len(rows), np.int8)
        stop = np.zeros(len(rows), np.int8)
        stop[outermost & ~handoff] = _CODE[Stop.OUTERMOST]
        kind = words & np.uint64(3)
        default = np.flatnonzero((kind == KIND_DEFAULT) & ~handoff)
        self.step_default(rows, default, words[default], new_pc, new_sp, new_fp, stop, handoff)
        method[default] = _SFRAME_CODE
        fallback = np.flatnonzero((kind == KIND_NONE) & ~handoff)
        self.step_fp(rows, fallback, mapping[fallback] < 0, new_pc, new_sp, new_fp, stop, handoff)
        method[fallback] = _FP_CODE
        sp = self.sp[rows]
        running: BOOL = (stop == 0) & ~handoff
        checks = [(new_pc == 0, Stop.ZERO_PC), (new_sp < sp, Stop.BACKWARDS)]
        if d:
            checks.append((new_sp == sp, Stop.NO_ADVANCE))
        for condition, reason in checks:
            hit = running & condition
            stop[hit] = _CODE[reason]
            running &= ~hit
        self.handoff[rows[handoff]] = True
        ended = stop != 0
        result.stops[rows[ended]] = stop[ended]
        go: I64 = rows[running]
        self.pc[go], self.sp[go], self.fp[go] = new_pc[running], new_sp[running], new_fp[running]
        result.pcs[go, d + 1] = new_pc[running]
        result.methods[go, d + 1] = method[running]
        result.count[go] = d + 2
        return running

    def step_default(self, rows: I64, at: I64, words: U64, new_pc: U64, new_sp: I64,
                     new_fp: U64, stop: npt.NDArray[np.int8], handoff: BOOL) -> None:
        """The default rule: CFA = SP/FP + offset, RA and maybe FP loaded from the CFA."""
        if not len(at):
            return
        r = rows[at]
        cfa_off, ra_off, fp_off = unpack_offsets(words)
        fp_based = (words & np.uint64(FP_BASED)) != 0
        fp = self.fp[r]
        big = fp_based & (fp >= np.uint64(GUARD))
        base = np.where(fp_based, fp.astype(np.int64), self.sp[r])
        cfa = base + cfa_off
        ra, ok, unaligned = self.read(r, cfa + ra_off)
        bad = ~ok & ~unaligned & ~big
        stop[at[bad]] = self.unreadable(r[bad], (cfa + ra_off)[bad])
        saved = (words & np.uint64(FP_SAVED)) != 0
        value, fp_ok, fp_unaligned = self.read(r, cfa + fp_off)
        handoff[at] |= big | unaligned | (ok & saved & fp_unaligned)
        new_pc[at] = ra
        new_sp[at] = cfa
        take = saved & fp_ok
        new_fp[at[take]] = value[take]

    def step_fp(self, rows: I64, at: I64, unmapped: BOOL, new_pc: U64, new_sp: I64,
                new_fp: U64, stop: npt.NDArray[np.int8], handoff: BOOL) -> None:
        """The frame-pointer fallback: [fp] = caller's fp, [fp + 8] = return address, taken
        only if the return address could be one (else BAD_RA)."""
        if not len(at):
            return
        r = rows[at]
        fp_u = self.fp[r]
        big = fp_u >= np.uint64(GUARD)
        handoff[at[big]] = True
        fp = np.where(big, 0, fp_u.astype(np.int64))
        usable = ~big & (fp >= self.sp[r]) & ((fp & 7) == 0)
        no_rule = ~big & ~usable
        stop[at[no_rule]] = np.where(unmapped[no_rule], _CODE[Stop.NO_MODULE],
                                     _CODE[Stop.NO_RULE])
        saved, saved_ok, saved_unaligned = self.read(r, fp)
        ra, ra_ok, ra_unaligned = self.read(r, fp + 8)
        if self.signed_records:
            ra = ra & np.uint64(PAC_MASK)
        handoff[at] |= usable & (saved_unaligned | ra_unaligned)
        failed = usable & ~handoff[at] & ~(saved_ok & ra_ok)
        where = np.where(saved_ok, fp + 8, fp)
        stop[at[failed]] = self.unreadable(r[failed], where[failed])
        good = usable & ~handoff[at] & saved_ok & ra_ok
        nonzero = good & (ra != 0)
        in_code = np.zeros(len(at), np.bool_)
        below = nonzero & (ra < np.uint64(self.user_limit))
        in_code[below] = self.space.mapped(ra[below] - np.uint64(1))
        bad_ra = nonzero & ~in_code
        stop[at[bad_ra]] = _CODE[Stop.BAD_RA]
        new_pc[at] = ra
        new_sp[at] = fp + 16
        new_fp[at[good]] = saved[good]


__all__ = ["STOPS", "BatchResult", "BatchSample", "BatchUnwinder"]

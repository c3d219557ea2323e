"""SFrame tables in the walker's maps: rows loaded once per binary, mappings per process.

A binary's table (its own ``.sframe`` merged with its CFI, or generated from the CFI, as
``sframe script`` uses; cached by build id) is flattened (:mod:`pysframe.unwind.flat`,
cached too) and written into the ``rows`` array at the first free range that holds it:
processes that map the same file share it. A process's entry in ``procs`` lists its
executable mappings with their load bias and row range, from ``/proc/PID/maps``.

A table is counted by the processes whose entry names it; when the last of them exits or
stops mapping it (its entry rewritten without it), its rows go back to the free ranges,
after the entries no longer point at them.

The bytes of the x86-64 sigreturn trampoline (glibc's ``__restore_rt``) are given a "no
rule" row (:func:`without_signal_rows`): the walker recognises the trampoline by its code
only where it finds no rule, as the scalar tracer does before any row, so a row there (a
signal frame's FDE) never makes it step the trampoline as a call frame.

PLT blocks (PCMASK functions: rows that repeat every ``rep_size`` bytes) are written
out as plain rows, one run per stub (:func:`walker_rows`): the walker's one binary
search then covers them, at a few rows per stub.
"""

from __future__ import annotations

import mmap
import os
import time
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from ..errors import PysframeError
from ..format.constants import ABI
from ..session.tables import GeneratedTables
from ..sources.live import MapEntry, read_maps
from ..unwind.flat import CFA_SHIFT, KIND_MASK, KIND_NONE, FlatTable
from ..unwind.flat_cache import cached_flat, flat_is_cached
from ..unwind.modules import BinaryFinder, damage_message
from ..unwind.unwinder import X86_64_SIGRETURN, sigreturn_offsets
from .bpf_sys import (
    MAP_ARRAY,
    MAP_F_MMAPABLE,
    BpfError,
    Fd,
    Resources,
    map_create,
    map_delete,
    map_update,
    map_update_batch,
    map_write,
)
from .walker import MAPPING, MAPPINGS, PAGE_INDEX_SHIFT, PAGE_INDEXED, PROCS_VALUE, ROW

#: Retired tables whose binaries (image, table) the finder keeps for a quick reload.
KEPT_RETIRED = 32
#: How long the rows of an idle process's table stay lent to a busier one (its entry is
#: then written with it again, where there is room: :meth:`TableLoader.give_back`), and
#: how long a process without a sample (or since its entry was first written) is idle.
LEND_S = 30.0
IDLE_S = 10.0
#: The most resolved mapping paths kept (:meth:`TableLoader._real_path`).
REAL_PATHS = 4096


class TableLoader:
    """Loads tables into ``rows`` (``capacity`` rows) and process entries into ``procs``."""

    def __init__(self, rows: Fd, procs: Fd, capacity: int, finder: BinaryFinder | None = None,
                 rows_mappable: bool = False) -> None:
        self.rows, self.procs, self.capacity = rows, procs, capacity
        #: Whether ``rows`` was made mappable (the kernel allows it): tables are written
        #: through a mapping (else with ``map_update_batch``).
        self.rows_mappable = rows_mappable
        self._real_paths: dict[tuple[str, int, int], str] = {}
        self.finder = finder or BinaryFinder(tables=GeneratedTables(apart=True, flat_abi="AMD64_ENDIAN_LITTLE"))
        #: Rows handed out (the high-water mark) and the ranges given back, (first, rows).
        self.used = 0
        self.free: list[tuple[int, int]] = []
        #: The tables each process's entry names, and the processes naming each table.
        self.process_tables: dict[int, set[tuple[str, bytes | None]]] = {}
        self.users: dict[tuple[str, bytes | None], set[int]] = {}
        #: Tables freed, and their rows (for the summary and the tests).
        self.freed_tables = 0
        self.freed_rows = 0
        #: The last generation given to a process entry (see procs_value).
        self._generation = 0
        #: The executable mappings each entry was written from (to skip unchanged ones).
        self.fingerprints: dict[int, int] = {}
        #: (path, build id) -> (first row, rows taken, its page index's too); (0, 0): no
        #: table. Its mappings' rows field (:func:`table_rows`) by the same key.
        self.tables: dict[tuple[str, bytes | None], tuple[int, int]] = {}
        self.entry_rows: dict[tuple[str, bytes | None], int] = {}
        #: Build ids of the binaries the targets mapped, by path (for the file's BUILD_ID).
        self.build_ids: dict[str, bytes] = {}
        #: Binaries whose own table the kernel's rules refuse (not loaded: their frames
        #: fall back to frame pointers), with the first reason.
        self.refused: dict[str, str] = {}
        #: Binaries whose own table is damaged (their rows come from the table generated
        #: from their CFI), with what to say of it.
        self.damaged: dict[str, str] = {}
        #: Tables no process names any more, rows still in place, oldest first: freed
        #: when their room is needed.
        self.retired: OrderedDict[tuple[str, bytes | None], tuple[int, int]] = OrderedDict()
        #: Binaries whose rows did not fit in the rows map when asked for (their rows).
        self.overflowed: dict[str, int] = {}
        #: A process whose code is walked by frame pointers, no table loaded (the
        #: recorder itself under -a: its numpy alone has 370k rows).
        self.without_tables: set[int] = set()
        #: The paths each table's binary was asked of the finder by: its image and table
        #: are forgotten there once the table has been retired long enough (see _release).
        self.finder_paths: dict[tuple[str, bytes | None], set[str]] = {}
        #: Retired tables whose binaries the finder still keeps, oldest first.
        self.kept_retired: OrderedDict[tuple[str, bytes | None], None] = OrderedDict()
        #: Whether a process had a sample lately: the tables of processes that had none
        #: lend their rows to a table that fits nowhere else (see _lend_rows). By
        #: default every process is busy: nothing is lent.
        self.recently_sampled: Callable[[int], bool] = lambda pid: True
        #: Tables lent that way, with when (the recorder's clock): left out of their
        #: processes' entries (their code copies the stack) for LEND_S, then loaded again.
        self.lent: dict[tuple[str, bytes | None], float] = {}
        self.lent_tables = 0
        #: The processes a lent table was taken from (their entries get it back), when
        #: each process's entry was first written (a process starting up is not idle),
        #: and the processes whose entries are being written now.
        self.lent_users: dict[tuple[str, bytes | None], set[int]] = {}
        self.loaded_at: dict[int, float] = {}
        self._loading: set[int] = set()
        #: Binaries whose tables are being generated in the background (by the image's
        #: path), with the processes whose entries leave them out until then (their code
        #: copies the stack meanwhile).
        self.generating: dict[str, set[int]] = {}
        #: The samples waiting for each process's tables (the recorder's count).
        self.samples_waiting: Callable[[], dict[int, int]] = dict

    def _table(self, key: tuple[str, bytes | None], module: object) -> tuple[int, int]:
        found = self.tables.get(key)
        if found is not None:
            return found
        found = self.retired.pop(key, None)
        if found is not None:  # its rows are still there
            self.tables[key] = found
            return found
        too_big = self.overflowed.get(str(getattr(module, "path", "")), 0)
        if too_big > self.room() and too_big > self.room() + sum(
                size for _, size in self._lenders(key)):
            return -1, too_big  # still no room
        found = (0, 0)
        self._flat_apart(module, key[1])
        starts, words, refusal = module_rows(module, key[1])
        if refusal is not None:
            self.refused[str(getattr(module, "path", ""))] = refusal
        damage, image = getattr(module, "damage", None), getattr(module, "image", None)
        if damage is not None and image is not None:
            self.damaged[str(getattr(module, "path", ""))] = damage_message(image, damage)
        rows, self.entry_rows[key] = table_rows(starts, words)
        count = len(rows)
        first = self._allocate(count) if len(starts) else None
        if first is None and len(starts) and self._lend_rows(count, key):
            first = self._allocate(count)
        if first is not None:
            self._write_rows(first, rows)
            found = (first, count)
        elif len(starts):
            # The rows map is full: not remembered as "no table" (tried again at the
            # next load, once tables are freed); its code is left out of the entry, so
            # that the walker copies the stack there and the chain is finished in user
            # space.
            self.overflowed[str(getattr(module, "path", ""))] = count
            return -1, count
        self.tables[key] = found
        return found

    def _write_rows(self, first: int, rows: np.ndarray) -> None:
        """A table's rows at row ``first`` (free rows: no entry points at them yet)."""
        if self.rows_mappable:
            map_write(self.rows, first * ROW.size, rows.tobytes())
        else:
            keys, values = rows_items(first, rows)
            map_update_batch(self.rows, keys, values, len(rows))

    def _lend_rows(self, count: int, wanted: tuple[str, bytes | None]) -> bool:
        """Make room for ``count`` rows from the tables of processes that had no sample
        lately (largest first): their entries are written again without them first (the
        walker never reads rows that are being replaced), then the tables are retired and
        their rows taken. False, and nothing lent, if that would not be enough."""
        needed, taken = count - self.room(), []
        for key, size in self._lenders(wanted):
            if needed <= 0:
                break
            taken.append(key)
            needed -= size
        if needed > 0 or not taken:
            return False
        now = time.monotonic()
        self.lent.update((key, now) for key in taken)
        self.lent_tables += len(taken)
        for key in taken:
            self.lent_users[key] = set(self.users.get(key, ()))
        for pid in sorted({pid for key in taken for pid in self.users.get(key, ())}):
            try:
                self.load_process(pid)  # without the lent tables: _name retires them
            except (OSError, BpfError):
                self.drop_process(pid)
        return all(key not in self.tables for key in taken)

    def _lenders(self, wanted: tuple[str, bytes | None]
                 ) -> list[tuple[tuple[str, bytes | None], int]]:
        """(table, rows) of the tables all of whose processes are idle (no sample for
        IDLE_S, entry written at least IDLE_S ago, not being written now), largest first."""
        now = time.monotonic()

        def idle(pid: int) -> bool:
            return (pid not in self._loading and now - self.loaded_at.get(pid, now) >= IDLE_S
                    and not self.recently_sampled(pid))

        return sorted(((key, self.tables[key][1]) for key, users in self.users.items()
                       if key != wanted and key in self.tables and self.tables[key][1]
                       and users and all(idle(pid) for pid in users)),
                      key=lambda item: -item[1])

    def _lent_now(self, key: tuple[str, bytes | None]) -> bool:
        """Whether ``key``'s rows are lent (for LEND_S from when they were)."""
        since = self.lent.get(key)
        return since is not None and time.monotonic() - since < LEND_S

    def give_back(self) -> None:
        """Tables lent for LEND_S: their processes' entries are written with them again
        (where there is room; else they stay uncovered, as any table that does not fit)."""
        now = time.monotonic()
        for key in [key for key, since in self.lent.items() if now - since >= LEND_S]:
            del self.lent[key]
            for pid in sorted(self.lent_users.pop(key, ())):
                try:
                    self.load_process(pid)
                except (OSError, BpfError):
                    self.drop_process(pid)

    def _generating(self, module: object, key: tuple[str, bytes | None], pid: int) -> bool:
        """Whether ``module``'s table or flat rows are being generated in the background
        (started now if the cache lacks the flat rows of a table not loaded yet): then
        ``pid`` waits for it."""
        tables = getattr(self.finder, "tables", None)
        path = str(getattr(module, "path", ""))
        if tables is None or not getattr(tables, "background", False):
            return False
        pending = getattr(module, "lookup", None) is None and path in tables.later
        if not pending and key not in self.tables and key not in self.retired:
            pending = not self._flat_apart(module, key[1])
        if pending:
            self.generating.setdefault(path, set()).add(pid)
        return pending

    def tables_ready(self) -> list[int]:
        """The processes waiting for tables whose background generation ended (their
        entries are to be written again): the finder opens those binaries afresh."""
        tables = getattr(self.finder, "tables", None)
        if tables is None:
            return []
        pids: set[int] = set()
        for path in tables.later.take_ready():
            # every module opened from the file, however asked for (by an entry, by the
            # chains finished in user space)
            self.finder.forget_file(path)
            pids |= self.generating.pop(path, set())
        return sorted(pids)

    def samples_for(self, path: str) -> int:
        """The samples waiting for the table of the binary at ``path`` (the order in
        which tables are generated in the background)."""
        waiting = self.samples_waiting()
        return sum(waiting.get(pid, 0) for pid in self.generating.get(path, ()))

    def waits_for_tables(self, pid: int) -> bool:
        """Whether ``pid``'s entry leaves out a table being generated."""
        return any(pid in waiting for waiting in self.generating.values())

    def room(self) -> int:
        """The rows a table could have now (unused, freed, and retired tables' rows)."""
        return (self.capacity - self.used + sum(size for _, size in self.free)
                + sum(size for _, size in self.retired.values()))

    def _flat_apart(self, module: object, build_id: bytes | None) -> bool:
        """Have the finder's helper process make the module's flat rows if the cache has
        none (flattening a compiler's table takes ~100 MiB for a moment); False while that
        runs in the background."""
        make = getattr(getattr(self.finder, "tables", None), "make_apart", None)
        lookup, image = getattr(module, "lookup", None), getattr(module, "image", None)
        if make is None or lookup is None or image is None:
            return True
        if not flat_is_cached(lookup, build_id or _build_id_of(module)):
            return bool(make(image.path))
        return True

    def _allocate(self, count: int) -> int | None:
        """The first row of ``count`` free rows (a freed range first, then the unused end,
        then the ranges of retired tables, oldest first), or None: full."""
        while True:
            for index, (first, size) in enumerate(self.free):
                if size >= count:
                    if size == count:
                        del self.free[index]
                    else:
                        self.free[index] = (first + count, size - count)
                    return first
            if self.used + count <= self.capacity:
                self.used += count
                return self.used - count
            if not self.retired:
                return None
            _, (first, size) = self.retired.popitem(last=False)
            self._free_range(first, size)

    def _release(self, key: tuple[str, bytes | None]) -> None:
        """The table is named by no entry any more: retired, its rows kept until their
        room is needed (a binary run again and again, as a compiler by make, is not
        loaded again each time); it is loaded again if a process maps it later."""
        first, count = self.tables.pop(key, (0, 0))
        self.users.pop(key, None)
        if not count:
            return
        self.freed_tables += 1
        self.freed_rows += count
        self.retired[key] = (first, count)
        # The finder keeps the binaries of the latest few retired tables (make runs the
        # same compiler again and again); the others are opened again if mapped again.
        self.kept_retired[key] = None
        while len(self.kept_retired) > KEPT_RETIRED:
            old, _ = self.kept_retired.popitem(last=False)
            for path in self.finder_paths.pop(old, ()):
                self.finder.forget(path)

    def _free_range(self, first: int, count: int) -> None:
        merged: list[tuple[int, int]] = []
        for start, size in sorted([*self.free, (first, count)]):
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((start, size))
        self.free = merged

    def _name(self, pid: int, keys: set[tuple[str, bytes | None]]) -> None:
        """``pid``'s entry now names ``keys``: tables no process names any more are freed
        (called after the entry was written or deleted)."""
        before = self.process_tables.pop(pid, set())
        if keys:
            self.process_tables[pid] = keys
        for key in keys - before:
            self.users.setdefault(key, set()).add(pid)
        for key in before - keys:
            users = self.users.get(key)
            if users is not None:
                users.discard(pid)
                if not users:
                    self._release(key)

    def drop_process(self, pid: int) -> None:
        """The process exited: its entry is deleted and its tables counted down."""
        try:
            map_delete(self.procs, pid.to_bytes(4, "little"))
        except BpfError:
            pass  # it had no entry
        self.fingerprints.pop(pid, None)
        self.loaded_at.pop(pid, None)
        self._name(pid, set())

    def sweep(self) -> None:
        """Entries of processes whose executable mappings changed with no record saying
        so (``dlclose``: perf reports no munmap) are rewritten; those of processes gone
        are dropped."""
        for pid in list(self.process_tables):
            try:
                self.load_process(pid, if_changed=True)
            except FileNotFoundError:
                self.drop_process(pid)
            except (OSError, BpfError):
                continue
        self.give_back()

    def prepare(self, path: str) -> int:
        """Load the tables of an executable about to run, its interpreter and the libraries
        it names (DT_NEEDED, one level, in the standard directories), so that after its
        exec only its mappings are left to write. Returns the rows loaded."""
        loaded = 0
        for candidate in [path, *_dependencies(path)]:
            module = self.finder.module(os.path.realpath(candidate), None, 0, 0)
            if module is not None and _key(module) not in self.tables:
                first, count = self._table(_key(module), module)
                loaded += count if first >= 0 else 0
        return loaded

    def load_process(self, pid: int, if_changed: bool = False) -> int:
        """Write ``pid``'s entry from its maps (``if_changed``: only if its executable
        mappings changed since); returns how many mappings have rows."""
        maps = read_maps(pid, executable=True)  # (a compiler's: ~1 line in 4)
        code = [entry for entry in maps if entry.path.startswith("/")]
        fingerprint = hash(tuple((entry.start, entry.end, entry.inode, entry.path)
                                 for entry in code))
        if if_changed and self.fingerprints.get(pid) == fingerprint:
            return -1
        self.fingerprints[pid] = fingerprint
        self.loaded_at.setdefault(pid, time.monotonic())
        self._loading.add(pid)
        try:
            return self._write_entry(pid, maps, code)
        finally:
            self._loading.discard(pid)

    def _real_path(self, entry: MapEntry) -> str:
        """The mapping's path with its links resolved, kept by path and the mapped file's
        device and inode (a make -j2 wrote ~200 entries of ~10 mappings each: 1,860
        ``realpath`` calls); a link changed to name another file maps another inode."""
        key = (entry.path, entry.device, entry.inode)
        real = self._real_paths.get(key)
        if real is None:
            if len(self._real_paths) >= REAL_PATHS:
                self._real_paths.clear()
            real = self._real_paths[key] = os.path.realpath(entry.path)
        return real

    def _write_entry(self, pid: int, maps: list[MapEntry], code: list[MapEntry]) -> int:
        entries: list[bytes] = []
        tableless: list[bytes] = []
        keys: set[tuple[str, bytes | None]] = set()
        for entry in code:
            real = self._real_path(entry)
            module = self.finder.module(real, None, entry.start, entry.pgoff)
            first, count = 0, 0
            if module is not None:
                identity = _build_id_of(module)
                if identity:
                    self.build_ids[entry.path] = identity
                key = _key(module)
                self.finder_paths.setdefault(key, set()).add(real)
                self.kept_retired.pop(key, None)  # in use again
                if pid not in self.without_tables:
                    if self._generating(module, key, pid) or self._lent_now(key):
                        # uncovered (the stack is copied there) until its table is ready
                        # (see tables_ready) or given back (see give_back)
                        continue
                    first, count = self._table(key, module)
            if first < 0:
                continue  # did not fit: uncovered (see _table)
            if count and module is not None and len(entries) < MAPPINGS:
                entries.append(MAPPING.pack(entry.start, entry.end, module.bias, first,
                                            self.entry_rows.get(key, count)))
                keys.add(key)
            else:  # covered without rules: frame pointers, not a stack copy
                tableless.append(MAPPING.pack(entry.start, entry.end, 0, 0, 0))
        # Known code without a table (the vdso, a binary without one, a table the kernel's
        # rules refuse) is listed too, after the tables, as far as the entry has room: the
        # walker copies the stack only for code the entry does not know.
        tableless += [MAPPING.pack(entry.start, entry.end, 0, 0, 0) for entry in maps
                      if entry.path == "[vdso]"]
        with_rows = len(entries)
        entries += tableless[:max(MAPPINGS - len(entries), 0)]
        self._generation = (self._generation + 1) & 0xFFFFFFFF
        map_update(self.procs, pid.to_bytes(4, "little"),
                   procs_value(entries, self._generation))
        self._name(pid, keys)
        return with_rows


def module_rows(module: object, build_id: bytes | None = None, kernel_rules: bool = True
                ) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(row starts, rule words, refusal) of a binary as the walker's ``rows`` hold them:
    none when the kernel's rules refuse its own table (``refusal`` says why: its frames
    fall back to frame pointers; ``kernel_rules`` False: not checked) or it has no table.
    A damaged own table is not refused: the module's table was generated from its CFI
    instead (as for a binary without .sframe), and that one is loaded."""
    empty = np.zeros(0, np.uint64)
    damaged = getattr(module, "damage", None) is not None
    refusal = _kernel_refusal(module) if kernel_rules and not damaged else None
    lookup = getattr(module, "lookup", None)
    whole = getattr(lookup, "whole_table", None)
    if whole is not None:  # made per function (the commands' tables): the walker needs all
        lookup = whole()
    if refusal is not None or lookup is None:
        return empty, empty, refusal
    flat = cached_flat(lookup, ABI.AMD64_ENDIAN_LITTLE, build_id or _build_id_of(module))
    starts, words = walker_rows(flat)
    return (*without_signal_rows(starts, words, signal_trampolines(module)), None)


_PF_X, _PT_LOAD = 1, 1


def signal_trampolines(module: object) -> list[int]:
    """The link-time addresses of the sigreturn trampoline's code in ``module``'s
    executable segments (glibc's ``__restore_rt``: one in libc)."""
    image = getattr(module, "image", None)
    if image is None:
        return []
    try:
        segments = image.program_headers()
        data = image.data
    except (PysframeError, ValueError):
        return []
    found = []
    for segment in segments:
        if segment.type != _PT_LOAD or not segment.flags & _PF_X:
            continue
        end = min(segment.offset + segment.filesz, len(data)) - len(X86_64_SIGRETURN) + 1
        # A window at a time, each let go once searched: searching libLLVM's 100 MiB of
        # code at once counted as 100 MiB of the recorder's memory.
        for start in range(segment.offset, end, SEARCH_WINDOW):
            stop = min(start + SEARCH_WINDOW, end)
            found += [at - segment.offset + segment.vaddr
                      for at in sigreturn_offsets(data, start, stop)]
            _let_go(data, start, stop + len(X86_64_SIGRETURN))
    return found


#: Bytes of a mapped file searched for signal trampolines at a time.
SEARCH_WINDOW = 4 << 20


def _let_go(data: object, start: int, end: int) -> None:
    """The pages of a mapped file just searched leave this process's resident set (they
    stay in the page cache)."""
    if isinstance(data, mmap.mmap) and end > start:
        first = start - start % mmap.PAGESIZE
        try:
            data.madvise(mmap.MADV_DONTNEED, first, end - first)
        except (OSError, ValueError):
            pass


def without_signal_rows(starts: np.ndarray, words: np.ndarray, trampolines: list[int]
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The rows with "no rule" from one byte before each trampoline (a return into it is
    looked up there) to its end; the rule in force after it is kept."""
    for address in trampolines:
        first, last = address - 1, address + len(X86_64_SIGRETURN)
        if not len(starts) or first < 0:
            continue
        after = int(np.searchsorted(starts, last, side="right")) - 1
        rule_after = words[after] if after >= 0 else np.uint64(KIND_NONE)
        keep = (starts < first) | (starts > last)
        starts, words = starts[keep], words[keep]
        at = int(np.searchsorted(starts, first))
        starts = np.insert(starts, at, np.array([first, last], np.uint64))
        words = np.insert(words, at, np.array([KIND_NONE, rule_after], np.uint64))
    return starts, words


def rows_map(owned: Resources, capacity: int) -> tuple[Fd, bool]:
    """The walker's rows map (``capacity`` rows), and whether it could be made mappable
    (tables written in one copy: :func:`~.bpf_sys.map_write`)."""
    try:
        return owned.own(map_create(MAP_ARRAY, 4, ROW.size, capacity, "sf_rows",
                                    MAP_F_MMAPABLE)), True
    except BpfError:  # before Linux 5.5: written element by element
        return owned.own(map_create(MAP_ARRAY, 4, ROW.size, capacity, "sf_rows")), False


def rows_items(first: int, rows: np.ndarray) -> tuple[bytes, bytes]:
    """The keys and values (:data:`~.walker.ROW` each) writing ``rows`` (:func:`table_rows`)
    at row ``first``."""
    keys = np.arange(first, first + len(rows), dtype="<u4").tobytes()
    return keys, rows.tobytes()


def table_rows(starts: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, int]:
    """The rows written for a table, as (n, 2) little-endian u64, the map's layout (its
    rows, then its page index where one is worth having: :func:`page_index`), and its
    mappings' rows field."""
    rows = np.column_stack((starts, words)).astype("<u8")
    index = page_index(starts)
    if index is None:
        return rows, len(starts)
    return np.concatenate((rows, index)), len(starts) | PAGE_INDEXED


#: A page index is left out of a table of fewer rows (eight halvings at most: the index
#: would save little), and where it would hold more rows than the table (code spread
#: thin over a large range: the search there is short anyway).
INDEXED_FROM_ROWS = 256


def page_index(starts: np.ndarray) -> np.ndarray | None:
    """The page index following a table's rows (see :data:`~.walker.PAGE_INDEXED`), as
    (n, 2) u64 rows, or None for a table too small or too sparse to need one."""
    if len(starts) < INDEXED_FROM_ROWS:
        return None
    first_page = int(starts[0]) >> PAGE_INDEX_SHIFT
    pages = (int(starts[-1]) >> PAGE_INDEX_SHIFT) - first_page + 1
    index_rows = 1 + -(-(pages + 1) // 4)
    if index_rows > len(starts):
        return None
    bounds = (first_page + np.arange(pages + 1, dtype=np.uint64)) << np.uint64(PAGE_INDEX_SHIFT)
    counts = np.zeros(4 * (index_rows - 1), dtype="<u4")
    counts[:pages + 1] = np.searchsorted(starts, bounds, side="left")
    header = np.array([[first_page, pages]], dtype="<u8")
    return np.concatenate((header, counts.view("<u8").reshape(-1, 2)))


def procs_value(entries: list[bytes], generation: int = 0) -> bytes:
    """A process's ``procs`` value from its :data:`~.walker.MAPPING` entries; its
    ``generation`` (new at every write: the walker's cached rules of an older one never
    match it)."""
    value = (len(entries).to_bytes(4, "little") + generation.to_bytes(4, "little")
             + b"".join(entries))
    return value.ljust(PROCS_VALUE, b"\0")


#: A PLT block written out as more rows than this keeps its one MASK row (the walk stops
#: there, with its reason): no real PLT comes near it.
MAX_PLT_ROWS = 1 << 16


def walker_rows(flat: FlatTable) -> tuple[np.ndarray, np.ndarray]:
    """(row starts, rule words) for the walker: ``flat``'s, each MASK row replaced by the
    rows of every repetition of its block (the pc's word equals ``flat.lookup``'s)."""
    if flat.rare_all:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    masked = np.flatnonzero((flat.words & np.uint64(3)) == KIND_MASK)
    if not len(masked):
        return flat.starts, flat.words
    starts: list[np.ndarray] = []
    words: list[np.ndarray] = []
    done = 0
    for index in masked.tolist():
        block = flat.masks[int(flat.words[index]) >> CFA_SHIFT]
        offsets = np.array(block.row_starts, dtype=np.uint64)
        repeats = -(-(block.end - block.start) // block.rep_size)
        if repeats * len(offsets) > MAX_PLT_ROWS or not len(offsets):
            continue
        bases = block.start + block.rep_size * np.arange(repeats, dtype=np.uint64)
        block_starts = (bases[:, None] + offsets[None, :]).ravel()
        block_words = np.tile(np.array(block.words, dtype=np.uint64), repeats)
        inside = block_starts < block.end
        starts += [flat.starts[done:index], np.array([block.start], np.uint64),
                   block_starts[inside]]
        words += [flat.words[done:index], np.array([KIND_NONE], np.uint64),
                  block_words[inside]]
        done = index + 1
    starts.append(flat.starts[done:])
    words.append(flat.words[done:])
    return np.concatenate(starts), np.concatenate(words)


def _kernel_refusal(module: object) -> str | None:
    """Why the kernel would refuse the binary's own .sframe (``sframe validate --kernel``),
    or None (no own table: ours is generated from its CFI; or a table it takes)."""
    from ..format.validation import ERROR, validate

    image = getattr(module, "image", None)
    if image is None:
        return None
    try:
        sections = image.sframe_sections()
    except (PysframeError, ValueError):
        return "unreadable .sframe"
    for section in sections:
        findings = [finding for finding in validate(section.raw, section.address, kernel=True)
                    if finding.severity == ERROR]
        if findings:
            return findings[0].message
    return None


def _build_id_of(module: object) -> bytes | None:
    image = getattr(module, "image", None)
    try:
        return image.build_id() if image is not None else None
    except (PysframeError, ValueError):
        return None


def _key(module: object) -> tuple[str, bytes | None]:
    """A binary's table key: its build id, else its real path (one table per file, however
    it was reached)."""
    build_id = _build_id_of(module)  # (a file rebuilt at the same path is another table)
    return ("", build_id) if build_id else (os.path.realpath(str(getattr(module, "path", ""))),
                                            None)


#: Where the dynamic loader finds libraries on Debian-like x86-64 systems.
LIBRARY_DIRECTORIES = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                       "/usr/lib64", "/lib", "/usr/lib")


def _dependencies(path: str) -> list[str]:
    """The interpreter and DT_NEEDED libraries of ``path`` found on disk (none if it is not
    a dynamic ELF file)."""
    from ..elf import ElfError, ElfImage

    try:
        elf = ElfImage(path).elf
        found = []
        for segment in elf.iter_segments():
            if segment["p_type"] == "PT_INTERP":
                found.append(segment.get_interp_name())
        dynamic = elf.get_section_by_name(".dynamic")
        names = [tag.needed for tag in dynamic.iter_tags("DT_NEEDED")] if dynamic else []
    except (ElfError, OSError, ValueError, AttributeError):
        return []
    for name in names:
        for directory in LIBRARY_DIRECTORIES:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate):
                found.append(candidate)
                break
    return found

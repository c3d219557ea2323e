"""Kernel symbols for the kernel frames of perf samples, from ``/proc/kallsyms``.

Used when the running kernel is the recorded one (same build id, from
``/sys/kernel/notes``), or when the recording names no kernel build id (``perf record
-B``: perf reads /proc/kallsyms then), and kallsyms shows real addresses; otherwise kernel
frames stay ``[unknown]``, as perf prints them without symbols.

Reading kallsyms takes ~55-110 ms of CPU for 120,000 lines (the kernel's ~40 ms to
print them, then ~15 ms to parse them as arrays where numpy is imported, ~65 ms in
Python elsewhere), at every run; so the table is kept in the private cache by kernel
build id, valid for one boot (the addresses move with
KASLR at each boot: ``/proc/sys/kernel/random/boot_id`` is part of the entry's source),
and mapped when read back, checked by its CRC and its shape
(:meth:`~.symbols.SymbolTable.from_spans`). Its names are spans of an area of bytes: where
numpy reads kallsyms, its text, kept whole (the names not copied out into a blob of their
own); where Python does, the names joined (:func:`_joined_names`).
"""

from __future__ import annotations

import atexit
import os
import sys
from itertools import accumulate, compress, islice

from ..cachedir import Source, describe, load_mapped, open_directory, store_parts
from ..elf.headers import find_build_id
from ..errors import PysframeError
from ..fd_io import write_all
from ..heap import keep_freed_memory
from ..helper_child import HelperChild, start_helper
from ..inputs import read_text
from .symbols import SymbolTable
from .table_bytes import intact, spans_entry_parts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from array import array
    from collections.abc import Callable

_TEXT_TYPES = {"T": "STB_GLOBAL", "t": "STB_LOCAL", "W": "STB_WEAK", "w": "STB_WEAK"}


def running_kernel_build_id(path: str = "/sys/kernel/notes") -> bytes | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return find_build_id(data, [(0, len(data))], big_endian=sys.byteorder == "big")


def load_kallsyms(path: str = "/proc/kallsyms") -> SymbolTable | None:
    """Text symbols of the running kernel (``None`` if unreadable or addresses are hidden),
    chosen as perf chooses among aliases (:class:`SymbolTable`: kallsyms' symbols have no
    size, so of several at one address the last one in address order, file order among
    equals, is kept, and each ends where the next address starts). The table is read from
    its cache entry's bytes (:meth:`~.symbols.SymbolTable.from_spans`), which
    :meth:`~.symbols.SymbolTable.entry` gives back whole."""
    payload = kallsyms_payload(path)
    return SymbolTable.from_spans(payload) if payload is not None else None


#: The most kallsyms is read of (a kernel's is 5-20 MB): more is not a kernel's.
_KALLSYMS_LIMIT = 256 << 20
#: The type column of a text symbol, between the spaces around it; the type alone.
_TYPES = (b" T ", b" t ", b" W ", b" w ")
_TEXT_KINDS = frozenset(kind.strip() for kind in _TYPES)
#: Whitespace other than spaces, tabs and newlines: not in the kernel's layout.
_OTHER_SPACES = (b"\r", b"\x0b", b"\x0c")


def kallsyms_payload(path: str = "/proc/kallsyms") -> bytes | None:
    """The cache entry's bytes (:func:`.table_bytes.spans_entry_parts`) of kallsyms' text
    symbols, as :func:`load_kallsyms` chooses them; None if unreadable, hidden or not
    text."""
    data = _kallsyms_text(path)
    parts = payload_parts_of(data) if data is not None else None
    return b"".join(parts) if parts is not None else None


def _kallsyms_text(path: str = "/proc/kallsyms") -> bytes | None:
    """kallsyms' bytes (None: unreadable, or too large to be a kernel's)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_KALLSYMS_LIMIT + 1)
    except OSError:
        return None
    return data if len(data) <= _KALLSYMS_LIMIT else None


def payload_parts_of(data: bytes) -> list[bytes | memoryview] | None:
    """The entry of kallsyms' text ``data`` as its parts (None: hidden or not text). In a
    process that has numpy imported, the kernel's layout is read as arrays
    (:func:`_read_with_numpy`, ~15 ms for 120,000 lines, besides the read's ~40 ms), the
    names kept as spans of ``data``, which the entry keeps; without it, as bytes a column
    at a time (:func:`_read_in_python`, ~65 ms), the names joined. The same table either
    way."""
    if data.isascii() and "numpy" in sys.modules:  # (never imported for this)
        read = _read_with_numpy(data)
        if read is not None:
            return read[0]
    return _read_in_python(data)


def _read_in_python(data: bytes) -> list[bytes | memoryview] | None:
    """The entry's parts of kallsyms' text (None: hidden or not text): the kernel's own
    layout (``%px %c %s``, then a tab and ``[module]`` for a module's symbol, left out
    like perf's vmlinux map) read a column at a time, as bytes, the names never made
    strings; text in another layout line by line (~180 ms for 120,000 lines); the names
    joined into the entry's area (:func:`_joined_names`)."""
    try:
        found = _columns(data) if data.isascii() else None
        if found is None:
            found = _line_by_line(data.decode())
    except ValueError:
        return None
    if found is None:
        return None
    starts, firsts, lasts, area = found
    if not starts or not any(starts):
        return None
    return _perf_payload(starts, firsts, lasts, area)


def _layout(data: bytes) -> tuple[int, int] | None:
    """(the addresses' width, where the first module's line starts) of kallsyms in the
    kernel's layout as far as its first line and its whitespace show it; None if not."""
    width = data.find(b" ")
    if any(space in data for space in _OTHER_SPACES) or width <= 0 or width % 2 or width > 16:
        return None
    tab = data.find(b"\t")
    return width, data.rfind(b"\n", 0, tab) + 1 if tab >= 0 else len(data)


def _columns(data: bytes) -> tuple[array[int], array[int], array[int], bytes] | None:
    """(addresses, where each name starts and ends in an area, the area) of the text
    symbols of kallsyms in the kernel's layout (each address as wide as the first
    line's), in file order; lines of another layout are not symbols. None when ``data`` is
    not in that layout: addresses or names that are not plain ones (no spaces, no control
    characters), or lines ended otherwise than by a bare newline. The lines before the
    first module's (the kernel's own, nearly all of them) are split at once; those from it
    on, one at a time (:func:`_late_symbols`)."""
    layout = _layout(data)
    if layout is None:
        return None
    width, cut = layout
    core = data[:cut]
    lines = core.count(b"\n") + (not core.endswith(b"\n") and bool(core))
    fields = core.split()
    addresses, kinds, names = fields[0::3], fields[1::3], fields[2::3]
    if (len(fields) != 3 * lines or set(map(len, addresses)) - {width}
            or set(map(len, kinds)) - {1}
            or sum(map(len, names)) + (width + 4) * lines - len(core) not in (0, 1)):
        return None  # not one plain address, type and name with single spaces a line
    text = list(map(_TEXT_KINDS.__contains__, kinds))
    addresses, names = list(compress(addresses, text)), list(compress(names, text))
    late = _late_symbols(data, width, cut)
    if late is None:
        return None
    for address, name_start, name_end in late:
        addresses.append(address)
        names.append(data[name_start:name_end])
    if not names:
        return None
    starts = _hex_addresses(addresses, width)
    return (starts, *_joined_names(names)) if starts is not None else None


def _joined_names(names: list[bytes]) -> tuple[array[int], array[int], bytes]:
    """(where each name starts and ends in the area, the area): ``names`` one after
    another. The reading in Python keeps its names so, not as spans of kallsyms' text as
    :func:`_read_with_numpy` does: their places in the text took it ~15 ms more than the
    ~65 ms of the whole reading (two more passes over its 120,000 lines)."""
    from array import array

    lasts = array("I", accumulate(map(len, names)))
    return array("I", [0]) + lasts[:-1], lasts, b"".join(names)


def _late_symbols(data: bytes, width: int, cut: int) -> list[tuple[bytes, int, int]] | None:
    """The text symbols of the lines from ``cut`` on (the modules' and any after them) in
    the kernel's layout and not a module's (no tab): (address, where the name starts and
    ends in ``data``); None if one's name is not a plain one."""
    found = []
    name_at, line_start = width + 3, cut
    for line in data[cut:].split(b"\n"):
        if line[width:name_at] in _TYPES and b"\t" not in line:
            name = line[name_at:]
            if not name or len(name.split()) != 1 or len(name) != len(name.strip()):
                return None
            found.append((line[:width], line_start + name_at, line_start + len(line)))
        line_start += len(line) + 1
    return found


def _hex_addresses(addresses: list[bytes], width: int) -> array[int] | None:
    """Hex addresses of ``width`` digits as an array; None if one is not."""
    try:
        raw = bytes.fromhex(b"".join(addresses).decode())
    except ValueError:
        return None
    if len(raw) * 2 != width * len(addresses):  # fromhex skips whitespace
        return None
    return _addresses(raw, width // 2)


def _addresses(raw: bytes, size: int) -> array[int]:
    """Big-endian ``size``-byte addresses as an array."""
    from array import array  # (the functions that make a table import it: a warm run reads)

    if size == 8:
        starts = array("Q", raw)
        if sys.byteorder == "little":
            starts.byteswap()
        return starts
    return array("Q", [int.from_bytes(raw[k:k + size], "big")
                       for k in range(0, len(raw), size)])


def _read_with_numpy(data: bytes) -> tuple[list[bytes | memoryview] | None] | None:
    """(the entry's parts, None if there is none: addresses hidden) of kallsyms in the kernel's
    layout read by :mod:`.kallsyms_columns`, the same as :func:`_columns` and
    :func:`_perf_payload` make it; None when not in that layout (read as any text)."""
    import numpy as np

    from .kallsyms_columns import core_symbols, payload_parts

    layout = _layout(data)
    if layout is None:
        return None
    width, cut = layout
    core, late = core_symbols(data, width, cut), _late_symbols(data, width, cut)
    if core is None or late is None:
        return None
    addresses, name_starts, name_ends = core
    if late:
        more = _hex_addresses([address for address, _, _ in late], width)
        if more is None:
            return None
        addresses = np.concatenate([addresses, np.frombuffer(more, np.uint64)])
        name_starts = np.concatenate([name_starts, [start for _, start, _ in late]])
        name_ends = np.concatenate([name_ends, [end for _, _, end in late]])
    if not len(addresses):
        return None
    return (payload_parts(addresses, name_starts, name_ends, data) if addresses.any()
            else None,)


def _line_by_line(text: str) -> tuple[array[int], array[int], array[int], bytes] | None:
    """The same from any text (fields split at whitespace, hex addresses), the names
    joined into the area."""
    from array import array

    starts, names = array("Q"), []
    try:
        for line in text.splitlines():
            fields = line.split()
            if len(fields) != 3 or fields[1] not in _TEXT_TYPES:
                continue  # module symbols ("[module]") are left out like perf's vmlinux map
            starts.append(int(fields[0], 16))
            names.append(fields[2].encode())
    except (ValueError, OverflowError):
        return None
    return (starts, *_joined_names(names)) if names else None


def _perf_payload(starts: array[int], firsts: array[int], lasts: array[int], area: bytes
                  ) -> list[bytes | memoryview] | None:
    """The entry's parts of the table :class:`SymbolTable` makes of size-less symbols
    (``starts``, their names at ``area[firsts[k]:lasts[k]]``, in file order): sorted by
    address (stable), the last of each address kept, each ending where the next starts
    and the last one page past its page (``_fixed_ends``)."""
    import operator  # (here: a warm run reads the entry, and ~0.3 ms of it is not needed)
    from array import array

    from .perf_rules import last_end

    rising = list(map(operator.lt, starts, islice(starts, 1, None)))
    if not all(rising) and any(map(operator.gt, starts, islice(starts, 1, None))):
        order = sorted(range(len(starts)), key=starts.__getitem__)
        starts = array("Q", map(starts.__getitem__, order))
        firsts = array("I", map(firsts.__getitem__, order))
        lasts = array("I", map(lasts.__getitem__, order))
        rising = list(map(operator.lt, starts, islice(starts, 1, None)))
    if not all(rising):  # aliases: each address's last one kept
        rising.append(True)
        starts = array("Q", compress(starts, rising))
        firsts = array("I", compress(firsts, rising))
        lasts = array("I", compress(lasts, rising))
    end = last_end(starts[-1])
    if end >> 64:
        return None  # (the last symbol in the last page: no end to give it)
    ends = starts[1:]
    ends.append(end)
    return spans_entry_parts(memoryview(starts), memoryview(ends), memoryview(firsts),
                             memoryview(lasts), area)


#: Kernel symbol tables in the cache: one per kernel build id (and payload format; p5:
#: names as spans of an area, :func:`.table_bytes.spans_entry_parts`).
KALLSYMS_KIND = "kernel/kallsyms.p5"


def kernel_symbols_for(recorded_build_id: bytes | None) -> SymbolTable | None:
    """kallsyms if the running kernel is the one that was recorded; for a recording that
    names no kernel (``perf record -B``), the running kernel's, read at the first lookup
    (perf reads /proc/kallsyms then); else ``None``."""
    if recorded_build_id is None:
        return RunningKernelSymbols()
    if running_kernel_build_id() != recorded_build_id:
        return None
    return _kallsyms(recorded_build_id)


class _LazySymbols(SymbolTable):
    """A table made (by ``load``) at the first lookup; ``done`` (if given) says whether
    that lookup would not wait (for the child of :func:`prefetch`)."""

    def __init__(self, load: Callable[[], SymbolTable | None],
                 done: Callable[[], bool] | None = None) -> None:
        self._load: Callable[[], SymbolTable | None] | None = load
        self._done = done
        self._table: SymbolTable | None = None

    def ready(self) -> bool:
        """Whether a lookup now would not wait for another process: a caller with work of
        its own (the text of the samples that follow) does it first."""
        return self._load is None or self._done is None or self._done()

    def lookup(self, address: int) -> tuple[str, int] | None:
        if self._load is not None:
            load, self._load = self._load, None
            self._table = load()
        return self._table.lookup(address) if self._table is not None else None


class RunningKernelSymbols(_LazySymbols):
    """The running kernel's kallsyms, read (or taken from the cache) at the first lookup:
    a recording without kernel samples never pays for them."""

    def __init__(self) -> None:
        super().__init__(_running_kernel_table)


def _running_kernel_table() -> SymbolTable | None:
    build_id = running_kernel_build_id()
    return load_kallsyms() if build_id is None else _kallsyms(build_id)


def _kallsyms(build_id: bytes) -> SymbolTable | None:
    """kallsyms of the running kernel (of ``build_id``), from the cache while it boots;
    the one :func:`prefetch` is making, at the first lookup."""
    boot = _boot_id()
    if boot is None:
        return load_kallsyms()
    if _making is not None and _making[0] == build_id:
        return _LazySymbols(lambda: _after_child(build_id, boot), _child_done)
    return _kallsyms_of_boot(build_id, boot)


def _after_child(build_id: bytes, boot: bytes) -> SymbolTable | None:
    """The table once the child of :func:`prefetch` has ended (read here if it failed)."""
    _child_ended()
    return _kallsyms_of_boot(build_id, boot)


def _kallsyms_of_boot(build_id: bytes, boot: bytes) -> SymbolTable | None:
    source = _source(boot)
    payload = load_mapped(KALLSYMS_KIND, build_id, source, intact)
    if payload is not None:
        cached = SymbolTable.from_spans(payload)
        if cached is not None:
            return cached
    table = load_kallsyms()
    if table is not None:
        store_parts(KALLSYMS_KIND, build_id, [table.entry()], source, mapped=True)
    return table


def _source(boot: bytes) -> Source:
    return describe(0, [boot, KALLSYMS_KIND.encode()])


#: The child :func:`prefetch` started: (the kernel's build id, the child).
_making: tuple[bytes, HelperChild] | None = None
#: Whether that child reads kallsyms itself, in Python (~0.1 s of a CPU), rather than
#: parsing as arrays a text read by another child (~30 ms).
_long = False
#: The child reading kallsyms' text for it (:class:`_KallsymsRead`), to reap.
_reader: HelperChild | None = None


def prefetch(recorded_build_id: bytes | None = None, *, numpy_next: bool = False) -> None:
    """Start making the running kernel's cache entry in a child process when the cache has
    none for this boot (a first run: reading kallsyms, ~0.1-0.2 s, then writing the entry),
    so that it is made on another CPU while the recording is opened and its first samples
    are unwound; :func:`kernel_symbols_for` then waits for it at the first kernel lookup.
    It forks: call it before any thread is started. Nothing on a single CPU, where the
    cache cannot be used, or while another such child runs; nothing either for a
    recording of another kernel (``recorded_build_id``, as :func:`kernel_symbols_for`
    takes it), which never uses the entry: the child would only take CPU time from the
    run (on a machine whose second CPU is a hyperthread, the Lua fixture's first run
    took ~15 ms longer with it).

    ``numpy_next``: the caller imports numpy next anyway (the batch pipeline). It is
    imported here while a first child reads kallsyms (~40 ms, on a CPU this process does
    not use yet), and the child forked after the import reads the text as arrays once the
    first one has written it: it takes a CPU ~30 ms, not ~110 (:func:`prefetching` then
    does not say it is running), at a lower priority than the run's own processes
    (:data:`PARSER_NICENESS`). This process waits for neither: it goes on to the
    recording (see :class:`_KallsymsRead`)."""
    global _making, _long, _reader
    if _making is not None or (os.cpu_count() or 1) < 2:
        return
    build_id, boot = running_kernel_build_id(), _boot_id()
    if recorded_build_id is not None and recorded_build_id != build_id:
        return
    if build_id is None or boot is None or load_mapped(
            KALLSYMS_KIND, build_id, _source(boot), lambda _: True) is not None:
        return  # (the header only: the CRC is checked when the entry is used)
    directory = open_directory("kernel", create=True)
    if directory is None:
        return
    os.close(directory)
    read = _read_importing_numpy() if numpy_next else None

    def make() -> bool:
        text = read.text() if read is not None else None
        if text is not None:
            _yield_to_the_run()
            # Its arrays of megabytes: each freed one's memory the next one's, not new
            # pages to fault in (the parse and the store took 32 CPU-ms against 39 in a
            # child forked as this one is, 21 alternating runs; 4,300 faults, not 8,500).
            keep_freed_memory()
            parts = payload_parts_of(text)
        else:
            table = load_kallsyms()
            parts = [table.entry()] if table is not None else None
        if parts is None:
            return False
        # (its parts as they are, kallsyms' text among them: never joined into one copy)
        store_parts(KALLSYMS_KIND, build_id, parts, _source(boot), mapped=True)
        return True

    child = start_helper(make)
    if read is not None:
        read.close()  # (the child has its own copy of the descriptor)
        _reader = read.reader
    if child is not None:
        _making, _long = (build_id, child), read is None
    if child is not None or read is not None:
        atexit.register(_child_ended, stop=True)


#: The niceness of the child that parses a text another child read: its ~30 ms
#: land while the record walk runs in two processes. The deep recording's first run took
#: 2.3% less with it (median of 21 alternating runs of per-run ratios; 453 -> 430 ms
#: medians), though on this machine's kernel the child is not held back: it keeps a CPU
#: of its own while the two walkers share the other (their wall time ~16 ms over their
#: CPU time each); its CPU time is what a first run pays. Not for the child that reads
#: kallsyms in Python (~0.1 s): the sample-by-sample path may want its names within a
#: few samples.
PARSER_NICENESS = 19


def _yield_to_the_run() -> None:
    """Lower this process's priority (:data:`PARSER_NICENESS`); nothing if refused."""
    try:
        os.nice(PARSER_NICENESS)
    except OSError:
        pass


class _KallsymsRead:
    """kallsyms' text as a child reads it into a memory file: the text from byte 8 on,
    then its size in bytes 0-7, written last (0: nothing read). The child of
    :func:`prefetch` forked after numpy's import waits for it there, not this process:
    this one had waited 0-6 ms for the read (median ~3.5, the deep bench recording's
    first runs) and copied the text out (~3 ms), before it could go on."""

    def __init__(self, memory: int, reader: HelperChild) -> None:
        self.memory, self.reader = memory, reader

    def text(self) -> bytes | None:
        """The text once the reader has ended (None: it read none). In a process forked
        from the one that started the reader (which reaps it)."""
        self.reader.wait()
        try:
            size = int.from_bytes(os.pread(self.memory, _SIZE_BYTES, 0), sys.byteorder)
            if not 0 < size <= _KALLSYMS_LIMIT or os.fstat(
                    self.memory).st_size != _SIZE_BYTES + size:
                return None
            text = os.pread(self.memory, size, _SIZE_BYTES)
            return text if len(text) == size else None
        finally:
            self.close()

    def close(self) -> None:
        os.close(self.memory)


#: The bytes before the text in the memory file of :class:`_KallsymsRead`: its size.
_SIZE_BYTES = 8


def _read_importing_numpy() -> _KallsymsRead | None:
    """kallsyms' text being read by a child while numpy is imported here (None: no memory
    file, no child or no numpy: the child of :func:`prefetch` then reads it itself). In a
    child, the read (~40 ms, the kernel's: a page of text a call) is out of this process's
    address space and lock; a thread here took ~90 ms, against the import's own mappings
    and code."""
    try:
        memory = os.memfd_create("pysframe-kallsyms", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None
    reader = start_helper(lambda: _copy_kallsyms(memory))
    if reader is None:
        os.close(memory)
        return None
    read = _KallsymsRead(memory, reader)
    try:
        import numpy  # noqa: F401
    except ImportError:
        read.close()
        reader.wait()
        return None
    return read


def _copy_kallsyms(target: int) -> bool:
    """kallsyms' text written to the memory file ``target`` as :class:`_KallsymsRead`
    reads it (False: unreadable)."""
    data = _kallsyms_text()
    if data is None:
        return False
    os.lseek(target, _SIZE_BYTES, os.SEEK_SET)
    write_all(target, data)
    os.pwrite(target, len(data).to_bytes(_SIZE_BYTES, sys.byteorder), 0)
    return True


def _child_done() -> bool:
    """Whether the child of :func:`prefetch` has ended."""
    return _making is None or _making[1].done()


def prefetching() -> bool:
    """Whether the child of :func:`prefetch` is still making the kernel's entry the long
    way, reading kallsyms in Python (it takes a CPU for ~0.1 s: work that would be split
    over the CPUs has one fewer)."""
    return _long and not _child_done()


def _child_ended(stop: bool = False) -> None:
    """Wait for the child of :func:`prefetch` to end (reaped if it is this process's),
    and for the one that read kallsyms for it; with ``stop``, ask them to end first if
    they still run. At exit (``stop``, registered by :func:`prefetch`), a child no lookup
    waited for (the samples never reached the kernel: filtered out, or none there) is not
    left running after the command, nor unreaped (a zombie where init does not reap): its
    entry was not needed by this run, and the next one that needs it makes it."""
    global _making, _reader
    if _making is not None:
        _, child = _making
        _making = None
        if stop:
            child.stop()
        child.wait()
    if _reader is not None:  # (ended by now, but at exit: the child waits for it)
        reader, _reader = _reader, None
        if stop:
            reader.stop()
        reader.wait()


def _boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> bytes | None:
    try:
        text = read_text(path, 128).strip()
    except PysframeError:
        return None
    return text.encode() if len(text) == 36 else None

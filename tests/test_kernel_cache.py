"""Kernel symbols are kept in the private cache per kernel build id and boot: a second
run reads the entry (not /proc/kallsyms), and a damaged or foreign entry is not used."""

from __future__ import annotations

import os
import select
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.left_behind import ends_leaving_nothing

from pysframe import cachedir
from pysframe.symbolize import kernel
from pysframe.symbolize.symbols import Symbol, SymbolTable

BUILD_ID = bytes(range(20))
BOOT = b"01234567-89ab-cdef-0123-456789abcdef"


@pytest.fixture
def fake_kernel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """A running kernel with BUILD_ID and BOOT whose kallsyms counts its reads."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(kernel, "running_kernel_build_id", lambda: BUILD_ID)
    monkeypatch.setattr(kernel, "_boot_id", lambda: BOOT)
    reads = [0]
    kallsyms = tmp_path / "kallsyms"
    kallsyms.write_text("ffffffff81000000 T _stext\nffffffff81000100 t helper\n"
                        "ffffffff81000200 T schedule\nffffffffc0000000 t mod_fn\t[mod]\n")
    real = kernel.load_kallsyms

    def counted(path: str = str(kallsyms)) -> SymbolTable | None:
        reads[0] += 1
        return real(str(kallsyms))

    monkeypatch.setattr(kernel, "load_kallsyms", counted)
    return reads


def test_a_second_run_reads_the_cached_table(fake_kernel: list[int]) -> None:
    first = kernel.kernel_symbols_for(BUILD_ID)
    second = kernel.kernel_symbols_for(BUILD_ID)
    assert first is not None and second is not None and fake_kernel == [1]
    assert second.lookup(0xffffffff81000210) == ("schedule", 0x10)
    assert (list(second.starts), list(second.ends), list(second.names)) == (
        list(first.starts), list(first.ends), list(first.names))
    assert kernel.kernel_symbols_for(b"another kernel id") is None


def test_another_boot_or_a_malformed_entry_reads_kallsyms_again(
        fake_kernel: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernel.kernel_symbols_for(BUILD_ID) is not None
    monkeypatch.setattr(kernel, "_boot_id", lambda: BOOT.replace(b"0", b"f"))
    assert kernel.kernel_symbols_for(BUILD_ID) is not None and fake_kernel == [2]
    # Entries whose cache header verifies but are not tables (written by hand): not used.
    source = cachedir.describe(0, [BOOT.replace(b"0", b"f"), kernel.KALLSYMS_KIND.encode()])
    junk = (b"", b"\xff" * 8, _entry(2, [1, 3], [2, 4], [(0, 1), (1, 2)], b"ab")[:-1],
            _entry(0, [], [], [], b""), _entry(3, [5], [6], [(0, 2)], b"ab"),
            _entry(2, [5, 7], [7, 9], [(0, 1), (1, 2)], b"ab")[:-2],
            _damaged(_entry(1, [5], [6], [(0, 2)], b"ab")))
    for payload in junk:
        cachedir.store(kernel.KALLSYMS_KIND, BUILD_ID, payload, source)
        table = kernel.kernel_symbols_for(BUILD_ID)
        assert table is not None and table.names[0] == "_stext"
    assert fake_kernel == [2 + len(junk)]  # each read kallsyms again


def _entry(count: int, starts: list[int], ends: list[int], spans: list[tuple[int, int]],
           area: bytes) -> bytes:
    """A kallsyms entry's payload made by hand (names as ``spans`` of ``area``), its CRC
    right."""
    body = (struct.pack(f"=Q{len(starts)}Q{len(ends)}Q", count, *starts, *ends)
            + struct.pack(f"={len(spans)}I", *(first for first, _ in spans))
            + struct.pack(f"={len(spans)}I", *(last for _, last in spans)) + area)
    return struct.pack("=I4x", zlib.crc32(body)) + body


def _damaged(payload: bytes) -> bytes:
    """``payload`` with its last byte changed, its CRC left."""
    return payload[:-1] + bytes([payload[-1] ^ 1])


def test_a_hand_made_entry_out_of_order_gives_names_not_errors(fake_kernel: list[int]) -> None:
    """The order of the starts and the names' spans are vouched for by the CRC only: an
    entry made by hand with a right CRC, starts out of order and spans past the names'
    bytes (or ending before they start) names frames wrongly but never fails a lookup."""
    source = cachedir.describe(0, [BOOT, kernel.KALLSYMS_KIND.encode()])
    cachedir.store(kernel.KALLSYMS_KIND, BUILD_ID,
                   _entry(3, [9, 2, 5], [10, 3, 7], [(0, 1), (1, 9), (3, 1)], b"abc"), source)
    table = kernel.kernel_symbols_for(BUILD_ID)
    assert table is not None and fake_kernel == [0]
    found = [table.lookup(address) for address in range(12)]
    assert {found_name for found_name, _ in filter(None, found)} <= {"a", "bc", ""}
    assert found[2] is not None and found[11] is None


def _perf_rule(text: str) -> tuple[list[int], list[int], list[str]]:
    """The table perf's rule (:class:`SymbolTable` of size-less symbols) makes of the
    text symbols of ``text``."""
    symbols = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] in "TtWw":
            address = int(fields[0], 16)
            symbols.append(Symbol(address, address, fields[2], "STB_GLOBAL", 0))
    table = SymbolTable(symbols)
    return list(table.starts), list(table.ends), list(table.names)


KALLSYMS = ("ffffffff81000000 T _stext\nffffffff81000000 t _text\nffffffff81000100 D data\n"
            "ffffffff81000300 W weak_fn\nffffffff81000200 t helper\n"
            "ffffffff81000200 T helper_alias\nffffffff81000200 T __helper\n"
            "ffffffffc0000000 t mod_fn\t[mod]\nffffffff81001000 w last\n"
            "ffffffff81001000 T last_alias\n")


@pytest.mark.parametrize(("text", "in_columns"), [
    (KALLSYMS, True),  # the kernel's layout: read a column at a time
    (KALLSYMS.replace("T _stext", "T  _stext").replace("\n", "\r\n"), False),  # line by line
    (KALLSYMS.replace("ffffffff8100", "8100"), True),  # 32-bit addresses
    (KALLSYMS.replace("0100 D data", "0100\x0bT\x0cdata"), False),  # other whitespace
    (KALLSYMS.replace("ffffffff81000300 W", "81000300 W"), False),  # another width
    ("ffffffff81000000 T a\nffffffff81000010 t b", True),  # no newline at the end
])
def test_kallsyms_are_read_as_perf_chooses(tmp_path: Path, text: str, in_columns: bool) -> None:
    path = tmp_path / "kallsyms"
    path.write_bytes(text.encode())
    table = kernel.load_kallsyms(str(path))
    assert table is not None
    starts, ends, names = _perf_rule(text)
    assert (list(table.starts), list(table.ends), list(table.names)) == (starts, ends, names)
    assert (kernel._columns(text.encode()) is not None) == in_columns
    # The last alias of an address is kept; data and module symbols are not symbols.
    if text.startswith(KALLSYMS[:30]):
        assert "__helper" in names and not {"helper", "mod_fn"} & set(names)
    # Unsorted, aliased, module and data lines: the payload reads back as the same table.
    back = SymbolTable.from_spans(table.entry())
    assert back is not None and list(back.names) == names and list(back.ends) == ends


def test_hidden_kallsyms_addresses_give_no_table(tmp_path: Path) -> None:
    path = tmp_path / "kallsyms"
    path.write_text("0000000000000000 T _stext\n0000000000000000 t helper\n")
    assert kernel.load_kallsyms(str(path)) is None
    assert kernel.load_kallsyms(str(tmp_path / "absent")) is None


def test_a_first_run_makes_the_entry_in_a_child(fake_kernel: list[int],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """prefetch() forks a child that reads kallsyms and writes the entry; the table
    kernel_symbols_for gives waits for it at its first lookup and reads the entry (this
    process never reads kallsyms); with the entry there, no child is started."""
    monkeypatch.setattr(kernel, "_making", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    kernel.prefetch()
    assert kernel._making is not None and kernel._making[0] == BUILD_ID
    table = kernel.kernel_symbols_for(BUILD_ID)
    assert table is not None and table.lookup(0xffffffff81000210) == ("schedule", 0x10)
    assert kernel._making is None and fake_kernel == [0]  # read by the child only
    again = kernel.kernel_symbols_for(BUILD_ID)
    assert again is not None and again.lookup(0xffffffff81000101) == ("helper", 1)

    def no_fork() -> int:
        raise AssertionError("forked with the entry in the cache")

    monkeypatch.setattr(os, "fork", no_fork)
    kernel.prefetch()
    assert kernel._making is None and fake_kernel == [0]


def test_a_child_that_made_nothing_leaves_the_reading_here(
        fake_kernel: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that could not make the entry (kallsyms unreadable then): the first lookup
    reads kallsyms in this process, as without a child."""
    monkeypatch.setattr(kernel, "_making", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    counted = kernel.load_kallsyms
    monkeypatch.setattr(kernel, "load_kallsyms", lambda: None)
    kernel.prefetch()
    monkeypatch.setattr(kernel, "load_kallsyms", counted)
    table = kernel.kernel_symbols_for(BUILD_ID)
    assert table is not None and fake_kernel == [0]
    assert table.lookup(0xffffffff81000000) == ("_stext", 0) and fake_kernel == [1]


@pytest.mark.parametrize("readable", [True, False])
def test_a_batch_run_reads_kallsyms_in_a_child_while_numpy_is_imported(
        fake_kernel: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        readable: bool) -> None:
    """With numpy next (the batch pipeline), a first child reads kallsyms while this
    process imports numpy, and the child forked then makes the entry of that text as
    arrays: not counted as a long child (a split record walk goes on); this process never
    reads kallsyms. A text the first child could not read is read by the second (as
    arrays too: numpy is imported by then)."""
    pytest.importorskip("numpy")
    monkeypatch.setattr(kernel, "_making", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    here = os.getpid()
    reads: list[int] = []

    def text(path: str = "") -> bytes | None:
        if os.getpid() == here:
            reads.append(here)
        if path:  # (the fake kernel's, read by load_kallsyms)
            return Path(path).read_bytes()
        return b"ffffffff81000000 T _stext\nffffffff81000200 T schedule\n" if readable else None

    monkeypatch.setattr(kernel, "_kallsyms_text", text)
    kernel.prefetch(numpy_next=True)
    assert kernel._making is not None and not kernel._long and not kernel.prefetching()
    table = kernel.kernel_symbols_for(BUILD_ID)
    assert table is not None and table.lookup(0xffffffff81000210) == ("schedule", 0x10)
    assert reads == [] and fake_kernel == [0]  # read by the children only
    if not readable:  # (the fake kernel's own kallsyms, read by the second child)
        assert table.lookup(0xffffffff81000101) == ("helper", 1)


def test_this_process_does_not_wait_for_the_text_being_read(
        fake_kernel: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """prefetch() returns while the first child is still reading kallsyms (held here at a
    gate): the child that parses it waits for it, not this process, which goes on to the
    recording; both children are reaped once the table is used."""
    pytest.importorskip("numpy")
    monkeypatch.setattr(kernel, "_making", None)
    monkeypatch.setattr(kernel, "_reader", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    gate_read, gate_write = os.pipe()

    def held(path: str = "") -> bytes | None:
        if path:
            return Path(path).read_bytes()
        # (in the first child: until the test lets it go, or 20 s: a process that waits
        # for it is not held for ever)
        select.select([gate_read], [], [], 20)
        return b"ffffffff81000000 T _stext\nffffffff81000300 T held_fn\n"

    monkeypatch.setattr(kernel, "_kallsyms_text", held)
    try:
        started = time.monotonic()
        kernel.prefetch(numpy_next=True)
        assert time.monotonic() - started < 10
        reader, making = kernel._reader, kernel._making
        assert making is not None and reader is not None
        assert not reader.done() and not making[1].done()  # both wait for the gate
    finally:
        os.write(gate_write, b"x")
    table = kernel.kernel_symbols_for(BUILD_ID)
    assert table is not None and table.lookup(0xffffffff81000310) == ("held_fn", 0x10)
    assert kernel._making is None and kernel._reader is None and fake_kernel == [0]
    for child in (reader, making[1]):
        assert not os.path.exists(f"/proc/{child.pid}")  # reaped, not a zombie
    os.close(gate_read)
    os.close(gate_write)


def _noted_by_the_child(monkeypatch: pytest.MonkeyPatch, readable: bool,
                        noting: list[tuple[str, Callable[[], str], Callable[..., Any]]]
                        ) -> list[str]:
    """What the child of a first run's prefetch (numpy next) noted, in order: each of
    ``noting`` is (a function of the kernel module replaced, the note a call of it writes
    first, what the call then does). ``readable``: kallsyms can be read (the child parses
    the text another read), else not (it reads kallsyms itself)."""
    pytest.importorskip("numpy")
    monkeypatch.setattr(kernel, "_making", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    seen_read, seen_write = os.pipe()

    def noted(note: Callable[[], str], inner: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            os.write(seen_write, note().encode() + b"\n")
            return inner(*args)
        return call

    for name, note, inner in noting:
        monkeypatch.setattr(kernel, name, noted(note, inner))
    monkeypatch.setattr(kernel, "_kallsyms_text", lambda path="": (
        Path(path).read_bytes() if path else
        b"ffffffff81000000 T _stext\n" if readable else None))
    kernel.prefetch(numpy_next=True)
    kernel._child_ended()
    os.close(seen_write)
    with os.fdopen(seen_read, "rb") as seen:
        return seen.read().decode().split()


@pytest.mark.parametrize("readable", [True, False])
def test_only_the_child_parsing_a_read_text_yields_the_cpus(
        fake_kernel: list[int], monkeypatch: pytest.MonkeyPatch, readable: bool) -> None:
    """The child that parses a text read before it was forked (~30 ms, while the record
    walk runs in two processes) runs at a lower priority than this process; the child
    that reads kallsyms itself, whose names the run may want at once, does not."""
    here = os.nice(0)
    noted = _noted_by_the_child(monkeypatch, readable, [
        ("payload_parts_of", lambda: str(os.nice(0)), kernel.payload_parts_of),
        ("load_kallsyms", lambda: str(os.nice(0)), kernel.load_kallsyms)])
    niceness = [int(note) for note in noted]
    expected = min(here + kernel.PARSER_NICENESS, 19) if readable else here
    assert niceness and set(niceness) == {expected}  # (load_kallsyms parses by it too)


@pytest.mark.parametrize("readable", [True, False])
def test_the_child_parsing_a_read_text_reuses_the_memory_it_frees(
        fake_kernel: list[int], monkeypatch: pytest.MonkeyPatch, readable: bool) -> None:
    """The child that parses a text another one read, with numpy (arrays of megabytes, one
    after another), tells the allocator to keep freed memory before it parses: a freed
    array's pages serve the next one, not new pages to fault in. The child that reads
    kallsyms itself parses in Python and leaves the allocator as it is."""
    calls = _noted_by_the_child(monkeypatch, readable, [
        ("keep_freed_memory", lambda: "keep", lambda: True),
        ("payload_parts_of", lambda: "parse", kernel.payload_parts_of)])
    assert calls[-1] == "parse"
    assert calls == (["keep", "parse"] if readable else ["parse"])


#: A run that starts the child and ends without a kernel lookup (its samples filtered out),
#: while the child is still reading a kallsyms that takes a minute; it prints the child's pid.
UNUSED_CHILD = """
import os, time
from pysframe.symbolize import kernel
kernel.running_kernel_build_id = lambda: bytes(range(20))
kernel._boot_id = lambda: b"01234567-89ab-cdef-0123-456789abcdef"
os.cpu_count = lambda: 2
kernel.load_kallsyms = lambda path="": time.sleep(60)
kernel.prefetch()
print(kernel._making[1].pid, flush=True)
"""


def test_a_child_no_lookup_waited_for_is_stopped_and_reaped_at_exit(tmp_path: Path) -> None:
    """No process is left after the command: not the child still running (it is stopped,
    the command does not wait a minute for it), nor one ended and not reaped."""
    ends_leaving_nothing(UNUSED_CHILD, [], tmp_path / "cache")


def test_the_child_keeps_no_standard_output_open(fake_kernel: list[int],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader of the command's output sees its end when the command ends: the child,
    held here until the check is done, has standard output on /dev/null."""
    monkeypatch.setattr(kernel, "_making", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    gate_read, gate_write = os.pipe()
    monkeypatch.setattr(kernel, "load_kallsyms", lambda: os.read(gate_read, 1) and None)
    output_read, output_write = os.pipe()
    saved = os.dup(1)
    os.dup2(output_write, 1)
    os.close(output_write)
    try:
        kernel.prefetch()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    try:
        assert kernel._making is not None
        # No writer is left (the child is still held at the gate): EOF at once, not a
        # wait for the child (a writer kept by it would make select time out).
        assert select.select([output_read], [], [], 30)[0] == [output_read]
        assert os.read(output_read, 1) == b""
    finally:
        os.write(gate_write, b"x")  # the child goes on (and makes no entry)
        os.close(output_read)
        kernel._child_ended()
    os.close(gate_read)
    os.close(gate_write)


def _kernel_sample(time: int, kernel_pcs: tuple[int, ...]) -> object:
    from pysframe.report.perf_script import PERF_CONTEXT_KERNEL
    from pysframe.session.perf import UnwoundSample
    from pysframe.sources.perf_records import EventAttr, Sample
    from pysframe.unwind.unwinder import FrameMethod, Stop, Unwind

    attr = EventAttr(1, 0, 0x1 | 0x2 | 0x4 | 0x20 | 0x100, 0, 0, 0, 0, name="cpu-clock")
    chain = (PERF_CONTEXT_KERNEL, *kernel_pcs) if kernel_pcs else ()
    sample = Sample(0, 2, ip=0x401000, pid=5, tid=5, time=time, period=10, callchain=chain,
                    attr=attr)
    unwind = Unwind(stop=Stop.RECORDED)
    unwind.add(0x401000, FrameMethod.IP)
    unwind.mappings.append(None)
    return UnwoundSample(sample, "work", unwind, unwind.mappings)


def test_samples_wait_for_the_kernels_names_held_not_blocking() -> None:
    """A first run reads kallsyms in a child: the text of samples with kernel frames is held
    (the samples after them made meanwhile) until the child is done, then named as if the
    names had been there from the start, in the samples' order."""
    from pysframe.report.perf_script import perf_script_text

    table = SymbolTable([Symbol(0xFFFFFFFF81000000, 0xFFFFFFFF81000100, "schedule",
                                "STB_GLOBAL", 0x100),
                         Symbol(0xFFFFFFFF81000200, 0xFFFFFFFF81000300, "do_syscall_64",
                                "STB_GLOBAL", 0x100)])
    samples = [_kernel_sample(t, (0xFFFFFFFF81000010, 0xFFFFFFFF81000210) if t % 3 == 2 else ())
               for t in range(1, 60)]
    looks = [0]

    def done() -> bool:
        looks[0] += 1
        return looks[0] > 3

    made: list[int] = []

    def load() -> SymbolTable:
        made.append(1)
        return table

    lazy = kernel._LazySymbols(load, done)
    texts = perf_script_text(iter(samples), lazy)  # type: ignore[arg-type]
    first = next(texts)  # a sample without kernel frames: given at once
    assert "work" in first and "kallsyms" not in first and not made
    held = [first, *texts]
    expected = list(perf_script_text(iter(samples), table))  # type: ignore[arg-type]
    assert "".join(held) == "".join(expected) and made == [1]
    assert "schedule+0x10 ([kernel.kallsyms])" in "".join(held) and looks[0] == 4


def test_only_kernel_lines_are_named_again() -> None:
    """A NUL elsewhere in held text (no recorded string has one: each is cut at its NUL)
    is left as it is, and never read as an address."""
    from pysframe.report.perf_script import HELD_NAMES, _named, kernel_line

    table = SymbolTable([Symbol(0x1000, 0x1100, "schedule", "STB_GLOBAL", 0x100)])
    held = ["\t" + kernel_line(0x1010, HELD_NAMES), "\t1234 a\0zz\0 ([kernel.kallsyms])",
            "\t1234 b\0 ([kernel.kallsyms])", "\t1234 \0c ([x])"]
    (text,) = _named(["\n".join(held)], table, {})
    named = text.split("\n")
    assert named[0] == "\t" + kernel_line(0x1010, table)
    assert named[0].endswith(" schedule+0x10 ([kernel.kallsyms])") and named[1:] == held[1:]


def test_profiles_name_kernel_frames_at_the_end_when_the_names_come_late() -> None:
    """`sframe report` on a first run: kernel locations made while kallsyms is being read
    are named when the profile is finished, the same names as with the table at once."""
    from pysframe.report.profiles import collect

    table = SymbolTable([Symbol(0xFFFFFFFF81000000, 0xFFFFFFFF81000100, "schedule",
                                "STB_GLOBAL", 0x100)])
    samples = [_kernel_sample(t, (0xFFFFFFFF81000010, 0xFFFFFFFF81000500) if t % 2 else ())
               for t in range(1, 12)]
    looks: list[int] = []
    loads: list[int] = []

    def load() -> SymbolTable:
        loads.append(len(looks))
        return table

    lazy = kernel._LazySymbols(load, lambda: bool(looks.append(1)) or False)
    late = collect(iter(samples), kernel=lazy)  # type: ignore[arg-type]
    at_once = collect(iter(samples), kernel=table)  # type: ignore[arg-type]
    assert late.locations == at_once.locations and late.name_counts() == at_once.name_counts()
    assert loads == [len(looks)] and len(looks) == 2  # one look per new kernel address
    assert late.name_counts() == {
        ("work", "[unknown]", "[kernel.kallsyms]_[k]", "schedule_[k]"): 6,
        ("work", "[unknown]"): 5}


def test_a_table_read_in_place_is_a_sequence_of_its_names() -> None:
    """Names read from an entry's bytes index as a list does (negative indexes too)."""
    table = SymbolTable.from_arrays([1, 5, 9], [5, 9, 12], ["a", "bb", "ccc"])
    back = SymbolTable.from_entry(table.entry())
    assert back is not None and back.payload is not None
    assert list(back.names) == ["a", "bb", "ccc"] and back.names[-1] == "ccc"
    assert back.names[1:] == ["bb", "ccc"] and back.lookup(10) == ("ccc", 1)
    with pytest.raises(IndexError):
        back.names[3]
    assert back.entry() == table.entry()


def test_a_kernel_table_read_in_place_names_spans_of_its_text() -> None:
    """The kernel's entry names each symbol by where it starts and ends in an area: read
    as arrays, kallsyms' own text, kept whole; read in Python, the names joined. Read
    back, either gives the same table, its names index as a list does, and the entry is
    the same bytes again."""
    pytest.importorskip("numpy")
    text = b"ffffffff81000000 T _stext\nffffffff81000040 d data\nffffffff81000100 t helper\n"
    read = kernel._read_with_numpy(text)
    by_python = kernel._read_in_python(text)
    assert read is not None and read[0] is not None and by_python is not None
    spans, joined = b"".join(read[0]), b"".join(by_python)
    assert spans.endswith(text) and joined.endswith(b"_stexthelper")
    for payload in (spans, joined):
        back = SymbolTable.from_spans(payload)
        assert back is not None and back.payload is not None
        assert list(back.names) == ["_stext", "helper"] and back.names[-1] == "helper"
        assert back.names[1:] == ["helper"] and back.lookup(0xffffffff81000104) == ("helper", 4)
        with pytest.raises(IndexError):
            back.names[2]
        assert back.entry() == payload
    assert SymbolTable.from_spans(spans[:-len(text) - 1]) is None  # (arrays cut short)


def test_no_child_for_a_recording_of_another_kernel(fake_kernel: list[int],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A recording of another kernel never uses the running kernel's entry: no child takes
    CPU time from its run; one of this kernel, or naming none, still gets one."""
    monkeypatch.setattr(kernel, "_making", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    forks: list[int] = []
    real_fork = os.fork

    def counted_fork() -> int:
        forks.append(1)
        return real_fork()

    monkeypatch.setattr(os, "fork", counted_fork)
    kernel.prefetch(bytes(20))
    assert kernel._making is None and forks == []
    kernel.prefetch(BUILD_ID)
    assert kernel._making is not None and forks == [1]
    kernel._child_ended()
    monkeypatch.setattr(kernel, "_making", None)
    cachedir_root = Path(os.environ["XDG_CACHE_HOME"])
    for entry in cachedir_root.rglob("*.kallsyms*"):
        entry.unlink()
    kernel.prefetch(None)  # (a recording naming no kernel: the running one, lazily)
    assert kernel._making is not None and forks == [1, 1]
    kernel._child_ended()


def test_script_asks_for_the_child_only_when_the_recording_may_use_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``script`` and ``report`` prefetch for the kernel a recording names; not for one
    whose build-id table names the binaries its samples hit but nothing of a kernel (no
    kernel frames); for one that names a module alone, or nothing (``perf record -B``),
    the running kernel's."""
    from pysframe.cli import script
    from pysframe.sources.perf_records import BuildIdEntry

    asked: list[bytes | None] = []
    monkeypatch.setattr(kernel, "prefetch",
                        lambda build_id, numpy_next=False: asked.append(build_id))

    class Recording:
        def __init__(self, entries: list[BuildIdEntry]) -> None:
            self.entries = entries

        def build_ids(self) -> list[BuildIdEntry]:
            return self.entries

    lua = BuildIdEntry(-1, b"\x01" * 20, "/usr/bin/lua", False)
    other = BuildIdEntry(-1, b"\x02" * 20, "[kernel.kallsyms]", True)
    module = BuildIdEntry(-1, b"\x03" * 20, "/lib/modules/x/kvm.ko", True)
    script._prefetch(Recording([lua, other]))
    script._prefetch(Recording([lua, module]))
    script._prefetch(Recording([lua]))
    script._prefetch(Recording([]))
    assert asked == [other.build_id, None, None]

"""The kernel's deferred unwinding model (pysframe.deferred): tracers, cookies, the
per-process SFrame registry and the kernel's user unwinder, on a small synthetic process
whose table is written with our encoder and whose stack is laid out by hand."""

from __future__ import annotations

import errno
import struct
from pathlib import Path

import pytest

from pysframe.deferred import (
    BITS_PER_LONG,
    DeferredUnwinder,
    EntryRegisters,
    Mm,
    cookie_parts,
    make_cookie,
    unwind_user,
)
from pysframe.deferred.mm import map_elf
from pysframe.format.constants import ABI, F_FDE_SORTED, VERSION_2, BaseReg
from pysframe.format.encode import encode
from pysframe.format.model import FDE, FRE, default_section
from pysframe.unwind.step import Stop as UserStop

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
TEXT, TEXT_SIZE = 0x400000, 0x2000
TABLE = 0x410000
STACK_TOP = 0x7FFFF000
SP = STACK_TOP - 0x100
F1, F2, MAIN, START = 0x400100, 0x400200, 0x400300, 0x400400
#: An address in the text area that no table row describes (frame pointers only).
BARE = 0x401800


def table(*, version: int = 3, text_end: int = TEXT + 0x1000, outside: bool = False) -> bytes:
    """f1 (a leaf: CFA = SP + 8), f2 and main (``push %rbp`` at +1: CFA = SP + 16, FP saved
    at CFA - 16) and _start (outermost)."""
    section = default_section(ABI.AMD64_ENDIAN_LITTLE, version)
    section.address = TABLE
    pushed = [FRE(0, (8,)), FRE(1, (16, -16))]
    section.fdes = [FDE(F1, 0x40, [FRE(0, (8,))]), FDE(F2, 0x40, list(pushed)),
                    FDE(MAIN, 0x40, list(pushed)), FDE(START, 0x20, [FRE(0, ())])]
    if outside:  # a function past the end of the text it is registered for
        section.fdes.append(FDE(text_end + 0x100, 0x10, [FRE(0, (8,))]))
    section.sort_fdes()
    return encode(section)


def words(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def process(validation: bool = False) -> Mm:
    """Text, its table (registered), and a stack: f1 called by f2 called by main called by
    _start, stopped in f1 (its entry registers: :data:`ENTRY`)."""
    mm = Mm(validation=validation)
    mm.mmap(TEXT, TEXT_SIZE, bytes(TEXT_SIZE), executable=True, name="prog")
    data = table()
    mm.mmap(TABLE, 0x1000, data, name="prog")
    mm.mmap(STACK_TOP - 0x1000, 0x1000, name="[stack]")
    # [SP] RA into f2 | f2: saved fp, RA into main | main: saved fp, RA into _start
    mm.write(SP, words(F2 + 0x20, 0xAAAA, MAIN + 0x20, 0xBBBB, START + 0x10))
    assert mm.sframes.add(TABLE, TABLE + len(data), TEXT, TEXT + 0x1000, "prog") == 0
    return mm


ENTRY = EntryRegisters(ip=F1 + 0x10, sp=SP, fp=0x1234)


def test_the_kernel_walk_follows_sframe_to_the_outermost_frame() -> None:
    trace = unwind_user(process(), ENTRY)
    assert trace.entries == [F1 + 0x10, F2 + 0x20, MAIN + 0x20, START + 0x10]
    assert trace.stop is UserStop.OUTERMOST
    assert trace.methods == ["sframe"] * 3


def test_frame_pointers_where_no_row_covers_the_pc() -> None:
    mm = process()
    frame = SP + 0x40  # [frame] = caller's fp, [frame + 8] = RA into main
    mm.write(frame, words(SP + 0x80, MAIN + 0x20))
    trace = unwind_user(mm, EntryRegisters(ip=BARE, sp=SP, fp=frame))
    assert trace.entries[:2] == [BARE, MAIN + 0x20]
    assert trace.methods[0] == "fp"
    # Without the frame-pointer fallback the walk has nothing to step with.
    alone = unwind_user(mm, EntryRegisters(ip=BARE, sp=SP, fp=frame), frame_pointers=False)
    assert alone.entries == [BARE] and alone.stop is UserStop.NO_METHOD


def test_the_kernel_checks_end_the_walk() -> None:
    mm = process()
    # FP-based CFA with FP below SP.
    assert unwind_user(mm, EntryRegisters(ip=BARE, sp=SP, fp=SP - 64)).stop is (
        UserStop.FP_BELOW_SP)
    # A saved frame pointer pointing back down the stack, below the next frame's SP.
    mm.write(SP + 0x40, words(SP, BARE + 0x10))
    down = unwind_user(mm, EntryRegisters(ip=BARE, sp=SP + 0x40, fp=SP + 0x40))
    assert down.entries == [BARE, BARE + 0x10] and down.stop is UserStop.FP_BELOW_SP
    # Reads above the user address limit fault.
    assert unwind_user(mm, EntryRegisters(ip=F1, sp=(1 << 47), fp=0)).stop is UserStop.FAULT
    # The frame limit.
    limited = unwind_user(mm, ENTRY, max_entries=2)
    assert limited.entries == [F1 + 0x10, F2 + 0x20] and limited.stop is UserStop.LIMIT
    # No user context (a kernel thread).
    assert unwind_user(mm, None).stop is UserStop.NOT_USER


def test_a_cfa_that_does_not_move_up_is_refused() -> None:
    mm = Mm()
    mm.mmap(TEXT, TEXT_SIZE, bytes(TEXT_SIZE), executable=True)
    section = default_section(ABI.AMD64_ENDIAN_LITTLE)
    section.address = TABLE
    section.fdes = [FDE(F1, 0x40, [FRE(0, (-8,))]), FDE(F2, 0x40, [FRE(0, (8,))])]
    section.sort_fdes()
    data = encode(section)
    mm.mmap(TABLE, 0x1000, data)
    mm.mmap(STACK_TOP - 0x1000, 0x1000)
    assert mm.sframes.add(TABLE, TABLE + len(data), TEXT, TEXT + 0x1000) == 0
    assert unwind_user(mm, EntryRegisters(ip=F1, sp=SP, fp=0)).stop is UserStop.BACKWARDS


def test_an_unaligned_cfa_is_refused() -> None:
    trace = unwind_user(process(), EntryRegisters(ip=F1 + 0x10, sp=SP + 4, fp=0))
    assert trace.stop is UserStop.UNALIGNED and trace.entries == [F1 + 0x10]


# -- tracers and cookies ---------------------------------------------------------------


def tracer_log(unwinder: DeferredUnwinder, name: str, log: list[tuple[str, int, list[int]]]
               ) -> object:
    work = unwinder.init(lambda work, trace, cookie: log.append((name, cookie,
                                                                  list(trace.entries))), name)
    assert not isinstance(work, int)
    return work


def test_two_tracers_in_one_entry_share_one_cookie_and_one_walk() -> None:
    unwinder, log = DeferredUnwinder(), []  # type: ignore[var-annotated]
    perf, ftrace = tracer_log(unwinder, "perf", log), tracer_log(unwinder, "ftrace", log)
    task = unwinder.new_task(100, process())
    unwinder.enter_kernel(task, ENTRY, cpu=1)
    first, cookie = unwinder.request(perf, task)  # type: ignore[arg-type]
    again, same = unwinder.request(perf, task)  # type: ignore[arg-type]
    other, shared = unwinder.request(ftrace, task, in_nmi=True)  # type: ignore[arg-type]
    assert (first, again, other) == (0, 1, 0)
    assert cookie == same == shared != 0
    assert cookie_parts(cookie) == (1, 3)  # CPU 1; the counter's first value, odd
    assert unwinder.walks == 0  # nothing walked in "interrupt context"
    unwinder.return_to_user(task)
    assert unwinder.walks == 1
    assert sorted(name for name, _, _ in log) == ["ftrace", "perf"]
    assert {entry_cookie for _, entry_cookie, _ in log} == {cookie}
    assert log[0][2] == [F1 + 0x10, F2 + 0x20, MAIN + 0x20, START + 0x10]


def test_a_new_entry_gets_a_new_cookie() -> None:
    unwinder, log = DeferredUnwinder(), []  # type: ignore[var-annotated]
    perf = tracer_log(unwinder, "perf", log)
    task = unwinder.new_task(100, process())
    cookies = []
    for _ in range(3):
        unwinder.enter_kernel(task, ENTRY, cpu=0)
        cookies.append(unwinder.request(perf, task)[1])  # type: ignore[arg-type]
        unwinder.return_to_user(task)
    assert [cookie_parts(cookie) for cookie in cookies] == [(0, 3), (0, 5), (0, 7)]
    assert unwinder.walks == 3 and len(log) == 3
    # Another CPU counts its own entries.
    unwinder.enter_kernel(task, ENTRY, cpu=5)
    assert unwinder.request(perf, task)[1] == make_cookie(5, 3)  # type: ignore[arg-type]


def test_a_request_after_the_callbacks_in_the_same_entry_reuses_the_walk() -> None:
    unwinder, log = DeferredUnwinder(), []  # type: ignore[var-annotated]
    perf, bpf = tracer_log(unwinder, "perf", log), tracer_log(unwinder, "bpf", log)
    task = unwinder.new_task(7, process())
    unwinder.enter_kernel(task, ENTRY, cpu=0)
    _, cookie = unwinder.request(perf, task)  # type: ignore[arg-type]
    unwinder._process(task)  # the task work ran; the task is still in the kernel
    task.task_work_queued = False
    assert unwinder.request(perf, task) == (1, cookie)  # type: ignore[arg-type]
    assert unwinder.request(bpf, task) == (0, cookie)  # type: ignore[arg-type]
    unwinder.return_to_user(task)
    assert unwinder.walks == 1  # the entry's cache served the second callback
    assert [name for name, _, _ in log] == ["perf", "bpf"]  # each tracer once


def test_requests_the_kernel_refuses() -> None:
    unwinder, log = DeferredUnwinder(), []  # type: ignore[var-annotated]
    perf = tracer_log(unwinder, "perf", log)
    kthread = unwinder.new_task(2, None, kthread=True)
    unwinder.enter_kernel(kthread, ENTRY, cpu=0)
    assert unwinder.request(perf, kthread) == (-errno.EINVAL, 0)  # type: ignore[arg-type]
    idle = unwinder.new_task(3, process())  # not entered from user space
    assert unwinder.request(perf, idle) == (-errno.EINVAL, 0)  # type: ignore[arg-type]


def test_cancel_stops_requests_and_callbacks_and_frees_the_bit() -> None:
    unwinder, log = DeferredUnwinder(), []  # type: ignore[var-annotated]
    perf, ftrace = tracer_log(unwinder, "perf", log), tracer_log(unwinder, "ftrace", log)
    task = unwinder.new_task(100, process())
    unwinder.enter_kernel(task, ENTRY, cpu=0)
    unwinder.request(perf, task)  # type: ignore[arg-type]
    unwinder.request(ftrace, task)  # type: ignore[arg-type]
    freed = ftrace.bit  # type: ignore[attr-defined]
    unwinder.cancel(ftrace)  # type: ignore[arg-type]
    assert not task.unwind_mask & (1 << freed)
    assert unwinder.request(ftrace, task) == (-errno.EINVAL, 0)  # type: ignore[arg-type]
    unwinder.return_to_user(task)
    assert [name for name, _, _ in log] == ["perf"]
    again = tracer_log(unwinder, "again", log)
    assert again.bit == freed  # type: ignore[attr-defined]


def test_task_exit_runs_the_pending_callbacks_and_refuses_new_requests() -> None:
    unwinder, log = DeferredUnwinder(), []  # type: ignore[var-annotated]
    perf = tracer_log(unwinder, "perf", log)
    task = unwinder.new_task(100, process())
    unwinder.enter_kernel(task, ENTRY, cpu=0)
    _, cookie = unwinder.request(perf, task)  # type: ignore[arg-type]
    unwinder.task_exit(task)  # exit() from the kernel: no return to user space
    assert [(name, got) for name, got, _ in log] == [("perf", cookie)]
    assert unwinder.request(perf, task) == (-errno.EINVAL, 0)  # type: ignore[arg-type]
    assert not task.task_work_queued and task not in unwinder.tasks


def test_the_tracer_limit_is_a_word_less_the_reserved_bits() -> None:
    unwinder = DeferredUnwinder()
    works = [unwinder.init(lambda *_: None) for _ in range(BITS_PER_LONG - 2)]
    assert all(not isinstance(work, int) for work in works)
    assert unwinder.init(lambda *_: None) == -errno.EBUSY
    assert sorted(work.bit for work in works) == list(range(2, BITS_PER_LONG))  # type: ignore[union-attr]


# -- the registry ------------------------------------------------------------------------


def test_a_corrupt_section_is_removed_after_the_fault() -> None:
    mm = process()
    data = bytearray(table())
    # FRE starts of f2 no longer ascending: the kernel's FRE search reports -EFAULT.
    from pysframe.format.decode import SFrameReader

    reader = SFrameReader(bytes(data), TABLE)
    entry = next(entry for entry in reader.fdes() if entry.start == F2)
    second_fre = entry.fres_offset + 3  # after FRE 0: start, info, one 1-byte word
    assert data[second_fre] == 1
    data[second_fre] = 0
    mm.write(TABLE, bytes(data))
    trace = unwind_user(mm, EntryRegisters(ip=F2 + 0x20, sp=SP + 8, fp=0))
    assert trace.stop is UserStop.SFRAME_ERROR
    assert [removal.reason for removal in mm.sframes.removals] == ["corrupt"]
    assert len(mm.sframes) == 0
    # The next walk has no section: frame pointers only.
    assert unwind_user(mm, EntryRegisters(ip=F2 + 0x20, sp=SP + 8, fp=SP + 8)).methods[:1] == [
        "fp"]
    # Why the file has none (for sframe defer's report), in a child forked since too.
    name = mm.sframes.removals[0].section.name
    assert mm.sframes.dropped_damaged(name) and mm.fork().sframes.dropped_damaged(name)
    assert not mm.sframes.dropped_damaged(name + "-other")


def test_registration_refuses_what_the_kernel_refuses() -> None:
    mm = process()
    mm.mmap(0x420000, 0x1000, bytes(0x1000), executable=True, name="jit")
    mm.mmap(0x430000, 0x1000, name="jit-table")
    bad_range = table(outside=True)
    mm.write(0x430000, bad_range)
    end = 0x430000 + len(bad_range)
    # Overlapping text, zero addresses, text not executable, table not mapped.
    assert mm.sframes.add(0x430000, end, TEXT, TEXT + 0x100) == -errno.EEXIST
    assert mm.sframes.add(0, end, 0x420000, 0x421000) == -errno.EINVAL
    assert mm.sframes.add(0x430000, end, 0x430000, 0x430100) == -errno.EINVAL
    assert mm.sframes.add(0x440000, 0x440100, 0x420000, 0x421000) == -errno.EINVAL
    # A version 2 table, or one not flagged sorted, is refused always.
    mm.write(0x430000, table(version=VERSION_2))
    assert mm.sframes.add(0x430000, end, 0x420000, 0x421000) == -errno.EINVAL
    unsorted = bytearray(bad_range)
    unsorted[2] &= ~F_FDE_SORTED  # preamble flags byte
    mm.write(0x430000, bytes(unsorted))
    assert mm.sframes.add(0x430000, end, 0x420000, 0x421000) == -errno.EINVAL
    # A function outside its text: taken without validation, refused with it (as
    # `sframe validate --kernel` refuses it).
    mm.write(0x430000, bad_range)
    from pysframe.format.validation import validate

    assert any(finding.severity == "error" for finding in
               validate(bad_range, 0x430000, [(0x420000, 0x421000)], kernel=True))
    checked = process(validation=True)
    checked.mmap(0x420000, 0x1000, bytes(0x1000), executable=True)
    checked.mmap(0x430000, 0x1000, bad_range)
    assert checked.sframes.add(0x430000, end, 0x420000, 0x421000) == -errno.EINVAL
    assert mm.sframes.add(0x430000, end, 0x420000, 0x421000) == 0
    # Unregistration by table address.
    assert mm.sframes.remove(0x430000) == 0
    assert mm.sframes.remove(0x430000) == -errno.EINVAL


def test_jit_code_registers_by_call_and_by_prctl() -> None:
    from pysframe.deferred import PR_ADD_SFRAME, PR_REMOVE_SFRAME, SFrameRegistration

    mm = Mm()
    mm.mmap(TEXT, TEXT_SIZE, bytes(TEXT_SIZE), executable=True, name="[jit]")
    data = table()
    mm.mmap(TABLE, 0x1000, data)
    mm.mmap(STACK_TOP - 0x1000, 0x1000)
    mm.write(SP, words(F2 + 0x20, 0xAAAA, MAIN + 0x20, 0xBBBB, START + 0x10))
    jit = SFrameRegistration(TABLE, len(data), TEXT, 0x1000)
    assert unwind_user(mm, ENTRY).stop is UserStop.FP_BELOW_SP  # nothing registered: FP only
    assert mm.sframes.register(jit) == 0
    assert unwind_user(mm, ENTRY).stop is UserStop.OUTERMOST
    assert mm.sframes.register(jit) == -errno.EEXIST
    assert mm.sframes.unregister(jit) == 0 and len(mm.sframes) == 0
    assert mm.sframes.register(SFrameRegistration(TABLE, 1 << 64, TEXT, 0x1000)) == (
        -errno.EINVAL)
    assert mm.sframes.prctl(PR_ADD_SFRAME, TABLE, TABLE + len(data), TEXT, TEXT + 0x1000) == 0
    assert mm.sframes.prctl(PR_REMOVE_SFRAME, TABLE) == 0
    assert mm.sframes.prctl("PR_SET_NAME", 1) == -errno.EINVAL


def test_munmap_drops_the_sections_it_covers() -> None:
    mm = process()
    mm.munmap(TEXT + 0x1000, 0x1000)  # text the section does not describe: kept
    assert len(mm.sframes) == 1
    mm.munmap(TEXT, 0x1000)
    assert len(mm.sframes) == 0 and mm.sframes.removals[0].reason == "unmapped"


def test_mapping_an_elf_file_registers_its_sframe_segment() -> None:
    lua = FIXTURES / "real" / "lua-2.46-x86_64" / "lua"
    if not lua.exists():
        pytest.skip("fixtures not present")
    mm = Mm(validation=True)
    bias = 0x555555554000
    map_elf(mm, lua.read_bytes(), bias, "lua")
    (section,) = mm.sframes.sections
    assert section.text_start == bias + 0x7000  # the R E segment
    assert mm.sframes.find(bias + 0x7000 + 0x10) is not None
    # binutils 2.44 writes version 2: the kernel does not take it.
    old = Mm()
    map_elf(old, (FIXTURES / "real" / "lua-2.44-x86_64" / "lua").read_bytes(), bias, "lua")
    assert len(old.sframes) == 0


def test_base_register_rows_use_the_frame_pointer() -> None:
    """A row with CFA = FP + 16 (after ``mov %rsp,%rbp``) steps through FP."""
    mm = Mm()
    mm.mmap(TEXT, TEXT_SIZE, bytes(TEXT_SIZE), executable=True)
    section = default_section(ABI.AMD64_ENDIAN_LITTLE)
    section.address = TABLE
    section.fdes = [FDE(F1, 0x40, [FRE(0, (16, -16), BaseReg.FP)]),
                    FDE(START, 0x20, [FRE(0, ())])]
    section.sort_fdes()
    data = encode(section)
    mm.mmap(TABLE, 0x1000, data)
    mm.mmap(STACK_TOP - 0x1000, 0x1000)
    frame = SP + 0x20
    mm.write(frame, words(0x5555, START + 4))
    assert mm.sframes.add(TABLE, TABLE + len(data), TEXT, TEXT + 0x1000) == 0
    trace = unwind_user(mm, EntryRegisters(ip=F1 + 8, sp=SP, fp=frame))
    assert trace.entries == [F1 + 8, START + 4] and trace.stop is UserStop.OUTERMOST


def test_hostile_tables_cost_their_frames_never_the_walk() -> None:
    """Mutated tables: registration refuses or takes them, a lookup that finds them bad
    drops them; nothing raises and every walk ends with a stop reason."""
    import random

    from tests.support.mutations import mutations

    rng = random.Random(14)
    base = table()
    for data in mutations(base, rng, 300):
        mm = Mm(validation=rng.random() < 0.5)
        mm.mmap(TEXT, TEXT_SIZE, bytes(TEXT_SIZE), executable=True)
        mm.mmap(TABLE, 0x1000, data[:0x1000])
        mm.mmap(STACK_TOP - 0x1000, 0x1000)
        mm.write(SP, words(F2 + 0x20, 0xAAAA, MAIN + 0x20, 0xBBBB, START + 0x10))
        result = mm.sframes.add(TABLE, TABLE + min(len(data), 0x1000), TEXT, TEXT + 0x1000)
        assert result in (0, -errno.EINVAL, -errno.EFAULT)
        trace = unwind_user(mm, ENTRY)
        assert isinstance(trace.stop, UserStop) and 1 <= len(trace.entries) <= 510


def test_an_elf_maps_only_what_it_holds() -> None:
    import struct as layout

    from pysframe.elf import ElfError

    prog = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"
    if not prog.exists():
        pytest.skip("fixtures not present")
    data = bytearray(prog.read_bytes())
    for cut in (40, len(data) // 3):  # truncated: one line, the caller drops the file
        with pytest.raises(ElfError):
            map_elf(Mm(), bytes(data[:cut]), 0x555555554000, "prog")
    # A PT_LOAD whose file bytes lie past the end is not mapped; the others are.
    phoff, = layout.unpack_from("<Q", data, 0x20)
    entry = phoff + 56 * next(index for index in range(8) if layout.unpack_from(
        "<I", data, phoff + 56 * index)[0] == 1)
    layout.pack_into("<Q", data, entry + 32, 1 << 40)  # p_filesz
    mm = Mm()
    mapped = map_elf(mm, bytes(data), 0x555555554000, "prog")
    assert mapped.areas and all(vma.end - vma.start < 1 << 30 for vma in mapped.areas)

"""Samples of every kind of recording, built by hand: ``-g`` callchains, no callchain,
system-wide fields, empty stack copies, truncated chains, the frame-pointer fallback's
checks and the stop reasons (tests/test_perf_parity.py checks the same against perf on
real recordings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from pysframe.format.constants import ABI
from pysframe.format.lookup import FrameRow, Rule, RuleKind
from pysframe.report.perf_script import TRUNCATED, format_sample
from pysframe.session.perf import PerfUnwinder, UnwoundSample, recorded_frames
from pysframe.sources.perf_records import EventAttr, Sample
from pysframe.symbolize.symbolizer import Symbolizer
from pysframe.unwind import callee_saved
from pysframe.unwind.address_space import AddressSpace, Mapping, Module
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.unwinder import FrameMethod, Registers, Stop, Unwind, Unwinder

KERNEL, USER = (1 << 64) - 128, (1 << 64) - 512
IP, TID, TIME, CALLCHAIN, CPU, PERIOD = 1, 2, 4, 32, 128, 256
REGS_USER, STACK_USER = 1 << 12, 1 << 13
FP_TYPE = IP | TID | TIME | CALLCHAIN | PERIOD
SYSTEM_WIDE = FP_TYPE | CPU
DWARF_TYPE = FP_TYPE | REGS_USER | STACK_USER


def _attr(sample_type: int) -> EventAttr:
    return EventAttr(1, 0, sample_type, 0, 0, 0, 0, name="cpu-clock")  # as EVENT_DESC names it


def _sample(sample_type: int, callchain: tuple[int, ...] = (), ip: int = 0x401234,
            misc: int = 2, tid: int = 42, cpu: int = 1) -> Sample:
    return Sample(0, misc, ip=ip, pid=tid, tid=tid, time=12_345_678_901_234, cpu=cpu,
                  period=1001001, callchain=callchain, attr=_attr(sample_type))


def _space() -> AddressSpace:
    space = AddressSpace()
    space.add(Mapping(0x400000, 0x500000, 0, "/usr/bin/prog", None, None))
    return space


def _text(sample: Sample, comm: str = "prog", unwind: Unwind | None = None) -> str:
    unwind = unwind if unwind is not None else recorded_frames(sample, _space())
    return format_sample(UnwoundSample(sample, comm, unwind, unwind.mappings), Symbolizer())


def test_a_frame_pointer_callchain_is_printed_as_recorded() -> None:
    """-g: kernel part, then the user part as the kernel recorded it (return addresses as
    they are, file-relative where mapped, a 0 entry too); the markers are not printed."""
    sample = _sample(FP_TYPE, (KERNEL, 0xFFFFFFFF81000100, USER, 0x401234, 0x402000, 0), misc=1)
    assert _text(sample) == (
        "prog    42 12345.678901:    1001001 cpu-clock: \n"
        "\tffffffff81000100 [unknown] ([kernel.kallsyms])\n"
        "\t            1234 [unknown] (/usr/bin/prog)\n"
        "\t            2000 [unknown] (/usr/bin/prog)\n"
        "\t               0 [unknown] ([unknown])\n\n")
    unwind = recorded_frames(sample, _space())
    assert unwind.stop is Stop.RECORDED
    assert [frame.method for frame in unwind.frames] == [FrameMethod.IP, FrameMethod.RECORDED, FrameMethod.RECORDED]


def test_an_unknown_context_marker_drops_the_chain_as_perf_does() -> None:
    """A frame-pointer walk can copy -160 from a user stack: perf prints the header only."""
    sample = _sample(FP_TYPE, (USER, 0x401234, 0, (1 << 64) - 160))
    assert _text(sample) == "prog    42 12345.678901:    1001001 cpu-clock: \n\n"


def test_without_callchain_the_sample_ip_is_printed_on_the_header_line() -> None:
    sample = _sample(IP | TID | TIME | PERIOD)
    assert _text(sample) == ("            prog    42 12345.678901:    1001001 cpu-clock:  "
                             "          401234 [unknown] (/usr/bin/prog)\n")
    kernel = _sample(IP | TID | TIME | PERIOD | CPU, ip=0xFFFFFFFF81000100, misc=1)
    assert _text(kernel, "swapper") == (
        "         swapper    42 [001] 12345.678901:    1001001 cpu-clock:  "
        "ffffffff81000100 [unknown] ([kernel.kallsyms])\n")


def test_system_wide_samples_show_the_cpu_and_a_task_less_sample_is_minus_one() -> None:
    sample = _sample(SYSTEM_WIDE, (KERNEL, 0xFFFFFFFF81000100), misc=1, tid=-1, cpu=3)
    assert _text(sample, ":-1").splitlines()[0] == (
        ":-1    -1 [003] 12345.678901:    1001001 cpu-clock: ")


class _Data:
    """The little of a PerfData that PerfUnwinder reads before its first record."""

    arch = "x86_64"

    def __init__(self, sample_type: int) -> None:
        self.attrs = [_attr(sample_type)]

    def build_ids(self) -> list[Any]:
        return []


def test_idle_and_unnamed_threads_are_named_as_perf_names_them() -> None:
    unwinder = PerfUnwinder(cast(Any, _Data(SYSTEM_WIDE)))
    assert unwinder._unwind(_sample(SYSTEM_WIDE, tid=0)).comm == "swapper"
    assert unwinder._unwind(_sample(SYSTEM_WIDE, tid=77)).comm == ":77"
    assert unwinder._unwind(_sample(SYSTEM_WIDE, tid=-1)).comm == ":-1"


def test_an_empty_stack_copy_gives_the_kernel_part_only() -> None:
    """A thread in execve has lost its old stack: perf prints no user frame, nor do we."""
    sample = _sample(DWARF_TYPE, (KERNEL, 0xFFFFFFFF81000100), misc=1)
    sample.regs, sample.regs_abi, sample.stack = (0,) * 3, 2, memoryview(b"")
    unwinder = PerfUnwinder(cast(Any, _Data(DWARF_TYPE)))
    unwound = unwinder._unwind(sample)
    assert unwound.unwind.frames == [] and unwound.unwind.stop is Stop.NO_STACK
    assert format_sample(unwound, Symbolizer()).count("\n") == 3


def test_a_chain_cut_by_the_end_of_the_stack_copy_ends_with_perfs_marker() -> None:
    sample = _sample(DWARF_TYPE)
    space = _space()
    unwind = Unwind(stop=Stop.COPY_ENDED)
    unwind.add(0x401234, FrameMethod.IP)
    unwind.mappings.append(space.find(0x401234))
    text = _text(sample, unwind=unwind)
    assert text.endswith(f"\t            1234 [unknown] (/usr/bin/prog)\n{TRUNCATED}\n\n")
    assert TRUNCATED == "\tffffffffffffffff [unknown] ([unknown])"
    # The unwinder says so where the return address lies past the end of the copy.
    short = Unwinder(ABI.AMD64_ENDIAN_LITTLE).unwind(
        Registers(0x401000, 0x7000, 0x7010), StackMemory(0x7000, bytes(0x18)), space)
    assert short.stop is Stop.COPY_ENDED


# --- the tracer ------------------------------------------------------------------------

def _walk(ra: int, space: AddressSpace) -> Unwind:
    """Frame 0 in a mapping without a table: the frame-pointer fallback finds ``ra``."""
    sp, fp = 0x7000, 0x7010
    stack = bytearray(0x40)
    stack[0x10:0x18] = (0x7030).to_bytes(8, "little")  # saved fp
    stack[0x18:0x20] = ra.to_bytes(8, "little")
    return Unwinder(ABI.AMD64_ENDIAN_LITTLE).unwind(Registers(0x401000, sp, fp),
                                                    StackMemory(sp, bytes(stack)), space)


def test_the_frame_pointer_fallback_takes_only_return_addresses_into_code() -> None:
    space = _space()
    space.add(Mapping(0x600000, 0x700000, 0, "/usr/lib/libx.so", None, None))
    assert _walk(0xAA17DDFA093B109B, space).stop is Stop.BAD_RA  # not canonical
    assert _walk(0x7FFF00001234, space).stop is Stop.BAD_RA  # canonical, in no mapping
    junk = _walk(0x7FFF00001234, space)
    assert [frame.pc for frame in junk.frames] == [0x401000]
    good = _walk(0x600010, space)
    assert [frame.pc for frame in good.frames][:2] == [0x401000, 0x600010]
    assert good.stop is not Stop.BAD_RA


class _Rows:
    """An SFrame lookup answering from fixed rows (func_start, func_end, row)."""

    def __init__(self, *rows: tuple[int, int, FrameRow]) -> None:
        self.rows = rows

    def find_fre(self, pc: int) -> FrameRow | None:
        return next((row for start, end, row in self.rows if start <= pc < end), None)


def _row(start: int, cfa: Rule) -> FrameRow:
    return FrameRow(0, 0, start, 0x100, 0, cfa, Rule(RuleKind.CFA, -8, deref=True),
                    Rule(RuleKind.RETAIN), func_end=start + 0x100)


class _Image:
    """An ELF image with no code bytes and no sections (no .eh_frame)."""

    path = "/usr/bin/prog"
    data = b""

    def section(self, name: str) -> None:
        return None


def _register_cfa_walk(monkeypatch: pytest.MonkeyPatch | None) -> Unwind:
    """Frame 0 (CFA = SP+16, rbx saved at CFA-16) returns into a function whose CFA is
    rbx+16, as _dl_runtime_resolve_xsavec's is."""
    lookup = _Rows((0x401000, 0x401100, _row(0x401000, Rule(RuleKind.CFA, 16, 7))),
                   (0x402000, 0x402100, _row(0x402000, Rule(RuleKind.REGISTER, 16, 3))))
    module = Module("/usr/bin/prog", None, 0, cast(Any, lookup), "test", cast(Any, _Image()))
    space = AddressSpace()
    space.add(Mapping(0x400000, 0x500000, 0, "/usr/bin/prog", None, module))
    sp = 0x7000
    stack = bytearray(0x200)
    stack[0x00:0x08] = (0x7100).to_bytes(8, "little")  # the caller's rbx, saved by frame 0
    stack[0x08:0x10] = (0x402010).to_bytes(8, "little")  # frame 0's return address
    stack[0x108:0x110] = (0x9000).to_bytes(8, "little")  # at rbx + 16 - 8
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE)
    if monkeypatch is not None:  # rbx saved at CFA-16 in every frame
        monkeypatch.setattr(callee_saved, "_saved_in",
                            lambda module, pc, regnum: -16 if regnum == 3 else "same")
    return unwinder.unwind(Registers(0x401004, sp, 0, 0, {3: 0x1234}),
                           StackMemory(sp, bytes(stack)), space)


def test_a_cfa_in_an_unrecoverable_register_says_so() -> None:
    walk = _register_cfa_walk(None)  # the module's image has no .eh_frame
    assert [frame.pc for frame in walk.frames] == [0x401004, 0x402010]
    assert walk.stop is Stop.REGISTER
    assert "register" in walk.stop.value


def test_a_cfa_in_a_register_saved_by_an_inner_frame_is_recovered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    walk = _register_cfa_walk(monkeypatch)
    assert [frame.pc for frame in walk.frames] == [0x401004, 0x402010, 0x9000]
    assert walk.stop is Stop.NO_MODULE


def test_an_lbr_call_stack_gives_the_user_chain_as_perf_builds_it() -> None:
    """--call-graph lbr (not recordable here: no PMU): the newest call's target, then the
    call sites, newest first, in place of the callchain's user part."""
    attr = EventAttr(0, 0, FP_TYPE | (1 << 11), 0, 0, 0, 0, (), 1 << 11)
    sample = _sample(FP_TYPE)
    sample.attr = attr
    sample.callchain = (USER, 0x402010)
    sample.branches = ((0x401500, 0x402000), (0x403010, 0x401400))
    unwind = recorded_frames(sample, _space())
    assert [frame.pc for frame in unwind.frames] == [0x402000, 0x401500, 0x403010]
    sample.branches = ()
    assert [frame.pc for frame in recorded_frames(sample, _space()).frames] == [0x402010]


def _vdso_module(unwinder: PerfUnwinder, build_id: bytes | None) -> Any:
    """The module the recording's ``[vdso]`` with ``build_id`` opens as (its first
    mapping met), or None."""
    unwinder._give_vdso(build_id)
    return unwinder.finder.module("[vdso]", build_id, 0x7FFF0000, 0)


def test_the_running_kernels_vdso_is_read_for_its_symbols_and_cfi(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Samples in the vDSO (time(), clock_gettime()) are named and unwound through the
    vDSO of this process when the recording's has the same build id: read from memory,
    with no file written (a copy in a temporary directory cost ~1 ms of every run)."""
    from pysframe.elf import ElfImage
    from pysframe.session.perf import own_vdso

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # (no build-id cache of perf's)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    image = own_vdso()
    assert image is not None and image.startswith(b"\x7fELF")
    ours = ElfImage("[vdso]", image).build_id()
    assert ours is not None
    module = _vdso_module(PerfUnwinder(cast(Any, _Data(DWARF_TYPE))), ours)
    assert module is not None and module.image.data == image
    assert module.image.section(".eh_frame") is not None and module.lookup is not None
    other = bytes(byte ^ 1 for byte in ours)  # another kernel's: not this one's, found nowhere
    assert _vdso_module(PerfUnwinder(cast(Any, _Data(DWARF_TYPE))), other) is None
    # no build id, no kernel named: not guessed
    assert _vdso_module(PerfUnwinder(cast(Any, _Data(DWARF_TYPE))), None) is None
    assert list(temporary.iterdir()) == []


def test_without_build_ids_the_vdso_is_ours_only_on_the_recorded_kernel(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A recording without build ids (perf record -B) gets this process's vDSO when it
    names the running kernel's release, and none when another kernel made it (perf takes
    its own either way, and names the other kernel's frames after this one's code)."""
    import os

    from pysframe.session.perf import own_vdso

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    here = _Data(DWARF_TYPE)
    here.os_release = os.uname().release  # type: ignore[attr-defined]
    module = _vdso_module(PerfUnwinder(cast(Any, here)), None)
    assert module is not None and module.image.data == own_vdso()
    elsewhere = _Data(DWARF_TYPE)
    elsewhere.os_release = os.uname().release + "-another"  # type: ignore[attr-defined]
    assert _vdso_module(PerfUnwinder(cast(Any, elsewhere)), None) is None

"""Unwinding the Lua recording with SFrame, frame for frame against `perf script --no-inline`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from tests.support.oracles import need_perf, unavailable

from conftest import FIXTURES
from pysframe.format import ABI
from pysframe.session.perf import PerfUnwinder
from pysframe.sources.perf_data import open_perf_data
from pysframe.unwind.address_space import AddressSpace
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.unwinder import Registers, Stop, Unwinder

LUA = FIXTURES / "real" / "lua-2.46-x86_64"
needs_recording = pytest.mark.skipif(not (LUA / "perf.data").exists(), reason="no recording")


def perf_user_frames() -> list[list[tuple[int, str]]]:
    samples: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] | None = None
    frame = re.compile(r"^\t\s*([0-9a-f]+) .*\((.*)\)$")
    with open(LUA / "perf-script.no-inline.txt") as handle:
        for line in handle:
            if not line.strip():
                if current is not None:
                    samples.append(current)
                current = None
            elif not line.startswith("\t"):
                current = []
            elif (match := frame.match(line.rstrip("\n"))) and current is not None:
                if match[2] != "[kernel.kallsyms]":
                    current.append((int(match[1], 16), match[2]))
    if current is not None:
        samples.append(current)
    return samples


@needs_recording
def test_lua_recording_frames_match_perf(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = perf_user_frames()
    ours = []
    with open_perf_data(str(LUA / "perf.data")) as data:
        for unwound in PerfUnwinder(data, [str(LUA)]).samples():
            frames = []
            for index, (frame, mapping) in enumerate(zip(unwound.unwind.frames,
                                                         unwound.mappings, strict=True)):
                pc = frame.pc if index == 0 else frame.pc - 1  # callers print as RA - 1
                if mapping is None:
                    frames.append((pc, "[unknown]"))
                else:
                    frames.append((pc - mapping.start + mapping.pgoff, mapping.filename))
            ours.append(frames)
    assert len(ours) == len(expected) == 3171
    identical = sum(a == b for a, b in zip(ours, expected, strict=True))
    # libc and ld.so have no .sframe: their tables come from the generator. The sample in
    # _dl_runtime_resolve_xsavec, whose CFA is rbx-based (a flexible FDE) in a caller frame,
    # matches too: rbx is recovered from the callees' CFI (unwind/callee_saved.py).
    assert identical == len(expected), [(i, a, b) for i, (a, b) in
                                        enumerate(zip(ours, expected, strict=True)) if a != b][:3]


def test_x86_64_step_and_failure_kinds() -> None:
    from pysframe.format import FDE, FRE, BaseReg, Section, SFrameLookup, SFrameReader, encode
    from pysframe.unwind.address_space import Mapping, Module

    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8, fdes=[
        FDE(0x1000, 0x20, [FRE(0, (8,)), FRE(1, (16, -16)), FRE(4, (16, -16), BaseReg.FP)]),
        FDE(0x2000, 0x10, [FRE(0, (8,)), FRE(1, ())]),
    ])
    module = Module("/bin/t", None, 0, SFrameLookup(SFrameReader(encode(section), 0)), "test")
    space = AddressSpace()
    space.add(Mapping(0x1000, 0x3000, 0, "/bin/t", None, module))
    sp = 0x7000
    stack = bytearray(64)
    # frame 0 in 0x1000 at offset 5 (fp-based, CFA = fp+16); caller returns into 0x2001 (outermost).
    stack[8:16] = (0x7100).to_bytes(8, "little")  # saved fp at CFA-16 = fp
    stack[16:24] = (0x2002).to_bytes(8, "little")  # RA at CFA-8
    result = Unwinder(ABI.AMD64_ENDIAN_LITTLE).unwind(
        Registers(0x1005, sp, sp + 8), StackMemory(sp, bytes(stack)), space)
    assert [f.pc for f in result.frames] == [0x1005, 0x2002]
    assert result.stop is Stop.OUTERMOST
    short = Unwinder(ABI.AMD64_ENDIAN_LITTLE).unwind(
        Registers(0x1005, sp, sp + 8), StackMemory(sp, bytes(stack[:16])), space)
    assert short.stop is Stop.COPY_ENDED  # the RA slot lies past the end of the copy
    lost = Unwinder(ABI.AMD64_ENDIAN_LITTLE).unwind(
        Registers(0x9000, sp, 0), StackMemory(sp, bytes(stack)), space)
    assert lost.stop is Stop.NO_MODULE


@needs_recording
def test_sframe_script_text_matches_perf_script(tmp_path: object,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole sample blocks against `perf script --no-inline`: headers, addresses, symbols
    (debug-file .symtab, perf's alias choice, name@plt) and dsos. Kernel frames need the
    recording machine's kallsyms, so they are compared by address only."""
    from pysframe.report.perf_script import perf_script_text

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with open_perf_data(str(LUA / "perf.data")) as data:
        ours = "".join(perf_script_text(PerfUnwinder(data, [str(LUA)]).samples())).split("\n\n")
    theirs = (LUA / "perf-script.no-inline.txt").read_text().split("\n\n")
    assert len(ours) == len(theirs)

    def without_kernel_symbols(block: str) -> list[str]:
        return [line.split(" ", 1)[0] if "[kernel.kallsyms]" in line else line
                for line in block.splitlines()]

    identical = sum(a == b for a, b in zip(ours, theirs, strict=True))
    user_identical = sum(without_kernel_symbols(a) == without_kernel_symbols(b)
                         for a, b in zip(ours, theirs, strict=True))
    assert user_identical >= 0.995 * len(theirs)
    assert identical >= 0.99 * len(theirs)


@needs_recording
def test_reports_folded_speedscope_svg(tmp_path: object) -> None:
    import json
    import os
    import subprocess
    import sys
    import xml.etree.ElementTree as ElementTree

    outputs = {}
    for form in ("folded", "speedscope", "svg"):
        target = os.path.join(str(tmp_path), f"lua.{form}")
        result = subprocess.run([sys.executable, "-m", "pysframe", "report", str(LUA / "perf.data"),
                                 "--binaries", str(LUA), "--format", form, "-o", target],
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
        assert result.returncode == 0, result.stderr
        outputs[form] = open(target).read()
    lines = outputs["folded"].splitlines()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == 3171
    assert any(line.startswith("lua;_start;__libc_start_main@@GLIBC_2.34;") for line in lines)
    document = json.loads(outputs["speedscope"])
    profile = document["profiles"][0]
    # cpu-clock: weighted by the samples' periods, in nanoseconds (perf's period column)
    periods = [int(match[1]) for match in re.finditer(r"^\S.*: +(\d+) cpu-clock:",
                                                      open(LUA / "perf-script.no-inline.txt").read(),
                                                      re.M)]
    assert len(periods) == 3171
    assert profile["type"] == "sampled" and profile["unit"] == "nanoseconds"
    assert sum(profile["weights"]) == profile["endValue"] == sum(periods)
    assert len(profile["samples"]) == len(lines)
    root = ElementTree.fromstring(outputs["svg"])
    assert root.tag.endswith("svg") and "luaV_execute" in outputs["svg"]


def _space_with(section: object, start: int, end: int) -> AddressSpace:
    from pysframe.format import SFrameLookup, SFrameReader, encode
    from pysframe.unwind.address_space import Mapping, Module

    module = Module("/bin/t", None, 0, SFrameLookup(SFrameReader(encode(section), 0)), "test")
    space = AddressSpace()
    space.add(Mapping(start, end, 0, "/bin/t", None, module))
    return space


def test_aarch64_rules_on_a_synthetic_stack() -> None:
    """Leaf with RA still in x30 (topmost), then a caller with FP/LR saved and a signed RA."""
    from pysframe.format import FDE, FRE, Section

    section = Section(version=3, abi=ABI.AARCH64_ENDIAN_LITTLE, fdes=[
        FDE(0x1000, 0x20, [FRE(0, (0,))]),                              # leaf: CFA = sp, RA in LR
        FDE(0x2000, 0x40, [FRE(0, (0,)), FRE(8, (32, -8, -16), mangled_ra=True)]),
        FDE(0x3000, 0x10, [FRE(0, (16, -8, -16)), FRE(4, ())]),          # outermost after 4
    ])
    space = _space_with(section, 0x1000, 0x4000)
    sp = 0x8000
    stack = bytearray(64)
    # caller frame (0x2000 at +0x10): CFA = sp + 32; FP at CFA-16, signed RA at CFA-8.
    stack[16:24] = (0x8030).to_bytes(8, "little")
    stack[24:32] = ((0x5A << 56) | 0x3006).to_bytes(8, "little")  # PAC bits in the top byte
    result = Unwinder(ABI.AARCH64_ENDIAN_LITTLE).unwind(
        Registers(0x1004, sp, 0x8010, lr=0x2011), StackMemory(sp, bytes(stack)), space)
    assert [f.pc for f in result.frames] == [0x1004, 0x2011, 0x3006]
    assert result.stop is Stop.OUTERMOST


def test_s390x_rules_on_a_synthetic_stack() -> None:
    """s390x: CFA words are (offset - 160) / 8, caller SP = CFA - 160, RA in r14 when unsaved."""
    from pysframe.format import FDE, FRE, BaseReg, Section

    section = Section(version=3, abi=ABI.S390X_ENDIAN_BIG, fdes=[
        FDE(0x1000, 0x20, [FRE(0, (0,))]),                                  # CFA = r15+160
        FDE(0x2000, 0x40, [FRE(0, ((320 - 160) // 8, -48, -72), BaseReg.SP)]),  # CFA = r15+320
    ])
    space = _space_with(section, 0x1000, 0x3000)
    sp = 0x9000
    stack = bytearray(512)
    # leaf (topmost): RA in r14 = 0x2010; CFA = sp + 160, caller sp = CFA - 160 = sp.
    # caller at 0x2010: CFA = sp + 320; RA at CFA-48, FP at CFA-72 (big-endian).
    stack[320 - 48:320 - 40] = (0x2FFF + 1).to_bytes(8, "big")
    stack[320 - 72:320 - 64] = (0x9500).to_bytes(8, "big")
    result = Unwinder(ABI.S390X_ENDIAN_BIG, max_depth=3).unwind(
        Registers(0x1008, sp, 0x9400, lr=0x2010), StackMemory(sp, bytes(stack), True), space)
    assert [f.pc for f in result.frames][:3] == [0x1008, 0x2010, 0x3000]


def test_kernel_frames_named_as_perf_names_them(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With the recording's kernel running, kallsyms names the kernel frames as perf names
    them. The recording is made here, on the running kernel (the fixture recordings'
    kernel is the machine's that made them: a test on them skipped on every other one)."""
    from pysframe.symbolize.kernel import kernel_symbols_for

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    perf = need_perf()
    data = tmp_path / "kernel.data"
    made = subprocess.run([perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o",
                           str(data), "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=4096",
                           "count=300000"], capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        unavailable(f"perf cannot record here: {made.stderr.strip()[-200:]}")
    with open_perf_data(str(data)) as recording:
        kernel_id = next(e.build_id for e in recording.build_ids()
                         if e.filename == "[kernel.kallsyms]")
    table = kernel_symbols_for(kernel_id)
    assert table is not None, "the running kernel's symbols were not read"
    script = subprocess.run([perf, "script", "--no-inline", "-i", str(data)],
                            capture_output=True, text=True, timeout=120)
    assert script.returncode == 0, script.stderr[-300:]
    checked = 0
    for line in script.stdout.splitlines():
        if line.endswith(" ([kernel.kallsyms])"):
            address, expected = line.split()[:2]
            found = table.lookup(int(address, 16))
            assert (f"{found[0]}+{found[1]:#x}" if found else "[unknown]") == expected, line
            checked += expected != "[unknown]"
    assert checked >= 50  # dd's time is mostly the kernel's

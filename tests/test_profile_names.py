"""Names of frames without a symbol in the profiles of ``sframe report``: the start of their
function where the binary's ``.eh_frame`` knows it (``file+0xoffset``, one node per
function, not one per instruction address), else the file (``[file]``); kernel frames
without symbols: ``[kernel.kallsyms]``. (tests/test_report_outputs.py checks the names
against the symbols of the binary before it was stripped, on a recording made there.)"""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from pysframe.elf import ElfImage
from pysframe.report.profiles import collect, unnamed_function
from pysframe.session.perf import UnwoundSample
from pysframe.sources.perf_records import EventAttr, Sample
from pysframe.symbolize.symbolizer import UNKNOWN, Symbolizer
from pysframe.unwind.address_space import Mapping, Module
from pysframe.unwind.unwinder import FrameMethod, Stop, Unwind

LUA = FIXTURES / "real" / "lua-2.46-x86_64" / "lua"
needs_lua = pytest.mark.skipif(not LUA.exists(), reason="no Lua fixture")
#: Where the Lua binary is mapped: its text segment (offset and address 0x7000) at BASE.
BASE = 0x5555_5555_4000
#: Two functions of the Lua binary (their symbols, as nm prints them).
LUA_V_EXECUTE, LUA_H_GET = 0x2E2E0, 0x28310


def lua_mapping(image: ElfImage | None) -> Mapping:
    module = Module(str(LUA), None, BASE, None, "test", image) if image is not None else None
    return Mapping(BASE + 0x7000, BASE + 0x7000 + 0x2B000, 0x7000, "/srv/lua", None, module)


@needs_lua
def test_a_frame_is_named_by_the_start_of_its_function() -> None:
    mapping = lua_mapping(ElfImage(str(LUA)))
    for start in (LUA_V_EXECUTE, LUA_H_GET):
        names = {unnamed_function(mapping, BASE + start + step) for step in (0, 1, 0x40, 0x61)}
        assert names == {f"lua+{start:#x}"}  # the text's offset in the file is its address


@needs_lua
def test_without_its_binary_a_frame_is_named_by_its_file() -> None:
    assert unnamed_function(lua_mapping(None), BASE + LUA_V_EXECUTE) == "[lua]"


@needs_lua
def test_without_an_fde_a_frame_is_named_by_its_file() -> None:
    mapping = lua_mapping(ElfImage(str(LUA)))
    assert unnamed_function(mapping, BASE + 0x7004) == "[lua]"  # .init: no FDE covers it


def _unwound(pcs: list[int], mappings: list[Mapping | None], callchain: tuple[int, ...] = ()
             ) -> UnwoundSample:
    attr = EventAttr(1, 0, 0x1 | 0x2 | 0x4 | 0x20 | 0x100, 0, 0, 0, 0, name="cpu-clock")
    sample = Sample(0, 2, ip=pcs[0], pid=5, tid=5, time=1, period=10, callchain=callchain,
                    attr=attr)
    unwind = Unwind(stop=Stop.RECORDED)
    for pc, mapping in zip(pcs, mappings, strict=True):
        unwind.add(pc, FrameMethod.RECORDED if unwind.pcs else FrameMethod.IP)
        unwind.mappings.append(mapping)
    return UnwoundSample(sample, "lua", unwind, unwind.mappings)


@needs_lua
def test_the_frames_of_one_function_are_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Symbolizer, "function", lambda *_: UNKNOWN)  # as if stripped
    mapping = lua_mapping(ElfImage(str(LUA)))
    bare = lua_mapping(None)
    samples = [_unwound([BASE + LUA_H_GET + leaf, BASE + LUA_V_EXECUTE + 0x101], [mapping] * 2)
               for leaf in (0x10, 0x20, 0x30)]
    samples += [_unwound([BASE + 0x9000 + leaf], [bare]) for leaf in (0, 8)]
    counts = collect(samples).name_counts()
    assert counts == {("lua", "lua+0x2e2e0", "lua+0x28310"): 3, ("lua", "[lua]"): 2}


def test_kernel_frames_without_symbols_are_one_node() -> None:
    kernel = (1 << 64) - 128
    samples = [_unwound([0x401000], [None], (kernel, 0xFFFF_FFFF_8100_0000 + offset))
               for offset in (0, 0x1234)]
    assert collect(samples).name_counts() == {
        ("lua", "[unknown]", "[kernel.kallsyms]_[k]"): 2}

"""Names of frames without a symbol in the profiles of ``sframe report``: the start of their
function where the binary's ``.eh_frame`` knows it (``file+0xoffset``, one node per
function, not one per instruction address), else the file (``[file]``); kernel frames
without symbols: ``[kernel.kallsyms]``. (tests/test_report_outputs.py checks the names
against the symbols of the binary before it was stripped, on a recording made there.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.support.oracles import need_perf
from tests.support.parity import as_perf61, recording_directory

from conftest import FIXTURES
from pysframe.elf import ElfImage
from pysframe.report.profiles import collect, unnamed_function
from pysframe.session.perf import UnwoundSample
from pysframe.sources.perf_records import EventAttr, Sample
from pysframe.symbolize import kernel as kernel_module
from pysframe.symbolize.symbolizer import UNKNOWN, Symbolizer
from pysframe.symbolize.symbols import Symbol, SymbolTable
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


# --- kernel frames of recordings without callchains ---------------------------------------

def test_a_kernel_ip_without_callchain_is_a_kernel_frame() -> None:
    kernel = SymbolTable([Symbol(0xFFFF_FFFF_8100_0000, 0xFFFF_FFFF_8100_1000, "read_zero",
                                 "STB_GLOBAL", 0)])
    sample = _unwound([0xFFFF_FFFF_8100_0010], [None])
    sample.unwind.stop = Stop.NO_CALLCHAIN
    sample.sample.attr = EventAttr(1, 0, 0x1 | 0x2 | 0x4 | 0x100, 0, 0, 0, 0, name="cpu-clock")
    assert collect([sample], kernel=kernel).name_counts() == {("lua", "read_zero_[k]"): 1}


def test_without_a_recorded_kernel_the_running_one_is_read_when_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """perf record -B names no kernel build id: perf reads /proc/kallsyms then, so do we;
    only at the first kernel frame (a recording of user code alone never pays for it)."""
    reads: list[bool] = []
    table = SymbolTable([Symbol(0x1000, 0x2000, "f", "STB_GLOBAL", 0)])
    monkeypatch.setattr(kernel_module, "_kallsyms", lambda _: reads.append(True) or table)
    monkeypatch.setattr(kernel_module, "load_kallsyms", lambda: reads.append(True) or table)
    found = kernel_module.kernel_symbols_for(None)
    assert found is not None and reads == []
    assert found.lookup(0x1010) == ("f", 0x10) and found.lookup(0x3000) is None
    assert reads == [True]


KERNEL_WORK = ["dd", "if=/dev/zero", "of=/dev/null", "bs=64k", "count=60000"]


@pytest.fixture(scope="module")
def without_callchains(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`perf record` without -g of a command that runs in the kernel, with and without
    build ids (-B)."""
    perf, directory = recording_directory(tmp_path_factory, "nocallchain")
    found = {}
    for name, options in (("ids", []), ("no-ids", ["-B"])):
        path = directory / f"{name}.data"
        subprocess.run([perf, "record", "-q", "-N", "--no-bpf-event", "-e", "cpu-clock", *options,
                        "-o", str(path), "--", *KERNEL_WORK], check=True, capture_output=True,
                       timeout=120)
        found[name] = path
    return found


@pytest.mark.parametrize("engine", [None, "vector"], ids=["default", "batch"])
@pytest.mark.parametrize("name", ["ids", "no-ids"])
def test_kernel_frames_without_callchains_as_perf_names_them(
        without_callchains: dict[str, Path], name: str, engine: str | None,
        tmp_path: Path) -> None:
    """On a first run (an empty cache): the sample-by-sample path reads kallsyms in
    Python; the batch pipeline reads it in a child while numpy is imported and parses it
    as arrays (-B: in this process, as arrays); either way, perf's names."""
    path = without_callchains[name]
    theirs = subprocess.run([need_perf(), "script", "-i", str(path)], capture_output=True,
                            text=True, check=True, timeout=120).stdout
    kernel = [line for line in theirs.splitlines() if line.endswith("([kernel.kallsyms])")]
    assert len(kernel) > 50 and not any("[unknown]" in line for line in kernel)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    if engine is not None:
        env["PYSFRAME_ENGINE"] = engine
    ours = subprocess.run([sys.executable, "-m", "pysframe", "script", str(path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert ours.returncode == 0, ours.stderr
    assert as_perf61(ours.stdout.splitlines(), theirs.splitlines()) == theirs.splitlines()
    # the profile's leaves are the functions perf names, kernel ones marked _[k]
    folded = subprocess.run([sys.executable, "-m", "pysframe", "report", str(path), "-o", "-"],
                            capture_output=True, text=True, timeout=300)
    assert folded.returncode == 0, folded.stderr
    ours_leaves: Counter[str] = Counter()
    for line in folded.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        ours_leaves[stack.rpartition(";")[2]] += int(count)
    theirs_leaves = Counter(
        f"{found[1]}_[k]" if found[2] == "[kernel.kallsyms]" else found[1]
        for found in re.finditer(r" [0-9a-f]+ (\S+?)\+0x[0-9a-f]+ \((\S+)\)$", theirs, re.M))
    kernel_leaves = {leaf: count for leaf, count in theirs_leaves.items() if leaf.endswith("_[k]")}
    assert kernel_leaves and all(ours_leaves[leaf] == count
                                 for leaf, count in kernel_leaves.items())

"""``sframe record``'s eBPF walker, run through the test interpreter, frame by frame against
the scalar tracer (issue 24, items 2 and 3).

Cases: (a) random pcs and synthetic stacks over the rows of every x86-64 fixture (the
walker is x86-64 only): row starts, bytes into rows, PLT stubs, flexible V3 rows,
function ends, outermost rows, recursions to the frame limit, pcs in no mapping; (b)
every sample of the fixture recording made with ``perf record --call-graph dwarf`` (its
registers and stack copy) and of tests/data's recordings, and recorded stacks at the
sigreturn trampoline; (c) gcore
cores of fixture programs (every thread). Each case gives the same frames and the same
stop reason in both, the stop codes mapped by :data:`SAME_STOP`, or a difference named
in :data:`DIFFERENCES` and checked to be that difference. Then deliberately broken
walkers (:data:`MUTANTS`) and table loaders (:data:`TABLE_MUTANTS`) must each fail: a
difference, or a fault of the interpreter (an access the verifier would refuse). Run
with ``-s`` for the counts.

Not a mutant here: the frame limit's check before ``user[count]`` (``count >=
USER_FRAMES``) raised past the array. The ``bpf_loop`` bound (``USER_FRAMES - 1`` steps)
already keeps every concrete run inside it; the check is there for the verifier, which
cannot see that bound through the state on the stack, and only the verifier's abstract
run can miss it. An interpreter runs concrete values.

Inputs are made the same on purpose, and named here: the walker gets the tables the
recorder would load (``record/tables.py``: files only, the kernel's refusals for the
recording; in (a) every fixture's table, V1 and V2 included, so every row is tried), and
the scalar tracer gets the same tables (a mapping the walker has no rows for is walked by
frame pointer in both). The walker reads user memory wherever it is mapped; the tracer
reads words: both read the same memory, the copy and the binaries' code (so the tracer
takes its general path, not the inline reads of a perf copy, which the batch engine's
tests hold to it; and its MEMORY and COPY_ENDED are one).
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from tests.support.bpf_interp import Fault
from tests.support.synthetic_stacks import Binary, make_case, map_fixture
from tests.support.walker_run import (
    RIG_FRAMES,
    TGID,
    CopyAndCode,
    WalkerRig,
    rig_walker,
    uncovered,
    walker_labels,
    walker_space,
)

from conftest import FIXTURES, REPO, manifest_entries
from pysframe.format.constants import ABI
from pysframe.record import asm, tables
from pysframe.record.asm import Asm
from pysframe.record.tables import procs_value, walker_rows
from pysframe.record.walker import MAPPING, MAPPINGS, walker
from pysframe.session.tables import GeneratedTables
from pysframe.sources.core import CoreFile
from pysframe.unwind.address_space import AddressSpace, Mapping
from pysframe.unwind.batch import BatchSample
from pysframe.unwind.flat import (
    BIAS,
    CFA_SHIFT,
    KIND_DEFAULT,
    KIND_RARE,
    OUTERMOST,
    RA_SHIFT,
    FlatTable,
)
from pysframe.unwind.modules import BinaryFinder
from pysframe.unwind.unwinder import (
    X86_64_SIGRETURN,
    FrameMethod,
    Registers,
    Stop,
    Unwind,
    Unwinder,
)

RECORDING = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
#: With the repository's own small recordings (a shell that execs, a zstd-compressed one).
RECORDINGS = [RECORDING, *sorted((REPO / "tests" / "data").glob("*.perf.data"))]
ELF_FIXTURES = [FIXTURES / entry["path"] for entry in manifest_entries()
                if entry["arch"] == "x86_64"]
CASES_PER_FIXTURE = 30
SEED = 24

#: The walker's stop codes (its records' ``stop`` field: record/walker.py, sampler.py) and
#: the scalar tracer's stops each stands for; one table until the stop enum lands.
SAME_STOP: dict[int, frozenset[Stop]] = {
    1: frozenset({Stop.DEPTH}),
    3: frozenset({Stop.MEMORY, Stop.COPY_ENDED}),  # the walker cannot tell them apart
    4: frozenset({Stop.ZERO_PC}),
    5: frozenset({Stop.BACKWARDS, Stop.NO_ADVANCE}),  # one code for both
    6: frozenset({Stop.OUTERMOST}),
    9: frozenset({Stop.NO_RULE, Stop.NO_MODULE}),  # no mapping: the frame-pointer step
}
#: The walker's codes for a rule it lacks and for the sigreturn trampoline. Its code 8
#: (a PLT block too large to write out as rows) is a difference here: no fixture has one.
RARE, SIGNAL = 7, 10
#: Labels of the walker no case reaches: ``stop_depth`` (its check is for the verifier:
#: the ``bpf_loop`` bound ends every walk first, leaving the stop code the walk started
#: with, the frame limit's) and ``stop_plt`` (no fixture has a PLT block too large to
#: write out as rows).
NEVER_REACHED = frozenset({"stop_depth", "stop_plt"})
#: Where the two may differ, each checked to be exactly that (:func:`compare`).
DIFFERENCES = {
    "rare rule": "the walker stops (code 7) at a row whose rule it lacks (flexible V3 "
                 "rules, register-based CFA, a mangled RA, offsets too large to pack); "
                 "the tracer applies it and goes on: the frames before are the same",
    "signal frame": "at the sigreturn trampoline the walker stops (code 10); the tracer "
                    "steps into the interrupted frame",
    "bad return address": "the tracer refuses a frame-pointer return address outside "
                          "executable code (BAD_RA); the walker keeps it as a frame",
}


@dataclass
class Tally:
    cases: int = 0
    frames: int = 0
    deepest: int = 0
    instructions: int = 0
    stops: Counter[str] = field(default_factory=Counter)
    #: The walker's instructions executed (by index in the program).
    coverage: set[int] = field(default_factory=set)
    #: What the synthetic cases' pcs aim at (row, plt, rare: flexible and other rules...).
    aims: Counter[str] = field(default_factory=Counter)
    named: Counter[str] = field(default_factory=Counter)
    differences: list[str] = field(default_factory=list)


def word_at(rig_rows: dict[int, tuple[int, int, int, list[int], list[int]]], pc: int
            ) -> int | None:
    """The rule word the walker's rows give ``pc`` (a lookup pc), None: no row."""
    from bisect import bisect_right

    for start, end, bias, starts, words in rig_rows.values():
        if start <= pc < end:
            index = bisect_right(starts, pc - bias) - 1
            return words[index] if index >= 0 else None
    return None


def compare(walked: list[int], stop: int, expected: Unwind,
            rows: dict[int, tuple[int, int, int, list[int], list[int]]]) -> str | None:
    """None if the walker's frames and stop are the tracer's, or the name of a documented
    difference it is; a message otherwise."""
    pcs, methods = expected.pcs, expected.methods
    if stop in SAME_STOP and walked == pcs and expected.stop in SAME_STOP[stop]:
        return None
    last = len(walked) - 1
    lookup = walked[-1] - (last > 0)
    if stop == RARE and walked == pcs[:len(walked)] and len(pcs) > last:
        word = word_at(rows, lookup)
        if word is not None and word & 3 == KIND_RARE and word != OUTERMOST:
            return "rare rule"
    if (stop == SIGNAL and walked == pcs[:len(walked)] and len(methods) > last
            and methods[last] == FrameMethod.SIGRETURN):
        return "signal frame"
    if (expected.stop == Stop.BAD_RA and walked[:len(pcs)] == pcs
            and len(walked) > len(pcs)):
        return "bad return address"
    first = next((i for i, (a, b) in enumerate(zip(walked, pcs, strict=False)) if a != b),
                 min(len(walked), len(pcs)))
    return (f"walker {[hex(pc) for pc in walked]} stop {stop}; tracer "
            f"{[hex(pc) for pc in pcs]} {expected.stop.name}; first difference at frame "
            f"{first}")


class Conformance:
    """One address space: the walker (maybe a mutant's) and the tracer over its cases."""

    def __init__(self, space: AddressSpace, kernel_rules: bool,
                 build: Callable[[int, int, int, int], tuple[bytes, bytes, bytes]] | None = None
                 ) -> None:
        self.space, loaded = walker_space(space, kernel_rules)
        self.rig = WalkerRig(loaded, build)
        self.rows = {id(m): (m.start, m.end, m.module.bias if m.module else 0,
                             [int(s) for s in starts], [int(w) for w in words])
                     for m, starts, words in loaded}
        self.scalar = Unwinder(ABI.AMD64_ENDIAN_LITTLE, RIG_FRAMES)

    def check(self, pc: int, sp: int, fp: int, stack: bytes, tally: Tally, label: str) -> bool:
        """One case into ``tally``; False: a difference not documented. Every fourth is
        sampled in the kernel (the walker takes the task's saved user registers)."""
        return self.check_memory(pc, sp, fp, CopyAndCode(sp, stack, self.space), tally, label)

    def check_memory(self, pc: int, sp: int, fp: int, memory: CopyAndCode, tally: Tally,
                     label: str) -> bool:
        walked = self.rig.walk(pc, sp, fp, memory, in_kernel=tally.cases % 4 == 1)
        tally.coverage |= self.rig.coverage
        if tally.cases % 16 == 9:  # the same sample of a task whose memory is gone
            gone = self.rig.walk(pc, sp, fp, memory, in_kernel=True, exiting=True)
            tally.coverage |= self.rig.coverage
            if gone.pcs or gone.copy is not None:
                tally.differences.append(f"{label}: a task without memory walked: "
                                         f"{gone.pcs[:3]}")
                return False
        expected = self.scalar.unwind(Registers(pc, sp, fp), memory, self.space)
        tally.cases += 1
        tally.frames += len(walked.pcs)
        tally.deepest = max(tally.deepest, len(walked.pcs))
        tally.instructions += walked.executed
        tally.stops[expected.stop.name] += 1
        verdict = compare(walked.pcs, walked.stop, expected, self.rows)
        if verdict in DIFFERENCES:
            tally.named[verdict] += 1
        elif verdict is not None:
            tally.differences.append(f"{label}: {verdict}")
            return False
        return True


def fixtures() -> Iterator[tuple[str, Binary]]:
    finder = BinaryFinder(tables=GeneratedTables(on_demand=False))  # whole, as the walker's
    for path in ELF_FIXTURES:
        binary = map_fixture(str(path), finder)
        if binary is not None:
            yield "/".join(path.parts[-4:]), binary


def synthetic(tally: Tally, build: Callable[..., tuple[bytes, bytes, bytes]] | None = None,
              per_fixture: int = CASES_PER_FIXTURE, stop_early: bool = False) -> None:
    rng = random.Random(SEED)
    for name, binary in fixtures():
        run = Conformance(binary.space, kernel_rules=False, build=build)
        # Relocatable objects flatten to no rows (their functions' unrelocated starts
        # overlap): a few frame-pointer cases; the linked binaries get the rest.
        for index in range(per_fixture if run.rows else max(1, per_fixture // 10)):
            case = make_case(rng, binary)
            tally.aims[case.aim] += 1
            ok = run.check(case.pc, case.sp, case.fp, case.stack, tally,
                           f"{name} case {index} ({case.aim})")
            if not ok and stop_early:
                return


def recorded(tally: Tally, build: Callable[..., tuple[bytes, bytes, bytes]] | None = None,
             limit: int | None = None, stop_early: bool = False) -> None:
    from tests.test_batch_unwind import collected

    for path in RECORDINGS:
        with collected(path) as (_, snapshots):
            for snapshot in snapshots:
                run = Conformance(snapshot.space, kernel_rules=True, build=build)
                for index, sample in enumerate(snapshot.samples[:limit]):
                    r = sample.registers
                    ok = run.check(r.pc, r.sp, r.fp, bytes(sample.stack), tally,
                                   f"{path.parent.name}/{path.name} sample {index}")
                    if not ok and stop_early:
                        return
                if path == RECORDING:
                    signal_cases(run, snapshot.samples[:20], tally)


def window_edges(tally: Tally) -> None:
    """Frame records at the very end of the readable stack: the walker's window (read from
    16 bytes under a word to the end of its page) cannot be read there, so each word is
    read alone, as in a stack whose last bytes end before its page does."""
    name, binary = next(iter(fixtures()))
    run = Conformance(binary.space, kernel_rules=False)
    sp = 0x7FFF_F000_0000 - 0x800
    for record_at in (0, 16, 64, 2032, 2040):
        stack = bytearray(record_at + 16)
        stack[record_at:record_at + 16] = struct.pack("<QQ", sp + record_at + 256, 0x1000)
        run.check(0x1000, sp, sp + record_at, bytes(stack), tally,
                  f"{name}: a frame record {record_at} bytes above SP, at the stack's end")


def trampolines(space: AddressSpace) -> list[int]:
    """Where the sigreturn trampoline (glibc's ``__restore_rt``) is mapped."""
    found = []
    for mapping in space.mappings:
        image = mapping.module.image if mapping.module is not None else None
        at = bytes(image.data).find(X86_64_SIGRETURN) if image is not None else -1
        if at >= 0 and mapping.start <= mapping.start + at - mapping.pgoff < mapping.end:
            found.append(mapping.start + at - mapping.pgoff)
    return found


def signal_cases(run: Conformance, samples: list[BatchSample], tally: Tally) -> None:
    """Recorded stacks with a frame at the sigreturn trampoline: sampled on it, and
    returned into from a frame-pointer frame (a signal handler's caller)."""
    for trampoline in trampolines(run.space):
        for index, sample in enumerate(samples):
            r, stack = sample.registers, bytearray(sample.stack)
            run.check(trampoline, r.sp, r.fp, bytes(stack), tally, f"sampled at sigreturn {index}")
            # in its rt_sigreturn system call: the pc just after the syscall instruction
            run.check(trampoline + len(X86_64_SIGRETURN), r.sp, r.fp, bytes(stack), tally,
                      f"sampled in sigreturn's system call {index}")
            stack[64:80] = struct.pack("<QQ", r.sp + 512, trampoline)
            run.check(0x1000, r.sp, r.sp + 64, bytes(stack), tally,
                      f"returned into sigreturn {index}")


def report(title: str, tally: Tally, started: float) -> None:
    print(f"\n{title}: {tally.cases} (pc, stack) cases, {tally.frames} frames compared, "
          f"{len(tally.differences)} differences (deepest chain {tally.deepest} frames), "
          f"{tally.instructions} BPF instructions "
          f"interpreted, {time.monotonic() - started:.1f} s")
    print(f"  scalar stops: {dict(tally.stops.most_common())}")
    if tally.aims:
        print(f"  synthetic pcs aimed at: {dict(tally.aims.most_common())}")
    labels = walker_labels()
    print(f"  walker instructions run: {len(tally.coverage)} of {len(walker(1, 2, 3, 4)[0]) // 8}"
          f"; labels never reached: {sorted(uncovered(labels, tally.coverage))}")
    print(f"  named differences: {dict(tally.named)}")
    for line in tally.differences[:20]:
        print("  DIFFERENCE", line)


needs_fixtures = pytest.mark.skipif(not ELF_FIXTURES, reason="no fixtures (../shared/fixtures)")


@needs_fixtures
def test_walker_equals_the_tracer_on_every_fixtures_rows(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tally, started = Tally(), time.monotonic()
    synthetic(tally)
    window_edges(tally)
    report("walker conformance, synthetic stacks over the fixtures' rows", tally, started)
    assert not tally.differences
    assert tally.cases >= 10 * len(ELF_FIXTURES) // 2 and tally.frames > 3 * tally.cases
    assert tally.stops.keys() >= {"OUTERMOST", "NO_RULE", "NO_MODULE", "MEMORY", "ZERO_PC",
                                  "BACKWARDS", "NO_ADVANCE", "DEPTH", "BAD_RA"}
    assert tally.named.keys() >= {"rare rule", "bad return address"}
    assert tally.aims["plt"] >= 30 and tally.aims["rare"] >= 30 and tally.aims["recursion"] >= 30
    # The stack copy's page counts are each run by tests/test_walker_stack_copy.py.
    assert {name for name in uncovered(walker_labels(), tally.coverage)
            if not name.startswith("copy_pages_")} <= NEVER_REACHED | {"stop_signal"}


@pytest.mark.skipif(not RECORDING.exists(), reason="no fixture recording (../shared/fixtures)")
def test_walker_equals_the_tracer_on_every_recorded_sample(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tally, started = Tally(), time.monotonic()
    recorded(tally)
    report("walker conformance, every sample of the recordings "
           f"({', '.join(p.parent.name + '/' + p.name for p in RECORDINGS)})", tally, started)
    assert not tally.differences
    assert tally.cases > 3000 and tally.frames > 40000  # 67,084 with this machine's libc
    assert tally.named["signal frame"] >= 40
    # The frame-pointer step's window reads (fp_chain_*, fp_return_*) are each run by the
    # synthetic stacks: every frame of these recordings has a row.
    assert {name for name in uncovered(walker_labels(), tally.coverage)
            if not name.startswith(("copy_", "fp_chain_", "fp_return_"))} <= NEVER_REACHED | {
        "stop_backwards", "stop_zero", "stop_fault",  # real stacks end at their outermost row
        "no_rule"}  # (every mapped pc of these has a row: a gap in a table has none)


@pytest.mark.skipif(not RECORDING.exists(), reason="no fixture recording (../shared/fixtures)")
def test_a_row_at_the_sigreturn_trampoline_still_ends_the_walk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walker knows the trampoline by its code only where it finds no rule; a table
    with a row there (a signal frame's FDE) is packed with "no rule" over the trampoline
    (tables.without_signal_rows), so the walk ends there as the scalar tracer's does."""
    from tests.test_batch_unwind import collected

    from pysframe.record.tables import signal_trampolines, without_signal_rows

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with collected(RECORDING) as (_, snapshots):
        snapshot = snapshots[0]
        space, loaded = walker_space(snapshot.space)
        trampoline = trampolines(space)[0]
        rows, packed = [], 0
        for mapping, starts, words in loaded:  # CFA = SP + 8, RA at CFA - 8: a plain row
            if mapping.start <= trampoline < mapping.end and mapping.module is not None:
                at = trampoline - mapping.module.bias
                index = int(np.searchsorted(starts, at, side="right"))
                assert words[index - 1] == 0 and starts[index - 1] == at - 1  # as loaded
                word = KIND_DEFAULT | (8 + BIAS) << CFA_SHIFT | (BIAS - 8) << RA_SHIFT
                starts = np.insert(starts, index, [at, at + len(X86_64_SIGRETURN)])
                words = np.insert(words, index, [word, 0])
                starts, words = without_signal_rows(starts, words,
                                                    signal_trampolines(mapping.module))
                packed += 1
            rows.append((mapping, starts, words))
        assert packed == 1
        sample = snapshot.samples[0]
        r = sample.registers
        walked = WalkerRig(rows).walk(trampoline, r.sp, r.fp,
                                      CopyAndCode(r.sp, bytes(sample.stack), space))
    assert (walked.pcs, walked.stop) == ([trampoline], SIGNAL)


@pytest.mark.skipif(not RECORDING.exists(), reason="no fixture recording (../shared/fixtures)")
@pytest.mark.parametrize("tag_checked", [True, False], ids=["walker", "mutant: tag ignored"])
def test_cached_rules_are_forgotten_when_the_tables_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tag_checked: bool) -> None:
    """The walker caches each pc's rule per CPU under the process entry's generation: once
    the entry is written again (a new layout, a table dropped), the same stacks walk as a
    fresh walker with an empty cache walks them. A walker that ignores the generation
    (the mutant) keeps using the old rules."""
    from tests.test_batch_unwind import collected

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    mutant = Mutant("", "step_exact", _op(JX | asm.JNE, 1, 2), lambda i: (i[0], 1, 1, *i[3:]))
    with collected(RECORDING) as (_, snapshots):
        snapshot = snapshots[0]
        space, loaded = walker_space(snapshot.space)
        samples = snapshot.samples[:40]
        # The tables changed: the first mapping with rows loses them (its frames by
        # frame pointer from now on).
        dropped = next(index for index, (_, starts, _) in enumerate(loaded) if len(starts))
        changed = [(mapping, starts[:0] if index == dropped else starts,
                    words[:0] if index == dropped else words)
                   for index, (mapping, starts, words) in enumerate(loaded)]
        if tag_checked:
            rig = WalkerRig(loaded)
        else:
            with mutated(mutant, monkeypatch) as hits:
                rig = WalkerRig(loaded)
            assert hits[0] >= 1
        fresh = WalkerRig(changed)

        def walks(walker: WalkerRig) -> list[tuple[list[int], int]]:
            found = []
            for sample in samples:
                r = sample.registers
                walked = walker.walk(r.pc, r.sp, r.fp, CopyAndCode(r.sp, bytes(sample.stack),
                                                                   space))
                found.append((walked.pcs, walked.stop))
            return found

        before = walks(rig)  # the cache filled with the old rules
        rig.load(changed, generation=1)
        after, expected = walks(rig), walks(fresh)
    assert before != expected  # the change matters to these stacks
    assert (after == expected) is tag_checked


class CoreAndCode(CopyAndCode):
    """A core's memory (where it has the bytes), else the mapped binaries' code."""

    def __init__(self, core: CoreFile, space: AddressSpace) -> None:
        super().__init__(0, b"", space)
        self.core = core

    def read_bytes(self, address: int, size: int) -> bytes | None:
        data = self.core.memory.read_bytes(address, size)
        return data if len(data) == size else super().read_bytes(address, size)


def core_of(child: subprocess.Popen[bytes], directory: Path) -> CoreFile:
    prefix = directory / "core"
    subprocess.run(["gcore", "-o", str(prefix), str(child.pid)], capture_output=True,
                   timeout=120, check=True)
    return CoreFile(f"{prefix}.{child.pid}")


CORE_PROGRAMS = [FIXTURES / "2.46/x86_64/O0/prog", FIXTURES / "2.47.50/x86_64/O2/prog-nopie"]


@pytest.mark.skipif(not all(p.exists() for p in CORE_PROGRAMS), reason="no fixtures here")
@pytest.mark.skipif(shutil.which("gcore") is None, reason="needs gcore (gdb) to make cores")
def test_walker_equals_the_tracer_on_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """The fixture programs blocked in write(2) below printf, and the Lua fixture in
    io.read() inside Lua calls, dumped with gcore: every thread's registers and the core's
    memory."""
    from tests.test_stack_gdb import blocked_in_write

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tally, started = Tally(), time.monotonic()
    lua = FIXTURES / "real" / "lua-2.46-x86_64" / "lua"
    for program in [*CORE_PROGRAMS, lua]:
        if program == lua:
            child = subprocess.Popen([str(lua), "-e", "local function a() return io.read() "
                                      "end io.write('ready\\n') io.flush() print(a())"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            time.sleep(0.1)
        else:
            child = blocked_in_write(program)
        try:
            core = core_of(child, tmp_path)
        finally:
            child.kill()
            child.wait()
            if program != lua:
                os.close(child._pysframe_master)  # type: ignore[attr-defined]
        space = AddressSpace()
        finder = BinaryFinder(tables=GeneratedTables(on_demand=False))  # whole, as the walker's
        for mapped in core.mappings:
            module = finder.module(mapped.path, None, mapped.start, mapped.pgoff)
            if module is not None:
                space.add(Mapping(mapped.start, mapped.end, mapped.pgoff, mapped.path, None,
                                  module))
        run = Conformance(space, kernel_rules=True)
        for thread in core.threads:
            regs = thread.registers
            run.check_memory(regs["rip"], regs["rsp"], regs["rbp"],
                             CoreAndCode(core, run.space), tally,
                             f"{program.name} core thread {thread.tid}")
    report("walker conformance, gcore of the fixture programs", tally, started)
    assert not tally.differences
    assert tally.cases == len(CORE_PROGRAMS) + 1 and tally.frames >= 5 * tally.cases


# -- mutants ---------------------------------------------------------------------------------

Insn = tuple[int, int, int, int, int, str | None]


@dataclass(frozen=True)
class Mutant:
    """One instruction of the walker changed: the ``nth`` (0-based) instruction under
    label ``label`` that ``match`` accepts becomes ``change``'s."""

    name: str
    label: str
    match: Callable[[Insn], bool]
    change: Callable[[Insn], Insn]


def _op(code: int, dst: int | None = None, src: int | None = None, imm: int | None = None
        ) -> Callable[[Insn], bool]:
    return lambda i: (i[0] == code and (dst is None or i[1] == dst)
                      and (src is None or i[2] == src) and (imm is None or i[4] == imm))


J, JX, A64 = asm.JMP, asm.JMP | asm.X, asm.ALU64
MUTANTS = [
    Mutant("binary search: a row starting at the key is passed over (off by one)",
           "search_step", _op(JX | asm.JGT, 1, 2), lambda i: (JX | asm.JGE, *i[1:])),
    Mutant("binary search: the row after the last one at or below the pc", "search",
           _op(A64 | asm.ADD, 1, imm=-1), lambda i: (*i[:4], 0, i[5])),
    Mutant("wrong CFA base: FP-based rules use SP", "cfa_from_fp",
           _op(asm.LDX | asm.MEM | asm.DW, 6, 9), lambda i: (i[0], i[1], i[2], 8, *i[4:])),
    Mutant("missing alignment check of the frame pointer", "fp_guess",
           _op(J | asm.JSET, 3, imm=7), lambda i: (*i[:4], 0, i[5])),
    Mutant("frame pointer below SP accepted", "fp_guess", _op(JX | asm.JLT, 3, 1),
           lambda i: (i[0], 3, 3, *i[3:])),
    Mutant("return addresses looked up exactly, not one byte before", "frame_step",
           _op(A64 | asm.ADD, 6, imm=-1), lambda i: (*i[:4], 0, i[5])),
    Mutant("load bias added instead of subtracted", "scan", _op(A64 | asm.X | asm.SUB, 0, 5),
           lambda i: (A64 | asm.X | asm.ADD, *i[1:])),
    Mutant("saved frame pointer not restored", "fp_done",
           _op(asm.LDX | asm.MEM | asm.DW, 1, 10), lambda i: (*i[:3], -32, *i[4:])),
    Mutant("saved frame pointer read at the RA offset", "fp_saved",
           _op(A64 | asm.RSH, 3, imm=44), lambda i: (*i[:4], 24, i[5])),
    Mutant("a return address of 0 accepted", "advance", _op(J | asm.JEQ, 1, imm=0),
           lambda i: (*i[:4], 99, i[5])),
    Mutant("a CFA that did not move accepted above the topmost frame", "advance",
           _op(J | asm.JEQ, 3, imm=0), lambda i: (*i[:4], 99, i[5])),
    Mutant("outermost rows not recognised", "have_rule", _op(J | asm.JEQ, 7, imm=OUTERMOST),
           lambda i: (*i[:4], 0, i[5])),
    Mutant("frame limit one frame short", "moved_up", _op(J | asm.JGE, 3, imm=RIG_FRAMES),
           lambda i: (*i[:4], RIG_FRAMES - 1, i[5])),
    Mutant("process key written to the wrong stack slot (uninitialised key)", "main_walk",
           lambda i: i[0] == asm.STX | asm.MEM | asm.W and i[1] == 10 and i[3] == -4,
           lambda i: (*i[:3], -128, *i[4:])),
    Mutant("a cached rule used whatever the pc", "step_exact", _op(JX | asm.JNE, 1, 6),
           lambda i: (i[0], 1, 1, *i[3:])),
    Mutant("the stack window kept from the last sample", "main_steps",
           lambda i: i[0] == asm.ST | asm.MEM | asm.DW and i[1] == 1 and i[3] == 8,
           lambda i: (*i[:3], 0, *i[4:])),
    Mutant("a word in the window's last 7 bytes taken (read past them)", "ra_window",
           _op(A64 | asm.ADD, 4, imm=-8), lambda i: (*i[:4], -1, i[5])),
    Mutant("a new window's word taken at its start, not 16 bytes in", "ra_sized",
           _op(asm.LDX | asm.MEM | asm.DW, 1, 5), lambda i: (*i[:3], 16, *i[4:])),
]


def _unsorted(flat: FlatTable) -> tuple[np.ndarray, np.ndarray]:
    starts, words = walker_rows(flat)
    return starts[::-1].copy(), words[::-1].copy()


#: Broken table loaders (record/tables.py's walker_rows replaced).
TABLE_MUTANTS: dict[str, Callable[[FlatTable], tuple[np.ndarray, np.ndarray]]] = {
    "PLT blocks left as one MASK row": lambda flat: (flat.starts, flat.words),
    "rows not sorted": _unsorted,
    "each row's rule shifted to the next row": lambda flat: (
        walker_rows(flat)[0], np.roll(walker_rows(flat)[1], 1)),
}


@contextmanager
def mutated(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The walker's assembler with ``mutant`` applied (yields the count of matches)."""
    original_emit, original_label = Asm._emit, Asm.label
    where = [""]
    hits = [0]

    def label(self: Asm, name: str) -> Asm:
        where[0] = name
        return original_label(self, name)

    def emit(self: Asm, opcode: int, dst: int = 0, src: int = 0, offset: int = 0,
             imm: int = 0, target: str | None = None) -> Asm:
        insn: Insn = (opcode, dst, src, offset, imm, target)
        if where[0] == mutant.label and mutant.match(insn):
            hits[0] += 1
            if hits[0] == 1:
                insn = mutant.change(insn)
        return original_emit(self, *insn)

    with monkeypatch.context() as patch:
        patch.setattr(Asm, "_emit", emit)
        patch.setattr(Asm, "label", label)
        yield hits


@needs_fixtures
@pytest.mark.skipif(not RECORDING.exists(), reason="no fixture recording (../shared/fixtures)")
def test_every_walker_mutant_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    survivors, killed = [], []
    for mutant in MUTANTS:
        with mutated(mutant, monkeypatch) as hits:
            code = rig_walker(10, 11, 12, 13)
        assert hits[0] >= 1, f"mutant {mutant.name!r} no longer applies to walker.py"

        def build(*fds: int, code: tuple[bytes, bytes, bytes] = code
                  ) -> tuple[bytes, bytes, bytes]:
            return code

        tally = Tally()
        try:
            synthetic(tally, build, stop_early=True)
            if not tally.differences:
                recorded(tally, build, limit=300, stop_early=True)
        except Fault as fault:
            killed.append(f"{mutant.name}: interpreter fault ({fault})")
            continue
        if tally.differences:
            killed.append(f"{mutant.name}: {tally.differences[0][:160]}")
        else:
            survivors.append(mutant.name)
    for name, rows in TABLE_MUTANTS.items():
        tally = Tally()
        with monkeypatch.context() as patch:
            patch.setattr(tables, "walker_rows", rows)
            synthetic(tally, stop_early=True)
        (killed if tally.differences else survivors).append(
            f"{name}: {tally.differences[0][:160]}" if tally.differences else name)
    print(f"\nwalker mutants: {len(killed)} killed, {len(survivors)} survived")
    for line in killed:
        print("  KILLED", line)
    assert not survivors, survivors


# -- hostile maps: the walker's own bounds -----------------------------------------------------


def hostile_procs(rng: random.Random, pc: int, capacity: int) -> bytes:
    """A ``procs`` value no loader writes: a mapping count past :data:`MAPPINGS`, row
    ranges past the ``rows`` array or wrapping 32 bits, mappings inside out."""
    count = rng.choice([0, 1, MAPPINGS, MAPPINGS + 1, 1000, (1 << 32) - 1])
    miss = rng.random() < 0.3  # no entry holds the pc: the scan reads every one
    entries = []
    for _ in range(MAPPINGS):
        start = pc + 1 if miss else pc - rng.choice([0, 1, 0x1000, 1 << 40])
        end = pc + rng.choice([1, 0, -8, 0x1000, 1 << 60])
        first = rng.choice([0, capacity - 1, capacity, capacity + 7, (1 << 32) - 1,
                            rng.getrandbits(32)])
        rows = rng.choice([0, 1, capacity, (1 << 32) - 1, rng.getrandbits(32)])
        entries.append(MAPPING.pack(start & (1 << 64) - 1, end & (1 << 64) - 1,
                                    rng.getrandbits(64), first, rows))
    value = bytearray(procs_value(entries))
    struct.pack_into("<I", value, 0, count)
    return bytes(value)


def run_hostile(build: Callable[..., tuple[bytes, bytes, bytes]] | None, cases: int) -> int:
    """Walk recorded stacks under hostile ``procs`` values; returns the walks made (a fault
    of the interpreter propagates)."""
    from tests.test_batch_unwind import collected

    rng = random.Random(SEED)
    with collected(RECORDING) as (_, snapshots):
        snapshot = snapshots[0]
        space, loaded = walker_space(snapshot.space)
        rig = WalkerRig(loaded, build)
        capacity = rig.rows.max_entries
        for index in range(cases):
            sample = snapshot.samples[index % len(snapshot.samples)]
            r = sample.registers
            rig.procs.update(TGID.to_bytes(4, "little"), hostile_procs(rng, r.pc, capacity))
            rig.walk(r.pc, r.sp, r.fp, CopyAndCode(r.sp, bytes(sample.stack), space))
    return cases


@pytest.mark.skipif(not RECORDING.exists(), reason="no fixture recording (../shared/fixtures)")
def test_hostile_maps_keep_the_walker_in_bounds(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever ``procs`` says, every access stays where the verifier allows it; without
    the scan's bound on the mapping count it would not (the interpreter faults)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert run_hostile(None, 300) == 300
    unbounded = Mutant("mapping scan without its bound", "scan",
                       _op(J | asm.JGE, 3, imm=MAPPINGS), lambda i: (*i[:4], 1 << 20, i[5]))
    with mutated(unbounded, monkeypatch) as hits:
        code = walker(10, 11, 12, 13)
    assert hits[0] == 1
    with pytest.raises(Fault, match="map_value access out of bounds"):
        run_hostile(lambda *fds: code, 300)

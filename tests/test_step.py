"""One step for every mode (issue 24): the batch engine and the scalar tracer against
:func:`step` on every row of every fixture ELF, and the vocabulary and policies of the one
:class:`Stop` enum.

For each row of each fixture's SFrame table (every row start of its flat table, gaps
included), two synthetic samples: the row's pc as the topmost frame, and as a caller
(reached through a frame-pointer step from a launcher mapping, so it is looked up one
byte before the return address), each with random registers and a random, sometimes
short, stack copy. The batch engine and the scalar tracer (depth-limited to that one
step) and :func:`step` under the tools' policy must agree on the caller's pc (and for the
batch engine its sp and fp), or on the stop reason.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from conftest import FIXTURES, manifest_entries, needs_fixtures
from pysframe.elf.sections import ElfImage
from pysframe.format.constants import ABI
from pysframe.format.decode import SFrameReader
from pysframe.format.errors import SFrameError
from pysframe.format.lookup import SFrameLookup
from pysframe.unwind.address_space import AddressSpace, Mapping, Module
from pysframe.unwind.batch import BatchSample, BatchUnwinder, _Batch
from pysframe.unwind.flat import flatten
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.step import (
    FP_RULE,
    KERNEL,
    S390X_R14_SLOT,
    WALKER_STOPS,
    Policy,
    Regs,
    Rule,
    Stop,
    rule_of_row,
    step,
)
from pysframe.unwind.unwinder import USER_LIMIT, Registers, StackReads, Unwind, Unwinder

#: Where the fixture's code is mapped (link-time addresses + BIAS), the launcher, the stack.
BIAS = 0x5500_0000_0000
LAUNCH = 0x4000_0000
STACK = 0x7FF0_0000_0000


def fixtures() -> list[Path]:
    return [FIXTURES / str(entry["path"]) for entry in manifest_entries()]


def lookups(path: Path) -> list[SFrameLookup]:
    try:
        sections = ElfImage(str(path)).sframe_sections()
        return [SFrameLookup(SFrameReader(s.relocated, s.address)) for s in sections]
    except SFrameError:
        return []


def expected(rule: Rule | None, regs: Regs, memory: StackMemory, space: AddressSpace,
             policy: Policy, abi: ABI) -> Regs | Stop:
    """What the scalar tracer makes of one step through :func:`step` (the frame-pointer
    fallback's return-address check and the unreadable-word reasons are its own)."""
    reads = StackReads(memory)
    used = FP_RULE if rule is None else rule
    moved = step(used, regs, reads.read, policy)
    if type(moved) is Stop:
        return reads.reason(moved, used)
    assert isinstance(moved, Regs)
    if rule is None and moved.pc != 0 and (moved.pc >= USER_LIMIT[abi]
                                           or space.find(moved.pc - 1) is None):
        return Stop.BAD_RA
    return moved


def row_pcs(lookup: SFrameLookup, abi: ABI) -> list[int]:
    """The first pc of every row: the flat table's row starts (gaps included), or for a
    table the batch engine leaves to the scalar tracer (overlapping functions of an
    object file) every FDE's row starts."""
    table = flatten(lookup, abi)
    if table.rare_all:
        reader = lookup.reader
        pcs = sorted({entry.start + fre.start for entry in reader.fdes()
                      for fre in reader.fres(entry) if entry.start + fre.start >= 0})
    else:
        pcs = sorted(set(table.starts.tolist()))
    for pc in pcs:
        lookup.find_fre(pc)
    return pcs


class Case:
    """One sample: registers, stack copy, and what step() says about the step it tests."""

    def __init__(self, sample: BatchSample, frame: int, want: Regs | Stop) -> None:
        self.sample, self.frame, self.want = sample, frame, want


def stack_images(rng: random.Random, pcs: list[int], big: bool) -> list[bytearray]:
    """A few stack images of 128 words: return addresses into the code (mostly), zeros,
    stack addresses, junk."""
    order: Literal["big", "little"] = "big" if big else "little"
    images = []
    for _ in range(8):
        pool = [0, STACK + 8 * rng.randrange(128), rng.getrandbits(64),
                STACK + rng.randrange(1024)]
        words = [rng.choice(pool) if rng.random() < 0.5 else rng.choice(pcs) + BIAS + 1
                 for _ in range(128)]
        images.append(bytearray(b"".join(w.to_bytes(8, order) for w in words)))
    return images


def cases_for(lookup: SFrameLookup, space: AddressSpace, abi: ABI, rng: random.Random,
              pcs: list[int]) -> list[Case]:
    policy = Policy.tools(abi, 3)
    big = abi is ABI.S390X_ENDIAN_BIG
    order: Literal["big", "little"] = "big" if big else "little"
    images = stack_images(rng, pcs, big)
    cases = []
    for link_pc in pcs:
        pc = link_pc + BIAS
        row = lookup.find_fre(link_pc)
        rule = rule_of_row(row) if row is not None else None
        # topmost: the row's pc itself
        sp = STACK + 8 * rng.randrange(32) + rng.choice((0, 0, 0, 4))
        fp = rng.choice((sp + 8 * rng.randrange(64), sp - 16, sp + 12, 0, STACK + 0x2000))
        lr = rng.choice(pcs) + BIAS + 1
        length = rng.choice((1024, 1024, 1024, 8 * rng.randrange(1, 40)))
        data = bytes(rng.choice(images)[:length])
        memory = StackMemory(sp, data, big)
        want = expected(rule, Regs(pc, sp, fp, lr, {}, True), memory, space, policy, abi)
        cases.append(Case(BatchSample(Registers(pc, sp, fp, lr), data), 0, want))
        # a caller: frame 0 in the launcher (no table: the frame-pointer step) returns to pc
        frame = STACK + 0x100
        image = bytearray(rng.choice(images))
        caller_fp = rng.choice((frame + 16 + 8 * rng.randrange(64), frame, frame + 20, 0))
        if policy.back_chain:
            # s390x: the launcher's back chain (the word at its SP) is the caller's SP,
            # the return address in r14's slot of the caller's save area; FP kept.
            image[0:8] = frame.to_bytes(8, order)
            image[0x100 + S390X_R14_SLOT:0x108 + S390X_R14_SLOT] = (pc + 1).to_bytes(8, order)
            caller = Regs(pc + 1, frame, frame)
        else:
            # AArch64 pac-ret: the record's x30 signed (a code in bits 48-54), stripped.
            code = rng.randrange(1, 128) << 48 if policy.signed_frame_records else 0
            image[0x100:0x110] = (caller_fp.to_bytes(8, order)
                                  + (code | (pc + 1)).to_bytes(8, order))
            caller = Regs(pc + 1, frame + 16, caller_fp)
        length = rng.choice((1024, 1024, 1024, 0x110 + 8 * rng.randrange(40)))
        if policy.back_chain:
            length = max(length, 0x108 + S390X_R14_SLOT)
        data = bytes(image[:length])
        memory = StackMemory(STACK, data, big)
        want = expected(rule, caller, memory, space, policy, abi)
        cases.append(Case(BatchSample(Registers(LAUNCH, STACK, frame, 0), data), 1, want))
    return cases


def check(space: AddressSpace, abi: ABI, cases: list[Case], depth: int) -> int:
    """The batch engine and the scalar tracer on every case (chains ending at ``depth``:
    after the step compared), against step(); returns the steps compared."""
    batch = BatchUnwinder(Unwinder(abi, depth))
    samples = [case.sample for case in cases]
    state = _Batch.of_samples(batch, batch._space(space), samples)
    state.run()
    compared = 0
    for i, case in enumerate(cases):
        # the scalar tracer too: its inline default rule (the hot loop for a caller) and
        # its general rows through step()
        memory = StackMemory(case.sample.registers.sp, case.sample.stack,
                             abi is ABI.S390X_ENDIAN_BIG)
        scalar = batch.scalar.unwind(case.sample.registers, memory, space)
        chains: list[tuple[Unwind, int | None, int | None]] = [(scalar, None, None)]
        if not state.handoff[i]:
            chains.append((state.result.unwind(i), int(state.sp[i]), int(state.fp[i])))
        at = case.frame
        for unwind, sp, fp in chains:
            if isinstance(case.want, Stop):
                assert len(unwind.pcs) == at + 1 and unwind.stop is case.want, (
                    i, unwind, case.want)
            else:
                assert unwind.pcs[at + 1:] == [case.want.pc], (i, unwind, case.want)
                assert unwind.stop is Stop.DEPTH, (i, unwind)
                if sp is not None:
                    assert (sp, fp) == (case.want.sp, case.want.fp), (i, unwind, case.want)
            compared += 1
    return compared


@needs_fixtures
def test_batch_equals_step_on_every_row_of_every_fixture() -> None:
    started = time.monotonic()
    rng = random.Random(24)
    files = compared = rows = 0
    for path in fixtures():
        for lookup in lookups(path):
            abi = ABI(lookup.reader.header.abi)
            try:
                pcs = row_pcs(lookup, abi)
            except SFrameError:
                continue  # a table the tracer drops: no rows to compare
            if not pcs or max(pcs) + 0x1000 >= 1 << 40:
                continue
            space = AddressSpace()
            space.add(Mapping(LAUNCH, LAUNCH + 0x1000, 0, "/launcher", None, None))
            module = Module(str(path), None, BIAS, lookup, "test")
            space.add(Mapping(BIAS + min(pcs), BIAS + max(pcs) + 0x1000, 0, str(path), None,
                              module))
            cases = cases_for(lookup, space, abi, rng, pcs)
            compared += check(space, abi, [c for c in cases if not c.frame], 2)
            compared += check(space, abi, [c for c in cases if c.frame], 3)
            rows += len(pcs)
            files += 1
    assert files >= 400, files
    print(f"{files} tables, {rows} rows, {compared} steps compared, "
          f"{time.monotonic() - started:.1f} s")


def test_one_stop_vocabulary() -> None:
    """The kernel model's old names are the merged reasons; the walker's codes are the
    enum's, one per reason, and unchanged (they are in recorded data and programs)."""
    # (mypy takes the aliases for members of their own: hence the ignores)
    assert Stop.LIMIT is Stop.DEPTH  # type: ignore[comparison-overlap]
    assert Stop.FAULT is Stop.MEMORY  # type: ignore[comparison-overlap]
    assert Stop.NO_METHOD is Stop.NO_RULE  # type: ignore[comparison-overlap]
    assert {code: stop.name for code, stop in WALKER_STOPS.items()} == {
        1: "DEPTH", 2: "UNALIGNED", 3: "MEMORY", 4: "ZERO_PC", 5: "BACKWARDS",
        6: "OUTERMOST", 7: "UNSUPPORTED", 8: "PLT", 9: "NO_RULE", 10: "SIGNAL"}
    assert len({stop.value for stop in Stop}) == len(Stop)


def _memory(words: dict[int, int]) -> StackMemory:
    data = bytearray(0x200)
    for address, value in words.items():
        data[address - STACK:address - STACK + 8] = value.to_bytes(8, "little")
    return StackMemory(STACK, bytes(data))


def test_policies_differ_where_documented() -> None:
    """The same rule and registers under the tools' policy and the kernel's."""
    tools = Policy.tools(ABI.AMD64_ENDIAN_LITTLE)
    from pysframe.format.lookup import Rule as ValueRule
    from pysframe.format.lookup import RuleKind

    ra, fp_slot = ValueRule(RuleKind.CFA, -8, deref=True), ValueRule(RuleKind.CFA, -16, deref=True)
    memory = _memory({STACK + 0x18: 0x401000, STACK + 0x10: STACK + 0x100})
    # an FP-based CFA with FP below SP: the kernel refuses it
    fp_based = Rule(6, 0x20, ra, fp_slot)
    regs = Regs(0x400000, STACK + 0x10, STACK, 0, {}, True)
    assert step(fp_based, regs, memory.read, KERNEL) is Stop.FP_BELOW_SP
    assert step(fp_based, regs, memory.read, tools) == Regs(0x401000, STACK + 0x20,
                                                           STACK + 0x100)
    # a CFA that is not word-aligned
    odd = Rule(7, 0x1C, ra, fp_slot)
    regs = Regs(0x400000, STACK, 0, 0, {}, True)
    assert step(odd, regs, memory.read, KERNEL) is Stop.UNALIGNED
    assert isinstance(step(odd, regs, memory.read, tools), Regs)
    # the same SP in a caller: one check in the kernel, two reasons in the tools
    same = Rule(7, 0, ra, fp_slot)
    regs = Regs(0x400000, STACK + 0x20, 0, None, None, False)
    assert step(same, regs, _memory({STACK + 0x18: 1}).read, KERNEL) is Stop.BACKWARDS
    assert step(same, regs, _memory({STACK + 0x18: 1}).read, tools) is Stop.NO_ADVANCE
    # a return address of 0 ends the tools' chain; the kernel takes it
    zero = Rule(7, 0x20, ra, ValueRule(RuleKind.RETAIN))
    regs = Regs(0x400000, STACK, 0, 0, {}, True)
    assert step(zero, regs, _memory({}).read, tools) is Stop.ZERO_PC
    assert step(zero, regs, _memory({}).read, KERNEL) == Regs(0, STACK + 0x20, 0)
    # an unreadable saved FP: kept by the tools, a fault for the kernel
    far = Rule(7, 0x20, ra, ValueRule(RuleKind.CFA, -0x400, deref=True))
    assert step(far, regs, memory.read, tools) == Regs(0x401000, STACK + 0x20, 0)
    assert step(far, regs, memory.read, KERNEL) is Stop.MEMORY
    # RA as a stack address: the kernel refuses the rule
    address = Rule(7, 0x20, ValueRule(RuleKind.CFA, -8), fp_slot)
    assert step(address, regs, memory.read, KERNEL) is Stop.BAD_RULE
    assert step(address, regs, memory.read, tools).pc == STACK + 0x18  # type: ignore[union-attr]
    # a register rule in a caller: SP is known to the tools, not to the kernel
    from_sp = Rule(7, 0x20, ValueRule(RuleKind.REGISTER, 0x18, 7, True), fp_slot)
    regs = Regs(0x400000, STACK, 0, None, None, False)
    assert step(from_sp, regs, memory.read, KERNEL) is Stop.REGISTER
    assert step(from_sp, regs, memory.read, tools).pc == 0x401000  # type: ignore[union-attr]
    # the frame-pointer method: a guess for the tools, a rule for the kernel
    regs = Regs(0x400000, STACK + 0x20, STACK + 0x10, None, None, False)
    assert step(FP_RULE, regs, memory.read, tools) is Stop.NO_RULE
    assert step(FP_RULE, regs, memory.read, KERNEL) is Stop.FP_BELOW_SP
    assert step(Rule(7, 8, ra, fp_slot, outermost=True), regs, memory.read,
                KERNEL) is Stop.OUTERMOST


@pytest.mark.parametrize("abi", list(ABI))
def test_tools_policy_per_abi(abi: ABI) -> None:
    policy = Policy.tools(abi)
    assert policy.lookup_before_return and not policy.cfa_alignment
    assert (policy.link_register is None) == (abi is ABI.AMD64_ENDIAN_LITTLE)
    assert policy.sp_offset == (-160 if abi is ABI.S390X_ENDIAN_BIG else 0)
    assert not KERNEL.lookup_before_return and KERNEL.max_frames == 510
    assert np.uint64(KERNEL.cfa_alignment) == 8

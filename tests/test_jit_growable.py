"""``pysframe.jit.GrowableSection`` against a straightforward model: thousands of random
add / invalidate / compact sequences; after each step the section's bytes pass
``sframe validate``, and every lookup (the section's own, and the format's lookup over
its bytes) equals the model's."""

from __future__ import annotations

import random

import pytest

from pysframe.cfi.instructions import (
    DW_CFA_advance_loc,
    DW_CFA_def_cfa,
    DW_CFA_def_cfa_offset,
    DW_CFA_def_cfa_register,
    DW_CFA_offset,
    DW_CFA_register,
    Instruction,
)
from pysframe.format.constants import ABI, F_FDE_SORTED, PCType
from pysframe.format.decode import SFrameReader
from pysframe.format.lookup import SFrameLookup
from pysframe.format.model import FDE, FRE
from pysframe.format.validation import ERROR, validate
from pysframe.generate.gas import translate
from pysframe.jit import GrowableSection, SectionFull

AMD64 = ABI.AMD64_ENDIAN_LITTLE
CIE = [Instruction(DW_CFA_def_cfa, 7, 8), Instruction(DW_CFA_offset, 16, -8)]


def jit_function(rng: random.Random, start: int, size: int) -> FDE:
    """A function as a JIT describes it, through the generator's CFI translation: a
    frameless leaf, a push-rbp frame, a frame on another register (a flexible V3 row),
    or a frame pointer kept in a register (flexible too)."""
    kind = rng.randrange(4)
    body: list[Instruction] = []
    if kind == 1:
        body = [Instruction(DW_CFA_advance_loc, 1), Instruction(DW_CFA_def_cfa_offset, 16),
                Instruction(DW_CFA_offset, 6, -16), Instruction(DW_CFA_advance_loc, 3),
                Instruction(DW_CFA_def_cfa_register, 6)]
    elif kind == 2:
        body = [Instruction(DW_CFA_advance_loc, 2), Instruction(DW_CFA_def_cfa, 10, 0)]
    elif kind == 3:
        body = [Instruction(DW_CFA_advance_loc, 4), Instruction(DW_CFA_register, 6, 3)]
    for _ in range(rng.randrange(3)):
        body += [Instruction(DW_CFA_advance_loc, rng.randrange(1, 6)),
                 Instruction(DW_CFA_def_cfa_offset, 8 * rng.randrange(1, 40))]
    return translate(CIE + body, start, size, AMD64)


def plt_like(rng: random.Random, start: int) -> FDE:
    """A block of stubs whose rows repeat every 16 bytes (PCMASK)."""
    return FDE(start, 16 * rng.randrange(1, 5),
               [FRE(0, (8,)), FRE(6, (16,))], pc_type=PCType.MASK, rep_size=16)


class Model:
    """The live functions by start; a lookup scans them all."""

    def __init__(self) -> None:
        self.live: dict[int, FDE] = {}

    def find(self, pc: int) -> tuple[int, FRE] | None:
        for fde in self.live.values():
            if fde.start <= pc < fde.end:
                offset = pc - fde.start
                if fde.pc_type == PCType.MASK:
                    offset %= fde.rep_size
                rows = [fre for fre in fde.fres if fre.start <= offset]
                return (fde.start, rows[-1]) if rows else None
        return None


def from_bytes(data: bytes, pc: int) -> tuple[int, FRE] | None:
    """The format's own lookup over the section's bytes."""
    reader = SFrameReader(data, 0)
    entry = SFrameLookup(reader).find_fde(pc)
    if entry is None:
        return None
    offset = pc - entry.start
    if entry.pc_type == PCType.MASK:
        offset %= entry.rep_size
    rows = [fre for _, fre in reader.fres_with_offsets(entry) if fre.start <= offset]
    return (entry.start, rows[-1]) if rows else None


def same(ours: tuple[FDE, FRE] | None, expected: tuple[int, FRE] | None) -> bool:
    if ours is None or expected is None:
        return ours is None and expected is None
    fde, fre = ours
    start, row = expected
    return fde.start == start and (fre.start, fre.words, fre.base_reg) == (
        row.start, row.words, row.base_reg)


def check(section: GrowableSection, model: Model, rng: random.Random) -> None:
    data = section.section_bytes()
    errors = [finding for finding in validate(data, 0) if finding.severity == ERROR]
    assert not errors, errors[:3]
    reader = SFrameReader(data, 0)
    assert bool(reader.header.flags & F_FDE_SORTED) == section.is_sorted
    assert sorted(fde.start for fde in section.functions) == sorted(model.live)
    probes = [rng.randrange(0x1000, 0x1000 + 64 * 256) for _ in range(12)]
    probes += [fde.start for fde in model.live.values()]
    probes += [fde.end - 1 for fde in model.live.values()]
    for pc in probes:
        expected = model.find(pc)
        assert same(section.find(pc), expected), hex(pc)
        decoded = from_bytes(data, pc) if model.live else None
        if expected is None:
            assert decoded is None, hex(pc)
        else:
            assert decoded is not None and decoded[0] == expected[0], hex(pc)
            assert (decoded[1].start, decoded[1].words) == (expected[1].start, expected[1].words)


@pytest.mark.parametrize("seed", range(8))
def test_random_sequences_stay_valid_and_agree_with_the_model(seed: int) -> None:
    rng = random.Random(seed)
    sequences = 250
    for _ in range(sequences):
        section = GrowableSection(AMD64, budget=rng.choice([600, 2000, 1 << 16]))
        model = Model()
        for _ in range(rng.randrange(4, 16)):
            action = rng.random()
            if action < 0.55 or not model.live:
                slot = rng.randrange(256)  # 64-byte slots: functions never overlap
                start = 0x1000 + 64 * slot
                if start in model.live:
                    continue
                fde = (plt_like(rng, start) if rng.random() < 0.1
                       else jit_function(rng, start, rng.randrange(8, 64)))
                try:
                    section.add(fde)
                except SectionFull:
                    assert section.holes == 0  # refused only after compacting
                    continue
                model.live[start] = fde
            elif action < 0.85:
                start = rng.choice(sorted(model.live))
                section.invalidate(start)
                del model.live[start]
            else:
                holes = section.holes + 16 * section.dead
                assert section.compact() == holes
                assert section.holes == 0 and section.is_sorted
            assert section.footprint <= section.budget
            check(section, model, rng)


def test_compaction_sorts_and_reclaims() -> None:
    rng = random.Random(7)
    section = GrowableSection(AMD64)
    for slot in (5, 1, 3, 2):
        section.add(jit_function(rng, 0x1000 + 64 * slot, 32))
    assert not section.is_sorted
    assert not SFrameReader(section.section_bytes(), 0).header.flags & F_FDE_SORTED
    before = section.footprint
    section.invalidate(0x1000 + 64 * 3)
    assert section.footprint == before  # a dead entry and a hole until compaction
    hole = section.holes
    assert hole > 0 and section.dead == 1
    assert section.compact() == hole + 16  # the rows and the index entry
    assert section.footprint == before - hole - 16
    assert section.is_sorted and section.holes == 0
    assert SFrameReader(section.section_bytes(), 0).header.flags & F_FDE_SORTED
    assert [fde.start for fde in section.functions] == [0x1040, 0x1080, 0x1140]


def test_budget_compacts_then_refuses() -> None:
    rng = random.Random(3)
    first = jit_function(rng, 0x1000, 32)
    section = GrowableSection(AMD64, budget=28 + 2 * (16 + 40))
    section.add(first)
    section.invalidate(0x1000)
    section.add(jit_function(rng, 0x2000, 32))  # fits once the hole is reclaimed
    with pytest.raises(SectionFull, match="after compaction"):
        for slot in range(3, 10):
            section.add(jit_function(rng, 0x1000 * slot, 32))
    with pytest.raises(ValueError, match="overlaps"):
        section.add(jit_function(rng, 0x2008, 8))
    with pytest.raises(KeyError):
        section.invalidate(0x9999)


@pytest.mark.parametrize("block", [1, 2, 5])
def test_sorted_starts_agree_with_a_sorted_list(monkeypatch: pytest.MonkeyPatch,
                                                block: int) -> None:
    """The blocked index of live starts (splits, emptied blocks, the rebuild at compaction)
    against a plain sorted list, with blocks small enough that every path is taken."""
    from bisect import bisect_right

    from pysframe.jit import growable

    monkeypatch.setattr(growable, "BLOCK", block)
    rng = random.Random(block)
    starts = growable._SortedStarts()
    model: list[int] = []
    for step in range(3000):
        if model and rng.random() < 0.45:
            value = model.pop(rng.randrange(len(model)))
            starts.remove(value)
        else:
            value = rng.randrange(10_000)
            if value in model:
                continue
            model.append(value)
            model.sort()
            starts.add(value)
        if step % 500 == 499:
            starts = growable._SortedStarts(model)
        assert len(starts) == len(model)
        for probe in (rng.randrange(-5, 10_005), value, value - 1):
            at = bisect_right(model, probe) - 1
            assert starts.floor(probe) == (model[at] if at >= 0 else None)

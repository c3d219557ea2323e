"""Synthetic samples over one binary's rows, for the walker's conformance test.

A case is a pc (a row start, a byte into a row, a PLT stub, a flexible V3 row, a
function's end, or no code at all), a stack pointer, a frame pointer and a stack copy.
The copy is written along the chain the binary's rows give (each caller's return address
and saved frame pointer where the rule puts them), with some words damaged, so chains go
deep through the rules instead of stopping at the first junk word; the other words are
random bytes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from pysframe.format.constants import ABI
from pysframe.unwind.address_space import AddressSpace, Mapping
from pysframe.unwind.flat import (
    FP_BASED,
    FP_SAVED,
    KIND_DEFAULT,
    KIND_NONE,
    KIND_RARE,
    OUTERMOST,
    FlatTable,
    unpack_offsets,
)
from pysframe.unwind.flat_cache import cached_flat
from pysframe.unwind.modules import BinaryFinder

STACK_TOP = 0x7FFD_0000_0000
STACK_SIZE = 8192
DYN_BASE = 0x7F12_3400_0000


@dataclass
class Case:
    pc: int
    sp: int
    fp: int
    stack: bytes
    #: What the case aims at ("row", "plt", "rare", "end", "unmapped", ...).
    aim: str


@dataclass
class Binary:
    """A fixture mapped into an address space, and the runtime pcs worth aiming at."""

    space: AddressSpace
    mapping: Mapping
    bias: int
    flat: FlatTable
    pcs: dict[str, list[int]]
    #: Return addresses of SP-based rows (the pc and the pc - 1 in one row): a function
    #: calling itself there makes a chain as deep as the copy allows.
    recursive: list[int]


def map_fixture(path: str, finder: BinaryFinder) -> Binary | None:
    """``path`` mapped whole (file offset 0, executable) at its link address (EXEC) or at
    :data:`DYN_BASE` (shared objects, relocatable objects)."""
    probe = finder.module(path, None, 0, 0)
    if probe is None or probe.lookup is None or probe.image is None:
        return None
    loads = [s for s in probe.image.program_headers() if s.type == 1]
    exec_type = probe.image.elf.header["e_type"] == "ET_EXEC"
    start = (min(s.vaddr for s in loads) & ~0xFFF) if exec_type and loads else DYN_BASE
    module = finder.module(path, None, start, 0)
    assert module is not None and module.lookup is not None
    flat = cached_flat(module.lookup, ABI.AMD64_ENDIAN_LITTLE, None)
    last = int(flat.starts[-1]) if len(flat.starts) else 0
    end = max(start + len(probe.image.data), module.bias + last + 64)
    mapping = Mapping(start, (end + 0xFFF) & ~0xFFF, 0, path, None, module)
    space = AddressSpace()
    space.add(mapping)
    bias = module.bias
    kinds = flat.words & np.uint64(3)
    pcs = {
        "row": [bias + int(s) for s in flat.starts[kinds != 0]],
        "end": [bias + int(s) for s in flat.starts[kinds == 0]],
        "rare": [bias + int(s) for s, w in zip(flat.starts, flat.words, strict=True)
                 if int(w) & 3 == KIND_RARE and int(w) != OUTERMOST],
        "outermost": [bias + int(s) for s in flat.starts[flat.words == OUTERMOST]],
        "plt": [bias + m.start + k for m in flat.masks for k in range(0, m.end - m.start, 3)],
        "mapped": list(range(mapping.start, mapping.end, 97)),
    }
    cfa, _, _ = unpack_offsets(flat.words)
    sp_based = ((flat.words & np.uint64(3 | FP_BASED)) == KIND_DEFAULT) & (cfa >= 16)
    room = np.append(np.diff(flat.starts.astype(np.int64)), 0) > 4
    recursive = [bias + int(s) + 2 for s in flat.starts[sp_based & room]]
    return Binary(space, mapping, bias, flat, {k: v for k, v in pcs.items() if v}, recursive)


def code_pc(rng: random.Random, binary: Binary) -> int:
    aim = "row" if rng.random() < 0.8 and "row" in binary.pcs else rng.choice(list(binary.pcs))
    return rng.choice(binary.pcs[aim]) + rng.choice([0, 0, 1, 3, rng.randrange(64)])


def make_case(rng: random.Random, binary: Binary) -> Case:
    """One case: registers, and a copy written along the chain the rows give (each
    caller's return address and saved frame pointer where the rule says), now and then
    damaged (a junk or zero word, a frame pointer that is no frame pointer)."""
    aim = rng.choice([*binary.pcs, "any", "unmapped"])
    if aim == "unmapped":
        pc = rng.choice([0x1000, binary.mapping.end + 0x10000, rng.getrandbits(47)])
    elif aim == "any":
        pc = code_pc(rng, binary)
    else:
        pc = rng.choice(binary.pcs[aim]) + rng.choice([0, 0, 1, 2, 7])
    sp = STACK_TOP - STACK_SIZE - rng.randrange(0, 4096, 8) + rng.choice([0, 0, 0, 8, 4, 1])
    fp = rng.choice([sp + 16 * rng.randrange(1, 64), sp + 16 * rng.randrange(1, 64),
                     sp + 16 * rng.randrange(1, 64), sp + 16, sp - 16, sp + 3, 0,
                     rng.getrandbits(64)])
    data = bytearray(rng.randbytes(STACK_SIZE))
    damage = rng.choice([0.0, 0.01, 0.03, 0.1])
    if binary.recursive and rng.random() < 0.1:
        aim, pc = "recursion", rng.choice(binary.recursive)
        _write_chain(rng, binary, data, pc, sp, fp, 140, damage, pc)
    else:
        _write_chain(rng, binary, data, pc, sp, fp, rng.choice([3, 8, 30, 140]), damage)
    return Case(pc, sp, fp, bytes(data), aim)


def _write_chain(rng: random.Random, binary: Binary, data: bytearray, pc: int, sp: int,
                 fp: int, frames: int, damage: float, recursion: int | None = None) -> None:
    """``frames`` callers written from (pc, sp, fp) on, each word damaged with probability
    ``damage``; ``recursion``: every caller is that return address."""
    base = sp

    def put(address: int, value: int) -> bool:
        if not base <= address <= base + STACK_SIZE - 8:
            return False
        if rng.random() < damage:
            value = rng.choice([0, rng.getrandbits(64), address, address - 64])
        data[address - base:address - base + 8] = (value & (1 << 64) - 1).to_bytes(8, "little")
        return True

    for depth in range(frames):
        lookup = pc - binary.bias - (depth > 0)
        word = int(binary.flat.lookup(np.array([lookup & (1 << 64) - 1], np.uint64))[0])
        if recursion is not None:
            caller = recursion
        elif "row" in binary.pcs and rng.random() < 0.9:
            caller = rng.choice(binary.pcs["row"]) + rng.choice([1, 1, 2, 3])
        else:
            caller = code_pc(rng, binary) + rng.choice([1, 1, 1, 2, 5])
        if word & 3 == KIND_DEFAULT:
            cfa_offset, ra_offset, fp_offset = (int(x[0]) for x in
                                                unpack_offsets(np.array([word], np.uint64)))
            cfa = (fp if word & FP_BASED else sp) + cfa_offset
            # Now and then a saved FP that gives an FP-based caller no room (its CFA = SP).
            saved = cfa + 16 * rng.randrange(1, 8) if rng.random() > damage * 5 else cfa - 16
            if not put(cfa + ra_offset, caller):
                return
            if word & FP_SAVED:
                put(cfa + fp_offset, saved)
                fp = saved
            sp, pc = cfa, caller
        elif word & 3 == KIND_NONE and not fp & 7 and fp >= sp:
            saved = fp + 16 * rng.randrange(1, 8) if rng.random() > damage * 5 else fp
            if not (put(fp, saved) and put(fp + 8, caller)):
                return
            sp, fp, pc = fp + 16, saved, caller
        else:
            return

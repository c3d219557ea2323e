"""Build large synthetic SFrame sections with the encoder (for the benches).

The functions imitate what gas emits for -O2 code: leaves with one row,
functions that push a few callee-saved registers, frame-pointer functions,
some big frames and a flexible (DRAP) function now and then.
"""

from __future__ import annotations

import random

from pysframe.format.constants import ABI, F_FDE_FUNC_START_PCREL, F_FDE_SORTED, BaseReg, FDEType
from pysframe.format.model import FDE, FRE, Section

SP, FP = BaseReg.SP, BaseReg.FP


def _rows(rng: random.Random, size: int, kind: int) -> tuple[list[FRE], FDEType]:
    if kind == 0:  # leaf
        return [FRE(0, (8,), SP)], FDEType.DEFAULT
    if kind == 1:  # push a few registers, sub rsp, then pops at the end
        pushes = rng.randint(1, 5)
        rows = [FRE(0, (8,), SP)]
        at = 1
        for k in range(pushes):
            rows.append(FRE(at, (16 + 8 * k,), SP))
            at += 2
        frame = 8 + 8 * pushes + rng.choice((0, 8, 24, 40, 120, 4096))
        rows.append(FRE(at + 2, (frame,), SP))
        tail = size - 2 * pushes - 2
        if tail > at + 4:
            rows.append(FRE(tail, (8 + 8 * pushes,), SP))
            rows.append(FRE(size - 1, (8,), SP))
        return rows, FDEType.DEFAULT
    if kind == 2:  # frame pointer
        return [FRE(0, (8,), SP), FRE(1, (16, -16), SP), FRE(4, (16, -16), FP),
                FRE(size - 1, (8, -16), SP)], FDEType.DEFAULT
    # DRAP, flexible
    return [FRE(0, (0x39, 8), FP), FRE(5, (0x51, 0), FP), FRE(14, (0x51, 0, 0, 0x33, 0), FP),
            FRE(18, (0x33, -8, 0, 0x33, 0), FP), FRE(size - 1, (0x39, 8), FP)], FDEType.FLEX


def large_section(num_functions: int, version: int = 3, seed: int = 1,
                  text_start: int = 0x401000, address: int = 0) -> Section:
    """A sorted x86-64 section with ``num_functions`` functions."""
    rng = random.Random(seed)
    fdes = []
    pc = text_start
    for _ in range(num_functions):
        kind = rng.choices((0, 1, 2, 3), weights=(40, 45, 14, 1 if version == 3 else 0))[0]
        size = rng.randint(24, 900) if kind else rng.randint(3, 80)
        rows, fde_type = _rows(rng, size, kind)
        fdes.append(FDE(pc, size, rows, fde_type=fde_type))
        pc += size + rng.choice((0, 0, 1, 5, 10))
    flags = F_FDE_FUNC_START_PCREL | F_FDE_SORTED if version > 1 else F_FDE_SORTED
    return Section(version=version, abi=ABI.AMD64_ENDIAN_LITTLE, flags=flags,
                   cfa_fixed_ra_offset=-8, fdes=fdes, address=address)

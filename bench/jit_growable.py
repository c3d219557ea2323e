"""Bench: a growable SFrame section as a JIT uses it (issue 16).

N functions of a typical JIT shape (a frame-pointer prologue and epilogue, ~200 bytes of
code each, rows from the generator's CFI translation) are added one by one, half of them
invalidated, the section compacted; the cost of each operation per function, and the
section's size against the code it describes, before and after compaction.

    python3 bench/jit_growable.py [--functions N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pysframe.cfi.instructions import (
    DW_CFA_advance_loc,
    DW_CFA_def_cfa,
    DW_CFA_def_cfa_offset,
    DW_CFA_def_cfa_register,
    DW_CFA_offset,
    Instruction,
)
from pysframe.format.constants import ABI
from pysframe.format.validation import ERROR, validate
from pysframe.generate.gas import translate
from pysframe.jit import GrowableSection

AMD64 = ABI.AMD64_ENDIAN_LITTLE
CIE = [Instruction(DW_CFA_def_cfa, 7, 8), Instruction(DW_CFA_offset, 16, -8)]


def function(start: int, size: int):  # type: ignore[no-untyped-def]
    body = [Instruction(DW_CFA_advance_loc, 1), Instruction(DW_CFA_def_cfa_offset, 16),
            Instruction(DW_CFA_offset, 6, -16), Instruction(DW_CFA_advance_loc, 3),
            Instruction(DW_CFA_def_cfa_register, 6),
            Instruction(DW_CFA_advance_loc, size - 6), Instruction(DW_CFA_def_cfa, 7, 8)]
    return translate(CIE + body, start, size, AMD64)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions", type=int, default=20000)
    args = parser.parse_args()
    rng = random.Random(1)
    sizes = [rng.randrange(64, 400) for _ in range(args.functions)]
    starts, at = [], 0x7F0000000000
    for size in sizes:
        starts.append(at)
        at += (size + 15) // 16 * 16
    fdes = [function(start, size) for start, size in zip(starts, sizes, strict=True)]
    section = GrowableSection(AMD64, budget=1 << 30)
    began = time.perf_counter()
    for fde in fdes:
        section.add(fde)
    added = time.perf_counter() - began
    code = sum(sizes)
    full = len(section.section_bytes())
    victims = rng.sample(starts, len(starts) // 2)
    began = time.perf_counter()
    for start in victims:
        section.invalidate(start)
    invalidated = time.perf_counter() - began
    holes = section.holes
    began = time.perf_counter()
    section.compact()
    compacted = time.perf_counter() - began
    data = section.section_bytes()
    errors = [f for f in validate(data, 0) if f.severity == ERROR]
    live_code = code - sum(size for start, size in zip(starts, sizes, strict=True)
                           if start in set(victims))
    n = args.functions
    print(f"{n:,} functions, {code:,} bytes of code")
    print(f"  add         {added / n * 1e6:7.1f} us per function; section {full:,} bytes = "
          f"{100 * full / code:.1f}% of the code ({full / n:.1f} bytes per function)")
    print(f"  invalidate  {invalidated / len(victims) * 1e6:7.1f} us per function (half of "
          f"them); {holes:,} bytes of holes until compaction")
    print(f"  compact     {compacted / (n - len(victims)) * 1e6:7.1f} us per live function; "
          f"section {len(data):,} bytes = {100 * len(data) / live_code:.1f}% of the live code; "
          f"sframe validate: {'valid' if not errors else errors[0].message}")
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Bench: a growable SFrame section as a JIT uses it (issue 16), at 5k, 20k and 80k functions.

For each N (default 5,000, 20,000 and 80,000, so that the scaling shows): N functions of a
typical JIT shape (a frame-pointer prologue and epilogue, ~200 bytes of code each, rows
from the generator's CFI translation) are added one by one in address order, half of them
invalidated in random order, the section compacted, then N random lookups by pc; the
cost of each operation per function (median and min-max of --repeats runs, each on a
fresh section), and the section's size against the code it describes, before and after
compaction. An add is mostly the encoding of the function's rows; the index alone (the
live starts kept sorted in blocks) is timed apart, as "index add" / "index remove", and so
is the structure it replaced (one sorted list: `insort`, `list.pop`), whose per-operation
cost grows with N (it shifts the list).
In-process (no start-up, no cache involved).

    python3 bench/jit_growable.py [--functions N ...] [--repeats N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from bisect import bisect_left, insort
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import spread
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
from pysframe.jit.growable import _SortedStarts

AMD64 = ABI.AMD64_ENDIAN_LITTLE
CIE = [Instruction(DW_CFA_def_cfa, 7, 8), Instruction(DW_CFA_offset, 16, -8)]


def function(start: int, size: int):  # type: ignore[no-untyped-def]
    body = [Instruction(DW_CFA_advance_loc, 1), Instruction(DW_CFA_def_cfa_offset, 16),
            Instruction(DW_CFA_offset, 6, -16), Instruction(DW_CFA_advance_loc, 3),
            Instruction(DW_CFA_def_cfa_register, 6),
            Instruction(DW_CFA_advance_loc, size - 6), Instruction(DW_CFA_def_cfa, 7, 8)]
    return translate(CIE + body, start, size, AMD64)


def one_run(n: int, seed: int) -> tuple[dict[str, float], str]:
    """Seconds per operation of one run on a fresh section of ``n`` functions, and the
    sizes line."""
    rng = random.Random(seed)
    sizes = [rng.randrange(64, 400) for _ in range(n)]
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
    pcs = [rng.randrange(starts[0], at) for _ in range(n)]
    began = time.perf_counter()
    for pc in pcs:
        section.find(pc)
    found = time.perf_counter() - began
    began = time.perf_counter()
    section.compact()
    compacted = time.perf_counter() - began
    # The index alone: every start added (in address order), half removed (random order).
    index = _SortedStarts()
    began = time.perf_counter()
    for start in starts:
        index.add(start)
    index_add = time.perf_counter() - began
    began = time.perf_counter()
    for start in victims:
        index.remove(start)
    index_remove = time.perf_counter() - began
    # The structure it replaced, for comparison: one sorted list (insort, list.pop).
    flat: list[int] = []
    began = time.perf_counter()
    for start in starts:
        insort(flat, start)
    list_add = time.perf_counter() - began
    began = time.perf_counter()
    for start in victims:
        flat.pop(bisect_left(flat, start))
    list_remove = time.perf_counter() - began
    data = section.section_bytes()
    errors = [f for f in validate(data, 0) if f.severity == ERROR]
    gone = set(victims)
    live_code = code - sum(size for start, size in zip(starts, sizes, strict=True)
                           if start in gone)
    live = n - len(victims)
    costs = {"add": added / n, "invalidate": invalidated / len(victims), "find": found / n,
             "compact (per live function)": compacted / live, "index add": index_add / n,
             "index remove": index_remove / len(victims),
             "one sorted list: insort": list_add / n,
             "one sorted list: pop": list_remove / len(victims)}
    sizes_line = (f"{code:,} bytes of code; section {full:,} bytes = {100 * full / code:.1f}% "
                  f"of the code ({full / n:.1f} bytes per function); {holes:,} bytes of holes "
                  f"after the invalidations; compacted {len(data):,} bytes = "
                  f"{100 * len(data) / live_code:.1f}% of the live code; sframe validate: "
                  f"{'valid' if not errors else errors[0].message}")
    return costs, sizes_line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions", type=int, nargs="+", default=[5000, 20000, 80000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    valid = True
    print(f"us per operation: median [min-max] of {args.repeats} runs")
    for n in args.functions:
        runs = [one_run(n, seed) for seed in range(1, args.repeats + 1)]
        print(f"{n:,} functions: {runs[0][1]}")
        valid = valid and all(line.endswith("valid") for _, line in runs)
        for name in runs[0][0]:
            print(f"  {name:28} {spread([costs[name] * 1e6 for costs, _ in runs], '.2f')} us")
    return 0 if valid else 1


if __name__ == "__main__":
    raise SystemExit(main())

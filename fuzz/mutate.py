"""Run N mutated fixture sections through every reader (no atheris needed).

    python3 -m fuzz.mutate 100000        # from the repository root; prints cases,
                                         # unexpected exceptions, slowest case

Mutations: bit flips, byte stores, truncations, extensions, inflated header
counts and FDE fields. Exit status 1 if any input raised something other than
SFrameError or took longer than --limit seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from pathlib import Path

from tests.support.exercise import exercise
from tests.support.mutations import mutations

from pysframe.elf import ElfImage
from pysframe.format import SFrameError

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", type=int, nargs="?", default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit", type=float, default=5.0)
    args = parser.parse_args()
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    seen = set()
    sections = []
    for entry in manifest["files"]:
        for section in ElfImage(str(FIXTURES / entry["path"])).sframe_sections():
            if section.relocated not in seen:
                seen.add(section.relocated)
                sections.append((entry["path"], section.relocated, section.address))
    rng = random.Random(args.seed)
    unexpected = 0
    slowest = (0.0, "")
    expected_errors = 0
    begin = time.perf_counter()
    for case in range(args.cases):
        path, data, address = sections[case % len(sections)]
        mutated = mutations(data, rng, 1)[0]
        start = time.perf_counter()
        try:
            exercise(mutated, address)
        except SFrameError:
            expected_errors += 1
        except Exception:
            unexpected += 1
            print(f"UNEXPECTED on a mutation of {path}:\n{traceback.format_exc()}", file=sys.stderr)
        took = time.perf_counter() - start
        if took > slowest[0]:
            slowest = (took, path)
    total = time.perf_counter() - begin
    print(f"{args.cases} mutated inputs from {len(sections)} distinct fixture sections in "
          f"{total:.0f} s: {expected_errors} raised SFrameError, {unexpected} unexpected "
          f"exceptions, slowest {slowest[0] * 1000:.0f} ms ({slowest[1]})")
    return 1 if unexpected or slowest[0] > args.limit else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Bench: `sframe dump` against `objdump --sframe`, in one run, printing time ratios.

Cases: the largest fixture (2.46/x86_64/O2/prog, where Python's start-up
dominates), and large synthetic sections (100,000 functions, built with our
encoder and added to an ELF file with `objcopy --add-section`): V3 dumped by
objdump 2.47.50 (installed from ../shared/toolchain when missing) and V1 by the
system's objdump 2.40. Each pair of outputs is compared for identity. Each pair is timed
cold and warm (bench/common.py: cold, our runs with an empty private XDG_CACHE_HOME; warm,
a private cache filled by one untimed run; `sframe dump` reads the section itself and
caches nothing, so the two columns should agree), alternating order, --runs repeats
(>= 5), median [min-max], the ratio taken run by run. Ours is the installed console
script (bytecode caching on). Then single-PC `find_fre` lookups per second on the large
V3 table (in-process).

    env -u PYTHONDONTWRITEBYTECODE python3 bench/dump.py [--functions N] [--runs N] [--lookups N]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    FIXTURES,
    MIN_REPEATS,
    OUT,
    cold_and_warm,
    find_objdump,
    print_table,
    spread,
    system_tool,
    venv_sframe,
    wall_time,
)
from large_section import large_section
from pysframe.format import SFrameLookup, SFrameReader, encode


def build_elf(section_bytes: bytes, name: str) -> Path:
    """A copy of a small fixture program whose .sframe is replaced by ``section_bytes``."""
    OUT.mkdir(parents=True, exist_ok=True)
    raw = OUT / f"{name}.sframe"
    raw.write_bytes(section_bytes)
    base = FIXTURES / "2.46" / "x86_64" / "O2" / "prog-nopie"
    stripped = OUT / f"{name}.base"
    elf = OUT / f"{name}.elf"
    objcopy = system_tool("objcopy")
    subprocess.run([objcopy, "--remove-section", ".sframe", str(base), str(stripped)], check=True)
    subprocess.run([objcopy, "--add-section", f".sframe={raw}", str(stripped), str(elf)],
                   check=True)
    stripped.unlink()
    return elf


def interpreter_startup(runs: int) -> float:
    """Median wall time of a bare `python3 -c pass` of the interpreter our script runs on."""
    python = Path(venv_sframe()[0]).with_name("python")
    return wall_time([str(python), "-c", "pass"], runs)


def _timed(argv: list[str], output: Path) -> Callable[[dict[str, str]], float]:
    def run(env: dict[str, str]) -> float:
        with open(output, "wb") as out:
            start = time.perf_counter()
            subprocess.run(argv, stdout=out, check=True, env=env)
            return time.perf_counter() - start
    return run


def compare(label: str, objdump: str, elf: Path, runs: int, startup: float) -> None:
    """Cold and warm wall times of both, alternating order (bench/common.py)."""
    ours_out = OUT / f"{elf.name}.sframe.txt"
    theirs_out = OUT / f"{elf.name}.objdump.txt"
    figures = cold_and_warm({"sframe dump": _timed([*venv_sframe(), "dump", str(elf)], ours_out),
                             "objdump --sframe": _timed([objdump, "--sframe", str(elf)],
                                                        theirs_out)}, runs)
    same = ours_out.read_bytes() == theirs_out.read_bytes()
    lines = ours_out.read_bytes().count(b"\n")
    print(f"{label}: {lines:,} lines, output {'identical' if same else 'DIFFERENT'}")
    print_table(figures, fmt=".1f", peer="objdump --sframe")
    for state, columns in figures.items():
        less = [(a - startup) / b for a, b in zip(columns["sframe dump"],
                                                  columns["objdump --sframe"], strict=True)]
        print(f"  {state} cache: ratio without the interpreter's start-up "
              f"{spread(less, '.2f')}x")


def lookups(section_bytes: bytes, count: int) -> None:
    reader = SFrameReader(section_bytes, 0)
    lookup = SFrameLookup(reader)
    starts = [reader.fde_start(i) for i in range(reader.num_fdes)]
    rng = random.Random(7)
    pcs = [rng.randrange(starts[0], starts[-1]) for _ in range(count)]
    find = lookup.find_fre
    begin = time.perf_counter()
    for pc in pcs:
        find(pc)
    cold = time.perf_counter() - begin
    begin = time.perf_counter()
    for pc in pcs:
        find(pc)
    warm = time.perf_counter() - begin
    print(f"find_fre, {count:,} random PCs over {reader.num_fdes:,} functions: "
          f"first pass {count / cold / 1e6:.2f} M lookups/s (decodes rows on first touch), "
          f"second pass {count / warm / 1e6:.2f} M lookups/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=MIN_REPEATS)
    parser.add_argument("--lookups", type=int, default=1_000_000)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    objdump_v3 = find_objdump("2.47.50")
    objdump_240 = system_tool("objdump")
    print(f"peers: {objdump_v3} (V3), {objdump_240} "
          f"({subprocess.run([objdump_240, '--version'], capture_output=True, text=True).stdout.splitlines()[0]})")
    startup = interpreter_startup(args.runs)
    print(f"bare interpreter start-up (`python -c pass`, the venv's): "
          f"{startup * 1000:.1f} ms")
    compare("largest fixture (2.46 x86_64 prog)", objdump_v3,
            FIXTURES / "2.46" / "x86_64" / "O2" / "prog", args.runs, startup)
    v3 = encode(large_section(args.functions, version=3))
    compare(f"synthetic V3, {args.functions:,} functions", objdump_v3, build_elf(v3, "large-v3"),
            args.runs, startup)
    v1 = encode(large_section(args.functions, version=1))
    compare(f"synthetic V1, {args.functions:,} functions", objdump_240,
            build_elf(v1, "large-v1"), args.runs, startup)
    lookups(v3, args.lookups)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Bench: `sframe dump` against `objdump --sframe`, in one run, printing time ratios.

Cases: the largest fixture (2.46/x86_64/O2/prog, where Python's start-up
dominates), and large synthetic sections (100,000 functions, built with our
encoder and added to an ELF file with `objcopy --add-section`): V3 dumped by
objdump 2.47.50 (installed from ../shared/toolchain when missing) and V1 by the
system's objdump 2.40. Each pair of outputs is compared for identity. Then
single-PC `find_fre` lookups per second on the large V3 table.

    python3 bench/dump.py [--functions N] [--runs N] [--lookups N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FIXTURES, OUT, find_objdump, sframe_command, system_tool, wall_time
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
    """Median wall time of a bare `python3 -c pass` with this interpreter and site-packages."""
    return wall_time([sys.executable, "-c", "pass"], runs)


def compare(label: str, objdump: str, elf: Path, runs: int, startup: float) -> None:
    """Median wall times, the two commands alternating run by run (so drift in the
    machine's speed hits both alike)."""
    ours_out = OUT / f"{elf.name}.sframe.txt"
    theirs_out = OUT / f"{elf.name}.objdump.txt"
    ours_times, theirs_times = [], []
    for _ in range(runs):
        ours_times.append(wall_time([*sframe_command(), "dump", str(elf)], 1, ours_out))
        theirs_times.append(wall_time([objdump, "--sframe", str(elf)], 1, theirs_out))
    ours, theirs = statistics.median(ours_times), statistics.median(theirs_times)
    same = ours_out.read_bytes() == theirs_out.read_bytes()
    lines = ours_out.read_bytes().count(b"\n")
    print(f"{label:<34} {lines:>9} lines  sframe {ours * 1000:7.1f} ms  objdump "
          f"{theirs * 1000:6.1f} ms  ratio {ours / theirs:5.2f}x  (without the interpreter's "
          f"start-up: {(ours - startup) / theirs:5.2f}x)  output "
          f"{'identical' if same else 'DIFFERENT'}")


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
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--lookups", type=int, default=1_000_000)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    objdump_v3 = find_objdump("2.47.50")
    objdump_240 = system_tool("objdump")
    print(f"peers: {objdump_v3} (V3), {objdump_240} "
          f"({subprocess.run([objdump_240, '--version'], capture_output=True, text=True).stdout.splitlines()[0]})")
    startup = interpreter_startup(args.runs)
    print(f"bare interpreter start-up (`{Path(sys.executable).name} -c pass`): "
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

"""Bench: SFrame generation from .eh_frame.

1. Time to convert one library (default the system libc) with `sframe generate`
   (whole command) and in-process (best of 5). Target: below 1 s.
2. A sweep over a directory tree (default /usr/lib/x86_64-linux-gnu): every
   x86-64/AArch64/s390x ELF file with CFI, on a process pool, with a progress
   bar; prints the total .sframe size against the .eh_frame(+hdr) size, and
   how many functions gas would have skipped.

    python3 bench/generate.py [--lib PATH] [--tree DIR] [--jobs N] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import OUT, sframe_command, wall_time
from pysframe.elf import ElfError, ElfImage
from pysframe.format.encode import encode
from pysframe.generate.section import GenerateError, generate


def convert(path: str) -> tuple[str, int, int, int, int, str]:
    """(path, sframe bytes, eh_frame bytes, functions, skipped, error)."""
    try:
        image = ElfImage(path)
        eh = image.section(".eh_frame")
        hdr = image.section(".eh_frame_hdr")
        if eh is None:
            return path, 0, 0, 0, 0, "no .eh_frame"
        result = generate(image)
        size = len(encode(result.section))
        return (path, size, len(eh[0]) + (len(hdr[0]) if hdr else 0), len(result.section.fdes),
                len(result.skipped), "")
    except (ElfError, GenerateError, ValueError) as error:
        return path, 0, 0, 0, 0, str(error).splitlines()[0][:80]


def elf_files(tree: Path, limit: int) -> list[str]:
    out = []
    for root, _, names in os.walk(tree):
        for name in names:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as handle:
                    if handle.read(4) != b"\x7fELF":
                        continue
            except OSError:
                continue
            out.append(path)
            if len(out) >= limit:
                return out
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="/usr/lib/x86_64-linux-gnu/libc.so.6")
    parser.add_argument("--tree", default="/usr/lib/x86_64-linux-gnu")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, default=100_000)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    target = OUT / "lib.sframe"
    command = wall_time([*sframe_command(), "generate", args.lib, "-o", str(target)], 5)
    best = float("inf")
    for _ in range(5):
        begin = time.perf_counter()
        image = ElfImage(args.lib)
        data = encode(generate(image).section)
        best = min(best, time.perf_counter() - begin)
    eh = image.section(".eh_frame")
    print(f"{args.lib}: `sframe generate` {command:.3f} s (median of 5, whole command), "
          f"in-process {best:.3f} s (best of 5); .sframe {len(data):,} bytes from .eh_frame "
          f"{len(eh[0]) if eh else 0:,} bytes")

    from rich.progress import Progress

    files = elf_files(Path(args.tree), args.limit)
    totals: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    begin = time.perf_counter()
    with Progress() as progress, ProcessPoolExecutor(args.jobs) as pool:
        task = progress.add_task(f"sweeping {args.tree}", total=len(files))
        for _, sframe, eh_size, functions, skipped, error in pool.map(convert, files, chunksize=4):
            progress.advance(task)
            if error:
                errors[error] += 1
                continue
            totals["files"] += 1
            totals["sframe"] += sframe
            totals["eh"] += eh_size
            totals["functions"] += functions
            totals["skipped"] += skipped
    elapsed = time.perf_counter() - begin
    ratio = totals["sframe"] / totals["eh"] if totals["eh"] else 0.0
    print(f"{args.tree}: {len(files)} ELF files in {elapsed:.1f} s on {args.jobs} processes; "
          f"{totals['files']} converted: {totals['functions']:,} functions, "
          f"{totals['skipped']:,} skipped as gas would; .sframe {totals['sframe']:,} bytes vs "
          f".eh_frame+.eh_frame_hdr {totals['eh']:,} bytes ({ratio:.2f}x)")
    for error, count in errors.most_common(5):
        print(f"  not converted: {count} x {error}")

    return 0


if __name__ == "__main__":
    raise SystemExit(main())

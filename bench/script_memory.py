"""Bench: peak RSS and wall time of `sframe script` on a large recording, on the same
recording without FINISHED_ROUND records, and on zstd bombs (issue 11).

    python3 bench/script_memory.py [--size MB] [--recording DIR] [--skip-large]

Records (once, with perf, into bench/out/, git-ignored) a `--call-graph dwarf` recording of
the Lua benchmark of about --size MB (default 1024), copies it with every FINISHED_ROUND
record turned into a no-op record of the same size, and builds two bombs from
tests/data/sh-loop.zstd.perf.data: two compressed records of a few KB inflating to 512 MiB
each (continuing the zstd stream, as in the issue), and 200 compressed records that each
start a zstd frame of their own inflating to 64 MiB (the worst case of the per-record
limit: each is decoded up to the limit). Runs our console script (bytecode caching on)
on each and prints its peak RSS (ru_maxrss of the child; this process stays small) and
wall time. The large files stay in bench/out for the next run; delete them by hand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.perf_rewrite import strip_rounds_in_place, zstd_bomb

from common import FIXTURES, OUT, REPO, compile_bytecode, venv_sframe
from perf_script import large_recording


def measured(argv: list[str]) -> tuple[float, int, int, int]:
    """(wall seconds, peak RSS KiB, exit status, lines on stderr) of one run, its output
    thrown away."""
    env = {key: value for key, value in os.environ.items()
           if key != "PYTHONDONTWRITEBYTECODE"}
    err = OUT / "script-memory.stderr"
    with open(os.devnull, "wb") as out, open(err, "wb") as errors:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=errors, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
    return (elapsed, usage.ru_maxrss, os.waitstatus_to_exitcode(status),
            len(err.read_text().splitlines()))


def without_rounds_copy(source: Path) -> Path:
    target = OUT / (source.stem + ".no-rounds.data")
    if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
        shutil.copyfile(source, OUT / "partial.data")
        changed = strip_rounds_in_place(str(OUT / "partial.data"))
        os.replace(OUT / "partial.data", target)
        print(f"{target}: {changed} FINISHED_ROUND records turned into no-ops", file=sys.stderr)
    return target


def bombs() -> list[Path]:
    raw = (REPO / "tests" / "data" / "sh-loop.zstd.perf.data").read_bytes()
    out = []
    for name, size, count, frames in (("bomb-2x512M", 512 * 2**20, 2, False),
                                      ("bomb-200-frames", 64 * 2**20, 200, True)):
        path = OUT / f"{name}.data"
        if not path.exists():
            path.write_bytes(zstd_bomb(raw, size, count, frames)[0])
        out.append(path)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recording", default=str(FIXTURES / "real" / "lua-2.46-x86_64"))
    parser.add_argument("--size", type=int, default=1024, help="MB of the large recording")
    parser.add_argument("--skip-large", action="store_true", help="the bombs only")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    compile_bytecode()
    recording = Path(args.recording)
    inputs: list[tuple[Path, list[str]]] = []
    if not args.skip_large:
        perf = shutil.which("perf")
        if perf is None:
            sys.exit("bench: perf not found (apt-get install linux-perf)")
        big = large_recording(perf, recording, args.size * 2**20, f"dwarf-{args.size}M.perf.data")
        binaries = ["--binaries", str(recording)]
        inputs += [(big, binaries), (without_rounds_copy(big), binaries)]
    inputs += [(path, []) for path in bombs()]
    for path, extra in inputs:
        took, peak, status, reports = measured([*venv_sframe(), "script", str(path), *extra])
        print(f"{path.name} ({path.stat().st_size / 2**20:,.1f} MiB): peak RSS "
              f"{peak / 1024:,.0f} MiB, {took:.1f} s, exit {status}, {reports} line(s) on "
              "stderr", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

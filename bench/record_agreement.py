"""Bench: does `sframe record` see the same profile as `perf record --call-graph dwarf`?

For each workload (a C program built -O2 without frame pointers, with `.sframe` from the
fixtures' binutils when install.sh has unpacked them, else with its table generated from
its CFI; the Lua fixture program;
python3 running a small script), record it once with `sframe record` and once with
`perf record --call-graph dwarf` (unwound by `sframe script`), fold both with
`sframe report --format folded`, and compare: the stacks holding at least 1% of the
samples in either profile must be the same set, each weight within 3 percentage points
(issue 15); and the share of `sframe record`'s user stacks that reach the outermost
frame (`_start`, `clone3`) where the binaries have tables (goal: at least 95%).
Kernel frames and the thread name are left out of the stacks (both tools see the same
kernel, but only dwarf recordings lose user frames behind a short stack copy), and frames
without a symbol are compared by file (their names carry an offset, and the two tools'
callers differ by one byte: return address against return address - 1).

    python3 bench/record_agreement.py [--seconds S]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FIXTURES, OUT, bench_environment, venv_sframe

C_WORKLOAD = r"""
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) long leaf(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long middle(long n) { return leaf(n) + 1; }
__attribute__((noinline)) long sorter(long n) { char buf[4096]; long t = 0;
  for (long r = 0; r < n; r++) { memset(buf, (int)r, sizeof buf); t += buf[r % 4096]; } return t; }
int main(int argc, char **argv) { long rounds = argc > 1 ? atol(argv[1]) : 2000; long t = 0;
  for (long r = 0; r < rounds; r++) t += (r % 3) ? middle(300000) : sorter(20000); return t == 42; }
"""
PYTHON_WORKLOAD = """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
for _ in range(12):
    fib(28)
"""


def folded(sframe: list[str], recording: Path, env: dict[str, str], binaries: list[str]
           ) -> Counter[str]:
    out = recording.with_suffix(".folded")
    options = [arg for directory in binaries for arg in ("--binaries", directory)]
    subprocess.run([*sframe, "report", str(recording), "--format", "folded", "-o", str(out),
                    *options], env=env, check=False, capture_output=True)
    weights: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        # A frame without a symbol is named file+offset, and `sframe record`'s callers are
        # return addresses where dwarf callers are return addresses - 1: such frames are
        # compared by file.
        frames = [re.sub(r"\+0x[0-9a-f]+$", "", frame) for frame in stack.split(";")[1:]
                  if not frame.endswith("_[k]")]
        if frames:
            weights[";".join(frames)] += int(count)
    return weights


def compare(name: str, ours: Counter[str], theirs: Counter[str]) -> bool:
    total_ours, total_theirs = sum(ours.values()) or 1, sum(theirs.values()) or 1
    share_ours = {stack: 100 * count / total_ours for stack, count in ours.items()}
    share_theirs = {stack: 100 * count / total_theirs for stack, count in theirs.items()}
    big = {stack for stack, share in share_ours.items() if share >= 1} | {
        stack for stack, share in share_theirs.items() if share >= 1}
    worst = max((abs(share_ours.get(stack, 0) - share_theirs.get(stack, 0)), stack)
                for stack in big) if big else (0.0, "")
    whole = sum(count for stack, count in ours.items()
                if stack.split(";")[0] in ("_start", "clone3", "clone"))
    outermost = 100 * whole / total_ours
    agree = worst[0] <= 3 and outermost >= 95
    print(f"{name}: {total_ours:,} samples (sframe record) vs {total_theirs:,} (perf dwarf + "
          f"sframe script); {len(big)} stacks >= 1%; largest difference {worst[0]:.1f} points"
          f"{' (' + worst[1][-80:] + ')' if worst[0] > 3 else ''}; {outermost:.1f}% of "
          f"sframe record's stacks reach the outermost frame -> "
          f"{'agree' if agree else 'DIFFER'}")
    return agree


def sframe_toolchain() -> Path | None:
    """gcc's -B directory of a binutils that emits SFrame V3 (as ../shared/toolchain/install.sh
    unpacks it: $SFRAME_TC, /opt/sframe-tc or sframe-tc beside the checkout), or None."""
    roots = [Path(os.environ["SFRAME_TC"])] if os.environ.get("SFRAME_TC") else []
    roots += [Path("/opt/sframe-tc"), Path(__file__).resolve().parents[2] / "sframe-tc"]
    for root in roots:
        for version in ("2.47.50", "2.46"):
            candidate = root / "gcc-B" / version / "x86_64"
            if (candidate / "as").exists():
                return candidate
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8000)
    args = parser.parse_args()
    perf = shutil.which("perf")
    if perf is None or os.geteuid() != 0:
        sys.exit("bench: needs root and perf")
    OUT.mkdir(parents=True, exist_ok=True)
    sframe, env = venv_sframe(), bench_environment()
    source, program = OUT / "agreement.c", OUT / "agreement"
    source.write_text(C_WORKLOAD)
    gnu = sframe_toolchain()
    with_sframe = ["-B", str(gnu), "-Wa,--gsframe"] if gnu is not None else []
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", *with_sframe, "-o", str(program),
                    str(source)], check=True)
    c_name = (f"C -O2, no frame pointers, .sframe from GNU as/ld {gnu.parent.name}"
              if gnu is not None else "C -O2, no frame pointers (table generated from CFI)")
    script = OUT / "agreement.py"
    script.write_text(PYTHON_WORKLOAD)
    lua = FIXTURES / "real" / "lua-2.46-x86_64"
    workloads = {c_name: ([str(program), str(args.rounds)], []),
                 "Lua fixture (binutils 2.46 .sframe)": ([str(lua / "lua"),
                                                          str(lua / "bench.lua")], [str(lua)]),
                 "python3 (generated tables)": ([shutil.which("python3", path="/usr/bin")
                                                 or "python3", str(script)], [])}
    agreed = True
    for name, (command, binaries) in workloads.items():
        ours, theirs = OUT / "agreement.sframe.data", OUT / "agreement.perf.data"
        subprocess.run([*sframe, "record", "-o", str(ours), "--", *command], env=env,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([perf, "record", "-q", "-F", "999", "-e", "cpu-clock", "--call-graph",
                        "dwarf", "-o", str(theirs), "--", *command], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        agreed &= compare(name, folded(sframe, ours, env, binaries),
                          folded(sframe, theirs, env, binaries))
    return 0 if agreed else 1


if __name__ == "__main__":
    raise SystemExit(main())

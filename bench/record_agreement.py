"""Bench: does `sframe record` see the same profile as `perf record --call-graph dwarf`?

For each workload (a C program built -O2 without frame pointers, with `.sframe` from the
fixtures' binutils when install.sh has unpacked them, else with its table generated from
its CFI; a 300-deep recursion; the Lua fixture program; python3 running a small script;
40 binaries never run before, run in turn by a shell; `make -j2` of a small C project;
with --system-wide S, everything on the machine for S seconds), record it once with
`sframe record` and once with `perf record --call-graph dwarf,65528` (the largest stack
copy, unwound by `sframe script`: the reference), fold both with `sframe report --format
folded`, and compare:
- the stacks holding at least 1% of the samples in either profile: the same set, each
  weight within 3 percentage points (issue 15);
- the functions in at least 1% of the samples' stacks: Jaccard index of the two sets
  (issue 26's goal: at least 0.9);
- the share of user stacks that reach the outermost frame (`_start`, `clone3`), ours
  against the reference's (goal: at least 99% where the reference reaches it);
- from `sframe record`'s summary: bytes per sample, its memory (peak resident set and
  BPF maps), and the walker's ns per frame (kernel.bpf_stats_enabled on while it runs).
Kernel frames and the thread name are left out of the stacks (both tools see the same
kernel, but only dwarf recordings lose user frames behind a short stack copy), and frames
without a symbol are compared by file (their names carry an offset, and the two tools'
callers differ by one byte: return address against return address - 1).

    python3 bench/record_agreement.py [--rounds N] [--system-wide S] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
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
for _ in range(60):
    fib(28)
"""


DEEP_WORKLOAD = r"""
#include <stdlib.h>
__attribute__((noinline)) long spin(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long down(int depth, long n) { if (depth == 0) return spin(n); return down(depth - 1, n) + depth; }
int main(int argc, char **argv) { long t = 0; for (int r = 0; r < atoi(argv[1]); r++) t += down(300, 1000000); return t == 42; }
"""
FRESH_WORKLOAD = r"""
__attribute__((noinline)) long spin(long n) { volatile long s = NUMBER; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long middle(long n) { return spin(n) + 1; }
int main(void) { long t = 0; for (int r = 0; r < 60; r++) t += middle(1000000); return t == 42; }
"""
OUTERMOST = ("_start", "clone3", "clone", "__clone")


@dataclass
class Profile:
    """A recording folded: stack weights (user frames, outermost first), samples, the
    share reaching the outermost frame, functions by the samples they are in."""

    stacks: Counter[str]
    samples: int
    outermost: float
    functions: Counter[str]


def folded(sframe: list[str], recording: Path, env: dict[str, str], binaries: list[str]
           ) -> Profile:
    out = recording.with_suffix(".folded")
    options = [arg for directory in binaries for arg in ("--binaries", directory)]
    subprocess.run([*sframe, "report", str(recording), "--format", "folded", "-o", str(out),
                    *options], env=env, check=False, capture_output=True)
    weights: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    samples = whole = 0
    for line in out.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        # A frame without a symbol is named file+offset, and `sframe record`'s callers are
        # return addresses where dwarf callers are return addresses - 1: such frames are
        # compared by file.
        frames = [re.sub(r"\+0x[0-9a-f]+$", "", frame) for frame in stack.split(";")[1:]
                  if not frame.endswith("_[k]")]
        if not frames:
            continue
        weights[";".join(frames)] += count
        samples += count
        whole += count * (frames[0] in OUTERMOST)
        for function in set(frames):
            functions[function] += count
    return Profile(weights, samples, 100 * whole / max(samples, 1), functions)


def compare(name: str, ours: Profile, theirs: Profile, summary: str) -> bool:
    total_ours, total_theirs = ours.samples or 1, theirs.samples or 1
    share_ours = {stack: 100 * count / total_ours for stack, count in ours.stacks.items()}
    share_theirs = {stack: 100 * count / total_theirs for stack, count in theirs.stacks.items()}
    big = {stack for stack, share in share_ours.items() if share >= 1} | {
        stack for stack, share in share_theirs.items() if share >= 1}
    worst = max((abs(share_ours.get(stack, 0) - share_theirs.get(stack, 0)), stack)
                for stack in big) if big else (0.0, "")
    mine = {f for f, count in ours.functions.items() if count >= 0.01 * total_ours}
    reference = {f for f, count in theirs.functions.items() if count >= 0.01 * total_theirs}
    jaccard = len(mine & reference) / len(mine | reference) if mine | reference else 1.0
    reaches = ours.outermost >= min(99.0, theirs.outermost)
    agree = worst[0] <= 3 and jaccard >= 0.9 and reaches
    print(f"{name}:\n  {ours.samples:,} samples (sframe record) vs {theirs.samples:,} (perf "
          f"dwarf,65528 + sframe script); outermost frame reached: {ours.outermost:.1f}% vs "
          f"{theirs.outermost:.1f}%; functions >= 1%: Jaccard {jaccard:.2f} "
          f"({len(mine)} vs {len(reference)}); {len(big)} stacks >= 1%, largest difference "
          f"{worst[0]:.1f} points{' (' + worst[1][-80:] + ')' if worst[0] > 3 else ''}"
          f"\n  {summary}\n  -> {'agree' if agree else 'DIFFER'}")
    return agree


def our_summary(stderr: str, recording: Path) -> str:
    """Bytes per sample, memory, and the walker's ns per frame, from the summary lines."""
    found = re.search(r"sframe record: ([\d,]+) samples? \(", stderr)
    walker = re.search(r"the walker took ([\d.]+) us per sample", stderr)
    memory = re.search(r"memory: (\d+) MiB peak resident, (\d+) MiB of BPF maps", stderr)
    samples = int(found.group(1).replace(",", "")) if found else 0
    size = recording.stat().st_size if recording.exists() else 0
    cost = ""
    if walker:
        cost = f"; the walker {float(walker.group(1)):.1f} us a sample"
    return (f"{size / max(samples, 1):,.0f} bytes a sample; "
            f"{memory.group(1) + ' MiB resident + ' + memory.group(2) + ' MiB of maps' if memory else ''}"
            f"{cost}")


def fresh_binaries(directory: Path, count: int = 40) -> list[str]:
    """``count`` binaries of distinct build ids, and a shell running them in turn."""
    directory.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        source = directory / f"b{number}.c"
        source.write_text(FRESH_WORKLOAD.replace("NUMBER", str(number + 1)))
        subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(directory / f"b{number}"),
                        str(source)], check=True)
    return ["sh", "-c", "; ".join(f"{directory}/b{number}" for number in range(count))]


def make_project(directory: Path) -> list[str]:
    """A small C project (24 files) and `make -j2 -B` of it."""
    directory.mkdir(parents=True, exist_ok=True)
    for number in range(24):
        body = "\n".join(f"int f{number}_{k}(int x) {{ return x * {k} + {number}; }}"
                         for k in range(300))
        (directory / f"u{number}.c").write_text(body + "\n")
    objects = " ".join(f"u{number}.o" for number in range(24))
    (directory / "Makefile").write_text(f"all: {objects}\n%.o: %.c\n\tgcc -O2 -c $< -o $@\n")
    return ["make", "-s", "-j2", "-B", "-C", str(directory)]


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
    parser.add_argument("--system-wide", type=float, default=0.0, metavar="S",
                        help="also record the whole machine for S seconds")
    parser.add_argument("--only", default=None, help="the workloads whose name has this")
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
    (OUT / "deep300.c").write_text(DEEP_WORKLOAD)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-o",
                    str(OUT / "deep300"), str(OUT / "deep300.c")], check=True)
    c_name = (f"C -O2, no frame pointers, .sframe from GNU as/ld {gnu.parent.name}"
              if gnu is not None else "C -O2, no frame pointers (table generated from CFI)")
    script = OUT / "agreement.py"
    script.write_text(PYTHON_WORKLOAD)
    lua = FIXTURES / "real" / "lua-2.46-x86_64"
    python = shutil.which("python3", path="/usr/bin") or "python3"
    workloads: dict[str, tuple[list[str], list[str], list[str]]] = {
        c_name: ([str(program), str(args.rounds)], [], []),
        "300-deep recursion (C, generated tables)": ([str(OUT / "deep300"), "1500"], [], []),
        "Lua fixture (binutils 2.46 .sframe)": ([str(lua / "lua"), str(lua / "bench.lua")],
                                                [str(lua)], []),
        "python3 (generated tables)": ([python, str(script)], [], []),
        "40 binaries never run before, in turn": (fresh_binaries(OUT / "fresh"), [], []),
        "make -j2 of 24 C files": (make_project(OUT / "project"), [], []),
    }
    if args.system_wide:
        workloads[f"-a for {args.system_wide:g} s"] = (
            [], [], ["-a", "--duration", f"{args.system_wide:g}"])
    agreed = True
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    was = stats.read_text().strip()
    try:
        for name, (command, binaries, options) in workloads.items():
            if args.only and args.only not in name:
                continue
            ours, theirs = OUT / "agreement.sframe.data", OUT / "agreement.perf.data"
            stats.write_text("1")
            target = options or ["--", *command]
            made = subprocess.run([*sframe, "record", "-o", str(ours), *target], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            stats.write_text(was)
            if made.returncode != 0:
                print(f"{name}: sframe record failed: {made.stderr.strip()[-300:]}")
                agreed = False
                continue
            perf_target = ["-a", "--", "sleep", f"{args.system_wide:g}"] if options else [
                "--", *command]
            copy = "dwarf,16384" if options else "dwarf,65528"  # -a: 1 GB a minute as it is
            subprocess.run([perf, "record", "-q", "-B", "-F", "999", "-e", "cpu-clock",
                            "--call-graph", copy, "-o", str(theirs), *perf_target],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            agreed &= compare(name, folded(sframe, ours, env, binaries),
                              folded(sframe, theirs, env, binaries),
                              our_summary(made.stderr, ours))
    finally:
        stats.write_text(was)
    return 0 if agreed else 1


if __name__ == "__main__":
    raise SystemExit(main())

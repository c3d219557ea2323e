"""Bench: the cost of recording with `sframe record` against `perf record --call-graph dwarf`.

A CPU-bound C program (fixed work: rounds of a loop under three calls, built -O2 without
frame pointers) is timed bare, under `sframe record -F 999` and under
`perf record --call-graph dwarf -F 999`, interleaved, medians of --runs runs each (and
under `sframe record --defer`, which walks as often here: the workload makes no system
calls); the
overhead is the extra wall time of the workload over its bare time (issue 15: at most 2%).
The floor any sampler pays is shown too: `perf record -F 999` taking no stacks (in a VM
the timer interrupt itself is dear: each one exits to the hypervisor).
Also: bytes written per sample by each, and the share of `sframe record`'s samples walked to
the outermost frame. Ours is the console script of bench/out/venv (bytecode caching on).

    python3 bench/record.py [--rounds N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import OUT, bench_environment, venv_sframe

#: The workload times its own work (CLOCK_MONOTONIC around it) and prints the seconds on
#: stderr: the tools' start-up and writing are not the workload's slowdown.
WORKLOAD = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) long leaf(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long middle(long n) { return leaf(n) + 1; }
__attribute__((noinline)) long outer(long rounds) { long t = 0; for (long r = 0; r < rounds; r++) t += middle(1000000); return t; }
int main(int argc, char **argv) { struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  long t = outer(argc > 1 ? atol(argv[1]) : 2000); clock_gettime(CLOCK_MONOTONIC, &b);
  fprintf(stderr, "workload-seconds %.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
  return t == 42; }
"""


def workload() -> Path:
    source, binary = OUT / "record-workload.c", OUT / "record-workload"
    source.write_text(WORKLOAD)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(binary), str(source)],
                   check=True)
    return binary


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(the workload's own seconds, the whole command's seconds, stderr)."""
    start = time.perf_counter()
    run = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=env, check=False)
    elapsed = time.perf_counter() - start
    if run.returncode not in (0, 1):
        sys.exit(f"bench: {argv[0]} failed ({run.returncode}): {run.stderr.strip()[-300:]}")
    found = re.search(r"workload-seconds ([\d.]+)", run.stderr)
    return (float(found[1]) if found else elapsed), elapsed, run.stderr


def _walker_cost(sframe: list[str], command: list[str], env: dict[str, str], output: Path
                 ) -> float:
    """us per sample of the BPF walker, counted by the kernel during one more recording (the
    wall-time ratio is noisier than 2% on a shared 2-core machine; this is not)."""
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    before = stats.read_text().strip()
    stats.write_text("1")
    try:
        _, _, errors = timed([*sframe, "record", "-F", "999", "-o", str(output), "--", *command],
                             env)
    finally:
        stats.write_text(before)
    found = re.search(r"walker took ([\d.]+) us per sample", errors)
    return float(found[1]) if found else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: sframe record needs root")
    perf = shutil.which("perf")
    OUT.mkdir(parents=True, exist_ok=True)
    sframe, env = venv_sframe(), bench_environment()
    binary = workload()
    ours_file, perf_file = OUT / "record.sframe.data", OUT / "record.perf.data"
    command = [str(binary), str(args.rounds)]
    timed([*sframe, "record", "-o", str(ours_file), "--", *command], env)  # warm caches
    times: dict[str, list[float]] = {"bare": [], "sframe record": [],
                                     "sframe record --defer": [], "perf record": [],
                                     "perf record, no stacks": []}
    whole: dict[str, list[float]] = {name: [] for name in times if name != "bare"}
    summary = ""
    for _ in range(args.runs):
        times["bare"].append(timed(command)[0])
        work, took, summary = timed([*sframe, "record", "-F", "999", "-o", str(ours_file),
                                     "--", *command], env)
        times["sframe record"].append(work)
        whole["sframe record"].append(took)
        work, took, _ = timed([*sframe, "record", "--defer", "-F", "999", "-o",
                               str(ours_file), "--", *command], env)
        times["sframe record --defer"].append(work)
        whole["sframe record --defer"].append(took)
        if perf is not None:
            work, took, _ = timed([perf, "record", "-q", "-F", "999", "-e", "cpu-clock",
                                   "--call-graph", "dwarf", "-o", str(perf_file), "--",
                                   *command])
            times["perf record"].append(work)
            whole["perf record"].append(took)
            # The floor: the same sampling event with no stack at all (the interrupt alone).
            work, took, _ = timed([perf, "record", "-q", "-F", "999", "-e", "cpu-clock",
                                   "-o", str(OUT / "record.floor.data"), "--", *command])
            times["perf record, no stacks"].append(work)
            whole["perf record, no stacks"].append(took)
    bare = statistics.median(times["bare"])
    print(f"workload: {binary.name} {args.rounds}, its own time bare {bare * 1000:.0f} ms "
          f"(medians of {args.runs}; bare runs spread {min(times['bare']) * 1000:.0f} to "
          f"{max(times['bare']) * 1000:.0f} ms)")
    for name in ("sframe record", "sframe record --defer", "perf record",
                 "perf record, no stacks"):
        if times[name]:
            value = statistics.median(times[name])
            print(f"  under {name:20} {value * 1000:7.0f} ms  overhead "
                  f"{100 * (value - bare) / bare:+5.1f}%"
                  + ("  (goal <= 2%)" if name.startswith("sframe record") else "")
                  + f"; the whole command {statistics.median(whole[name]) * 1000:.0f} ms")
    cost = _walker_cost(sframe, command, env, ours_file)
    if cost:
        print(f"  the walker's own cost (kernel.bpf_stats_enabled): {cost:.1f} us per sample, "
              f"{cost * 999 / 1e4:.2f}% of the sampled CPU at 999 Hz")
    found = re.search(r"([\d,]+) samples \(([\d.]+)% walked", summary)
    if found:
        samples = int(found[1].replace(",", ""))
        print(f"  sframe record: {samples:,} samples, {found[2]}% walked to the outermost frame, "
              f"{ours_file.stat().st_size / max(samples, 1):,.0f} bytes per sample")
    if perf is not None and perf_file.exists():
        report = subprocess.run([perf, "script", "-G", "-F", "tid", "-i", str(perf_file)],
                                capture_output=True, text=True, check=False).stdout
        samples = max(1, sum(1 for line in report.splitlines() if line.strip()))
        print(f"  perf record --call-graph dwarf: {perf_file.stat().st_size / samples:,.0f} "
              f"bytes per sample ({samples:,} samples)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

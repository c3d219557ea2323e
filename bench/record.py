"""Bench: the cost of recording with `sframe record` against `perf record --call-graph dwarf`.

Workloads of one C program (fixed work, built -O2 without frame pointers; it times its own
work, wall and CPU, so the tools' start-up and writing are not counted as its slowdown):
- deep: CPU-bound, a loop under 112 mutually recursive calls (~117 frames a stack, under
  the walker's 127): the eBPF walker's cost grows per frame, a dwarf stack copy's does not;
- deep, system calls: the same depth, the work being read(2)s of 256 bytes of /dev/zero
  (most samples land in the kernel): here `sframe record --defer` defers the walk to the
  return to user space (one walk per kernel entry, made by the `sys_exit` program), so its
  row measures the deferred path, not the immediate one;
- with --shallow, also the same loop 4 frames deep in the program (6 a stack): the case
  that flatters the walker.
Each is run bare, under `sframe record -F 999` (and `--defer` on the system-call
workload), under `perf record --call-graph dwarf -F 999` and under `perf record -F 999`
with no stacks (the floor any sampler pays: in a VM each timer interrupt exits to the
hypervisor). perf runs with -B (no build-id pass: perf 6.1 aborts in it, "stack smashing
detected" at util/build-id.c:1010, after recording the system-call workload; the pass
comes after the workload, so only the whole command's time is lower for it). The overhead
is the workload's extra CPU time (user + system, which holds the samplers' interrupts)
over its bare CPU time in the same repeat (issue 15's goal: at most 2%), and the same in
wall time (noisier: other work on the machine lands in it).

Cold and warm columns (bench/common.py): cold runs get an empty private XDG_CACHE_HOME (our
tables for the program and libc generated before the command starts: it shows in the whole
command's time, hardly in the workload's), warm ones a private cache filled by one untimed
run; the commands alternate order, repeated --runs times (>= 5), median [min-max].

The walker's own cost is counted by the kernel in --counted more runs of each sframe row
(warm cache) with kernel.bpf_stats_enabled on (off for the timed runs: it adds clock reads
around every program run): run_time_ns and run_cnt of every program `sframe record` loads
(the sampling program, and with --defer the `sys_exit` and `sched_process_exit` programs,
which run at every system call and exit of every process of the machine while the
recording lasts), read from the recorder's /proc/PID/fdinfo until it exits (the last
~20 ms may be missed). The cost per sample is the sum of all programs' time over the
samples taken, also shown as a share of the workload's wall time. Also: bytes written
per sample, frames per sample and the share of `sframe record`'s samples walked to the
outermost frame. Ours is the installed console script (bytecode caching on).

Then (``--part agreement``, or both by default) bench/record_agreement.py's workloads, which
issue 26 names: the 300-deep recursion, python3, 40 binaries never run before, make -j2 of a
small C project and ``-a`` for --system-wide seconds (60 by default) on a machine kept busy:
chains reaching the outermost frame and functions >= 1% against perf --call-graph
dwarf,65528 + sframe script, the walker's ns per frame, the overhead on the workload
against perf's no-stack floor in the same rounds, bytes per sample and peak memory.

    env -u PYTHONDONTWRITEBYTECODE python3 bench/record.py [--runs N] [--quick] [--shallow]
                                                           [--part P] [--system-wide S]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import (
    COLD,
    MIN_REPEATS,
    OUT,
    WARM,
    bench_environment,
    cold_and_warm,
    private_cache,
    spread,
    venv_sframe,
    with_cache,
)
from pysframe.record.defer_walk import RETURN_HOOKS

WORKLOAD = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static int zero = -1;
static char buffer[256];
/* The work at the bottom of the stack: a loop (cpu) or small read(2)s of /dev/zero (sys). */
__attribute__((noinline)) long leaf(long n, int sys) {
    volatile long s = 0;
    if (sys) { for (long i = 0; i < n; i++) s += read(zero, buffer, sizeof buffer); }
    else { for (long i = 0; i < n; i++) s += i; }
    return s;
}
__attribute__((noinline)) long down_a(int depth, long n, int sys);
__attribute__((noinline)) long down_b(int depth, long n, int sys) {
    if (depth <= 0) return leaf(n, sys);
    return down_a(depth - 1, n, sys) + (depth & 3);
}
__attribute__((noinline)) long down_a(int depth, long n, int sys) {
    if (depth <= 0) return leaf(n, sys);
    return down_b(depth - 1, n, sys) ^ depth;
}
/* workload cpu|sys DEPTH ROUNDS N: ROUNDS times, DEPTH calls down, then N iterations. */
int main(int argc, char **argv) {
    int sys = argc > 1 && strcmp(argv[1], "sys") == 0;
    int depth = argc > 2 ? atoi(argv[2]) : 1;
    long rounds = argc > 3 ? atol(argv[3]) : 100, n = argc > 4 ? atol(argv[4]) : 1000000;
    zero = open("/dev/zero", O_RDONLY);
    struct timespec a, b, ca, cb;
    clock_gettime(CLOCK_MONOTONIC, &a); clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ca);
    long t = 0;
    for (long r = 0; r < rounds; r++) t += down_a(depth, n, sys);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cb); clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, "workload-seconds %.6f cpu %.6f\n",
            (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9,
            (cb.tv_sec - ca.tv_sec) + (cb.tv_nsec - ca.tv_nsec) / 1e9);
    return t == 42;
}
"""

#: name: (mode, depth, rounds, iterations), each ~0.2 s bare on an idle 2-core VM.
WORKLOADS = {
    "shallow, CPU-bound": ("cpu", 1, 700, 1_000_000),
    "deep, CPU-bound": ("cpu", 112, 700, 1_000_000),
    "deep, system calls": ("sys", 112, 60, 10_000),
}
FREQUENCY = "999"
PERF_EVENT, RAW_TRACEPOINT = 7, 17  # enum bpf_prog_type


def workload() -> Path:
    source, binary = OUT / "record-workload.c", OUT / "record-workload"
    source.write_text(WORKLOAD)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(binary), str(source)],
                   check=True)
    return binary


@dataclass
class Run:
    """One run: the workload's own seconds, the whole command's, and for sframe record the
    kernel's counts of its programs and its summary."""

    work: float
    whole: float
    #: The workload's own CPU time (user + system; the walker's time in its interrupts
    #: counts here), less disturbed than wall time by whatever else the machine runs.
    cpu: float
    stderr: str = ""
    #: program ("sampling", "sys_exit", ...): (run_time_ns, run_cnt).
    programs: dict[str, tuple[int, int]] = field(default_factory=dict)
    output: Path | None = None


def _bpf_programs(pid: int) -> dict[int, tuple[int, int, int]]:
    """prog_id: (prog_type, run_time_ns, run_cnt) of the BPF programs ``pid`` holds."""
    found: dict[int, tuple[int, int, int]] = {}
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-prog":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                fields = dict(line.split(":", 1) for line in info if ":" in line)
            found[int(fields["prog_id"])] = (int(fields["prog_type"]),
                                             int(fields.get("run_time_ns", "0")),
                                             int(fields.get("run_cnt", "0")))
        except (OSError, KeyError, ValueError):
            continue
    return found


def _named(programs: dict[int, tuple[int, int, int]]) -> dict[str, tuple[int, int]]:
    """The programs by role: the sampling program (perf event), and the return hooks (raw
    tracepoints, loaded in RETURN_HOOKS order, so in prog_id order)."""
    named: dict[str, tuple[int, int]] = {}
    hooks = iter(RETURN_HOOKS)
    for _, (kind, ns, count) in sorted(programs.items()):
        name = "sampling" if kind == PERF_EVENT else next(hooks, f"type {kind}")
        named[name] = (ns, count)
    return named


def timed(argv: list[str], env: dict[str, str] | None = None, watch: bool = False,
          output: Path | None = None) -> Run:
    """Run ``argv``; with ``watch``, poll its BPF programs' counts until it exits."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=env)
    programs: dict[int, tuple[int, int, int]] = {}
    if watch:
        while child.poll() is None:
            programs.update(_bpf_programs(child.pid))
            time.sleep(0.02)
    errors = child.communicate()[1]
    elapsed = time.perf_counter() - start
    if child.returncode not in (0, 1):
        sys.exit(f"bench: {argv[0]} failed ({child.returncode}): {errors.strip()[-300:]}")
    found = re.search(r"workload-seconds ([\d.]+) cpu ([\d.]+)", errors)
    if found is None:
        sys.exit(f"bench: {argv[0]} printed no workload-seconds: {errors.strip()[-300:]}")
    return Run(float(found[1]), elapsed, float(found[2]), errors, _named(programs), output)


def runners(kind: str, command: list[str], sframe: list[str], perf: str | None
            ) -> dict[str, Callable[[dict[str, str]], Run]]:
    """The compared commands of one workload."""
    ours, theirs = OUT / "record.sframe.data", OUT / "record.perf.data"
    deferred = OUT / "record.defer.data"
    found: dict[str, Callable[[dict[str, str]], Run]] = {
        "bare": lambda env: timed(command, env),
        "sframe record": lambda env: timed(
            [*sframe, "record", "-F", FREQUENCY, "-o", str(ours), "--", *command], env, True,
            ours),
    }
    if kind == "sys":
        found["sframe record --defer"] = lambda env: timed(
            [*sframe, "record", "--defer", "-F", FREQUENCY, "-o", str(deferred), "--",
             *command], env, True, deferred)
    if perf is not None:
        found["perf record --call-graph dwarf"] = lambda env: timed(
            [perf, "record", "-q", "-B", "-F", FREQUENCY, "-e", "cpu-clock", "--call-graph",
             "dwarf", "-o", str(theirs), "--", *command], env, output=theirs)
        # The floor: the same sampling event with no stack at all (the interrupt alone).
        found["perf record, no stacks"] = lambda env: timed(
            [perf, "record", "-q", "-B", "-F", FREQUENCY, "-e", "cpu-clock", "-o",
             str(OUT / "record.floor.data"), "--", *command], env)
    return found


def report(name: str, command: list[str], figures: dict[str, dict[str, list[Run]]],
           counted: dict[str, list[Run]], sframe: list[str], perf: str | None) -> None:
    states = list(figures)
    repeats = len(figures[states[0]]["bare"])
    print(f"{name}: {' '.join([Path(command[0]).name, *command[1:]])}  (median [min-max] of "
          f"{repeats}, alternating order; overheads against the bare run of the same repeat)")
    for state in states:
        print(f"  {state + ' cache':32}{'workload CPU ms':>18}{'overhead (CPU)':>26}"
              f"{'overhead (wall)':>26}{'whole command ms':>22}")
        bare = figures[state]["bare"]
        for row, runs in figures[state].items():
            cpu, wall = "", ""
            if row != "bare":
                cpu = spread([100 * (run.cpu - base.cpu) / base.cpu
                              for run, base in zip(runs, bare, strict=True)], "+.1f") + "%"
                wall = spread([100 * (run.work - base.work) / base.work
                               for run, base in zip(runs, bare, strict=True)], "+.1f") + "%"
            print(f"    {row:30}{spread([run.cpu * 1000 for run in runs]):>18}{cpu:>26}"
                  f"{wall:>26}{spread([run.whole * 1000 for run in runs]):>22}")
    for row, runs in counted.items():
        per_sample, share, lines = [], [], []
        for run in runs:
            sampling = run.programs.get("sampling", (0, 0))[1]
            total = sum(ns for ns, _ in run.programs.values())
            if sampling:
                per_sample.append(total / sampling / 1000)
                share.append(100 * total / (run.work * 1e9))
        for program in runs[-1].programs:
            counted = [run.programs[program] for run in runs if program in run.programs]
            lines.append(f"{program} {spread([count for _, count in counted])} runs x "
                         f"{spread([ns / count / 1000 for ns, count in counted if count], '.2f')}"
                         " us")
        print(f"  {row}, {len(runs)} counted runs: the BPF programs' time per sample "
              f"{spread(per_sample, '.2f')} us (all programs), {spread(share, '.1f')}% of the "
              f"workload's time: "
              + "; ".join(lines))
        last = runs[-1]
        found = re.search(r"([\d,]+) samples \(([\d.]+)% walked", last.stderr)
        if found and last.output is not None and last.output.exists():
            samples = int(found[1].replace(",", ""))
            print(f"    {samples:,} samples, {found[2]}% walked to the outermost frame, "
                  f"{last.output.stat().st_size / max(samples, 1):,.0f} bytes per sample, "
                  f"{_frames_per_sample(sframe, last.output):.0f} frames per sample (mean)")
        deferred = re.search(r"--defer: .*", last.stderr)
        if deferred:
            print(f"    {deferred[0]}")
    perf_runs = figures[states[-1]].get("perf record --call-graph dwarf")
    if perf is not None and perf_runs and perf_runs[-1].output is not None:
        data = perf_runs[-1].output
        # (Counted by `perf report --stats`: perf 6.1's `perf script` aborts on this
        # recording, as its build-id pass does.)
        stats = subprocess.run([perf, "report", "--stats", "-i", str(data)],
                               capture_output=True, text=True, check=False).stdout
        found = re.search(r"SAMPLE events:\s+(\d+)", stats)
        samples = max(1, int(found[1]) if found else 0)
        print(f"  perf record --call-graph dwarf: {data.stat().st_size / samples:,.0f} bytes "
              f"per sample ({samples:,} samples)")


def _frames_per_sample(sframe: list[str], data: Path) -> float:
    text = subprocess.run([*sframe, "script", str(data)], capture_output=True, text=True,
                          env=bench_environment(), check=False).stdout
    chains = [block for block in text.split("\n\n") if block.strip()]
    frames = sum(block.count("\n\t") for block in chains)
    return frames / max(1, len(chains))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=MIN_REPEATS)
    parser.add_argument("--quick", action="store_true",
                        help="workloads a quarter as long, warm column only")
    parser.add_argument("--only", choices=sorted(WORKLOADS), action="append")
    parser.add_argument("--shallow", action="store_true",
                        help="the shallow workload too (4 frames: flatters the walker)")
    parser.add_argument("--counted", type=int, default=3,
                        help="runs of each sframe row with kernel.bpf_stats_enabled on")
    parser.add_argument("--part", choices=("overhead", "agreement", "all"), default="all")
    parser.add_argument("--system-wide", type=float, default=60.0, metavar="S",
                        help="the agreement part's -a workload: seconds (0: none)")
    args = parser.parse_args()
    if args.part != "overhead":
        agreement = [sys.executable, str(Path(__file__).with_name("record_agreement.py")),
                     "--system-wide", f"{args.system_wide:g}"]
        if args.part == "agreement":
            return subprocess.run(agreement, check=False).returncode
    if os.geteuid() != 0:
        sys.exit("bench: sframe record needs root")
    perf = shutil.which("perf")
    OUT.mkdir(parents=True, exist_ok=True)
    sframe, env = venv_sframe(), bench_environment()
    binary = workload()
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    before = stats.read_text().strip()
    try:
        for name, (kind, depth, rounds, iterations) in WORKLOADS.items():
            if (args.only and name not in args.only) or (
                    not args.only and not args.shallow and name.startswith("shallow")):
                continue
            if args.quick:
                rounds = max(1, rounds // 4)
            command = [str(binary), kind, str(depth), str(rounds), str(iterations)]
            compared = runners(kind, command, sframe, perf)
            stats.write_text("0")  # timed runs: no clock reads around every program run
            figures = cold_and_warm(compared, args.runs, env,
                                    (WARM,) if args.quick else (COLD, WARM))
            stats.write_text("1")
            counted: dict[str, list[Run]] = {}
            with private_cache() as cache:
                for row, runner in compared.items():
                    if row.startswith("sframe"):
                        counted[row] = [runner(with_cache(env, cache))
                                        for _ in range(args.counted)]
            stats.write_text(before)
            report(name, command, figures, counted, sframe, perf)
    finally:
        stats.write_text(before)
    if args.part == "all":
        return subprocess.run(agreement, check=False).returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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
  BPF maps), and the walker's ns per frame (kernel.bpf_stats_enabled on while it runs;
  its us per sample over the mean user frames per sample);
- the overhead on the workload: its CPU time (user + system, as bash's `time` counts the
  command's processes) under `sframe record` and under `perf record` with no stacks (the
  floor any sampler pays), against a bare run of the same repeat, median of --repeats
  runs in alternating order (issue 26's goal: within 1 point of perf's floor), and the
  median of the rounds' differences (ours less the floor: the runs of a round share the
  machine's state) with its 95% interval (the sign test's: the goal is called met only
  when the whole interval is within it); --overhead-only measures this alone, for every
  workload chosen, --variant=OPTIONS adds a run of sframe record with those options to
  each round, and --rounds-log FILE keeps the rounds, so that later runs add to them.
A chain reaches the outermost frame at `_start` or `clone3`, at `_dl_start_user` (the
return address in ld.so's entry, which has no CFI: samples taken while the dynamic loader
runs), or at the caller of `__libc_start_main` (a stripped binary's `_start`, unnamed).
Each command runs once, as `perf record ... -- sframe record -- COMMAND`: perf's events
are per task and inherited, as ours are, so both sample the same run the same way (the
recorder's own threads are left out). Two recordings of separate runs differ by the run's
own chance (`make -j2`'s functions near 1% moved by ~0.15 points between runs: a Jaccard
index of 0.86). `perf record -a` beside the command would sample it otherwise: per-CPU
events sample a process's first millisecond (the dynamic loader's start), which per-task
events, armed at the fork, rarely do (40 fresh binaries: `_dl_start` in 1.19% of perf -a's
stacks, 0.29% of ours). --separate records each command twice instead.
The frame after ld.so's `call _dl_start` is named `_dl_start_user` by its return address
and `_start` by the address before it (perf's dwarf callers): the same frame, folded as
`_start`.
The -a workload keeps the machine busy (make -j2 of the project, python3 and the C
program in turn) for S seconds, and is recorded by both tools at once, with -a. With --idle N,
N idle Python processes that imported numpy (OpenBLAS: 370k rows) run all along, as on a
desktop or a build server: processes whose tables would fill the walker's map.
Kernel frames and the thread name are left out of the stacks (both tools see the same
kernel, but only dwarf recordings lose user frames behind a short stack copy), and frames
without a symbol are compared by file (their names carry an offset, and the two tools'
callers differ by one byte: return address against return address - 1).

    python3 bench/record_agreement.py [--rounds N] [--system-wide S] [--only=NAME]
                                      [--repeats N] [--idle N] [--overhead-only [--variant=OPTIONS]]
                                      [--rounds-log FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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
#: The recording tools' own threads and processes (sframe-gen: the helpers generating tables
#: in the background), left out of both profiles (with -a each samples itself).
RECORDERS = ("sframe", "perf", "sframe-tables", "sframe-gen")
#: A frame one tool names by its return address, the other by the byte before it.
SAME_FRAME = {"_dl_start_user": "_start"}
OUTERMOST = ("_start", "clone3", "clone", "__clone", "_dl_start_user")


def reaches_outermost(frames: list[str]) -> bool:
    """Whether a chain (outermost first) ends at a process's or thread's first frame."""
    return frames[0] in OUTERMOST or (len(frames) > 1
                                      and frames[1].startswith("__libc_start_main"))


@dataclass
class Profile:
    """A recording folded: stack weights (user frames, outermost first), samples, the
    share reaching the outermost frame, functions by the samples they are in."""

    stacks: Counter[str]
    samples: int
    outermost: float
    functions: Counter[str]
    #: Mean user frames per sample.
    frames: float = 0.0


def folded(sframe: list[str], recording: Path, env: dict[str, str], binaries: list[str]
           ) -> Profile:
    out = recording.with_suffix(".folded")
    options = [arg for directory in binaries for arg in ("--binaries", directory)]
    subprocess.run([*sframe, "report", str(recording), "--format", "folded", "-o", str(out),
                    *options], env=env, check=False, capture_output=True)
    weights: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    samples = whole = frame_count = 0
    for line in out.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        # A frame without a symbol is named file+offset, and `sframe record`'s callers are
        # return addresses where dwarf callers are return addresses - 1: such frames are
        # compared by file.
        comm = stack.split(";")[0]
        if comm in RECORDERS:
            continue  # the recording tool itself: not the workload
        frames = [SAME_FRAME.get(name, name) for name in (
            re.sub(r"\+0x[0-9a-f]+$", "", frame) for frame in stack.split(";")[1:]
            if not frame.endswith("_[k]"))]
        if not frames:
            continue
        weights[";".join(frames)] += count
        samples += count
        frame_count += count * len(frames)
        whole += count * reaches_outermost(frames)
        for function in set(frames):
            functions[function] += count
    return Profile(weights, samples, 100 * whole / max(samples, 1), functions,
                   frame_count / max(samples, 1))


def compare(name: str, ours: Profile, theirs: Profile, summary: str,
            overhead: Overhead | None = None) -> bool:
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
    cheap = overhead is None or overhead[1] <= overhead[2] + 1
    agree = worst[0] <= 3 and jaccard >= 0.9 and reaches and cheap
    print(f"{name}:\n  {ours.samples:,} samples (sframe record) vs {theirs.samples:,} (perf "
          f"dwarf,65528 + sframe script); outermost frame reached: {ours.outermost:.1f}% vs "
          f"{theirs.outermost:.1f}%; functions >= 1%: Jaccard {jaccard:.2f} "
          f"({len(mine)} vs {len(reference)}); {len(big)} stacks >= 1%, largest difference "
          f"{worst[0]:.1f} points{' (' + worst[1][-80:] + ')' if worst[0] > 3 else ''}"
          f"\n  {summary}{_walker_per_frame(summary, ours.frames)}"
          f"{_overhead_text(overhead)}\n  -> {'agree' if agree else 'DIFFER'}")
    return agree


def _walker_per_frame(summary: str, frames: float) -> str:
    found = re.search(r"the walker ([\d.]+) us a sample", summary)
    if not found or not frames:
        return ""
    return f" over {frames:.0f} user frames: {1000 * float(found[1]) / frames:.0f} ns a frame"


def _overhead_text(overhead: Overhead | None, variant: str = "") -> str:
    if overhead is None:
        return ""
    text = (f"\n  the workload's CPU time: bare {overhead.bare:.2f} s; overhead under sframe "
            f"record {overhead.ours:+.1f}%, under perf record with no stacks (the floor) "
            f"{overhead.floor:+.1f}% (goal: within 1 point); ours less the floor, round by "
            f"round: {_spread(overhead.paired)}")
    if overhead.variant is not None and overhead.variant_paired is not None:
        text += (f"\n  with {variant}: {overhead.variant:+.1f}%; less the floor, round by "
                 f"round: {_spread(overhead.variant_paired)}")
    return text


def _spread(values: list[float]) -> str:
    text = (f"median {statistics.median(values):+.1f} points [{min(values):+.1f} to "
            f"{max(values):+.1f}] over {len(values)} rounds")
    interval = median_interval(values)
    if interval is None:
        return text + " (too few rounds for a 95% interval)"
    low, high = interval
    verdict = ("goal met" if high <= 1.0 else "goal NOT met" if low > 1.0
               else "the rounds cannot tell whether the goal is met")
    return text + f"; 95% interval of the median {low:+.1f} to {high:+.1f} points: {verdict}"


def median_interval(values: list[float], confidence: float = 0.95
                    ) -> tuple[float, float] | None:
    """A distribution-free interval holding the median with ``confidence``: the k-th
    smallest and k-th largest rounds, k the largest with P(Binomial(n, 1/2) < k) at most
    (1 - confidence) / 2 (the sign test's interval: no assumption on the noise's shape,
    which here has a long tail of rounds a neighbour disturbed). None under 6 rounds."""
    ordered = sorted(values)
    count = len(ordered)
    tail, k = 0.0, 0
    while True:
        below = tail + math.comb(count, k) / 2 ** count  # P(X <= k)
        if below > (1 - confidence) / 2:
            break
        tail, k = below, k + 1
    if k == 0:
        return None
    return ordered[k - 1], ordered[count - k]


def timed_cpu(argv: list[str], env: dict[str, str]) -> float:
    """The CPU seconds (user + system) of the workload a tool runs: ``argv`` ends with
    :func:`cpu_timed`'s wrapper, which prints them."""
    run = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, check=False)
    found = re.findall(r"^WORKLOAD-CPU ([\d.]+) ([\d.]+)$", run.stderr, re.M)
    if not found:
        sys.exit(f"bench: {argv[0]}: no CPU time printed: {run.stderr.strip()[-300:]}")
    return float(found[-1][0]) + float(found[-1][1])


def cpu_timed(command: list[str]) -> list[str]:
    """``command`` under bash's ``time`` (its processes' CPU, children included)."""
    return ["bash", "-c", 'TIMEFORMAT="WORKLOAD-CPU %U %S"; time "$@" >/dev/null 2>&1',
            "bench", *command]


class Overhead(NamedTuple):
    """The workload's CPU seconds bare, and the overheads (%) under sframe record, under perf
    record with no stacks (the floor) and under the --variant of sframe record: medians,
    and ours (the variant's) less the floor in each round."""

    bare: float
    ours: float
    floor: float
    paired: list[float]
    variant: float | None = None
    variant_paired: list[float] | None = None


def overheads(command: list[str], system_wide: bool, sframe: list[str], perf: str,
              env: dict[str, str], repeats: int, variant: list[str] | None = None,
              log: Path | None = None, name: str = "") -> Overhead:
    """Medians over ``repeats`` rounds, each bare, ours, perf's (and ours with ``variant``'s
    options) in turn. The rounds' differences are the steadier figure: a round's runs share
    the machine's state (here ±3-5 points from run to run, ±10 on a busy day). With
    ``log``, each round's CPU seconds are appended to it as a JSON line, and the rounds
    it already holds for workload ``name`` (with the same variant) are counted too: a
    long measurement can be made in several sittings."""
    wrapped = cpu_timed(command)
    where = ["-a"] if system_wide else []
    scratch = OUT / "agreement.overhead.data"
    rows: dict[str, list[float]] = {"bare": [], "ours": [], "floor": [], "variant": []}
    label = " ".join(variant) if variant is not None else None
    for earlier in logged_rounds(log, name, label):
        rows["bare"].append(earlier["bare"])
        for key in ("ours", "floor", "variant"):
            if key in earlier:
                rows[key].append(100 * (earlier[key] - earlier["bare"]) / earlier["bare"])
    for _ in range(repeats):
        bare = timed_cpu(wrapped, env)
        ours = timed_cpu([*sframe, "record", "-q", *where, "-o", str(scratch), "--", *wrapped],
                         env)
        floor = timed_cpu([perf, "record", "-q", "-B", "-F", "999", "-e", "cpu-clock", *where,
                           "-o", str(scratch), "--", *wrapped], env)
        rows["bare"].append(bare)
        rows["ours"].append(100 * (ours - bare) / bare)
        rows["floor"].append(100 * (floor - bare) / bare)
        if variant is not None:
            other = timed_cpu([*sframe, "record", "-q", *variant, *where, "-o", str(scratch),
                               "--", *wrapped], env)
            rows["variant"].append(100 * (other - bare) / bare)
        if log is not None:
            seconds = {"bare": bare, "ours": ours, "floor": floor}
            if variant is not None:
                seconds["variant"] = other
            with log.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps({"workload": name, "variant": label, **seconds,
                                         "at": time.time()}) + "\n")

    def less_floor(name: str) -> list[float]:
        return [value - floor for value, floor in zip(rows[name], rows["floor"], strict=True)]

    return Overhead(statistics.median(rows["bare"]), statistics.median(rows["ours"]),
                    statistics.median(rows["floor"]), less_floor("ours"),
                    statistics.median(rows["variant"]) if variant is not None else None,
                    less_floor("variant") if variant is not None else None)


def logged_rounds(log: Path | None, name: str, variant: str | None) -> list[dict[str, float]]:
    """The rounds ``log`` holds for workload ``name`` measured with ``variant``."""
    if log is None or not log.exists():
        return []
    found = []
    for line in log.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("workload") == name and entry.get("variant") == variant:
            found.append(entry)
    return found


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


def make_project(directory: Path, files: int = 24) -> list[str]:
    """A small C project (``files`` files) and `make -j2 -B` of it."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("u*.[co]"):
        stale.unlink()
    for number in range(files):
        body = "\n".join(f"int f{number}_{k}(int x) {{ return x * {k} + {number}; }}"
                         for k in range(300))
        (directory / f"u{number}.c").write_text(body + "\n")
    objects = " ".join(f"u{number}.o" for number in range(files))
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


def busy_machine(seconds: float, pieces: list[list[str]], env: dict[str, str]) -> list[str]:
    """A shell keeping the machine busy about ``seconds``: ``pieces`` in turn, as many
    rounds as one bare round fits (a fixed amount of work, so that runs compare)."""
    script = "; ".join(" ".join(f"'{arg}'" for arg in piece) + " >/dev/null 2>&1"
                       for piece in pieces)
    started = time.perf_counter()
    subprocess.run(["sh", "-c", script], env=env, check=False)
    rounds = max(1, round(seconds / max(time.perf_counter() - started, 0.1)))
    return ["sh", "-c", f"for i in $(seq {rounds}); do {script}; done"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8000,
                        help="the C workloads' length (8000: ~0.5 s; the 300-deep one 3/16 of it)")
    parser.add_argument("--system-wide", type=float, default=0.0, metavar="S",
                        help="also record the whole machine, kept busy for S seconds")
    parser.add_argument("--only", default=None, help="the workloads whose name has this")
    parser.add_argument("--make-files", type=int, default=24, metavar="N",
                        help="the C files of the make -j2 project (24: ~5,700 samples; the "
                             "functions near 1%% move by ~0.15 points between samplings)")
    parser.add_argument("--separate", action="store_true",
                        help="record each command twice, once under each tool (default: one "
                             "run, `sframe record -- COMMAND` with `perf record -a` beside it)")
    parser.add_argument("--idle", type=int, default=0, metavar="N",
                        help="-a: N idle python3 processes holding numpy run all along")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of bare / sframe record / perf record for the overhead")
    parser.add_argument("--overhead-only", action="store_true",
                        help="only the overhead (no recordings compared)")
    parser.add_argument("--rounds-log", type=Path, default=None, metavar="FILE",
                        help="append each overhead round to FILE (JSON lines) and count the "
                             "rounds it already holds: a long measurement in sittings")
    parser.add_argument("--variant", default=None, metavar="OPTIONS",
                        help="with --overhead-only: also sframe record with these options, in "
                             "the same rounds (e.g. --variant='--max-stack 2')")
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
    make = make_project(OUT / "project", args.make_files)
    workloads: dict[str, tuple[list[str], list[str], bool]] = {
        c_name: ([str(program), str(args.rounds)], [], False),
        "300-deep recursion (C, generated tables)": (
            [str(OUT / "deep300"), str(max(1, args.rounds * 3 // 16))], [], False),
        "Lua fixture (binutils 2.46 .sframe)": ([str(lua / "lua"), str(lua / "bench.lua")],
                                                [str(lua)], False),
        "python3 (generated tables)": ([python, str(script)], [], False),
        "40 binaries never run before, in turn": (fresh_binaries(OUT / "fresh"), [], False),
        f"make -j2 of {args.make_files} C files": (make, [], False),
    }
    if args.system_wide:
        busy = busy_machine(args.system_wide, [make, [python, str(script)],
                                               [str(program), str(args.rounds // 4)]], env)
        workloads[f"-a, the machine kept busy ~{args.system_wide:g} s (make -j2, python3, C)"] = (
            busy, [], True)
    agreed = True
    idle = [subprocess.Popen([sys.executable, "-c", "import numpy, time; time.sleep(1e6)"])
            for _ in range(args.idle if args.system_wide else 0)]
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    was = stats.read_text().strip()
    try:
        for name, (command, binaries, system_wide) in workloads.items():
            if args.only and args.only not in name:
                continue
            stats.write_text("0")  # timed runs: no clock reads around every program run
            # (-a: one round, each run being the whole --system-wide time)
            if args.overhead_only:
                overhead = overheads(command, system_wide, sframe, perf, env, args.repeats,
                                     args.variant.split() if args.variant else None,
                                     args.rounds_log, name)
                print(f"{name}:{_overhead_text(overhead, args.variant or '')}", flush=True)
                continue
            overhead = overheads(command, system_wide, sframe, perf, env,
                                 1 if system_wide else args.repeats)
            ours, theirs = OUT / "agreement.sframe.data", OUT / "agreement.perf.data"
            where = ["-a"] if system_wide else []
            # The largest copy, -a too (7 GB a minute here; with 16 KiB copies perf's chains
            # of deep compiler stacks lost their outer functions: 0.9% where ours had 1.35%)
            reference = [perf, "record", "-q", "-B", "-F", "999", "-e", "cpu-clock", *where,
                         "-m", "64M", "--call-graph", "dwarf,65528", "-o", str(theirs)]
            alongside = None
            if system_wide:  # the same run recorded by both (see the docstring)
                alongside = subprocess.Popen(reference, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL)
                time.sleep(2)  # perf has synthesized the running processes and samples
            # One run of a command recorded by both: perf's per-task events inherited by
            # `sframe record` and the command it runs, as ours are by the command
            around = [] if system_wide or args.separate else [*reference, "--"]
            stats.write_text("1")
            made = subprocess.run([*around, *sframe, "record", *where, "-o", str(ours), "--",
                                   *command], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
            stats.write_text(was)
            if alongside is not None:
                alongside.send_signal(signal.SIGINT)
                alongside.wait()
            if made.returncode != 0:
                print(f"{name}: sframe record failed: {made.stderr.strip()[-300:]}")
                agreed = False
                continue
            if alongside is None and args.separate:
                subprocess.run([*reference, "--", *command], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            agreed &= compare(name, folded(sframe, ours, env, binaries),
                              folded(sframe, theirs, env, binaries),
                              our_summary(made.stderr, ours), overhead)
    finally:
        stats.write_text(was)
        for process in idle:
            process.kill()
            process.wait()
    return 0 if agreed else 1


if __name__ == "__main__":
    raise SystemExit(main())

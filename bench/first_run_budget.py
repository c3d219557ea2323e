"""Bench: what a first run of `sframe script` adds to a warm one, part by part of the
private cache, in wall time and in CPU time, against what the speed goal leaves for it.

Issue 29's goals hold the first run (an empty XDG_CACHE_HOME) to perf's time: on the
small recording at most 1.25x perf's time, on the large one at least 4x perf's speed
(--goal 1.25 or --goal 0.25: the most our time may be, as a multiple of perf's). A first
run makes what a warm one reads from the cache: the kernel's symbols (kallsyms parsed),
the binaries' symbol tables, their SFrame tables (on-demand indexes, functions made, flat
tables). This bench times, in one sitting and in alternating order:

- perf script --no-inline on the same recording;
- ours warm: the cache a finished run left (copied afresh for every run);
- ours with every part of that cache but one, for each part: the time over warm is what
  a first run pays for that part;
- ours cold: an empty cache.

Each run's CPU time is user + system time of the whole process tree
(:func:`common.measured_run`: our helpers and workers are all waited for, so theirs is
counted). Then it prints the
budget: the goal's time (goal x perf's median) minus our warm median is what a first
run may add; what it adds is cold minus warm, and each part's share. On a machine whose
CPUs are all busy through a run, a first run's added CPU time, split over the CPUs, is a
floor under its added wall time: the budget line says how much CPU time the goal leaves.
Ours is the installed console script (bytecode caching on).

    env -u PYTHONDONTWRITEBYTECODE python3 bench/first_run_budget.py [--recording small|large|FILE]
        [--goal RATIO] [--runs N] [--samples N] [--binaries DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    FIXTURES,
    MIN_REPEATS,
    OUT,
    alternating,
    bench_environment,
    measured_run,
    private_cache,
    spread,
    venv_sframe,
    with_cache,
)

#: The parts of a filled cache (directories under $XDG_CACHE_HOME/pysframe).
PARTS = {"kernel symbols": "kernel", "symbol tables": "symbols", "SFrame tables": "sframe"}
#: The goal on each named recording: the most our time may be, as a multiple of perf's.
GOALS = {"small": 1.25, "large": 0.25}


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one run, its text to /dev/null."""
    wall, cpu, _ = measured_run(argv, env)
    return wall, cpu


def copy_parts(full: Path, target: Path, parts: list[str]) -> None:
    """The cache ``full`` into ``target`` with only the directories ``parts`` of it."""
    for part in parts:
        source = full / "pysframe" / part
        if source.is_dir():
            shutil.copytree(source, target / "pysframe" / part)


def variants(full: Path) -> dict[str, Callable[[Path], None]]:
    """How each cache state is made in an empty directory."""

    def keeping(parts: list[str]) -> Callable[[Path], None]:
        return lambda target: copy_parts(full, target, parts)

    made = {"warm": keeping(list(PARTS.values()))}
    for name, part in PARTS.items():
        made[f"all but {name}"] = keeping([other for other in PARTS.values() if other != part])
    made["cold"] = keeping([])
    return made


def measure(ours: list[str], perf: list[str], runs: int
            ) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) of every run of each variant and of perf, ``runs`` alternating repeats."""
    environment = bench_environment()
    figures: dict[str, list[tuple[float, float]]] = {}
    with private_cache() as full:
        run_once(ours, with_cache(environment, full))  # the finished run's cache, untimed
        states = variants(full)
        names = [*states, "perf"]
        figures = {name: [] for name in names}
        for repeat in range(runs):
            for name in alternating(names, repeat):
                if name == "perf":
                    figures[name].append(run_once(perf, environment))
                    continue
                with tempfile.TemporaryDirectory(prefix="bench-cache-", dir=OUT) as cache:
                    os.chmod(cache, 0o700)
                    states[name](Path(cache))
                    figures[name].append(run_once(ours, with_cache(environment, Path(cache))))
    return figures


def report(figures: dict[str, list[tuple[float, float]]], goal: float, cpus: int) -> None:
    def median(name: str, column: int) -> float:
        return statistics.median(value[column] for value in figures[name]) * 1e3

    width = max(map(len, figures)) + 2
    print(f"  {'':{width}}{'wall, ms':>22}{'CPU, ms':>22}   "
          f"(median [min-max] of {len(figures['perf'])}, alternating order)")
    for name, values in figures.items():
        print(f"  {name:{width}}{spread([v[0] * 1e3 for v in values]):>22}"
              f"{spread([v[1] * 1e3 for v in values]):>22}")
    warm_wall, warm_cpu = median("warm", 0), median("warm", 1)
    perf_wall = median("perf", 0)
    limit = goal * perf_wall
    allowed = limit - warm_wall
    print(f"  goal: at most {goal:g} x perf's {perf_wall:.0f} ms = {limit:.0f} ms; the warm run "
          f"takes {warm_wall:.0f} ms, so a first run may add {allowed:.0f} ms "
          f"({max(allowed, 0) * cpus:.0f} CPU-ms over {cpus} CPUs at most, if all are busy)")
    added_wall, added_cpu = median("cold", 0) - warm_wall, median("cold", 1) - warm_cpu
    print(f"  a first run adds {added_wall:.0f} ms and {added_cpu:.0f} CPU-ms "
          f"(cold {median('cold', 0):.0f} ms against warm; goal "
          f"{'met' if added_wall <= allowed else 'NOT met'})")
    for name in PARTS:
        variant = f"all but {name}"
        print(f"    {name}: {median(variant, 0) - warm_wall:+.0f} ms, "
              f"{median(variant, 1) - warm_cpu:+.0f} CPU-ms")


def recording_and_goal(args: argparse.Namespace, perf: str) -> tuple[Path, list[str], float]:
    """(the recording, our extra arguments for it, the goal)."""
    if args.recording == "small":
        directory = FIXTURES / "real" / "lua-2.46-x86_64"
        subprocess.run([perf, "buildid-cache", "--add", str(directory / "lua")],
                       check=False, stderr=subprocess.DEVNULL)
        return directory / "perf.data", ["--binaries", str(directory)], GOALS["small"]
    if args.recording == "large":
        from perf_script import deep_recording

        return deep_recording(perf, args.samples, reuse=True), [], GOALS["large"]
    binaries = ["--binaries", args.binaries] if args.binaries else []
    return Path(args.recording), binaries, args.goal if args.goal is not None else 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recording", default="small",
                        help="small (the Lua fixture), large (bench/deep.c), or a perf.data")
    parser.add_argument("--goal", type=float, default=None,
                        help="the most our time may be, as a multiple of perf's")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--samples", type=int, default=50_000,
                        help="large: at least this many samples if it is recorded anew")
    parser.add_argument("--binaries", default=None, help="our --binaries, for a perf.data")
    args = parser.parse_args()
    perf = shutil.which("perf")
    if perf is None:
        sys.exit("bench: perf not found (apt-get install linux-perf)")
    OUT.mkdir(parents=True, exist_ok=True)
    data, extra, goal = recording_and_goal(args, perf)
    if args.goal is not None:
        goal = args.goal
    ours = [*venv_sframe(), "script", str(data), *extra]
    figures = measure(ours, [perf, "script", "--no-inline", "-i", str(data)],
                      max(args.runs, MIN_REPEATS))
    print(f"{args.recording}: {data} ({data.stat().st_size / 2**20:.0f} MiB)")
    report(figures, goal, len(os.sched_getaffinity(0)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Bench: `sframe stack PID` against `eu-stack -p PID` and gdb on one multi-threaded process.

Builds a small C program (gcc) whose 8 threads block in nested calls, then times each
tool cold and warm (bench/common.py): cold, our runs start with an empty private
XDG_CACHE_HOME (libc's SFrame table generated, DWARF answers and symbols read again);
warm, a private cache filled by one untimed run. The tools alternate order, --runs
repeats (>= 5), median [min-max], ratios taken run by run against issue 13's goals (at
least 5x faster than gdb, within 5x of eu-stack). eu-stack and gdb keep no such cache
(the page cache is warm for all). Ours is the installed console script (bytecode caching
on), as users run it; eu-stack comes from Debian's elfutils, installed when missing.
Also one `stack` inside a process that has imported pysframe (warm private cache), and
the phases of two warm runs (PYSFRAME_PHASE_TIMES=1; the first of three fills the cache).

    env -u PYTHONDONTWRITEBYTECODE python3 bench/stack.py [--threads N] [--runs N]

``--baseline SRC`` also times another checkout's pysframe (its ``src`` first on PYTHONPATH),
interleaved with ours in every repeat, run as a console script of pip's entry-point form
(which imports ``re``): how the checkouts before the ``sframe`` script file installed it.

    git worktree add /tmp/before <commit>
    env -u PYTHONDONTWRITEBYTECODE python3 bench/stack.py --threads 4 --baseline /tmp/before/src
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    MIN_REPEATS,
    OUT,
    baseline_sframe,
    bench_environment,
    cold_and_warm,
    compile_bytecode,
    print_table,
    private_cache,
    ratios,
    spread,
    venv_sframe,
    with_cache,
)

PROGRAM = r"""
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
__attribute__((noinline)) static void level3(void) { for (;;) pause(); }
__attribute__((noinline)) static void level2(void) { level3(); __asm__ volatile(""); }
__attribute__((noinline)) static void *level1(void *arg) { (void)arg; level2(); return 0; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 8;
    pthread_t t;
    for (int i = 0; i < n; i++) pthread_create(&t, 0, level1, 0);
    puts("ready"); fflush(stdout);
    level2();
    return 0;
}
"""


def timed(argv: list[str]) -> Callable[[dict[str, str]], float]:
    def run(env: dict[str, str]) -> float:
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                       env=env)
        return time.perf_counter() - start
    return run


#: Run by the venv's interpreter (this checkout's pysframe, not whatever the bench's own
#: interpreter imports): the median time of `stack` in a process that has imported
#: pysframe, one untimed run first.
IN_PROCESS = """
import contextlib, io, statistics, sys, time
from pysframe.cli.stack import run_stack
times = []
for run in range(int(sys.argv[2]) + 1):
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        run_stack(int(sys.argv[1]), as_json=False, show_build_id=False, max_depth=256)
        if run:
            times.append(time.perf_counter() - start)
print(statistics.median(times))
"""


def in_process_time(python: str, pid: int, runs: int, env: dict[str, str]) -> float:
    """Median time of the stack command's work inside one Python process (imports done, no
    interpreter start-up): what a profiler using the library pays per stack."""
    done = subprocess.run([python, "-c", IN_PROCESS, str(pid), str(runs)], env=env,
                          capture_output=True, text=True, check=True)
    return float(done.stdout)


def phase_times(sframe: list[str], pid: int, env: dict[str, str]) -> str:
    """The phases one run of ours prints with PYSFRAME_PHASE_TIMES set (warm cache)."""
    done = subprocess.run([*sframe, "stack", str(pid)], env={**env, "PYSFRAME_PHASE_TIMES": "1"},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)
    return next((line for line in done.stderr.splitlines() if line.startswith("phases: ")),
                "phases: (none printed)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=MIN_REPEATS)
    parser.add_argument("--baseline", type=Path, default=None, metavar="SRC",
                        help="another checkout's src, timed too (see above)")
    args = parser.parse_args()
    if shutil.which("eu-stack") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "elfutils"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    OUT.mkdir(parents=True, exist_ok=True)
    compile_bytecode()
    source, binary = OUT / "threads.c", OUT / "threads"
    source.write_text(PROGRAM.replace("#include <stdio.h>", "#include <stdio.h>\n#include <stdlib.h>"))
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(binary), str(source)], check=True)
    child = subprocess.Popen([str(binary), str(args.threads)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        sframe = venv_sframe()
        pid = str(child.pid)
        tools = {"sframe stack": timed([*sframe, "stack", pid]),
                 "sframe stack --no-debuginfo": timed([*sframe, "stack", "--no-debuginfo", pid])}
        if args.baseline is not None:
            command, extra = baseline_sframe(sframe, args.baseline)
            baseline = timed([*command, "stack", pid])
            tools["baseline sframe stack"] = lambda env: baseline({**env, **extra})
        if shutil.which("eu-stack"):
            tools["eu-stack"] = timed(["eu-stack", "-p", pid])
        if shutil.which("gdb"):
            tools["gdb"] = timed(["gdb", "-batch", "-ex", "thread apply all bt", "-p", pid])
        figures = cold_and_warm(tools, args.runs)
        interpreter = str(Path(sframe[0]).with_name("python"))
        python = statistics.median(
            timed([interpreter, "-c", "pass"])(bench_environment()) for _ in range(args.runs))
        with private_cache() as cache:
            env = with_cache(bench_environment(), cache)
            inside = in_process_time(interpreter, child.pid, args.runs, env)
            phases = [phase_times(sframe, child.pid, env) for _ in range(3)][1:]
        print(f"{args.threads + 1} threads; python start-up in the venv {python * 1000:.0f} ms; "
              f"one `stack` in a process that has imported pysframe (warm cache) "
              f"{inside * 1000:.1f} ms")
        for line in phases:
            print(f"  warm {line}")
        print_table(figures)
        for state, columns in figures.items():
            ours = columns["sframe stack"]
            if "eu-stack" in columns:
                versus = ratios(ours, columns["eu-stack"])
                print(f"  {state} cache: sframe/eu-stack {spread(versus, '.2f')}x, --no-debuginfo "
                      f"{spread(ratios(columns['sframe stack --no-debuginfo'], columns['eu-stack']), '.2f')}x"
                      f" (goal <= 5x: {'met' if statistics.median(versus) <= 5 else 'NOT met'})")
            if "baseline sframe stack" in columns:
                print(f"  {state} cache: baseline/sframe "
                      f"{spread(ratios(columns['baseline sframe stack'], ours), '.3f')}x")
            if "gdb" in columns:
                versus = ratios(columns["gdb"], ours)
                print(f"  {state} cache: gdb/sframe {spread(versus, '.1f')}x, --no-debuginfo "
                      f"{spread(ratios(columns['gdb'], columns['sframe stack --no-debuginfo']), '.1f')}x"
                      f" (goal >= 5x: {'met' if statistics.median(versus) >= 5 else 'NOT met'})")
    finally:
        child.kill()
        child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

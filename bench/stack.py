"""Bench: `sframe stack PID` against `eu-stack -p PID` and gdb on one multi-threaded process.

Builds a small C program (gcc) whose 8 threads block in nested calls, warms the
generated-SFrame cache with one run, then times each tool (median of N runs) and
prints the ratios against issue 13's goals (at least 5x faster than gdb, within 5x of
eu-stack). Ours is the console script in bench/out/venv (bytecode caching on), as users
run it. eu-stack comes from Debian's elfutils, installed when missing.

    python3 bench/stack.py [--threads N] [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import OUT, bench_environment, compile_bytecode, venv_sframe

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


def median_time(argv: list[str], runs: int) -> float:
    times = []
    env = bench_environment()
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                       env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def in_process_time(pid: int, runs: int) -> float:
    """Median time of the stack command's work inside one Python process (imports done, no
    interpreter start-up): what a profiler using the library pays per stack."""
    import contextlib
    import io

    from pysframe.cli.stack import run_stack

    times = []
    for _ in range(runs):
        with contextlib.redirect_stdout(io.StringIO()):
            start = time.perf_counter()
            run_stack(pid, as_json=False, show_build_id=False, max_depth=256)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=7)
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
        ours_cmd = [*sframe, "stack", str(child.pid)]
        subprocess.run(ours_cmd, stdout=subprocess.DEVNULL, check=True)  # warm the cache
        ours = median_time(ours_cmd, args.runs)
        bare = median_time([*ours_cmd[:-1], "--no-debuginfo", str(child.pid)], args.runs)
        python = median_time([str(Path(sframe[0]).with_name("python")), "-c", "pass"],
                             args.runs)
        inside = in_process_time(child.pid, args.runs)
        results = [f"sframe stack {ours * 1000:.0f} ms (--no-debuginfo {bare * 1000:.0f} ms; "
                   f"python start-up in the venv {python * 1000:.0f} ms; one `stack` in a process "
                   f"that has imported pysframe {inside * 1000:.1f} ms)"]
        if shutil.which("eu-stack"):
            eu = median_time(["eu-stack", "-p", str(child.pid)], args.runs)
            results.append(f"eu-stack {eu * 1000:.0f} ms (sframe/eu-stack {ours / eu:.2f}x, "
                           f"--no-debuginfo {bare / eu:.2f}x; goal <= 5x: "
                           f"{'met' if ours <= 5 * eu else 'NOT met'})")
        if shutil.which("gdb"):
            gdb = median_time(["gdb", "-batch", "-ex", "thread apply all bt", "-p",
                               str(child.pid)], max(3, args.runs // 2))
            results.append(f"gdb {gdb * 1000:.0f} ms (gdb/sframe {gdb / ours:.1f}x, "
                           f"--no-debuginfo {gdb / bare:.1f}x; goal >= 5x: "
                           f"{'met' if gdb >= 5 * ours else 'NOT met'})")
        print(f"{args.threads + 1} threads:\n  " + "\n  ".join(results))
    finally:
        child.kill()
        child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

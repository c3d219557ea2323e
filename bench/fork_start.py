"""Bench: how soon a forked child first runs, left where the kernel puts it and moved off
its parent's CPU (:func:`pysframe.cpus.place_forked`).

``script -j`` forks its worker and a first run forks its symbols helper while this
process goes on working; each child's first instruction is on the run's critical path.
On a guest where the kernel leaves a new task on its parent's CPU, the child waits for a
balancing tick while the other CPU idles. Here the parent is busy (a spin) before and
after each fork, the machine idle in between (``--idle`` seconds), and the child reports
when it first ran. Both ways alternate, ``--forks`` each; median [min-max] in ms.

    python3 bench/fork_start.py [--forks 15] [--idle 0.05]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pysframe.cpus import place_forked, usable_cpus


def _spin(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def child_start(moved: bool, idle: float) -> tuple[float, float]:
    """(ms from the fork to the child's first run, ms the parent spent forking and
    placing it)."""
    time.sleep(idle)
    _spin(0.002)
    read_end, write_end = os.pipe()
    begin = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        first = time.perf_counter()
        os.write(write_end, repr(first - begin).encode())
        os._exit(0)
    if moved:
        place_forked(pid)
    parent = time.perf_counter() - begin
    _spin(0.008)
    os.close(write_end)
    started = float(os.read(read_end, 64).decode())
    os.close(read_end)
    os.waitpid(pid, 0)
    return started * 1e3, parent * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forks", type=int, default=15)
    parser.add_argument("--idle", type=float, default=0.05)
    args = parser.parse_args()
    print(f"{usable_cpus()} CPUs, kernel {os.uname().release}")
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for k in range(args.forks * 2):
        moved = bool(k % 2)
        results[moved].append(child_start(moved, args.idle))
    for moved, found in results.items():
        starts = [start for start, _ in found]
        parents = [parent for _, parent in found]
        print(f"  {'moved off the parent CPU' if moved else 'left where placed':>26}: child "
              f"first ran {statistics.median(starts):.2f} ms [{min(starts):.2f}-"
              f"{max(starts):.2f}] after the fork; the parent's fork took "
              f"{statistics.median(parents):.2f} ms")


if __name__ == "__main__":
    main()

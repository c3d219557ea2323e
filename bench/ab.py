"""Bench: one ``sframe`` command line, this checkout's against another's, warm (or, with
``--cold``, first runs), run by run.

Ours is the installed console script (bytecode caching on); the other checkout's ``src``
runs first on PYTHONPATH through pip's entry-point wrapper, as the checkouts before
``scripts/sframe`` installed the command (bench/common.py). Each side has a private cache
filled by two untimed runs (``--cold``: an empty one for every run, whose first run's output
is compared); the sides alternate, --runs repeats (>= 5). Prints wall and
CPU time (user + system of the command and its children, from ``getrusage``: steadier
than wall time on a noisy machine) as median [min-max], the run-by-run ratios, and
whether the two outputs are the same.

    env -u PYTHONDONTWRITEBYTECODE python3 bench/ab.py --baseline /tmp/before/src \\
        [--runs N] [--cold] -- script bench/out/system.data
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    MIN_REPEATS,
    baseline_sframe,
    bench_environment,
    measured_run,
    private_cache,
    spread,
    venv_sframe,
    with_cache,
)


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """(wall seconds, CPU seconds, standard output) of one run."""
    return measured_run(argv, env, capture=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, metavar="SRC")
    parser.add_argument("--runs", type=int, default=MIN_REPEATS)
    parser.add_argument("--cold", action="store_true",
                        help="time first runs: an empty cache for every run")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the sframe arguments, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no sframe command given (after --)")
    ours = venv_sframe()
    theirs, extra = baseline_sframe(ours, args.baseline)
    sides = {"sframe": ([*ours, *command], {}), "baseline": ([*theirs, *command], extra)}
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    outputs: dict[str, bytes] = {}
    with private_cache() as our_cache, private_cache() as their_cache:
        warm = {"sframe": our_cache, "baseline": their_cache}
        if not args.cold:
            for name, (argv, more) in sides.items():
                environment = {**with_cache(bench_environment(), warm[name]), **more}
                outputs[name] = [run(argv, environment)[2] for _ in range(2)][-1]
        for repeat in range(max(args.runs, MIN_REPEATS)):
            for name in (list(sides) if repeat % 2 == 0 else list(reversed(sides))):
                argv, more = sides[name]
                with private_cache() as empty:
                    cache = empty if args.cold else warm[name]
                    took, used, output = run(argv, {**with_cache(bench_environment(), cache),
                                                    **more})
                outputs.setdefault(name, output)
                wall[name].append(took)
                cpu[name].append(used)
    print(f"sframe {' '.join(command)} ({'cold' if args.cold else 'warm'}; outputs "
          f"{'identical' if outputs['sframe'] == outputs['baseline'] else 'differ'})")
    for name in sides:
        print(f"  {name:9} wall {spread(wall[name], '.3f')} s, cpu {spread(cpu[name], '.3f')} s")
    for label, figures in (("wall", wall), ("cpu", cpu)):
        versus = [a / b for a, b in zip(figures["baseline"], figures["sframe"], strict=True)]
        print(f"  baseline/sframe {label} time, run by run: {spread(versus, '.3f')}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

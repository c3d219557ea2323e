"""First run vs warm: ``sframe script`` on the fixture recordings with an empty private
XDG_CACHE_HOME (every binary's table generated; in parallel, the default, or one after the
other) and with a warm one (the same private cache after the parallel run filled it).
Prints median [min-max] of ``--runs`` (>= 5) wall times of each. Ours is the installed
console script (bytecode caching on); the sequential variant is the same command run
through its interpreter with the prefetch turned off.

    env -u PYTHONDONTWRITEBYTECODE python3 bench/first_run.py [--runs 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    FIXTURES,
    MIN_REPEATS,
    alternating,
    bench_environment,
    private_cache,
    spread,
    venv_sframe,
    with_cache,
)

#: Runs ``sframe script`` with the prefetch turned off (tables made when first mapped).
_SEQUENTIAL = ("import sys; import pysframe.unwind.modules as m; "
               "m.BinaryFinder.prefetch = lambda self, *a, **k: 0; "
               "from pysframe.cli.main import cli; sys.argv[0] = 'sframe'; cli()")


def _time(command: list[str], cache: Path) -> float:
    env = with_cache(bench_environment(), cache)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=MIN_REPEATS)
    runs = max(MIN_REPEATS, parser.parse_args().runs)
    sframe = venv_sframe()
    python = str(Path(sframe[0]).with_name("python"))
    recordings = sorted(FIXTURES.glob("real/*/perf.data"))
    if not recordings:
        sys.exit("bench: no recordings under ../shared/fixtures/real")
    for recording in recordings:
        arguments = ["script", str(recording), "--binaries", str(recording.parent)]
        parallel = [*sframe, *arguments]
        sequential = [python, "-c", _SEQUENTIAL, *arguments]
        figures: dict[str, list[float]] = {"first (parallel)": [], "first (sequential)": [],
                                           "warm": []}
        commands = {"first (parallel)": parallel, "first (sequential)": sequential}
        for repeat in range(runs):
            for name in alternating(list(commands), repeat):
                command = commands[name]
                with private_cache() as cache:
                    figures[name].append(_time(command, cache))
                    if name == "first (parallel)":
                        figures["warm"].append(_time(parallel, cache))
        print(f"{recording.parent.name}: " + ", ".join(
            f"{name} {spread(times, '.2f')} s" for name, times in figures.items()))


if __name__ == "__main__":
    main()

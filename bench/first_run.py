"""First run vs warm: ``sframe script`` on the fixture recordings with an empty table cache
(every binary's table generated; in parallel, the default, or one after the other) and
with a warm one. Prints the best of ``--runs`` wall times of each.

    PYTHONPATH=src python3 bench/first_run.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from common import FIXTURES, REPO

#: Runs ``sframe script`` with the prefetch turned off (tables made when first mapped).
_SEQUENTIAL = ("import sys; import pysframe.unwind.modules as m; "
               "m.BinaryFinder.prefetch = lambda self, *a, **k: 0; "
               "from pysframe.cli.main import cli; sys.argv[0] = 'sframe'; cli()")


def _time(command: list[str], cache: str) -> float:
    env = {**os.environ, "XDG_CACHE_HOME": cache, "PYTHONPATH": str(REPO / "src")}
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    recordings = sorted(FIXTURES.glob("real/*/perf.data"))
    if not recordings:
        sys.exit("bench: no recordings under ../shared/fixtures/real")
    for recording in recordings:
        arguments = ["script", str(recording), "--binaries", str(recording.parent)]
        parallel = [sys.executable, "-m", "pysframe", *arguments]
        sequential = [sys.executable, "-c", _SEQUENTIAL, *arguments]
        figures: dict[str, list[float]] = {"first (parallel)": [], "first (sequential)": [],
                                           "warm": []}
        for _ in range(runs):
            for name, command in (("first (parallel)", parallel),
                                  ("first (sequential)", sequential)):
                with tempfile.TemporaryDirectory() as cache:
                    figures[name].append(_time(command, cache))
                    if name == "first (parallel)":
                        figures["warm"].append(_time(parallel, cache))
        print(f"{recording.parent.name}: " + ", ".join(
            f"{name} {min(times):.2f} s" for name, times in figures.items()))


if __name__ == "__main__":
    main()

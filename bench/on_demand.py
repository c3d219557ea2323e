"""Tables on demand (issue 29, item 1): ``sframe script`` on recordings of binaries without
``.sframe``, first run (empty private XDG_CACHE_HOME: each function's rows made when a
sample first needs them) against warm (the same cache after that run), and ``perf script``
(which reads ``.eh_frame`` lazily) on the same recording in the same repeat. Prints median
[min-max] of ``--runs`` (>= 5) wall times and the first/warm ratio (goal: <= 1.5).

Recordings are given as paths; for instance a system-wide one on a busy machine and a
pipeline of openssl, gzip and xz:

    perf record -a -g --call-graph dwarf,8192 -o system.data -- sleep 4
    perf record -g --call-graph dwarf,8192 -o pipeline.data -- sh -c \\
        'openssl speed -seconds 1 sha256; head -c 20000000 /dev/urandom | gzip -1 | xz -0 >/dev/null'
    env -u PYTHONDONTWRITEBYTECODE python3 bench/on_demand.py system.data pipeline.data
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

from common import (
    MIN_REPEATS,
    alternating,
    bench_environment,
    private_cache,
    spread,
    venv_sframe,
    with_cache,
)


def _time(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=MIN_REPEATS)
    arguments = parser.parse_args()
    runs = max(MIN_REPEATS, arguments.runs)
    sframe = venv_sframe()
    perf = shutil.which("perf")
    for recording in arguments.recordings:
        ours = [*sframe, "script", "-i", str(recording)]
        figures: dict[str, list[float]] = {"first": [], "warm": [], "perf script": []}
        for repeat in range(runs):
            for name in alternating(["sframe", "perf"], repeat):
                if name == "perf":
                    if perf is not None:
                        figures["perf script"].append(
                            _time([perf, "script", "-i", str(recording)], bench_environment()))
                    continue
                with private_cache() as cache:
                    env = with_cache(bench_environment(), cache)
                    figures["first"].append(_time(ours, env))
                    figures["warm"].append(_time(ours, env))
        ratio = [first / warm for first, warm in zip(figures["first"], figures["warm"],
                                                     strict=True)]
        print(f"{recording}: " + ", ".join(
            f"{name} {spread(times, '.2f')} s" for name, times in figures.items() if times)
            + f"; first/warm {statistics.median(ratio):.2f}x [{min(ratio):.2f}-{max(ratio):.2f}]")


if __name__ == "__main__":
    main()

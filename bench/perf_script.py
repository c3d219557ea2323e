"""Bench: `sframe script` against `perf script --no-inline` on the same recording, in one run.

perf must find the recorded binary: the bench adds it to perf's build-id cache
(`perf buildid-cache --add`, which writes under ~/.debug) before timing. Prints
wall time, frames per second of each, their ratio, and our peak RSS.

    python3 bench/perf_script.py [--recording DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FIXTURES, OUT, sframe_command


def timed(argv: list[str], output: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS KiB of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(output, "wb") as out:
        start = time.perf_counter()
        subprocess.run(argv, stdout=out, stderr=subprocess.DEVNULL, check=True)
        elapsed = time.perf_counter() - start
    return elapsed, max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def frames(path: Path) -> int:
    return sum(1 for line in path.open() if line.startswith("\t"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recording", default=str(FIXTURES / "real" / "lua-2.46-x86_64"))
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    perf = shutil.which("perf")
    if perf is None:
        sys.exit("bench: perf not found (apt-get install linux-perf)")
    recording = Path(args.recording)
    data = recording / "perf.data"
    binary = recording / "lua"
    subprocess.run([perf, "buildid-cache", "--add", str(binary)], check=False,
                   stderr=subprocess.DEVNULL)
    OUT.mkdir(parents=True, exist_ok=True)
    ours_out, theirs_out = OUT / "sframe-script.txt", OUT / "perf-script.txt"
    ours_times, theirs_times, rss = [], [], 0
    for _ in range(args.runs):
        took, peak = timed([*sframe_command(), "script", str(data), "--binaries",
                            str(recording)], ours_out)
        ours_times.append(took)
        rss = max(rss, peak)
        theirs_times.append(timed([perf, "script", "--no-inline", "-i", str(data)],
                                  theirs_out)[0])
    ours, theirs = statistics.median(ours_times), statistics.median(theirs_times)
    our_frames, their_frames = frames(ours_out), frames(theirs_out)
    print(f"{data}: sframe script {ours:.3f} s ({our_frames / ours:,.0f} frames/s), "
          f"perf script --no-inline {theirs:.3f} s ({their_frames / theirs:,.0f} frames/s); "
          f"speed ratio sframe/perf = {(our_frames / ours) / (their_frames / theirs):.2f} "
          f"(>= 1.0 means faster than perf); peak RSS of sframe script {rss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

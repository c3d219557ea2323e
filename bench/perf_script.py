"""Bench: `sframe script` against `perf script --no-inline` on the same recording, in one run.

perf must find the recorded binary: the bench adds it to perf's build-id cache
(`perf buildid-cache --add`, which writes under ~/.debug) before timing. Prints
wall time, frames per second of each, their ratio, and our peak RSS.

    python3 bench/perf_script.py [--recording DIR] [--runs N] [--large]

--large also records (once, with perf, into bench/out/) a recording of at least
500 MB of the same Lua benchmark run repeatedly, and reports both tools' time and
our peak RSS on it (peak memory must not grow with the number of samples).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FIXTURES, OUT, sframe_command


def timed(argv: list[str], output: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS KiB of this very child) of one run."""
    with open(output, "wb") as out:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        sys.exit(f"bench: {argv[0]} failed ({child.returncode})")
    return elapsed, usage.ru_maxrss


def frames(path: Path) -> int:
    return sum(1 for line in path.open() if line.startswith("\t"))


def large_recording(perf: str, recording: Path, minimum: int = 500 * 2**20,
                    name: str = "large.perf.data") -> Path:
    """A `--call-graph dwarf` recording of at least ``minimum`` bytes of the Lua benchmark
    run repeatedly (about 26 MB per run), made once into bench/out/NAME."""
    target = OUT / name
    if target.exists() and target.stat().st_size >= minimum:
        return target
    OUT.mkdir(parents=True, exist_ok=True)
    runs = max(1, -(-minimum // (25 * 2**20)))
    script = f"for i in $(seq {runs}); do ./lua bench.lua >/dev/null; done"
    print(f"recording {target} ({runs} runs of the Lua benchmark, about {runs * 4} s) ...",
          file=sys.stderr)
    subprocess.run([perf, "record", "-q", "-N", "-e", "cpu-clock", "-F", "999", "--call-graph",
                    "dwarf", "-o", str(target), "sh", "-c", script], cwd=recording, check=True,
                   stderr=subprocess.DEVNULL)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recording", default=str(FIXTURES / "real" / "lua-2.46-x86_64"))
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--large", action="store_true")
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
    if args.large:
        big = large_recording(perf, recording)
        took, peak = timed([*sframe_command(), "script", str(big), "--binaries",
                            str(recording)], ours_out)
        theirs_took = timed([perf, "script", "--no-inline", "-i", str(big)], theirs_out)[0]
        print(f"{big} ({big.stat().st_size / 2**20:.0f} MiB, {frames(ours_out):,} frames): "
              f"sframe script {took:.1f} s, perf script --no-inline {theirs_took:.1f} s; "
              f"peak RSS of sframe script {peak / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

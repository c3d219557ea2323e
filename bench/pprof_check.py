"""Read ``sframe report --format pprof`` back with Go's own reader, ``go tool pprof``.

Makes the pprof and folded reports of a recording (by default the Lua fixture's) with
this tree, then checks with ``go tool pprof`` (Debian's golang-go):

- ``-raw`` reads the file: sample types ``samples/count`` and ``cpu/nanoseconds``;
- ``-top -sample_index=samples``: every function's flat sample count equals the number
  of samples whose leaf frame it is in the folded output (pprof merges functions by
  name, as the folded leaves are counted here);
- ``-top -sample_index=cpu``: the total equals the sum of the samples' periods (perf
  script's period column, when the recording's perf-script.no-inline.txt is there).

Prints pprof's header and a JSON line of results; exits 1 if a check fails, 2 if go is
not installed (``--install`` tries ``apt-get install -y golang-go`` first).

    python3 bench/pprof_check.py [--recording DIR] [--install]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
LUA = REPO.parent / "shared" / "fixtures" / "real" / "lua-2.46-x86_64"
TOP_LINE = re.compile(r"^ *([\d.]+)(\w*) +[\d.]+% +[\d.]+% +[\d.]+\w* +[\d.]+% +(.+)$", re.M)


def find_go(install: bool) -> str | None:
    go = shutil.which("go")
    if go is None and install:
        subprocess.run(["apt-get", "install", "-y", "golang-go"], check=False,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        go = shutil.which("go")
    return go


def make_reports(recording: Path) -> dict[str, Path]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "XDG_CACHE_HOME": str(OUT / "cache")}
    paths = {}
    for form in ("pprof", "folded"):
        paths[form] = OUT / f"{recording.name}.{form}"
        subprocess.run([sys.executable, "-m", "pysframe", "report",
                        str(recording / "perf.data"), "--binaries", str(recording),
                        "--format", form, "-o", str(paths[form])], check=True, env=env)
    return paths


def pprof(go: str, *args: str) -> str:
    # PPROF_BINARY_PATH leads nowhere: pprof must use our names, not symbolize again
    return subprocess.run([go, "tool", "pprof", *args], capture_output=True, text=True,
                          check=True, env={**os.environ, "PPROF_BINARY_PATH": "/nonexistent"},
                          timeout=600).stdout


def check(go: str, recording: Path) -> dict[str, object]:
    paths = make_reports(recording)
    raw = pprof(go, "-raw", str(paths["pprof"]))
    every = ("-nodecount=1000000", "-nodefraction=0", "-edgefraction=0")
    counts = pprof(go, "-top", "-sample_index=samples", *every, str(paths["pprof"]))
    cpu = pprof(go, "-top", "-sample_index=cpu", "-unit=ns", *every, str(paths["pprof"]))
    print(counts.split("      flat")[0], end="")
    flat = {match[3]: int(float(match[1])) for match in TOP_LINE.finditer(counts)}
    leaves: Counter[str] = Counter()
    for line in paths["folded"].read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        leaves[stack.split(";")[-1].removesuffix("_[k]")] += int(count)
    total_cpu = re.search(r"of ([\d.]+)ns total", cpu)
    results: dict[str, object] = {
        "recording": str(recording),
        "sample_types": re.search(r"^(samples/count .*)$", raw, re.M)[1]  # type: ignore[index]
        if "samples/count" in raw else None,
        "functions": len(flat), "samples": sum(leaves.values()),
        "leaf_counts_equal": {k: v for k, v in flat.items() if v} == dict(leaves),
        "cpu_ns": float(total_cpu[1]) if total_cpu else None,
    }
    script = recording / "perf-script.no-inline.txt"
    if script.exists():
        periods = [int(m[1]) for m in re.finditer(r"^\S.*: +(\d+) cpu-clock:",
                                                  script.read_text(), re.M)]
        results["perf_period_sum"] = sum(periods)
    return results


def failures(results: dict[str, object]) -> list[str]:
    problems = []
    if results["sample_types"] != "samples/count cpu/nanoseconds[dflt]":
        problems.append(f"sample types: {results['sample_types']}")
    if not results["leaf_counts_equal"]:
        problems.append("flat sample counts differ from the folded leaves")
    expected = results.get("perf_period_sum")
    if expected is not None and results["cpu_ns"] != expected:
        problems.append(f"cpu total {results['cpu_ns']} ns, perf's periods {expected} ns")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", type=Path, default=LUA,
                        help="a directory with perf.data and the recorded binaries")
    parser.add_argument("--install", action="store_true",
                        help="apt-get install golang-go when go is missing")
    args = parser.parse_args()
    go = find_go(args.install)
    if go is None:
        print(json.dumps({"skipped": "go is not installed (apt-get install golang-go)"}))
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    results = check(go, args.recording)
    results["failures"] = failures(results)
    print(json.dumps(results))
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())

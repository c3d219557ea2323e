"""Soak: many `sframe stack PID` runs against targets that make stopping them hard.

* pingpong (tests/data/pingpong.c): threads that send themselves SIGUSR1 as fast as they
  can and check, after every kill, that the handler ran. A signal taken while the tool
  holds a thread and not given back at detach is counted as lost by the program itself.
* churn (tests/data/churn.c): threads that create and join short-lived threads all the
  time, so threads appear and vanish during every run.

After every run, every thread of the target is checked: not traced (TracerPid 0), not in
a tracing stop (t) nor in a stop (T). At the end the report gives, per target: runs,
failed runs (with the first few messages), threads found stopped or traced, lost
signals, median time per run.

    PYTHONPATH=src python3 bench/stack_soak.py [--runs 2000] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import OUT, REPO, compile_bytecode

DATA = REPO / "tests" / "data"


def build(name: str) -> Path:
    binary = OUT / "soak" / name
    binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(binary), str(DATA / f"{name}.c")],
                   check=True)
    return binary


def held_threads(pid: int) -> list[str]:
    """The threads of ``pid`` that are traced or stopped, as "tid:state:tracer"."""
    found = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return ["process gone"]
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
        state = fields.get("State", "?").split()[0]
        tracer = int(fields.get("TracerPid", "0").split()[0] or 0)
        if tracer or state in ("t", "T"):
            found.append(f"{tid}:{state}:{tracer}")
    return found


@dataclass
class Soaked:
    """What one target went through."""

    runs: int
    failures: Counter[str]
    held: list[str]
    output: str  # what the target printed at the end
    status: int | None  # the target's exit status (pingpong: 1 if it lost a signal)
    median: float

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def soak(name: str, arguments: list[str], runs: int, cache: Path) -> Soaked:
    binary = build(name)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache),
           "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([str(binary), *arguments], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    command = [sys.executable, "-m", "pysframe", "stack", "--no-debuginfo", str(child.pid)]
    failures: Counter[str] = Counter()
    held: list[str] = []
    times = []
    try:
        for index in range(runs):
            start = time.perf_counter()
            try:
                result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                        env=env)
                if result.returncode != 0:
                    failures[f"exit {result.returncode}: {result.stderr.strip()[:200]}"] += 1
            except subprocess.TimeoutExpired:
                failures["timed out (120 s)"] += 1
            times.append(time.perf_counter() - start)
            now_held = held_threads(child.pid)
            if now_held:
                time.sleep(0.05)  # a run just ended: give the kernel a moment, then recheck
                now_held = held_threads(child.pid)
            held.extend(f"after run {index + 1}: {entry}" for entry in now_held)
            if (index + 1) % 200 == 0:
                print(f"  {name}: {index + 1}/{runs} runs, {sum(failures.values())} failed, "
                      f"{len(held)} held", file=sys.stderr, flush=True)
        output, _ = child.communicate("", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return Soaked(runs, failures, held, output.strip(), child.returncode,
                  statistics.median(times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1,
                        help="signalling threads in pingpong (each keeps a CPU busy)")
    parser.add_argument("--creators", type=int, default=2, help="creator threads in churn")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    compile_bytecode()
    cache = OUT / "soak" / "cache"
    results = {
        "pingpong": soak("pingpong", [str(args.threads)], args.runs, cache),
        "churn": soak("churn", [str(args.creators)], args.runs, cache),
    }
    for name, result in results.items():
        print(f"{name}: {result.runs} runs, {result.failed} failed, {len(result.held)} "
              f"threads left stopped or traced, median {result.median * 1000:.0f} ms/run; "
              f"the target said {result.output!r} (exit status {result.status})")
        for message, count in result.failures.most_common(5):
            print(f"    {count} x {message}")
        for entry in result.held[:5]:
            print(f"    {entry}")
    said = results["pingpong"].output.split()
    print(f"lost signals: {said[-1] if said[:1] == ['sent'] else 'unknown'}")
    bad = any(result.failed or result.held or result.status for result in results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

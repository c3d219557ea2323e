"""Tables on demand (issue 29, item 1): ``sframe script`` on recordings of binaries without
``.sframe``, first run (empty private XDG_CACHE_HOME: each function's rows made when a
sample first needs them) against warm (the same cache after that run), and ``perf script
--no-inline`` (which reads ``.eh_frame`` lazily; without --no-inline perf 6.1 runs addr2line
per address for inline frames, minutes on a recording holding cc1) on the same recording in
the same repeat. Prints median
[min-max] of ``--runs`` (>= 5) wall times and the first/warm ratio (goal: <= 1.5).

Recordings are given as paths; for instance a system-wide one on a busy machine and a
pipeline of openssl, gzip and xz:

    perf record -a -g --call-graph dwarf,8192 -o system.data -- sleep 4
    perf record -g --call-graph dwarf,8192 -o pipeline.data -- sh -c \\
        'openssl speed -seconds 1 sha256; head -c 20000000 /dev/urandom | gzip -1 | xz -0 >/dev/null'
    env -u PYTHONDONTWRITEBYTECODE python3 bench/on_demand.py system.data pipeline.data

``--baseline SRC`` times another checkout's pysframe too (its ``src``, put first on
PYTHONPATH of the same console script), interleaved with ours in every repeat:

    git worktree add /tmp/before <commit>
    env -u PYTHONDONTWRITEBYTECODE python3 bench/on_demand.py system.data --baseline /tmp/before/src

``--own-sframe N`` also makes (in bench/out/own-sframe/) and times a recording of a program
of N functions (default 3,000) assembled by the fixtures' gas 2.46 with ``--gsframe`` and
linked by its ld: a binary with its own version 3 ``.sframe``, which the first run merges
with its CFI per function (the whole merge decodes and encodes every row of the own
table). Its FDEs have the shapes of compiled C: loops, calls, a local array, ``alloca``, a
switch.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    MIN_REPEATS,
    OUT,
    alternating,
    bench_environment,
    find_objdump,
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


def _function(number: int, total: int, chosen: random.Random) -> str:
    """A C function of one of five shapes, calling others further on (none recurse)."""
    callee = [min(total - 1, number + 1 + chosen.randrange(40)) for _ in range(3)]
    calls = [f"(f{c}(a / 2, b) & 3)" if c != number else "0" for c in callee]
    shape = number % 5
    if shape == 0:
        body = f"long x = a * {number} + b; for (int j = 0; j < (int)(a & 3); j++) x += {calls[0]}; return x;"
    elif shape == 1:
        body = (f"char buf[{64 + number % 200}]; memset(buf, (int)a, sizeof buf); "
                f"sink = buf[b & 31]; return b > 3 ? {calls[1]} : buf[1];")
    elif shape == 2:
        body = ("long *p = __builtin_alloca((a & 15) * 8 + 8); p[0] = a; sink = p[0]; "
                f"return a > 2 ? {calls[2]} + p[0] : p[0];")
    elif shape == 3:
        body = (f"switch (a & 7) {{ case 0: return {calls[0]}; case 1: return b * 3; "
                f"case 2: return {calls[1]} + 1; case 3: sink = a; return 7; "
                "default: return a ^ b; }")
    else:
        body = (f"double d = a; for (long j = 0; j < b % 5; j++) d = d * 1.5 + j; "
                f"sink = (long)d; return (long)d + (a > 5 ? {calls[2]} : 0);")
    return f"__attribute__((noinline)) long f{number}(long a, long b) {{ {body} }}"


def own_sframe_recording(functions: int) -> Path:
    """A perf recording (--call-graph dwarf) of a program of ``functions`` functions with
    its own .sframe (gas and ld 2.46, installed by ../shared/toolchain when missing)."""
    directory = OUT / "own-sframe"
    directory.mkdir(parents=True, exist_ok=True)
    recording = directory / f"own{functions}.perf.data"
    if recording.exists():
        return recording
    find_objdump("2.46")  # the toolchain, installed if missing
    gcc_b = next(prefix / "gcc-B" / "2.46" / "x86_64" for prefix in
                 (Path("/opt/sframe-tc"), OUT / "sframe-tc")
                 if (prefix / "gcc-B" / "2.46" / "x86_64" / "as").exists())
    chosen = random.Random(7)
    lines = ["#include <stdio.h>", "#include <string.h>", "volatile long sink;",
             *(f"long f{number}(long a, long b);" for number in range(functions)),
             *(_function(number, functions, chosen) for number in range(functions)),
             "int main(void) { long t = 0; for (long r = 0; r < 60000; r++)",
             f"  for (int i = 0; i < {functions}; i += 7) t += f{0}(r + i, i) + f{functions // 2}(i, r);",
             '  printf("%ld\\n", t); return 0; }']
    source = directory / f"own{functions}.c"
    source.write_text("\n".join(lines) + "\n")
    program = directory / f"own{functions}"
    subprocess.run(["gcc", "-O2", f"-B{gcc_b}/", "-Wa,--gsframe", "-o", str(program),
                    str(source)], check=True)
    subprocess.run(["perf", "record", "-q", "-g", "--call-graph", "dwarf,8192", "-F", "999",
                    "-o", str(recording), "--", str(program)], check=True,
                   stdout=subprocess.DEVNULL)
    return recording


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=MIN_REPEATS)
    parser.add_argument("--own-sframe", type=int, nargs="?", const=3000, default=None,
                        metavar="N")
    parser.add_argument("--baseline", type=Path, default=None, metavar="SRC",
                        help="also time the pysframe of another checkout's src directory "
                             "(e.g. a git worktree of an older commit) the same way, in the "
                             "same repeats: before/after in one sitting")
    arguments = parser.parse_args()
    runs = max(MIN_REPEATS, arguments.runs)
    sframe = venv_sframe()
    perf = shutil.which("perf")
    recordings = list(arguments.recordings)
    if arguments.own_sframe is not None:
        recordings.append(own_sframe_recording(arguments.own_sframe))
    if not recordings:
        parser.error("no recording (give paths, or --own-sframe)")
    for recording in recordings:
        ours = [*sframe, "script", "-i", str(recording)]
        sides = {"": bench_environment()}
        if arguments.baseline is not None:  # (its modules come before the installed ones)
            sides["baseline "] = {**bench_environment(),
                                  "PYTHONPATH": str(arguments.baseline.resolve())}
        figures: dict[str, list[float]] = {}
        for repeat in range(runs):
            for name in alternating([*sides, "perf"], repeat):
                if name == "perf":
                    if perf is not None:
                        figures.setdefault("perf script", []).append(_time(
                            [perf, "script", "--no-inline", "-i", str(recording)],
                            bench_environment()))
                    continue
                with private_cache() as cache:
                    env = with_cache(sides[name], cache)
                    figures.setdefault(f"{name}first", []).append(_time(ours, env))
                    figures.setdefault(f"{name}warm", []).append(_time(ours, env))
        print(f"{recording}: " + ", ".join(
            f"{name} {spread(times, '.2f')} s" for name, times in figures.items()))
        for name in sides:
            ratio = [first / warm for first, warm in zip(
                figures[f"{name}first"], figures[f"{name}warm"], strict=True)]
            print(f"  {name}first/warm {statistics.median(ratio):.2f}x "
                  f"[{min(ratio):.2f}-{max(ratio):.2f}] (goal <= 1.5)")


if __name__ == "__main__":
    main()

"""Bench: the floor of a pure-Python `sframe script` on the small recording, against perf.

Issue 13 asks `sframe script` to be no slower than `perf script --no-inline` on the Lua
fixture recording (3,171 samples, 66k frames). This bench measures the least any
pure-Python implementation must do there: bench/floor_skeleton.py walks the records,
parses the samples, prints kernel frames and steps the user frames with plans that
pysframe decided beforehand (untimed), each line made once per pc; no imports beyond
the standard library, no symbols, no side band, no time order, no checks. It is run
alone and split over two forked processes (the best case of `-j 2`), in the same run
as perf, the interpreter's bare start-up, the imports of our lean script path, and our
real command. Each command is timed cold and warm (bench/common.py: cold, an empty private
XDG_CACHE_HOME, so our command generates libc's table and reads symbols again; warm, a
private cache filled by one untimed run; only `sframe script` uses it), in alternating
order, --runs repeats (>= 5), median [min-max]; the floor is computed from the warm
medians (the skeleton's plans are decided beforehand, a warm cache's work). Ours is the
installed console script (bytecode caching on).

    env -u PYTHONDONTWRITEBYTECODE python3 bench/script_floor.py [--recording DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import marshal
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH, FIXTURES, OUT, WARM, cold_and_warm, print_table, venv_sframe

#: The modules our `script` path imports for a small recording (the lean scalar path).
SCRIPT_IMPORTS = ("import pysframe.cli.entry, pysframe.cli.script, pysframe.sources.perf_data, "
                  "pysframe.session.perf, pysframe.report.perf_script, "
                  "pysframe.symbolize.symbolizer, pysframe.symbolize.kernel")


def skeleton_arguments(data_path: Path, binaries: Path, plans_path: Path) -> list[str]:
    """The skeleton's arguments; its plans decided by pysframe (one warm unwinding pass)."""
    from pysframe.cli.script import open_recording
    from pysframe.errors import Problems
    from pysframe.sources.perf_records import (
        SAMPLE_ADDR,
        SAMPLE_CPU,
        SAMPLE_ID,
        SAMPLE_IDENTIFIER,
        SAMPLE_IP,
        SAMPLE_PERIOD,
        SAMPLE_STREAM_ID,
        SAMPLE_TID,
        SAMPLE_TIME,
    )
    from pysframe.unwind.plans import DefaultPlan

    data, unwinder = open_recording(str(data_path), [str(binaries)], Problems(lambda _: None))
    with data:
        for _ in unwinder.samples():
            pass
        plans = {key: (int(plan.sp_based), plan.cfa_offset, plan.ra_offset, plan.fp_offset)
                 for _, table in unwinder.unwinder._plans._layouts.values()
                 for key, plan in table.items() if type(plan) is DefaultPlan}
        attr = data.attrs[0]
        offset, size = data.data_offset, data.data_size
    plans_path.write_bytes(marshal.dumps(plans))
    prefix = [bit for bit in (SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR,
                              SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_PERIOD)
              if attr.sample_type & bit]
    mask = attr.sample_regs_user

    def register(perf_index: int) -> int:  # BP 6, SP 7, IP 8 in perf's x86-64 numbering
        return (mask & ((1 << perf_index) - 1)).bit_count()

    return [str(plans_path), str(data_path), str(offset), str(size), str(len(prefix)),
            str(prefix.index(SAMPLE_TID)), str(prefix.index(SAMPLE_TIME)),
            str(prefix.index(SAMPLE_PERIOD)), str(mask.bit_count()), str(register(6)),
            str(register(7)), str(register(8))]


def timed(argv: list[str]) -> Callable[[dict[str, str]], float]:
    def run(env: dict[str, str]) -> float:
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                       check=True)
        return time.perf_counter() - start
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recording", default=str(FIXTURES / "real" / "lua-2.46-x86_64"))
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    perf = shutil.which("perf")
    if perf is None:
        sys.exit("bench: perf not found (apt-get install linux-perf)")
    OUT.mkdir(parents=True, exist_ok=True)
    sframe = venv_sframe()
    python = str(Path(sframe[0]).parent / "python")
    recording = Path(args.recording)
    data = recording / "perf.data"
    subprocess.run([perf, "buildid-cache", "--add", str(recording / "lua")], check=False,
                   stderr=subprocess.DEVNULL)
    skeleton = [python, str(BENCH / "floor_skeleton.py"),
                *skeleton_arguments(data, recording, OUT / "floor-plans.marshal")]
    commands = {
        "perf script --no-inline": [perf, "script", "--no-inline", "-i", str(data)],
        "skeleton, one process": [*skeleton, "1"],
        "skeleton, two processes": [*skeleton, "2"],
        "python start-up": [python, "-c", "pass"],
        "python + our script path's imports": [python, "-c", SCRIPT_IMPORTS],
        "sframe script": [*sframe, "script", str(data), "--binaries", str(recording)],
    }
    figures = cold_and_warm({name: timed(argv) for name, argv in commands.items()}, args.runs)
    print_table(figures, peer="perf script --no-inline")
    medians = {name: statistics.median(values) * 1e3 for name, values in figures[WARM].items()}
    theirs = medians["perf script --no-inline"]
    floor = medians["skeleton, two processes"] + (medians["python + our script path's imports"]
                                                  - medians["python start-up"])
    print(f"floor of a pure-Python implementation (warm medians): two-process skeleton + "
          f"imports = {floor:.0f} ms, {floor / theirs:.2f}x perf's time "
          f"({'below' if floor < theirs else 'not below'} perf's, before any symbol lookup, "
          "side band or time order)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

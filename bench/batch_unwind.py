"""The unwind phase alone: the scalar tracer against the numpy batch engine.

Samples are collected first (record scan, address spaces, binaries and SFrame tables
loaded), then each engine unwinds all of them; times are the best of ``--repeat`` runs,
each with fresh engines (cold plan cache, flat tables built inside the batch time) and
again warm (second run on the same engines). ``--times N`` repeats the recording's
samples N times to show how the engines scale.

    PYTHONPATH=src python3 bench/batch_unwind.py ../shared/fixtures/real/lua-2.46-x86_64/perf.data
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pysframe.session.batch import CollectingSession, Snapshot
from pysframe.sources.perf_data import open_perf_data
from pysframe.unwind.batch import BatchUnwinder
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.unwinder import Unwind, Unwinder


def scalar_run(unwinder: Unwinder, snapshots: list[Snapshot]) -> list[Unwind]:
    return [unwinder.unwind(s.registers, StackMemory(s.registers.sp, s.stack), snapshot.space)
            for snapshot in snapshots for s in snapshot.samples]


def batch_run(batch: BatchUnwinder, snapshots: list[Snapshot], objects: bool) -> int:
    frames = 0
    for snapshot in snapshots:
        result = batch.unwind(snapshot.space, snapshot.samples)
        if objects:
            frames += sum(len(unwind.frames) for unwind in result.unwinds())
        else:
            frames += int(result.count.sum())
    return frames


def best(function: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recording", type=Path)
    parser.add_argument("--binaries", type=Path, help="default: the recording's folder")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--times", type=int, default=1)
    args = parser.parse_args()
    with open_perf_data(str(args.recording)) as data:
        session = CollectingSession(data, [str(args.binaries or args.recording.parent)])
        start = time.perf_counter()
        snapshots = session.collect()
        collect = time.perf_counter() - start
        for snapshot in snapshots:
            snapshot.samples *= args.times
        samples = sum(len(s.samples) for s in snapshots)
        abi, depth = session.unwinder.abi, session.unwinder.max_depth
        frames = sum(len(u.frames) for u in scalar_run(Unwinder(abi, depth), snapshots))
        print(f"{args.recording}: {samples} samples, {frames} frames, {len(snapshots)} "
              f"snapshot(s); collecting (scan, spaces, tables): {collect * 1e3:.0f} ms")
        warm_scalar = Unwinder(abi, depth)
        warm_batch = BatchUnwinder(warm_scalar)
        scalar_run(warm_scalar, snapshots)
        batch_run(warm_batch, snapshots, False)
        rows = [
            ("scalar, cold plan cache", lambda: scalar_run(Unwinder(abi, depth), snapshots)),
            ("scalar, warm", lambda: scalar_run(warm_scalar, snapshots)),
            ("batch, cold (flat tables built)",
             lambda: batch_run(BatchUnwinder(Unwinder(abi, depth)), snapshots, False)),
            ("batch, warm, arrays", lambda: batch_run(warm_batch, snapshots, False)),
            ("batch, warm, + Frame objects", lambda: batch_run(warm_batch, snapshots, True)),
        ]
        for name, function in rows:
            seconds = best(function, args.repeat)
            print(f"  {name:34} {seconds * 1e3:8.1f} ms  {seconds / frames * 1e9:7.0f} ns/frame")


if __name__ == "__main__":
    main()

"""speedscope JSON (https://www.speedscope.app/file-format-schema.json): one "sampled"
profile per thread and recorded event, sharing one frame table.

A thread's profile is named as speedscope names the threads of ``perf script`` text it
imports: ``comm pid: N tid: M`` (the command the thread ran the most samples as), with
`` (event)`` after it when the recording has several events. The profiles are in the
order of event, process and thread; the one speedscope opens first
(``activeProfileIndex``) is the thread with the most samples.

For the software clocks (cpu-clock, task-clock) a sample's period is the time it stands
for, in nanoseconds: the weights are those periods and the unit is ``"nanoseconds"``, so
speedscope shows real time. For other events (cycles, page faults, ...) a period is a
count of events, which speedscope has no unit for: the weights are sample counts and the
unit is ``"none"``. Frames are named like the folded stacks, with the mapped file as
``file`` (so equal names in different files stay apart).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .profiles import KERNEL_FILE, Location, Profile, is_clock

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


@dataclass(slots=True)
class _Thread:
    """The stacks of one thread and event: weight by outermost-first frame ids."""

    weights: dict[tuple[int, ...], int] = field(default_factory=dict)
    samples: int = 0
    comms: Counter[str] = field(default_factory=Counter)


def speedscope(profile: Profile, name: str) -> str:
    """The speedscope document of ``profile``, titled ``name``."""
    frames: dict[tuple[str, str | None], int] = {}
    ids = [frames.setdefault(_frame_key(location), len(frames))
           for location in profile.locations]
    threads: dict[tuple[int, int, int], _Thread] = {}
    for key, (count, period) in profile.stacks.items():
        thread = threads.setdefault((key.event, key.pid, key.tid), _Thread())
        stack = tuple(ids[index] for index in reversed(key.stack))
        weight = period if is_clock(profile.events[key.event]) else count
        thread.weights[stack] = thread.weights.get(stack, 0) + weight
        thread.samples += count
        thread.comms[key.comm] += count
    order = sorted(threads)
    profiles = [_sampled(profile.events, key, threads[key]) for key in order]
    busiest = max(range(len(order)), key=lambda index: threads[order[index]].samples,
                  default=0)
    document = {
        "$schema": SCHEMA, "exporter": "pysframe", "name": name,
        "activeProfileIndex": busiest,
        "shared": {"frames": [{"name": frame} if file is None else {"name": frame, "file": file}
                              for frame, file in frames]},
        "profiles": profiles,
    }
    return json.dumps(document)


def _sampled(events: list[str], key: tuple[int, int, int], thread: _Thread) -> dict[str, Any]:
    """The "sampled" profile of one thread and event."""
    event, pid, tid = key
    comm = thread.comms.most_common(1)[0][0]
    name = f"{comm} pid: {pid} tid: {tid}"
    if len(events) > 1:
        name += f" ({events[event]})"
    ordered = sorted(thread.weights.items())
    return {
        "type": "sampled", "name": name,
        "unit": "nanoseconds" if is_clock(events[event]) else "none",
        "startValue": 0, "endValue": sum(weight for _, weight in ordered),
        "samples": [list(stack) for stack, _ in ordered],
        "weights": [weight for _, weight in ordered]}


def _frame_key(location: Location) -> tuple[str, str | None]:
    """A speedscope frame: its name and file."""
    if location.kernel:
        return location.folded_name, KERNEL_FILE
    return location.name, location.mapping.filename if location.mapping else None

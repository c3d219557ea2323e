"""speedscope JSON (https://www.speedscope.app/file-format-schema.json): one "sampled"
profile per recorded event.

For the software clocks (cpu-clock, task-clock) a sample's period is the time it stands
for, in nanoseconds: the weights are those periods and the unit is ``"nanoseconds"``, so
speedscope shows real time. For other events (cycles, page faults, ...) a period is a
count of events, which speedscope has no unit for: the weights are sample counts and the
unit is ``"none"``. Frames are named like the folded stacks, with the mapped file as
``file`` (so equal names in different files stay apart); each stack starts with the
command, as in the folded output.
"""

from __future__ import annotations

import json

from .profiles import KERNEL_FILE, Location, Profile, is_clock

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def speedscope(profile: Profile, name: str) -> str:
    """The speedscope document of ``profile``, titled ``name``."""
    frames: dict[tuple[str, str | None], int] = {}
    ids = [frames.setdefault(_frame_key(location), len(frames))
           for location in profile.locations]
    per_event: list[dict[tuple[int, ...], int]] = [{} for _ in profile.events]
    for (event, comm, _, stack), (count, period) in profile.stacks.items():
        comm_id = frames.setdefault((comm, None), len(frames))
        key = (comm_id, *(ids[index] for index in reversed(stack)))
        weight = period if is_clock(profile.events[event]) else count
        per_event[event][key] = per_event[event].get(key, 0) + weight
    profiles = []
    for event_name, weights in zip(profile.events, per_event, strict=True):
        ordered = sorted(weights.items())
        total = sum(weight for _, weight in ordered)
        several = len(profile.events) > 1
        profiles.append({
            "type": "sampled", "name": f"{name} ({event_name})" if several else name,
            "unit": "nanoseconds" if is_clock(event_name) else "none",
            "startValue": 0, "endValue": total,
            "samples": [list(stack) for stack, _ in ordered],
            "weights": [weight for _, weight in ordered]})
    document = {
        "$schema": SCHEMA, "exporter": "pysframe", "name": name, "activeProfileIndex": 0,
        "shared": {"frames": [{"name": frame} if file is None else {"name": frame, "file": file}
                              for frame, file in frames]},
        "profiles": profiles,
    }
    return json.dumps(document)


def _frame_key(location: Location) -> tuple[str, str | None]:
    """A speedscope frame: its name and file."""
    if location.kernel:
        return location.folded_name, KERNEL_FILE
    return location.name, location.mapping.filename if location.mapping else None

"""How many CPUs this process may run on: its affinity (``taskset``, a container's cpuset),
not the machine's count. What ``-j`` defaults to, and whether work split over two
processes can run at once."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on (the machine's count where the system does not
    say)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1

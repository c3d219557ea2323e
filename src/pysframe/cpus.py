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


def place_forked(pid: int) -> None:
    """Move the child ``pid``, just forked, off the CPU this process runs on, to the other
    CPUs it may run on (it keeps that mask). Where the kernel leaves a new task on its
    parent's CPU (this 2-vCPU Firecracker guest, Linux 6.18), the child waited there for
    a balancing tick while the other CPU idled: it first ran 1.3-5 ms after the fork, 3
    on average, against 1.4 ms once moved (``python3 bench/fork_start.py``). The Lua
    fixture's first run: 1.4% faster (31 alternating runs). Does nothing on one CPU; a
    failure is ignored (a placement, never an error). The CPU comes from /proc (``os`` has no
    ``sched_getcpu``; ctypes costs more than the read)."""
    try:
        allowed = os.sched_getaffinity(0)
        if len(allowed) < 2:
            return
        with open("/proc/thread-self/stat", "rb") as stat:
            here = int(stat.read().rsplit(b")", 1)[1].split()[36])
        if here in allowed:
            os.sched_setaffinity(pid, allowed - {here})
    except (AttributeError, OSError, ValueError, IndexError):
        pass

"""What the recorder reads of /proc: processes, threads, thread groups, and the kernel's
accounts of its own BPF objects (fdinfo: a program's run time, the maps' memlock); and
the few libc functions it calls that Python does not wrap (:func:`libc_function`)."""

from __future__ import annotations

import os
from typing import Any

from ..session.tables import BASE_NICE
from . import bpf_sys as sys_bpf

#: How much the recorder raises its priority once sampling starts: its table thread
#: writes a process's entry just after its exec, and until then the process's samples
#: are walked to stack copies. On two CPUs busy with make -j2, the recorder at the
#: workload's priority got a compiler's entry in ~10 ms, 10 raised got it sooner
#: (chains finished from copies: ~650 -> ~300 of 5,200).
PRIORITY_RAISE = 10


def maps_memlock() -> int:
    """The bytes the kernel charges for this process's BPF maps (their fdinfo memlock),
    each map once however many descriptors name it (the ring buffer has three)."""
    charged: dict[str, int] = {}
    try:
        names = os.listdir("/proc/self/fdinfo")
    except OSError:
        return 0
    for name in names:
        try:
            with open(f"/proc/self/fdinfo/{name}") as info:
                fields = dict(line.split(":", 1) for line in info if ":" in line)
        except (OSError, ValueError):
            continue
        if "map_type" in fields:
            key = fields.get("map_id", name).strip()
            charged[key] = int(fields.get("memlock", "0").strip() or 0)
    return sum(charged.values())


def run_time(program: sys_bpf.Fd) -> float:
    """ns per run of ``program`` from its fdinfo (0 unless BPF run statistics are on)."""
    try:
        with open(f"/proc/self/fdinfo/{int(program)}") as info:
            fields = dict(line.split(":", 1) for line in info if ":" in line)
        runs = int(fields.get("run_cnt", "0").strip() or 0)
        return int(fields.get("run_time_ns", "0").strip() or 0) / runs if runs else 0.0
    except (OSError, ValueError):
        return 0.0


def processes(kernel_threads: bool = False) -> list[int]:
    """Every process with user mappings (with ``kernel_threads``: every process)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/maps") as maps:
                    if kernel_threads or maps.read(1):
                        found.append(int(name))
            except OSError:
                continue
    return sorted(found)


def threads(pid: int) -> list[int]:
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def tgid(tid: int) -> int:
    try:
        with open(f"/proc/{tid}/status") as status:
            for line in status:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return tid


def return_free_memory() -> None:
    """Give the heap's free pages back to the kernel (glibc's ``malloc_trim``): a table
    generated or flattened here frees hundreds of megabytes that glibc otherwise keeps,
    and a long ``-a`` run's resident size would be its largest table's, for hours."""
    trim = libc_function("malloc_trim")
    if trim is not None:  # (not glibc: nothing to do)
        trim(0)


def libc_function(name: str) -> Any | None:
    """The C library's function ``name`` (errno kept for ``ctypes.get_errno``), or None
    where there is none."""
    import ctypes

    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None


def raise_priority(by: int = PRIORITY_RAISE) -> None:
    """Raise this thread's scheduling priority (nice) by ``by`` where permitted, and note
    the old value for the helper processes (:data:`~pysframe.session.tables.BASE_NICE`).
    The threads started after inherit it; processes forked before do not."""
    try:
        base = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, max(base - by, -20))
    except OSError:
        return  # not permitted (no CAP_SYS_NICE): as it was
    os.environ[BASE_NICE] = str(base)

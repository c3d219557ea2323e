"""``sframe record``: stacks walked in the kernel by the eBPF SFrame walker, into perf.data."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from .errors import EXIT_OK, EXIT_UNREADABLE, CommandError


def run_record(*, pids: list[int], command: list[str], frequency: int,
               duration: float | None, output: str, report: Any, event: str = "cpu-clock",
               system_wide: bool = False, defer: bool = False) -> int:
    from ..record.bpf_sys import BpfError
    from ..record.recorder import record
    from .files import write_output

    if (bool(pids) + bool(command) + system_wide) != 1:
        raise CommandError("give one of -p PID, -a, or a command to run (after --)",
                           EXIT_UNREADABLE)
    machine = platform.machine()
    if machine not in ("x86_64", "amd64"):
        # The programs read x86-64 registers and pt_regs; the bpf() call number is x86-64's.
        raise CommandError(f"recording with eBPF walks x86-64 stacks only; this machine is "
                           f"{machine} (record with perf and read it with sframe script)",
                           EXIT_UNREADABLE)
    if os.geteuid() != 0:
        raise CommandError("recording with eBPF needs root (or CAP_BPF and CAP_PERFMON)",
                           EXIT_UNREADABLE)
    if not 1 <= frequency <= 100_000:
        raise CommandError(f"-F {frequency}: the frequency must be 1 to 100000 Hz",
                           EXIT_UNREADABLE)
    try:
        data, result = record(pids, command or None, frequency, duration, report, event,
                              system_wide, defer)
    except BpfError as error:
        raise CommandError(f"the kernel refused: {error}{_missing(str(error))}",
                           EXIT_UNREADABLE) from None
    write_output(output, data)
    walked = 100 * result.outermost / result.walks if result.walks else 0.0
    if result.gone:
        report(f"{len(result.gone)} process{'es' if len(result.gone) != 1 else ''} ended before "
               "their tables were loaded: their samples have frame-pointer stacks only")
    cost = (f"; the walker took {result.walker_ns / 1000:.1f} us per sample"
            if result.walker_ns else "")
    # (Walks, not samples: with --defer, one walk serves the samples of a kernel entry.)
    sys.stderr.write(f"sframe record: {result.samples:,} samples ({walked:.1f}% walked to the "
                     f"outermost frame{cost}), {len(data):,} bytes written to {output}\n")
    if result.freed_tables:
        report(f"the tables of {result.freed_tables} binar"
               f"{'ies' if result.freed_tables != 1 else 'y'} no target mapped any more were "
               "freed")
    if defer:
        saved = result.requests - result.deferred_walks
        report(f"--defer: {result.requests:,} samples taken in system calls asked for their "
               f"user stack; {result.deferred_walks:,} walks made at the return to user space "
               f"({saved:,} saved by shared cookies); {result.walks:,} walks in all")
    return EXIT_OK


def _missing(message: str) -> str:
    """What the kernel lacks, when the error says so."""
    if "perf_event_open" in message and "ENOENT" in message:
        return " (this event is not supported here: no such counter, e.g. in a VM)"
    if "bpf_loop" in message or "unknown func" in message:
        return " (the kernel lacks bpf_loop: Linux 5.17 or later is needed)"
    if "BTF" in message:
        return " (the kernel lacks BTF: CONFIG_DEBUG_INFO_BTF)"
    if "creating BPF map" in message and "sf_ring" in message:
        return " (the kernel lacks BPF ring buffers: Linux 5.8 or later is needed)"
    return ""

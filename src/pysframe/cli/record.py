"""``sframe record``: stacks walked in the kernel by the eBPF SFrame walker, into perf.data.

Its command line follows perf record's: the options perf users type (``-p``, ``-t``, ``-a``,
``-C``, ``-F``, ``-c``, ``-e``, ``-o``, ``--duration``, ``-q``, ``-g``), an existing output
kept as ``OUTPUT.old``, a target that does not exist or a command that cannot be run
refused in one line before anything is recorded, and the exit status perf gives.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import stat
import sys
from dataclasses import dataclass, field
from typing import Any

from .errors import EXIT_OK, EXIT_UNREADABLE, CommandError

#: perf's exit statuses for a command that is not found / cannot be executed (as env's).
EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE = 127, 126
DEFAULT_FREQUENCY = 999


@dataclass(slots=True)
class RecordOptions:
    """``sframe record``'s command line."""

    pids: tuple[str, ...] = ()
    tids: tuple[str, ...] = ()
    system_wide: bool = False
    cpus: str | None = None
    frequency: int | None = None
    period: int | None = None
    duration: float | None = None
    event: str = "cpu-clock"
    call_graph: str | None = None
    max_stack: int | None = None
    stack_copy: int | None = None
    defer: bool = False
    output: str = "perf.data"
    quiet: bool = False
    command: list[str] = field(default_factory=list)


def run_record(options: RecordOptions, report: Any) -> int:
    from ..record.bpf_sys import BpfError
    from ..record.command import CommandFailed
    from ..record.recorder import record
    from .files import write_output

    target = _target(options)
    if options.call_graph is not None:
        raise CommandError(f"--call-graph {options.call_graph}: sframe record walks every user "
                           "stack in the kernel from SFrame tables; for perf's unwinders record "
                           f"with 'perf record --call-graph {options.call_graph}' and read the "
                           "file with 'sframe script'", EXIT_UNREADABLE)
    machine = platform.machine()
    if machine not in ("x86_64", "amd64"):
        # The programs read x86-64 registers and pt_regs; the bpf() call number is x86-64's.
        raise CommandError(f"recording with eBPF walks x86-64 stacks only; this machine is "
                           f"{machine} (record with perf and read it with sframe script)",
                           EXIT_UNREADABLE)
    if os.geteuid() != 0:
        raise CommandError("recording with eBPF needs root (or CAP_BPF and CAP_PERFMON)",
                           EXIT_UNREADABLE)
    _check_output(options.output)
    try:
        recorded, result = record(target, options.duration, report, options.event,
                                  options.defer, _scratch_directory(options.output))
    except BpfError as error:
        raise CommandError(f"the kernel refused: {error}{_missing(str(error))}",
                           EXIT_UNREADABLE) from None
    except CommandFailed as error:
        import errno

        raise CommandError(str(error), EXIT_NOT_FOUND if error.errno in (
            errno.ENOENT, errno.ENOTDIR) else EXIT_NOT_EXECUTABLE) from None
    _keep_old(options.output)
    write_output(options.output, recorded.chunks())
    if not options.quiet:
        _summary(options, result, recorded.size, report)
    if result.signal:  # stopped by a signal: die of it, as perf does, the file written
        sys.stderr.flush()
        signal.signal(result.signal, signal.SIG_DFL)
        os.kill(os.getpid(), result.signal)
    return _workload_status(result.workload_status)


def _target(options: RecordOptions) -> Any:
    """What to record, every part checked before anything starts."""
    from ..record.recorder import Target

    pids = _numbers(options.pids, "-p")
    tids = _numbers(options.tids, "-t")
    system_wide = options.system_wide or options.cpus is not None
    if (bool(pids) + bool(tids) + bool(options.command or system_wide)) != 1 or (
            (pids or tids) and system_wide):
        raise CommandError("give one of -p PID, -t TID, -a (or -C CPUS), or a command to run "
                           "(after --)", EXIT_UNREADABLE)
    for number, flag in [*((pid, "-p") for pid in pids), *((tid, "-t") for tid in tids)]:
        if not os.path.exists(f"/proc/{number}"):
            raise CommandError(f"{flag} {number}: no such {'process' if flag == '-p' else 'thread'}",
                               EXIT_UNREADABLE)
    if options.command:
        _check_command(options.command[0])
    if options.frequency is not None and options.period is not None:
        raise CommandError("give -F (a frequency) or -c (a period), not both", EXIT_UNREADABLE)
    frequency = options.frequency if options.frequency is not None else DEFAULT_FREQUENCY
    if options.period is None and not 1 <= frequency <= 100_000:
        raise CommandError(f"-F {frequency}: the frequency must be 1 to 100000 Hz",
                           EXIT_UNREADABLE)
    cpus = _cpu_list(options.cpus) if options.cpus is not None else None
    if options.stack_copy is not None and options.stack_copy % 8:
        raise CommandError(f"--stack-copy {options.stack_copy}: a multiple of 8 bytes",
                           EXIT_UNREADABLE)
    return Target(pids=pids, tids=tids, command=options.command or None,
                  system_wide=system_wide, cpus=cpus, frequency=frequency,
                  period=options.period, max_stack=options.max_stack,
                  stack_copy=options.stack_copy)


def _numbers(values: tuple[str, ...], flag: str) -> list[int]:
    """``-p 1,2 -p 3``: the numbers, each > 0."""
    found = []
    for value in values:
        for part in value.split(","):
            if not part.strip().isdigit() or int(part) < 1:
                raise CommandError(f"{flag} {value}: not a list of ids (e.g. 1234,1235)",
                                   EXIT_UNREADABLE)
            found.append(int(part))
    return found


def _cpu_list(text: str) -> list[int]:
    """``-C 0-3,6``: the CPUs, each one this machine has."""
    count = os.cpu_count() or 1
    found: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise CommandError(f"-C {text}: not a CPU list (e.g. 0-3,6)", EXIT_UNREADABLE)
        low, high = int(first), int(last or first)
        if low > high or high >= count:
            raise CommandError(f"-C {text}: this machine has CPUs 0-{count - 1}",
                               EXIT_UNREADABLE)
        found.update(range(low, high + 1))
    return sorted(found)


def _check_command(name: str) -> None:
    """A command that is not found or cannot be executed: refused before recording."""
    found = shutil.which(name)
    if found is None:
        exists = "/" in name and os.path.exists(name)
        raise CommandError(f"{name}: {'permission denied' if exists else 'command not found'}",
                           EXIT_NOT_EXECUTABLE if exists else EXIT_NOT_FOUND)


def _check_output(path: str) -> None:
    """The output may be written (its directory exists; not a directory)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError(f"{path}: cannot write: no directory {directory}", EXIT_UNREADABLE)
    if os.path.isdir(path):
        raise CommandError(f"{path}: cannot write: is a directory", EXIT_UNREADABLE)


def _scratch_directory(path: str) -> str | None:
    """Where the records wait for the end: beside a regular (or new) output file, where
    there is room for it; the system's temporary directory for a device or a pipe."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except FileNotFoundError:
        pass
    except OSError:
        return None
    directory = os.path.dirname(os.path.abspath(path))
    return directory if os.access(directory, os.W_OK | os.X_OK) else None


def _keep_old(path: str) -> None:
    """An existing regular output file becomes ``PATH.old``, as perf keeps it (a link or
    a device is written through, not moved)."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode) and os.path.getsize(path):
            os.replace(path, path + ".old")
    except FileNotFoundError:
        pass
    except OSError as error:
        raise CommandError(f"{path}: cannot keep it as {path}.old: {error.strerror}",
                           EXIT_UNREADABLE) from None


def _workload_status(status: int | None) -> int:
    """The command's exit status (128 + N if signal N ended it); 0 without one."""
    if status is None:
        return EXIT_OK
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else EXIT_OK


def _summary(options: RecordOptions, result: Any, size: int, report: Any) -> None:
    from ..record.completion import MOST_PENDING, MOST_PENDING_BYTES
    from ..record.tables import IDLE_S, LEND_S

    walked = 100 * result.outermost / result.walks if result.walks else 0.0
    if result.gone:
        sys.stderr.write(f"sframe record: {len(result.gone)} process"
                         f"{'es' if len(result.gone) != 1 else ''} ended before their tables "
                         "were loaded (their samples finished from stack copies where they "
                         "could be)\n")
    cost = (f"; the walker took {result.walker_ns / 1000:.2f} us per sample"
            if result.walker_ns else "")
    without = result.samples - result.user_samples - result.own_samples
    idle = (f"; {without:,} without a user stack (idle, kernel threads) not counted"
            if without > 0 else "")
    if result.own_samples:
        idle += (f"; {result.own_samples:,} of the recorder itself (walked by frame pointers) "
                 "not counted")
    # (Walks, not samples: with --defer, one walk serves the samples of a kernel entry.)
    samples = f"{result.samples:,} sample{'s' if result.samples != 1 else ''}"
    sys.stderr.write(f"sframe record: {samples} ({walked:.1f}% of user stacks "
                     f"walked to the outermost frame{cost}{idle}), {size:,} bytes written to "
                     f"{options.output}\n")
    if result.finished:
        sys.stderr.write(f"sframe record: {result.finished:,} chain"
                         f"{'s' if result.finished != 1 else ''} met code whose table was not "
                         "loaded yet and were finished from their stack copies\n")
    import resource

    # The recorder's own peak: RUSAGE_CHILDREN would hold the workload's (a command's
    # largest process, e.g. a compiler), which is not the recorder's memory.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sys.stderr.write(f"sframe record: memory: {peak / 2**20:.0f} MiB peak resident, "
                     f"{result.maps_bytes / 2**20:.0f} MiB of BPF maps\n")
    if result.overflowed:
        report(f"the rows of {len(result.overflowed)} binar"
               f"{'ies' if len(result.overflowed) != 1 else 'y'} did not fit in the walker's "
               "table map when asked for (their samples were finished from stack copies): "
               + ", ".join(sorted(result.overflowed)[:3]))
    if result.copies_dropped:
        report(f"{result.copies_dropped:,} more such samples kept the walker's chain (at most "
               f"{MOST_PENDING:,} stack copies and {MOST_PENDING_BYTES >> 30} GiB of them wait on "
               "disk)")
    if result.idle_processes:
        report(f"{result.idle_processes:,} of the processes running at the start had no sample "
               f"and got no tables ({result.prepared_processes:,} had samples and got theirs; "
               "a process gets its tables at its first sample)")
    if result.freed_tables:
        report(f"the tables of {result.freed_tables} binar"
               f"{'ies' if result.freed_tables != 1 else 'y'} no target mapped any more were "
               "freed")
    if result.lent_tables:
        report(f"the rows of {result.lent_tables} table{'s' if result.lent_tables != 1 else ''} "
               f"of processes without samples for {IDLE_S:g} s were lent to binaries that "
               f"fit nowhere else, for {LEND_S:g} s each")
    if options.defer:
        saved = result.requests - result.deferred_walks
        report(f"--defer: {result.requests:,} samples taken in system calls asked for their "
               f"user stack; {result.deferred_walks:,} walks made at the return to user space "
               f"({saved:,} saved by shared cookies); {result.walks:,} walks in all")


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

"""``sframe record``: sample processes with the eBPF SFrame walker and write perf.data.

A command is started held on a pipe until its events exist, so that its whole life is
seen. Per target thread: a cpu-clock event running the walker, inherited by the threads
and processes it creates, and a side-band event (MMAP2 with build ids, COMM, FORK, EXIT,
on the monotonic clock the walker stamps samples with) whose records go into the file as
the kernel wrote them. Tables are loaded from ``/proc/PID/maps`` at start and again when
a process maps executable code, forks or execs; a process's entry is dropped at its exit.

Everything the kernel holds for us (programs, maps, events, ring buffers) is owned by
one :class:`~.bpf_sys.Resources` and released on every path: the end of the command,
``--duration``, Ctrl-C, an error.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..session.tables import GeneratedTables
from ..sources.live import read_maps
from ..sources.perf_records import RECORD_HEADER
from ..unwind.modules import BinaryFinder
from ..unwind.step import Stop
from . import bpf_sys as sys_bpf
from .command import end_command, exit_status, held_child
from .completion import (
    MOST_PENDING,
    MOST_PENDING_BYTES,
    MOST_PENDING_MEMORY,
    Pending,
    ProcessMaps,
    finish,
    pending_of,
)
from .copies import CopyStore
from .defer_walk import RETURN_HOOKS, deferring_walker, return_walker
from .perf_file import (
    ATTR_FLAGS,
    DEFER_FLAGS,
    EVENTS,
    SAMPLE_TYPE,
    build_id_entry,
    comm_record,
    deferred_record,
    event_attr,
    kernel_mmap_record,
    kernel_text,
    mmap2_record,
    request_record,
    sample_record,
    sampling_attr,
    sampling_flags,
)
from .perf_ring import PerfRing
from .procfs import (
    maps_memlock,
    processes,
    raise_priority,
    return_free_memory,
    run_time,
    tgid,
    threads,
)
from .ringbuf import RingBuffer
from .sampler import (
    COPY_BYTES,
    FLAG_STACK_COPY,
    KIND_DEFERRED,
    KIND_REQUEST,
    RECORD,
    USER_FRAMES,
    user_at,
)
from .spool import RecordedFile, RecordSpool
from .table_worker import TableWorker
from .tables import IDLE_S, TableLoader, rows_map
from .walker import PROCS_VALUE, STOP_OUTERMOST, scratch_map, walker

RING_BYTES = 1 << 24
#: How often the ring buffer is drained (the walker does not wake us per sample); the side
#: band wakes us at once (a new mapping's table is loaded without waiting).
POLL_MS = 50
ROWS = 1 << 20
#: ``--defer``: threads that may wait for their walk at once (an LRU map: the entries
#: exited threads leave are pushed out), and how long the last requests are waited for.
PENDING = 1 << 16
#: How often the targets' maps are read again for code unmapped without a record
#: (``dlclose``), so that tables no process maps are freed; less often with ``-a``.
SWEEP_S, SWEEP_ALL_S = 2.0, 10.0
#: A record's kind, flags, user frames and the reason its walk ended (what the summary
#: counts and what says a stack copy follows), read once, without unpacking the rest.
RECORD_HEAD = struct.Struct("<II24xII")
DRAIN_MS = 100
MMAP2, COMM, EXIT, FORK = 10, 3, 4, 7
#: side-band event flags: inherit, mmap, comm, task, sample_id_all, mmap2, comm_exec,
#: use_clockid. Not build_id: while our side band asked for build ids in MMAP2 records,
#: every ``perf record -g`` (perf 6.1) run at the same time aborted ("assertion failed at
#: util/build-id.c:1010"; 3 of 3 with ``-a``, Linux 6.18), and none without it: the
#: kernel reads build ids for all sessions once one asks. They come from the files here
#: (the BUILD_ID feature).
SIDE_BAND_FLAGS = ((1 << 1) | (1 << 8) | (1 << 9) | (1 << 13) | (1 << 18) | (1 << 23)
                   | (1 << 24) | (1 << 25))
CLOCK_MONOTONIC = 1


@dataclass(slots=True)
class Target:
    """What to record: a command (started here, held until its events exist), processes,
    threads, or every process (on ``cpus``, default all; with a command, until it ends);
    sampled at ``frequency`` Hz or every ``period`` events."""

    pids: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    command: list[str] | None = None
    system_wide: bool = False
    cpus: list[int] | None = None
    frequency: int = 999
    period: int | None = None
    max_stack: int | None = None
    stack_copy: int | None = None


class Recording:
    """What a recording produced: counts for the summary (the file's records are in
    :class:`RecordedFile`)."""

    def __init__(self) -> None:
        self.samples = 0
        #: Samples with a user stack (not idle, not a kernel thread's).
        self.user_samples = 0
        #: The signal (SIGINT, SIGTERM, SIGHUP) that stopped the recording, or 0.
        self.signal = 0
        #: The command's wait status (None: no command, or it could not be reaped).
        self.workload_status: int | None = None
        self.outermost = 0
        self.lost = 0
        #: Samples by the reason their user walk ended.
        self.stops: dict[int, int] = {}
        #: Build ids of the binaries mapped by the targets, by path.
        self.binaries: dict[str, bytes] = {}
        #: The walker's own run time per sample, in ns, when the kernel counts it
        #: (sysctl kernel.bpf_stats_enabled=1); 0 otherwise.
        self.walker_ns = 0.0
        #: Processes that ended before their tables could be loaded, and those whose
        #: tables failed to load (reported once each).
        self.gone: set[int] = set()
        self.failed: set[int] = set()
        #: ``--defer``: samples that asked for their user stack, and the walks made at
        #: the return to user space (the difference: walks the shared cookies saved).
        self.requests = 0
        self.deferred_walks = 0
        #: Walks of user stacks made (at the sample, or deferred).
        self.walks = 0
        #: Samples whose chains were finished in user space from their stack copies, and
        #: those past the bound that kept the walker's chain.
        self.finished = 0
        self.copies_dropped = 0
        #: The BPF maps' memory (memlock), read at the end.
        self.maps_bytes = 0
        #: Tables freed when no target mapped them any more, and tables of idle processes
        #: whose rows were lent to a table that fit nowhere else.
        self.freed_tables = 0
        self.lent_tables = 0
        #: ``-a``: processes running at the start whose tables were prepared (they had
        #: samples), and those that never had a sample (no tables loaded for them).
        self.prepared_processes = 0
        self.idle_processes = 0
        #: Samples of the recorder itself (``-a``).
        self.own_samples = 0
        #: Binaries whose rows did not fit in the rows map when first asked for.
        self.overflowed: dict[str, int] = {}


#: The signals that stop a recording cleanly (the file is written, the command it
#: started is sent SIGTERM), as perf record handles them.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def record(target: Target, duration: float | None, report: Callable[[str], None],
           event: str = "cpu-clock", defer: bool = False, scratch: str | None = None
           ) -> tuple[RecordedFile, Recording]:
    """Record ``target``; with ``defer``, samples taken in system calls have their user
    stacks walked at the return to user space (:mod:`.defer_walk`). Returns the perf.data
    file to write (its records kept meanwhile in a scratch file in the directory
    ``scratch``, default the system's) and the counts. SIGINT, SIGTERM and SIGHUP end the
    recording (noted in the result); a command it started and that still runs is then
    sent SIGTERM."""
    result = Recording()
    spool = RecordSpool(scratch)
    stop = {"now": False}

    def stopping(number: int, _: object) -> None:
        stop["now"] = True
        result.signal = result.signal or number

    previous = {number: signal.signal(number, stopping) for number in STOP_SIGNALS}
    child: int | None = None
    try:
        with sys_bpf.Resources() as owned:
            session = _Session(owned, target.frequency, result, spool, report, defer,
                               target.max_stack or USER_FRAMES,
                               target.stack_copy or COPY_BYTES)
            session.event = EVENTS[event]
            session.period = target.period
            session.cpus = target.cpus
            text = kernel_text()
            if text is not None:
                session.keep(0, kernel_mmap_record(*text))
            child = _start(session, target)
            _until_done(session, stop, duration, child,
                        None if target.system_wide and target.command is None
                        else target.pids or target.tids)
            session.stop_sampling()
            session.stopped = True
            session.stop_worker()
            if child is not None:  # perf's manners: the command it started ends with it
                if result.workload_status is None:
                    result.workload_status = end_command(child, signal.SIGTERM)
                child = None
            if defer:  # walks asked for by the last samples come at their threads' returns
                session.poll(DRAIN_MS)
            session.poll(0)
            session.close()
            session.tables_being_generated()
            session.finish_chains()
            session.copies.close()
            session.generated.close()
            result.binaries = session.loader.build_ids
            result.freed_tables = session.loader.freed_tables
            result.lent_tables = session.loader.lent_tables
            result.prepared_processes, result.idle_processes = session.prepared_counts
            result.overflowed = dict(session.loader.overflowed)
            for path, reason in session.loader.refused.items():
                report(f"{path}: its .sframe is not loaded, the kernel's rules refuse it "
                       f"({reason}); its frames fall back to frame pointers")
            for path, message in session.loader.damaged.items():
                report(f"{path}: {message}")
    except BaseException:
        spool.close()
        raise
    finally:
        if child is not None:
            end_command(child, signal.SIGKILL)
        for number, handler in previous.items():
            signal.signal(number, handler)
    event_type, config = EVENTS[event]
    attr = event_attr(target.period or target.frequency,
                      sampling_flags(ATTR_FLAGS, target.period)
                      | (DEFER_FLAGS if defer else 0), config=config, event_type=event_type)
    return RecordedFile(spool, attr, _build_ids(result.binaries), event), result


def _start(session: _Session, target: Target) -> int | None:
    """Events on the targets, tables for the processes already running, then sampling;
    a command is started (held until its events exist) and its pid returned. On any
    failure the command is killed before it runs: never recorded only in part."""
    release, child = None, None
    targets: list[int] = []
    if target.command is not None:
        executable = shutil.which(target.command[0])
        if executable is not None:
            session.loader.prepare(executable)
        child, release = held_child(target.command)
        session.command_pid = child
        if not target.system_wide:
            targets = [child]
            session.on_exec = True
    if target.system_wide:
        targets = [-1]
    elif target.pids:
        targets = [tid for pid in target.pids for tid in threads(pid)]
    elif target.tids:
        targets = list(target.tids)
    try:
        for tid in targets:
            session.follow(tid, inherit=not target.tids)
        if target.system_wide:
            # Sampling starts at once: the processes' names and mappings first (quick),
            # their tables after, in the table worker; samples of code not loaded yet
            # carry stack copies and are finished at the end.
            pids = processes()
            for pid in pids:
                session.synthesize(pid)
            for pid in sorted(set(processes(kernel_threads=True)) - set(pids)):
                session.synthesize(pid)  # kernel threads: their names only
            raise_priority()
            session.enable()
            # Only the processes sampled are prepared; idle ones wait for a sample.
            session.start_worker(sampled_only=True).prepare(pids,
                                                            progress=sys.stderr.isatty())
        else:
            if not session.on_exec:  # a held command has not run its program yet
                pids = sorted({tgid(tid) for tid in targets} - {0})
                session.prefetch(pids)
                for pid in pids:
                    session.tables(pid)
                    session.synthesize(pid)
            raise_priority()  # after the command's fork: it keeps its own
            session.enable()
            session.start_worker()
        if release is not None:
            release()
    except BaseException:
        if child is not None:  # never let the command run unrecorded
            end_command(child, signal.SIGKILL)
        session.stop_worker()
        raise
    return child


def _until_done(session: _Session, stop: dict[str, bool], duration: float | None,
                child: int | None, target_pids: list[int] | None) -> None:
    """Drain, load tables and sweep until Ctrl-C, ``duration``, the end of the command
    ``child`` or of every process of ``target_pids`` (None: ``-a``, no end of its own)."""
    deadline = None if duration is None else time.monotonic() + duration
    sweep_every = SWEEP_S if target_pids is not None else SWEEP_ALL_S
    next_sweep = time.monotonic() + sweep_every
    while not stop["now"] and (deadline is None or time.monotonic() < deadline):
        session.poll(POLL_MS)
        if time.monotonic() >= next_sweep:
            session.sweep()
            next_sweep = time.monotonic() + sweep_every
        if child is not None:
            status = exit_status(child)
            if status is not None:
                session.result.workload_status = status
                return
        if child is None and target_pids is not None and not any(
                os.path.exists(f"/proc/{pid}") for pid in target_pids):
            return


def _build_ids(binaries: dict[str, bytes]) -> list[bytes]:
    """BUILD_ID entries: the running kernel's (so that kernel frames are named when the file
    is read on this kernel) and every binary whose table was loaded."""
    from ..symbolize.kernel import running_kernel_build_id

    entries = []
    kernel = running_kernel_build_id()
    if kernel:
        entries.append(build_id_entry(kernel, "[kernel.kallsyms]", kernel=True))
    entries += [build_id_entry(build_id, path, kernel=False)
                for path, build_id in sorted(binaries.items())]
    return entries


class _Session:
    def __init__(self, owned: sys_bpf.Resources, frequency: int, result: Recording,
                 spool: RecordSpool, report: Callable[[str], None], defer: bool = False,
                 frames: int = USER_FRAMES, copy_bytes: int = COPY_BYTES) -> None:
        self.owned, self.frequency, self.result, self.report = owned, frequency, result, report
        self.spool = spool
        own = owned.own
        self.ring_fd = own(sys_bpf.map_create(sys_bpf.MAP_RINGBUF, 0, 0, RING_BYTES, "sf_ring"))
        scratch = own(sys_bpf.map_create(sys_bpf.MAP_ARRAY, *scratch_map(frames, copy_bytes),
                                         "sf_scratch"))
        self.procs = own(sys_bpf.map_create(sys_bpf.MAP_HASH, 4, PROCS_VALUE, 4096, "sf_procs"))
        rows, rows_mappable = rows_map(owned, ROWS)
        maps = (int(self.ring_fd), int(scratch), int(self.procs), int(rows))
        if defer:
            code, blob, infos = self._deferring(maps, frames, copy_bytes)
        else:
            code, blob, infos = walker(*maps, frames=frames, copy_bytes=copy_bytes)
        btf = own(sys_bpf.btf_load(blob))
        self.program = own(sys_bpf.prog_load(sys_bpf.PROG_PERF_EVENT, code, "sframe_record",
                                             btf=btf, func_info=infos))
        self.generated = GeneratedTables(apart=True, flat_abi="AMD64_ENDIAN_LITTLE")  # made in a helper process
        self.loader = TableLoader(rows, self.procs, ROWS, BinaryFinder(tables=self.generated),
                                  rows_mappable)
        self.own_pid = os.getpid()
        self.loader.without_tables.add(self.own_pid)
        #: The recorder and the processes it starts but the command (walked by frame
        #: pointers, not counted as the workload).
        self.own_pids, self.command_pid = {self.own_pid}, -1
        self.ring = RingBuffer(self.ring_fd, RING_BYTES)
        #: Woken by samples and by side-band records alike: a new mapping's table is
        #: loaded as soon as the kernel reports it.
        self.waiting = select.poll()
        self.waiting.register(int(self.ring_fd), select.POLLIN)
        self.side_bands: list[PerfRing] = []
        self.events: list[sys_bpf.Fd] = []
        #: A command held before its exec: its events start at the exec.
        self.on_exec = False
        #: The sampling event: (perf type, config); every ``period`` events instead of at
        #: ``frequency`` Hz when set; ``-a``'s CPUs (None: all).
        self.event = EVENTS["cpu-clock"]
        self.period: int | None = None
        self.cpus: list[int] | None = None
        #: Samples whose chains are finished in user space from their stack copies, and
        #: each process's executable mappings for them.
        self.frames = frames
        self.maps = ProcessMaps()
        #: By process (how many wait for each: the order in which ``-a`` prepares
        #: tables), with their number and bytes (bounded).
        self.to_finish: dict[int, list[Pending]] = {}
        self.pending_count = 0
        self.pending_bytes = 0
        #: Their copies, on disk beside the recording's other records; the bytes of their
        #: records held in memory.
        self.copies = CopyStore(spool.directory)
        self.pending_memory = 0
        #: Held by the polling thread while it takes records in, and by the table thread
        #: while it takes waiting samples out or rewrites their records.
        self.lock = threading.Lock()
        #: When exited processes were last forgotten (the recorder's clock, seconds), and
        #: when each process last had a sample: the tables of processes without one lately
        #: lend their rows to a table that fits nowhere else (TableLoader._lend_rows).
        self.forgotten_at = 0.0
        self.last_sampled: dict[int, float] = {}
        self.loader.recently_sampled = self.recently_sampled
        #: The thread doing table work once sampling runs (None: done inline), whether
        #: sampling has stopped (no more table work then), and (processes prepared,
        #: processes left without a sample) by the worker's prepare.
        self.worker: TableWorker | None = None
        self.stopped = False
        self.prepared_counts = (0, 0)

    def _deferring(self, maps: tuple[int, int, int, int], frames: int, copy_bytes: int
                   ) -> tuple[bytes, bytes, bytes]:
        """--defer: the return programs loaded and attached; the sampling program's code."""
        own = self.owned.own
        self.pending = own(sys_bpf.map_create(sys_bpf.MAP_LRU_HASH, 4, 8, PENDING,
                                              "sf_pending"))
        counter = own(sys_bpf.map_create(sys_bpf.MAP_PERCPU_ARRAY, 4, 8, 1, "sf_entries"))
        code, blob, infos = deferring_walker(*maps, int(self.pending), int(counter),
                                             frames, copy_bytes)
        # The sampling program interrupts the return programs (a perf event's program
        # is kept from running inside a kprobe's, not a raw tracepoint's): they build
        # their records in scratch of their own.
        returning = own(sys_bpf.map_create(sys_bpf.MAP_ARRAY,
                                           *scratch_map(frames, copy_bytes),
                                           "sf_scratch_ret"))
        hook_maps = (maps[0], int(returning), maps[2], maps[3])
        for hook in RETURN_HOOKS:
            hook_code, hook_blob, hook_infos = return_walker(
                *hook_maps, int(self.pending), at_exit=hook == "sched_process_exit",
                frames=frames, copy_bytes=copy_bytes)
            hook_program = own(sys_bpf.prog_load(
                sys_bpf.PROG_RAW_TRACEPOINT, hook_code, f"sframe_{hook}",
                btf=own(sys_bpf.btf_load(hook_blob)), func_info=hook_infos))
            own(sys_bpf.raw_tracepoint_open(hook, hook_program))
        return code, blob, infos

    def follow(self, tid: int, inherit: bool = True) -> None:
        """A sampling event running the walker and a side-band event on thread ``tid``
        (-1: every thread of every CPU: ``-a``), inherited by the threads and processes it
        starts unless ``inherit`` is False (``-t``)."""
        sample = sampling_attr(self.event, self.frequency, self.period,
                               inherit=tid >= 0 and inherit, on_exec=self.on_exec)
        cpus = self.cpus if self.cpus is not None else range(os.cpu_count() or 1)
        for cpu in ([-1] if tid >= 0 else cpus):
            event = self.owned.own(sys_bpf.perf_event_open(sample, tid, cpu))
            sys_bpf.ioctl(event, sys_bpf.PERF_EVENT_IOC_SET_BPF, int(self.program))
            self.events.append(event)
        side_flags = SIDE_BAND_FLAGS & ~(1 << 1) if tid < 0 else SIDE_BAND_FLAGS
        side = bytearray(event_attr(0, side_flags, config=9, sample_type=SAMPLE_TYPE))
        struct.pack_into("<i", side, 92, CLOCK_MONOTONIC)
        # Wake up as soon as a record is there (watermark of 1 byte: wakeup_events counts
        # samples only, and this event has none): a new mapping's table is loaded at once.
        struct.pack_into("<I", side, 48, 1)
        struct.pack_into("<Q", side, 40, struct.unpack_from("<Q", side, 40)[0] | (1 << 14))
        # An inherited event has a ring buffer only per CPU (the kernel refuses to map a
        # per-task one): one side-band event per CPU.
        for cpu in range(os.cpu_count() or 1):
            band = self.owned.own(sys_bpf.perf_event_open(bytes(side), tid, cpu))
            self.side_bands.append(PerfRing(band))
            self.waiting.register(int(band), select.POLLIN)

    def ask_tables(self, pid: int) -> None:
        """Load ``pid``'s tables: by the table worker when there is one (none once sampling
        has stopped: the recording needs no more)."""
        if self.stopped:
            return
        if self.worker is not None:
            self.worker.ask("load", pid)
        else:
            self.tables(pid)

    def drop(self, pid: int) -> None:
        if self.stopped:
            return
        if self.worker is not None:
            self.worker.ask("drop", pid)
        else:
            self.loader.drop_process(pid)

    def sweep(self) -> None:
        if self.worker is not None:
            self.worker.ask("sweep")
        else:
            self.loader.sweep()

    def start_worker(self, sampled_only: bool = False) -> TableWorker:
        """From here on, table work is done off the polling path; ``sampled_only``: its
        preparation of running processes takes only those with samples (``-a``)."""
        worker = TableWorker(self.tables, self.loader.drop_process, self.loader.sweep,
                             self.prefetch, self.samples_waiting,
                             self.finish_ready, return_free_memory,
                             sampled=self.was_sampled if sampled_only else None,
                             ready=self.loader.tables_ready, finish=self.finish_waiting)
        self.worker = worker
        # From now on a table missing from the cache is generated in the background; its
        # code copies the stack until then (see TableLoader.tables_ready).
        self.generated.later.on_ready = lambda: worker.ask("ready")
        self.generated.later.rank = self.loader.samples_for
        self.loader.samples_waiting = self.samples_waiting
        self.generated.background = True
        return worker

    def was_sampled(self, pid: int) -> bool:
        """Whether ``pid`` had a sample (read from the table thread)."""
        return pid in self.last_sampled

    def stop_worker(self) -> None:
        if self.worker is not None:
            worker, self.worker = self.worker, None
            worker.close()
            self.prepared_counts = (len(worker.prepared_pids), len(worker.left_pids))

    def tables(self, pid: int) -> None:
        try:
            self.loader.load_process(pid)
        except (FileNotFoundError, ProcessLookupError):
            # ended before its tables were loaded (its maps gone, or ESRCH reading them):
            # its samples were walked by frame pointers, or finished from their copies
            self.result.gone.add(pid)
        except (OSError, sys_bpf.BpfError) as error:
            if pid not in self.result.failed:
                self.result.failed.add(pid)
                self.report(f"process {pid}: its tables were not loaded: {error}")

    def prefetch(self, pids: list[int]) -> None:
        """Generate the tables the processes' binaries lack in parallel (first run)."""
        files: set[tuple[str, bytes | None]] = set()
        for pid in pids:
            try:
                files.update((entry.path, None) for entry in read_maps(pid)
                             if "x" in entry.perms and entry.path.startswith("/"))
            except OSError:
                continue
        try:
            self.loader.finder.prefetch(sorted(files), progress=False)
        except (OSError, ValueError):
            pass

    def synthesize(self, pid: int) -> None:
        """COMM and MMAP2 records of a process that was running before the recording, as
        perf synthesizes them from /proc."""
        now = time.monotonic_ns()
        for tid in threads(pid):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8",
                          errors="replace") as handle:
                    name = handle.read().strip()
            except OSError:
                continue
            self.keep(now, comm_record(pid, tid, name, now))
        try:
            maps = read_maps(pid)
        except OSError:
            return
        for entry in maps:
            if entry.path:
                record = mmap2_record(pid, entry.start, entry.end, entry.pgoff, entry.perms,
                                      entry.device, entry.inode, entry.path, now)
                self.keep(now, record)
                kind, misc = struct.unpack_from("<IH", record)
                self.maps.side_band(kind, misc, record, 0)  # mapped before any sample

    def enable(self) -> None:
        if self.on_exec:
            return  # the kernel enables them at the exec
        for event in self.events:
            sys_bpf.ioctl(event, sys_bpf.PERF_EVENT_IOC_ENABLE)

    def poll(self, timeout_ms: int) -> None:
        if timeout_ms:
            try:
                self.waiting.poll(timeout_ms)
            except InterruptedError:
                pass
        with self.lock:
            self._take_in()
            now = time.monotonic()
            if now - self.forgotten_at >= 1.0:
                self.forgotten_at = now
                self.maps.forget_exited(now, self.to_finish)
                if self.to_finish and self.worker is not None:
                    self.worker.ask("finish")  # (at most one queued)

    def recently_sampled(self, pid: int) -> bool:
        when = self.last_sampled.get(pid)
        return when is not None and time.monotonic() - when < IDLE_S

    def samples_waiting(self) -> dict[int, int]:
        """How many samples wait for each process's tables."""
        with self.lock:
            return {pid: len(items) for pid, items in self.to_finish.items()}

    def _take_in(self) -> None:
        """The side band's records, then the walker's (a sample's mappings are known
        before it: see :class:`ProcessMaps`)."""
        for band in self.side_bands:
            for data in band.records():
                self._side_band(data)
        now = time.monotonic()
        for raw in self.ring.records():
            kind, flags, user_frames, reason = RECORD_HEAD.unpack_from(raw)
            if kind == KIND_REQUEST:
                stamp, data = request_record(raw)
                self.result.requests += 1
            elif kind == KIND_DEFERRED:
                stamp, data = deferred_record(raw)
                self.result.deferred_walks += 1
                self._walked(reason)
            else:
                stamp, data = sample_record(raw, frames=self.frames)
                pid = struct.unpack_from("<I", raw, 8)[0]
                self.last_sampled[pid] = now
                self._sampled_while_idle(pid)
                if pid in self.own_pids:
                    self.result.own_samples += 1  # walked by frame pointers: not counted
                elif user_frames and _has_user_stack(raw):  # idle, kernel threads: none
                    self.result.user_samples += 1
                    self._walked(reason)
                if flags & FLAG_STACK_COPY and pid not in self.own_pids:
                    self._keep_copy(raw)
            self.result.samples += kind != KIND_DEFERRED
            self.keep(stamp, data)

    def _sampled_while_idle(self, pid: int) -> None:
        """A process left idle by ``-a``'s preparation has its tables loaded at its first
        sample (this one and the next few are finished from their stack copies)."""
        worker = self.worker
        if worker is not None and pid in worker.left_pids and worker.prepared.is_set():
            worker.left_pids.discard(pid)
            self.ask_tables(pid)

    def _keep_copy(self, raw: bytes | memoryview) -> None:
        """A sample to finish in user space (its record is the next one kept)."""
        if (self.pending_count >= MOST_PENDING or self.pending_bytes >= MOST_PENDING_BYTES
                or self.pending_memory >= MOST_PENDING_MEMORY):
            self.result.copies_dropped += 1
            return
        found = pending_of(len(self.spool), raw, self.frames, self.copies)
        if found is not None:
            self.to_finish.setdefault(found.pid, []).append(found)
            self.pending_count += 1
            self.pending_bytes += found.stored_size
            self.pending_memory += found.held()

    def finish_ready(self, pid: int) -> None:
        """In the table thread, once ``pid``'s tables are loaded: its waiting samples
        finished now (their copies freed: a busy ``-a`` run fills the bound otherwise).
        Their layouts are taken under the lock; the unwinding is done outside it."""
        if self.loader.waits_for_tables(pid):
            return  # finished once all its tables are there
        with self.lock:
            ready = self.to_finish.pop(pid, [])
            if not ready:
                return
            self.maps.in_order()
            layouts = [self.maps.layout(item.pid, item.time) for item in ready]
            self.pending_count -= len(ready)
            self.pending_bytes -= sum(item.stored_size for item in ready)
            self.pending_memory -= sum(item.held() for item in ready)
        finished = finish(ready, self.maps, self.loader.finder, self.frames, layouts,
                          self.copies)
        with self.lock:
            self._apply(ready, finished)

    def tables_being_generated(self) -> None:
        """At the end: the tables being generated for samples that wait are waited for
        (the others are given up), then any table a waiting sample needs is generated as
        it is met (no longer in the background)."""
        later = self.generated.later
        left = later.only(lambda path: self.loader.samples_for(path) > 0)
        if left and sys.stderr.isatty():
            sys.stderr.write(f"sframe record: generating the tables of {left} binar"
                             f"{'ies' if left != 1 else 'y'} for the samples waiting for "
                             "them ...\n")
        later.drain()
        self.loader.tables_ready()
        self.generated.background = False

    def finish_waiting(self) -> None:
        """In the table thread, every second: the samples of processes that wait for no
        table being generated are finished now (their tables are loaded, or fit nowhere in
        the rows map: their code copies the stack for good), not at their next load."""
        worker, loader = self.worker, self.loader
        with self.lock:
            pids = [pid for pid in self.to_finish if pid in loader.fingerprints
                    and not loader.waits_for_tables(pid)
                    and (worker is None or not worker.load_queued(pid))]
        for pid in pids:
            self.finish_ready(pid)

    def finish_chains(self) -> None:
        """The pending samples' chains finished in user space, their records rewritten."""
        waiting = [item for items in self.to_finish.values() for item in items]
        self.to_finish.clear()
        if waiting:
            self._apply(waiting, finish(waiting, self.maps, self.loader.finder, self.frames,
                                        store=self.copies))

    def _apply(self, items: list[Pending], finished: dict[int, tuple[list[int], Stop]]
               ) -> None:
        """The finished samples' records rewritten (under the lock while sampling)."""
        result = self.result
        for item in items:
            found = finished.get(item.sequence)
            if found is None:
                continue
            chain, stop = found
            self.spool.replace(item.sequence,
                               sample_record(item.raw, chain, (item.index, stop))[1])
            walker_outermost = RECORD.unpack_from(item.raw)[8] == STOP_OUTERMOST
            result.outermost += (stop is Stop.OUTERMOST) - walker_outermost
            result.finished += 1

    def _walked(self, reason: int) -> None:
        self.result.walks += 1
        self.result.outermost += reason == STOP_OUTERMOST
        self.result.stops[reason] = self.result.stops.get(reason, 0) + 1

    def keep(self, stamp: int, data: bytes) -> None:
        self.spool.append(stamp, data)

    def _side_band(self, data: bytes) -> None:
        kind, misc, size = RECORD_HEADER.unpack_from(data)
        trailer = data[size - 24:size]
        pid, _, stamp = struct.unpack_from("<iiQ", trailer) if len(trailer) == 24 else (0, 0, 0)
        self.maps.side_band(kind, misc, data, stamp)
        if kind == 2 or kind == 13:  # LOST / LOST_SAMPLES
            self.result.lost += 1
        self.keep(stamp, data)
        if kind == MMAP2 and misc & 0x2000 == 0:  # executable code mapped
            self.ask_tables(pid)
        elif kind == FORK:
            child_pid, parent_pid = struct.unpack_from("<ii", data, 8)
            if child_pid != parent_pid and parent_pid in self.own_pids:
                if child_pid != self.command_pid:
                    self.own_pids.add(child_pid)
                    self.loader.without_tables.add(child_pid)
                    self.ask_tables(child_pid)  # an entry without tables: frame pointers
            elif child_pid != parent_pid:
                self.ask_tables(child_pid)
        elif kind == EXIT:
            exited, parent = struct.unpack_from("<ii", data, 8)
            tid = struct.unpack_from("<i", data, 16)[0]
            if exited == tid:
                self.drop(exited)
                self.maps.exited(exited, time.monotonic())
                self.last_sampled.pop(exited, None)
                if exited != self.own_pid and exited in self.own_pids:
                    self.own_pids.discard(exited)
                    self.loader.without_tables.discard(exited)
            del parent

    def stop_sampling(self) -> None:
        for event in self.events:
            try:
                sys_bpf.ioctl(event, sys_bpf.PERF_EVENT_IOC_DISABLE)
            except sys_bpf.BpfError:
                pass

    def close(self) -> None:
        self.result.walker_ns = run_time(self.program)
        self.result.maps_bytes = maps_memlock()
        self.ring.close()
        for band in self.side_bands:
            band.close()


def _has_user_stack(raw: bytes | memoryview) -> bool:
    """Whether a walker record has a user frame (its first user ip is not 0)."""
    at = user_at(raw)
    return len(raw) >= at + 8 and bool(struct.unpack_from("<Q", raw, at)[0])

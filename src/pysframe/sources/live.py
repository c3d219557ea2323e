"""Stacks of a live process through ptrace (x86-64): registers, maps and memory.

Hand-written over ctypes' C module (:mod:`.ptrace_sys`): Python has no ptrace binding.
Every thread is stopped with PTRACE_SEIZE + PTRACE_INTERRUPT (the thread sees no
signal), read, and detached again; :class:`Attached` detaches in ``finally`` on every
path, including errors, Ctrl-C and time-outs, so the target is never left stopped.
Memory is read through ``/proc/PID/task/TID/mem``, which also reads pages a guard page
would hide from process_vm_readv.

What a target may do meanwhile, and how it is handled:

* A signal may arrive between the seize and the interrupt: the thread then reports a
  signal-delivery stop (the signal taken from its queue, held by the tracer) instead of
  the interrupt's event stop. It is as stopped as the other, so it is read as it is, and
  detached *with* that signal, which the kernel then delivers as if nothing happened
  (detaching with 0 would drop it).
* A process in a group stop (SIGSTOP) reports it as an event stop; detaching puts it
  back in the group stop: a stopped process stays stopped.
* Threads end at any time: a seize of a thread that has just ended fails with ESRCH, or
  with EPERM once it is a zombie (so EPERM is a permission problem only if the thread
  still lives); a seized thread that ends reports its exit instead of a stop.
* Threads are created at any time: the task list is read again after every thread seen
  is stopped, until no new thread appears (a stopped thread creates none).
* The main thread may have ended (``pthread_exit``) while the others run: a zombie
  leader has no maps and no memory, so both are read through a live thread.

One case is left to the kernel: a main thread that ends while it is held cannot be
collected (nor detached) before its process's other threads end; it stays this
process's tracee, and the kernel hands it back when this process ends (at once, for
the command line; a long-lived caller keeps it until then).
"""

from __future__ import annotations

import errno
import os
import struct
import time

from .. import c_signal as signal
from ..errors import PysframeError
from ..records import record_class
from .ptrace_sys import PtraceCalls

PTRACE_GETREGS = 12
PTRACE_DETACH = 17
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
WALL = 0x40000000
_HELD_SIGNALS = {signal.SIGINT, signal.SIGALRM, signal.SIGTERM, signal.SIGHUP}
#: How many times the task list is read again for threads created meanwhile (each round
#: stops every new thread; a process whose threads are all stopped creates none).
_TASK_ROUNDS = 64
#: Waiting for a thread to stop: how often its state is checked (it may have ended).
_STATE_CHECK = 0.002
#: At detach, how long a thread seized but not yet stopped is waited for.
_DETACH_WAIT = 1.0
_YAMA = "/proc/sys/kernel/yama/ptrace_scope"
_PF_KTHREAD = 0x00200000  # in the flags field of /proc/PID/stat

# x86-64 struct user_regs_struct: 27 unsigned longs in this order.
_USER_REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs "
              "eflags rsp ss fs_base gs_base ds es fs gs").split()
#: DWARF numbers of the x86-64 general registers (for register-based rules in frame 0).
_DWARF = {"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7,
          **{f"r{n}": n for n in range(8, 16)}}

# ptrace from the C library already loaded into this process (dlopen(NULL)):
# ctypes.util.find_library would run `ldconfig -p` at every start.
_PTRACE = PtraceCalls(len(_USER_REGS))


class LiveError(PysframeError):
    """A process or thread could not be read (one line, with the errno text)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message, unreadable=True)
        self.errno = code


def _ptrace(request: int, tid: int, address: int = 0, data: object = None) -> int:
    result, code = _PTRACE.call(request, tid, address, data)
    if code:
        raise LiveError(code, f"ptrace({request:#x}) on thread {tid}: {os.strerror(code)}")
    return result


def gone(pid: int) -> LiveError:
    """The error for a process that does not exist (any more)."""
    return LiveError(errno.ESRCH, f"process {pid}: no such process")


def task_ids(pid: int) -> list[int]:
    """The thread ids of ``pid`` (empty when the process is gone)."""
    try:
        return sorted(int(name) for name in os.listdir(f"/proc/{pid}/task") if name.isdigit())
    except FileNotFoundError:
        return []
    except OSError as error:
        raise LiveError(error.errno or errno.EIO,
                        f"process {pid}: {error.strerror or error}") from None


def _stat_fields(pid: int, tid: int) -> list[str]:
    """The fields of ``/proc/PID/task/TID/stat`` after the command name (state first);
    empty when the thread is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return []
    return text.rpartition(b")")[2].decode("ascii", "replace").split()


def _comm(pid: int) -> str:
    """`` (name)`` of process ``pid`` as its stat file gives it (printable, bounded), or
    nothing when that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read(4096)
    except OSError:
        return ""
    name = text.partition(b"(")[2].rpartition(b")")[0][:64]
    shown = "".join(c if c.isprintable() else "?" for c in name.decode("utf-8", "replace"))
    return f" ({shown})" if shown else ""


def thread_state(pid: int, tid: int) -> str | None:
    """The state letter of thread ``tid`` (``R``, ``S``, ``T``, ``t``, ``Z`` ...), or
    ``None`` when it is gone."""
    fields = _stat_fields(pid, tid)
    return fields[0] if fields else None


def _ended(pid: int, tid: int) -> bool:
    """Whether ``tid`` has ended: gone, a zombie, or dead."""
    return thread_state(pid, tid) in (None, "Z", "X")


def _tracer_of(pid: int, tid: int) -> int:
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as handle:
            for line in handle:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _not_permitted(pid: int, tid: int, error: LiveError) -> LiveError:
    """The error for a seize refused to a live thread: already traced (by whom), or not
    permitted (Yama's setting named only where Yama exists)."""
    holder = _tracer_of(pid, tid)
    if holder and holder != os.getpid():
        return LiveError(errno.EPERM, f"process {pid}: thread {tid} is already traced by "
                                      f"process {holder}")
    message = f"process {pid}: ptrace: {os.strerror(error.errno)}"
    if os.path.exists(_YAMA):
        message += f" (see {_YAMA})"
    return LiveError(error.errno, message)


@record_class
class MapEntry:
    start: int
    end: int
    perms: str
    pgoff: int
    path: str
    #: The mapped file's device (``os.makedev(major, minor)``) and inode; 0 for anonymous.
    device: int = 0
    inode: int = 0


def read_maps(pid: int, tid: int | None = None, executable: bool = False) -> list[MapEntry]:
    """The mappings of ``pid`` (through thread ``tid``'s view when given: the same address
    space, readable when the main thread has ended; ``executable``: only those that are).
    Paths keep bytes that are not UTF-8 as surrogates (``surrogateescape``), so that they
    still open the file."""
    where = f"/proc/{pid}/maps" if tid is None else f"/proc/{pid}/task/{tid}/maps"
    entries = []
    with open(where, encoding="utf-8", errors="surrogateescape") as handle:
        for line in handle:
            fields = line.split(maxsplit=5)
            if len(fields) < 5 or (executable and "x" not in fields[1]):
                continue
            start, end = (int(part, 16) for part in fields[0].split("-"))
            major, _, minor = fields[3].partition(":")
            path = fields[5].strip() if len(fields) > 5 else ""
            entries.append(MapEntry(start, end, fields[1], int(fields[2], 16), path,
                                    os.makedev(int(major, 16), int(minor, 16)),
                                    int(fields[4])))
    return entries


def live_maps(pid: int) -> tuple[int, list[MapEntry]]:
    """A live thread of ``pid`` and the process's mappings as that thread sees them (the
    main thread's own are empty once it has ended). Raises "no such process"."""
    for tid in [pid, *(tid for tid in task_ids(pid) if tid != pid)]:
        if tid != pid and _ended(pid, tid):
            continue
        try:
            entries = read_maps(pid, None if tid == pid else tid)
        except (FileNotFoundError, ProcessLookupError):
            continue
        except OSError as error:
            raise LiveError(error.errno or errno.EIO,
                            f"process {pid}: {error.strerror or error}") from None
        if entries:
            return tid, entries
    fields = _stat_fields(pid, pid)
    if len(fields) > 6 and fields[6].isdigit() and int(fields[6]) & _PF_KTHREAD:
        raise LiveError(errno.EPERM, f"PID {pid}{_comm(pid)} is a kernel thread: no user stack")
    raise gone(pid)  # ended, or ending (its memory already released)


class ProcessMemory:
    """Reads 8-byte words of a process through /proc/PID/mem (page cache per walk)."""

    __slots__ = ("_fd", "_pages")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pages: dict[int, bytes | None] = {}

    def read(self, address: int) -> int | None:
        page = address & ~0xFFF
        if address + 8 > page + 0x1000:  # a word across two pages
            raw = self.read_bytes(address, 8)
            return None if raw is None else int.from_bytes(raw, "little")
        data = self._pages.get(page, b"")
        if data == b"":
            try:
                data = os.pread(self._fd, 0x1000, page)
                if len(data) != 0x1000:
                    data = None
            except (OSError, OverflowError):
                data = None
            self._pages[page] = data
        if data is None:
            return None
        return int(struct.unpack_from("<Q", data, address - page)[0])

    def read_bytes(self, address: int, size: int) -> bytes | None:
        try:
            data = os.pread(self._fd, size, address)
        except (OSError, OverflowError):
            return None
        return data if len(data) == size else None


def open_memory(pid: int, tid: int) -> int:
    """A descriptor of the address space of ``pid`` through its live thread ``tid``."""
    try:
        return os.open(f"/proc/{pid}/task/{tid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        raise gone(pid) from None
    except OSError as error:
        raise LiveError(error.errno or errno.EIO,
                        f"process {pid}: memory: {error.strerror or error}") from None


@record_class
class ThreadState:
    tid: int
    name: str
    registers: dict[str, int]


@record_class
class _Tracee:
    """One thread of the target: whether it was seized, whether its stop was collected,
    the signal it was stopped with (a signal-delivery stop: delivered at detach), whether
    it has ended, and whether its end was collected (a traced thread that ends stays a
    zombie until its tracer collects it, and keeps its process from ending)."""

    tid: int
    seized: bool = True
    stopped: bool = False
    signal: int = 0
    ended: bool = False
    reaped: bool = False
    detached: bool = False

    @property
    def held(self) -> bool:
        """Stopped, alive, and ours to detach."""
        return self.stopped and not self.ended and not self.detached

    @property
    def settled(self) -> bool:
        """Nothing more to wait for: held (to be detached), detached, or collected."""
        return self.held or self.detached or self.reaped


class Attached:
    """Context manager: all threads of ``pid`` stopped; detached on exit, whatever happens.

    Threads that end meanwhile are left out; threads created meanwhile are stopped too.
    "no such process" (ESRCH) when no thread is left to read.
    """

    def __init__(self, pid: int, timeout: float = 2.0) -> None:
        self.pid = pid
        self.timeout = timeout
        self.memory_fd = -1
        self._tracees: dict[int, _Tracee] = {}

    @property
    def stopped(self) -> list[int]:
        """The threads held stopped (in thread id order)."""
        return sorted(tid for tid, tracee in self._tracees.items() if tracee.held)

    def __enter__(self) -> Attached:
        if self.pid == os.getpid():
            raise LiveError(errno.EPERM, f"process {self.pid}: cannot stop its own process")
        # Ctrl-C or an alarm between a seize and its bookkeeping would leave a thread
        # traced: they are held while threads are stopped, and raised once all are.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        try:
            self._attach()
        except BaseException:
            self._release()
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            raise
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a held Ctrl-C raises here
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _attach(self) -> None:
        deadline = time.monotonic() + self.timeout
        for _ in range(_TASK_ROUNDS):
            new = [tid for tid in task_ids(self.pid) if tid not in self._tracees]
            if not new:
                break
            for tid in new:
                self._seize(tid)
            self._wait(deadline)
        stopped = self.stopped
        if not stopped:
            raise gone(self.pid)
        self.memory_fd = open_memory(self.pid, stopped[0])

    def _seize(self, tid: int) -> None:
        try:
            _ptrace(PTRACE_SEIZE, tid)
        except LiveError as error:
            if error.errno == errno.ESRCH or (error.errno == errno.EPERM
                                              and _ended(self.pid, tid)):
                self._tracees[tid] = _Tracee(tid, seized=False, ended=True)  # ended
                return
            if error.errno == errno.EPERM:
                raise _not_permitted(self.pid, tid, error) from None
            raise
        tracee = self._tracees[tid] = _Tracee(tid)
        try:
            _ptrace(PTRACE_INTERRUPT, tid)
        except LiveError as error:
            if error.errno != errno.ESRCH:
                raise
            tracee.ended = True  # ended between the two calls; its exit is collected later

    def _wait(self, deadline: float) -> None:
        """Collect the stop (or the end) of every seized thread, until ``deadline``."""
        checked = time.monotonic()
        while True:
            pending = [t for t in self._tracees.values() if not t.stopped and not t.ended]
            for tracee in pending:
                self._collect(tracee)
            pending = [t for t in pending if not t.stopped and not t.ended]
            if not pending:
                return
            now = time.monotonic()
            if now - checked > _STATE_CHECK:
                # A thread that became a zombie before it could stop never will (a main
                # thread waits, as a zombie, for the others to end).
                checked = now
                for tracee in pending:
                    if _ended(self.pid, tracee.tid):
                        tracee.ended = True
                continue
            if now > deadline:
                raise LiveError(errno.ETIMEDOUT, f"process {self.pid}: thread {pending[0].tid} "
                                                 "did not stop in time")
            time.sleep(0.0002)

    def _collect(self, tracee: _Tracee) -> None:
        """One non-blocking look at ``tracee``'s state change."""
        try:
            waited, status = os.waitpid(tracee.tid, os.WNOHANG | WALL)
        except ChildProcessError:  # no longer ours to wait for: it has ended
            tracee.ended = tracee.reaped = True
            return
        if waited != tracee.tid:
            return
        if os.WIFSTOPPED(status):
            tracee.stopped = True
            if status >> 16 == 0:  # a signal-delivery stop: the signal is ours to give back
                tracee.signal = os.WSTOPSIG(status)
        elif os.WIFEXITED(status) or os.WIFSIGNALED(status):
            tracee.ended = tracee.reaped = True

    def threads(self) -> list[ThreadState]:
        out = []
        for tid in self.stopped:
            buffer = _PTRACE.words()
            try:
                _ptrace(PTRACE_GETREGS, tid, 0, _PTRACE.pointer(buffer))
            except LiveError as error:
                if error.errno != errno.ESRCH:
                    raise
                self._tracees[tid].ended = True  # killed (SIGKILL) while stopped
                continue
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm", "rb") as handle:
                    # Any bytes (a thread names itself): shown escaped, never a failure.
                    name = handle.read(64).strip().decode("utf-8", "backslashreplace")
            except OSError:
                name = "?"
            out.append(ThreadState(tid, name, dict(zip(_USER_REGS, buffer, strict=True))))
        if not out:
            raise gone(self.pid)
        return out

    def memory(self) -> ProcessMemory:
        return ProcessMemory(self.memory_fd)

    def __exit__(self, *_: object) -> None:
        # Ctrl-C or an alarm during the loop would leave the remaining threads stopped:
        # hold those signals until every thread is detached (their handlers run after).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        try:
            if self.memory_fd >= 0:
                os.close(self.memory_fd)
                self.memory_fd = -1
            self._release()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _release(self) -> None:
        """Detach every seized thread, each with the signal it was stopped with, and
        collect the end of those that ended."""
        tracees = [t for t in self._tracees.values() if t.seized]
        self._tracees = {}
        # A thread seized but not stopped yet cannot be detached: wait a little for its
        # stop (the interrupt is pending; it may bring a signal). An ended one must be
        # collected, or it stays a zombie that keeps its process from ending; so must one
        # killed while stopped (its detach fails).
        deadline = time.monotonic() + _DETACH_WAIT
        self._settle(tracees, deadline)
        for tracee in tracees:
            if tracee.held:
                try:
                    _ptrace(PTRACE_DETACH, tracee.tid, 0, tracee.signal)
                    tracee.detached = True
                except LiveError:
                    tracee.ended = True  # killed meanwhile: its end is ours to collect
        self._settle(tracees, deadline)
        # Left over only when a thread never stopped within the wait (stuck in the kernel)
        # or a main thread ended while its process lives on: the kernel lets them go, with
        # any pending signal kept, when this process ends.

    def _settle(self, tracees: list[_Tracee], deadline: float) -> None:
        """Collect stops and ends until every thread is settled (or ``deadline``)."""
        while True:
            waiting = [t for t in tracees if not t.settled and not self._leader_waits(t)]
            for tracee in waiting:
                self._collect(tracee)
            if all(t.settled for t in waiting) or time.monotonic() > deadline:
                return
            time.sleep(0.0002)

    def _leader_waits(self, tracee: _Tracee) -> bool:
        """Whether ``tracee`` is an ended main thread whose end cannot be collected yet:
        that waits for every other thread of its process to end."""
        if tracee.tid != self.pid or thread_state(self.pid, tracee.tid) != "Z":
            return False
        return any(not _ended(self.pid, tid) for tid in task_ids(self.pid) if tid != self.pid)


def dwarf_registers(registers: dict[str, int]) -> dict[int, int]:
    return {number: registers[name] for name, number in _DWARF.items()}

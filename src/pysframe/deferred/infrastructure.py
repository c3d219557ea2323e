"""The kernel's deferred unwinding infrastructure (``kernel/unwind/deferred.c``, 6.17+).

A tracer registers once (``unwind_deferred_init``: a bit of one machine word, two bits
reserved, so at most 62 tracers) and, from interrupt or NMI context, asks for the user
stack of the current task (``unwind_deferred_request``). The answer is a cookie naming
the current kernel entry, the same for every request until the task returns to user
space: the CPU number plus one in the low 32 bits, and in the high 32 bits a per-CPU
entry counter bumped (by two, low bit set so no cookie is 0) at the first request of
an entry. The first request queues task work; it runs just before the return to user
space, walks the user stack once (cached for the entry: later requests of the same
entry reuse it) and calls back every tracer whose bit is pending, each at most once
per entry. The return to user space clears the cookie, the cache and the bits. A task
that exits with work pending gets its callbacks run from the exit path; an exiting
task, a kernel thread or a task not entered from user space gets -EINVAL. Cancelling
a tracer frees its bit, in every task too.

The model is single-threaded: "NMI context" is a flag of :meth:`DeferredUnwinder.request`
(allowed on x86-64, which has an NMI-safe cmpxchg).
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from ..records import field, record_class
from ..unwind.step import Stop
from .mm import Mm
from .user_unwind import MAX_ENTRIES, EntryRegisters, UserTrace, unwind_user

UNWIND_PENDING = 1 << 0
UNWIND_USED = 1 << 1
RESERVED_BITS = UNWIND_PENDING | UNWIND_USED
BITS_PER_LONG = 64
ALL_BITS = (1 << BITS_PER_LONG) - 1


def make_cookie(cpu: int, count: int) -> int:
    """The 64-bit cookie of an entry: ``cpu + 1`` low, the entry count high."""
    return ((count & 0xFFFFFFFF) << 32) | ((cpu + 1) & 0xFFFFFFFF)


def cookie_parts(cookie: int) -> tuple[int, int]:
    """(cpu, entry count) of a cookie."""
    return (cookie & 0xFFFFFFFF) - 1, cookie >> 32


#: A tracer's callback: (its work, the user trace, the cookie).
Callback = Callable[["UnwindWork", UserTrace, int], None]


@record_class
class UnwindWork:
    """A registered tracer (``struct unwind_work``); ``bit`` -1 once cancelled."""

    callback: Callback
    bit: int
    name: str = ""


@record_class
class Task:
    """The parts of a task the infrastructure reads and keeps (``unwind_task_info``)."""

    tid: int
    mm: Mm | None
    kthread: bool = False
    exiting: bool = False
    #: The CPU it runs on, and the user registers saved at its current kernel entry
    #: (None: not in the kernel from user space).
    cpu: int = 0
    entry: EntryRegisters | None = None
    unwind_mask: int = 0
    cookie: int = 0
    #: The cached trace of this entry (None: not walked yet) and the tracers served.
    cache: UserTrace | None = None
    unwind_completed: int = 0
    task_work_queued: bool = False
    #: Every callback made for this task: (tracer name, cookie, trace entries).
    delivered: list[tuple[str, int, tuple[int, ...]]] = field(default_factory=list)


class DeferredUnwinder:
    """Registered tracers, per-CPU entry counters and the walks made."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, frame_pointers: bool = True) -> None:
        self.unwind_mask = RESERVED_BITS
        #: Newest first, as ``list_add_rcu`` puts them.
        self.callbacks: list[UnwindWork] = []
        self.counters: dict[int, int] = {}
        self.tasks: list[Task] = []
        self.max_entries = max_entries
        self.frame_pointers = frame_pointers
        #: User stacks actually walked (not served from a task's cache).
        self.walks = 0

    # -- tracers -----------------------------------------------------------------------

    def init(self, callback: Callback, name: str = "") -> UnwindWork | int:
        """``unwind_deferred_init``: the new tracer, or -EBUSY when every bit is taken."""
        if self.unwind_mask == ALL_BITS:
            return -errno.EBUSY
        bit = (~self.unwind_mask & (self.unwind_mask + 1)).bit_length() - 1  # ffz
        self.unwind_mask |= 1 << bit
        work = UnwindWork(callback, bit, name)
        self.callbacks.insert(0, work)
        return work

    def cancel(self, work: UnwindWork | None) -> None:
        """``unwind_deferred_cancel``: no more requests or callbacks for ``work``."""
        if work is None or work.bit < 0 or (1 << work.bit) & RESERVED_BITS:
            return
        mask = 1 << work.bit
        self.callbacks.remove(work)
        work.bit = -1
        self.unwind_mask &= ~mask
        for task in self.tasks:
            task.unwind_mask &= ~mask
            task.unwind_completed &= ~mask

    # -- tasks -------------------------------------------------------------------------

    def new_task(self, tid: int, mm: Mm | None, *, kthread: bool = False) -> Task:
        """``unwind_task_init``: a task known to the infrastructure."""
        task = Task(tid, mm, kthread=kthread)
        self.tasks.append(task)
        return task

    def enter_kernel(self, task: Task, registers: EntryRegisters, cpu: int) -> None:
        """The task traps or calls into the kernel from user space on ``cpu``."""
        task.entry, task.cpu = registers, cpu

    def request(self, work: UnwindWork, task: Task, *, in_nmi: bool = False
                ) -> tuple[int, int]:
        """``unwind_deferred_request`` while ``task`` runs in the kernel: (0 queued, 1
        already pending or done in this entry, or a negative errno; the cookie, 0 on
        error). ``in_nmi`` is accepted: x86-64 has an NMI-safe cmpxchg."""
        del in_nmi
        if task.kthread or task.exiting or task.entry is None:
            return -errno.EINVAL, 0
        if work.bit < 0:
            return -errno.EINVAL, 0
        bit = 1 << work.bit
        cookie = self._cookie(task)
        if task.unwind_mask & bit:
            return 1, cookie
        wanted = UNWIND_PENDING | bit
        old = task.unwind_mask
        task.unwind_mask |= wanted
        if old & wanted:
            return (1 if old & bit else 0), cookie
        task.task_work_queued = True
        return 0, cookie

    def _cookie(self, task: Task) -> int:
        """``get_cookie``: the entry's cookie, made at its first request."""
        if not task.cookie:
            count = (self.counters.get(task.cpu, 0) + 2) | 1
            self.counters[task.cpu] = count & 0xFFFFFFFF
            task.cookie = make_cookie(task.cpu, count)
        return task.cookie

    # -- the return to user space, and exit ---------------------------------------------

    def return_to_user(self, task: Task) -> None:
        """The task's queued work runs, then ``unwind_reset_info``: the next entry starts
        with no cookie, no cache and no bits."""
        if task.task_work_queued:
            task.task_work_queued = False
            self._process(task)
        if task.unwind_mask and not task.unwind_mask & UNWIND_PENDING:
            task.unwind_mask = 0
            task.cookie = 0
            task.cache = None
            task.unwind_completed = 0
        task.entry = None

    def task_exit(self, task: Task) -> None:
        """``unwind_deferred_task_exit``: pending callbacks run from the exit path (the
        task still has its memory), then its work is cancelled; no request is taken
        after this."""
        task.exiting = True
        if task.unwind_mask & UNWIND_PENDING:
            self._process(task)
        task.task_work_queued = False
        if task in self.tasks:
            self.tasks.remove(task)

    def _process(self, task: Task) -> None:
        """``process_unwind_deferred``: one walk (or the entry's cache), each pending
        tracer called once."""
        bits = task.unwind_mask
        task.unwind_mask &= ~UNWIND_PENDING
        trace = self._trace(task)
        bits &= ~task.unwind_completed
        for work in list(self.callbacks):
            if work.bit >= 0 and bits & (1 << work.bit):
                work.callback(work, trace, task.cookie)
                task.delivered.append((work.name, task.cookie, tuple(trace.entries)))
                task.unwind_completed |= 1 << work.bit

    def _trace(self, task: Task) -> UserTrace:
        """``unwind_user_faultable``: the entry's cached trace, or a new walk."""
        if task.cache is not None and task.cache.entries:
            return task.cache
        if task.mm is None:
            return UserTrace([], Stop.NOT_USER, [])
        self.walks += 1
        task.cache = unwind_user(task.mm, task.entry, self.max_entries, self.frame_pointers)
        task.unwind_mask |= UNWIND_USED
        return task.cache


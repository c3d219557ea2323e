"""``sframe record --defer``: user stacks walked once per kernel entry, at the return to
user space, as the kernel's deferred unwinding does (:mod:`pysframe.deferred`).

A sample taken while its thread is in a system call does not walk the user stack: it
asks for it. The first request of the entry makes the entry's cookie by the kernel's
rule (:func:`pysframe.deferred.infrastructure.make_cookie`: a per-CPU entry count
bumped by two with the low bit set, and the CPU plus one) and keeps it in ``pending``
under the thread id; later requests of the same entry find it there and share it. The
sample goes out with its kernel stack and the cookie (:data:`~.sampler.KIND_REQUEST`).

The walk is made once, by a second program on the ``sys_exit`` raw tracepoint (the
return from the system call: the user registers are the entry's) and on
``sched_process_exit`` (a task that exits with a request pending gets its walk from the
exit path, as ``unwind_deferred_task_exit`` does); it takes the thread's cookie out of
``pending`` and sends the cookie with the user stack (:data:`~.sampler.KIND_DEFERRED`).
At the exit the thread's entry is left holding cookie 0: a request made after it (the
exit path's own work, such as unmapping the memory) is refused, as the kernel refuses
an exiting task, and its sample keeps its kernel stack alone.

Kernel entries other than system calls (interrupts, page faults) have no return-to-user
hook a BPF program can attach to (the exit-to-user functions are ``noinstr``), and a
sample taken in user mode has none either: those samples are walked at once, as
without ``--defer``. A system call is told apart by its saved registers: a syscall
instruction leaves the return address in RCX, and the entry code stores the system
call's number (not -1) as ``orig_ax``; an interrupt or fault that happens to match
both would be asked for at the next system call's return instead (not seen).
"""

from __future__ import annotations

from .asm import JEQ, JNE, JSET, JSLT, LSH, OR, R0, R1, R2, R3, R4, R7, R8, R10, RSH, Asm
from .sampler import (
    COOKIE_AT,
    COPY_BYTES,
    FLAG_IN_KERNEL,
    FLAG_USER_REGS,
    GET_CURRENT_TASK_BTF,
    GET_SMP_PROCESSOR_ID,
    KIND_DEFERRED,
    KIND_REQUEST,
    KTIME_GET_NS,
    MAP_LOOKUP_ELEM,
    PT_BP,
    PT_IP,
    PT_SP,
    TASK_PT_REGS,
    USER_FRAMES,
    sample_fields,
)
from .walker import STATE, walker

MAP_UPDATE_ELEM, MAP_DELETE_ELEM = 2, 3
#: x86-64 struct pt_regs: RCX and the system call number saved at entry.
PT_CX, PT_ORIG_AX = 88, 120
#: Scratch slots below the walker's state on the programs' stacks.
KEY_AT, VALUE_AT, ZERO_AT = STATE - 8, STATE - 16, STATE - 20
#: The tracepoints where a pending walk is made.
RETURN_HOOKS = ("sys_exit", "sched_process_exit")


def deferring_walker(ringbuf_fd: int, scratch_fd: int, procs_fd: int, rows_fd: int,
                     pending_fd: int, counter_fd: int, frames: int = USER_FRAMES,
                     copy_bytes: int = COPY_BYTES) -> tuple[bytes, bytes, bytes]:
    """The sampling program of ``--defer``: requests in system calls, walks elsewhere."""
    def fill(a: Asm) -> None:
        sample_fields(a, "defer_check", "main_output")
        a.label("defer_check")
        a.ldx(4, R1, R8, 4).jump(JSET, R1, FLAG_IN_KERNEL, "defer_in_kernel").goto("main_walk")
        a.label("defer_in_kernel")
        a.call(GET_CURRENT_TASK_BTF).mov(R1, R0, reg=True).call(TASK_PT_REGS)
        a.ldx(8, R1, R0, PT_ORIG_AX).jump(JSLT, R1, 0, "main_walk")
        a.ldx(8, R1, R0, PT_CX).ldx(8, R2, R0, PT_IP).jump(JNE, R1, R2, "main_walk", reg=True)
        _request(a, pending_fd, counter_fd)

    return walker(ringbuf_fd, scratch_fd, procs_fd, rows_fd, fill, "sframe_defer", frames,
                  copy_bytes)


def _request(a: Asm, pending_fd: int, counter_fd: int) -> None:
    """The entry's cookie (made at its first request), the sample sent without a walk."""
    a.ldx(4, R1, R8, 12).stx(4, R10, KEY_AT, R1)
    a.ld_map(R1, pending_fd).mov(R2, R10, reg=True).add(R2, KEY_AT).call(MAP_LOOKUP_ELEM)
    a.jump(JEQ, R0, 0, "defer_new_entry")
    a.ldx(8, R1, R0, 0).jump(JEQ, R1, 0, "defer_refused").goto("defer_have_cookie")
    a.label("defer_new_entry")
    a.st(4, R10, ZERO_AT, 0).ld_map(R1, counter_fd).mov(R2, R10, reg=True).add(R2, ZERO_AT)
    a.call(MAP_LOOKUP_ELEM).jump(JEQ, R0, 0, "main_walk")
    # count = (count + 2) | 1, kept to 32 bits; cookie = count << 32 | (cpu + 1)
    a.ldx(8, R1, R0, 0).add(R1, 2).alu(OR, R1, 1).alu(LSH, R1, 32).alu(RSH, R1, 32)
    a.stx(8, R0, 0, R1)
    a.alu(LSH, R1, 32).ldx(4, R2, R8, 24).add(R2, 1).alu(OR, R1, R2, reg=True)
    a.stx(8, R10, VALUE_AT, R1)
    a.ld_map(R1, pending_fd).mov(R2, R10, reg=True).add(R2, KEY_AT)
    a.mov(R3, R10, reg=True).add(R3, VALUE_AT).mov(R4, 0).call(MAP_UPDATE_ELEM)
    a.jump(JNE, R0, 0, "main_walk")  # no room to wait: walk now
    a.ldx(8, R1, R10, VALUE_AT)
    a.label("defer_have_cookie")
    a.stx(8, R8, COOKIE_AT, R1).st(4, R8, 0, KIND_REQUEST)
    a.goto("main_output")
    a.label("defer_refused")  # the thread is exiting: its kernel stack alone
    a.goto("main_output")


def return_walker(ringbuf_fd: int, scratch_fd: int, procs_fd: int, rows_fd: int,
                  pending_fd: int, at_exit: bool, frames: int = USER_FRAMES,
                  copy_bytes: int = COPY_BYTES) -> tuple[bytes, bytes, bytes]:
    """The program on a return hook (``at_exit``: on ``sched_process_exit``): the
    thread's pending walk, if any."""
    def fill(a: Asm) -> None:
        a.stx(4, R10, KEY_AT, R7)
        a.ld_map(R1, pending_fd).mov(R2, R10, reg=True).add(R2, KEY_AT).call(MAP_LOOKUP_ELEM)
        a.jump(JEQ, R0, 0, "return_none")
        a.ldx(8, R1, R0, 0).jump(JEQ, R1, 0, "return_refused").stx(8, R8, COOKIE_AT, R1)
        _settle(a, pending_fd, at_exit)
        a.st(4, R8, 0, KIND_DEFERRED).st(4, R8, 4, FLAG_USER_REGS)
        a.mov(R1, R7, reg=True).alu(RSH, R1, 32).stx(4, R8, 8, R1).stx(4, R8, 12, R7)
        a.call(KTIME_GET_NS).stx(8, R8, 16, R0)
        a.call(GET_SMP_PROCESSOR_ID).stx(4, R8, 24, R0)
        a.st(4, R8, 28, 0).st(4, R8, 32, 0).st(4, R8, 36, 0).st(8, R8, 64, 0)
        a.call(GET_CURRENT_TASK_BTF).mov(R1, R0, reg=True).call(TASK_PT_REGS)
        a.ldx(8, R1, R0, PT_IP).stx(8, R8, 40, R1)
        a.ldx(8, R1, R0, PT_SP).stx(8, R8, 48, R1)
        a.ldx(8, R1, R0, PT_BP).stx(8, R8, 56, R1)
        a.goto("main_walk")
        a.label("return_none")
        if at_exit:
            _settle(a, pending_fd, at_exit)
        a.goto("main_out")
        a.label("return_refused")
        if not at_exit:  # a thread id used again after an exit: its entries are its own
            _settle(a, pending_fd, at_exit)
        a.goto("main_out")

    name = "sframe_exit" if at_exit else "sframe_return"
    return walker(ringbuf_fd, scratch_fd, procs_fd, rows_fd, fill, name, frames, copy_bytes)


def _settle(a: Asm, pending_fd: int, at_exit: bool) -> None:
    """The thread's entry is done: removed, or at the exit left refusing (cookie 0)."""
    a.ld_map(R1, pending_fd).mov(R2, R10, reg=True).add(R2, KEY_AT)
    if at_exit:
        a.st(8, R10, VALUE_AT, 0).mov(R3, R10, reg=True).add(R3, VALUE_AT).mov(R4, 0)
        a.call(MAP_UPDATE_ELEM)
    else:
        a.call(MAP_DELETE_ELEM)

"""The BPF program that runs at each sample: who, when, where, and the stacks.

One ring-buffer record per sample (:data:`RECORD`): process and thread, time, CPU, the
user registers (from the sample's registers when it was taken in user mode; from the
task's saved user registers, ``bpf_task_pt_regs``, when it was taken in the kernel),
the kernel stack (``bpf_get_stack``) and the user stack walked in the program. This
first walker follows frame pointers with the user-space tracer's checks (aligned, moving
up, a non-zero return address); the SFrame walker replaces it where tables are loaded.
"""

from __future__ import annotations

import struct

from ..unwind.step import Stop
from .asm import (
    AND,
    JEQ,
    JGE,
    JLE,
    JNE,
    JSET,
    JSLE,
    LSH,
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    R7,
    R8,
    R9,
    R10,
    RSH,
    Asm,
)
from .btf import task_mm_offset

# Helpers.
GET_CURRENT_PID_TGID, KTIME_GET_NS, GET_SMP_PROCESSOR_ID, MAP_LOOKUP_ELEM = 14, 5, 8, 1
GET_STACK, PROBE_READ_USER, RINGBUF_RESERVE, RINGBUF_SUBMIT = 67, 112, 131, 132
GET_CURRENT_TASK_BTF, TASK_PT_REGS = 158, 175
#: x86-64 struct pt_regs offsets (the sample context starts with one).
PT_BP, PT_IP, PT_CS, PT_SP = 32, 128, 136, 152
#: Kernel frames kept (perf's kernel.perf_event_max_stack), and the user frames of this
#: program's frame-pointer walk.
MAX_FRAMES = 127
#: The SFrame walker's user frames: by default, and at most (``--max-stack``).
USER_FRAMES, MOST_USER_FRAMES = 1024, 4096
#: Record layout: u32 kind, flags, pid, tid; u64 time; u32 cpu, kernel bytes, user frames,
#: stop; u64 ip, sp, bp, period, cookie; u64 kernel[kernel bytes / 8]; u64 user[N] (N: the
#: walk's most frames; a record is sent up to its last user frame). The user frames follow
#: the kernel's (:func:`user_at`): a sample taken in user mode sends no room for kernel
#: frames (writing 1 KiB of zeros into the ring buffer's cold pages cost ~300 ns).
RECORD = struct.Struct("<IIIIQIIIIQQQQQ")
COOKIE_AT = 72
#: The sample's period, in the program's context (struct bpf_perf_event_data).
CTX_PERIOD = 168
KERNEL_AT = RECORD.size
USER_AT = KERNEL_AT + 8 * MAX_FRAMES
RECORD_SIZE = USER_AT + 8 * MAX_FRAMES


def record_size(user_frames: int) -> int:
    """The bytes of a record with room for ``user_frames`` user frames."""
    return USER_AT + 8 * user_frames


#: The bits a record's kernel bytes may have (8 * MAX_FRAMES: 0b1111111000).
KERNEL_MASK = 8 * MAX_FRAMES


def user_at(raw: bytes | memoryview) -> int:
    """Where a record's user frames start: after its kernel frames."""
    kernel_bytes = struct.unpack_from("<I", raw, 28)[0] if len(raw) >= 32 else 0
    return KERNEL_AT + (kernel_bytes & KERNEL_MASK)


def frames_end(raw: bytes | memoryview, frames: int) -> int:
    """Where a record ends after its user frames (at most ``frames``): where a stack
    copy's note (:data:`COPY_HEADER`) is."""
    user_count = struct.unpack_from("<I", raw, 32)[0] if len(raw) >= 36 else 0
    return user_at(raw) + 8 * min(user_count, frames)


def user_offset(a: Asm, dst: int) -> None:
    """dst = :func:`user_at` of the record at R8 (bounded for the verifier)."""
    # Masked, not clamped: a branch would make two states the verifier checks the whole
    # walk in (the kernel stack's bytes are at most 8 * MAX_FRAMES, all bits in the mask).
    a.ldx(4, dst, R8, 28).alu(AND, dst, KERNEL_MASK).add(dst, KERNEL_AT)


def user_base(a: Asm, dst: int) -> None:
    """dst = the record at R8's user frames (R8 + :func:`user_at`); R8 kept."""
    user_offset(a, dst)
    a.add(dst, R8, reg=True)
FLAG_IN_KERNEL, FLAG_USER_REGS = 1, 2
#: The walk met code no loaded table covers (a binary whose table is not loaded yet, code
#: mapped a moment ago): the record carries that frame's registers and a copy of the
#: user stack from its SP (:data:`COPY_HEADER` after the last user frame, then the bytes),
#: for the recorder to finish the chain in user space once the table exists.
FLAG_STACK_COPY = 4
#: u32 the frame's index in user[], u32 bytes copied; u64 its pc, sp, fp.
COPY_HEADER = struct.Struct("<IIQQQ")
#: The most bytes of stack copied (twice perf's default for --call-graph dwarf: a first
#: sample of a deep recursion needs its frames above the uncovered one).
COPY_BYTES = 16384
#: ``--stack-copy``'s bounds (perf's for --call-graph dwarf,SIZE).
MIN_COPY_BYTES, MOST_COPY_BYTES = 512, 65528
#: A sample with its user stack; a sample whose user stack is deferred (``--defer``: kernel
#: stack and cookie only); a deferred walk (cookie and user stack, at the return to user).
KIND_SAMPLE, KIND_REQUEST, KIND_DEFERRED = 1, 2, 3
#: Why a user walk ended: the codes of :class:`~pysframe.unwind.step.Stop` (one table,
#: :data:`~pysframe.unwind.step.WALKER_STOPS`, for the programs and the reader of their
#: records).
STOP_DEPTH, STOP_UNALIGNED, STOP_FAULT, STOP_ZERO, STOP_BACKWARDS = (
    Stop.DEPTH.code, Stop.UNALIGNED.code, Stop.MEMORY.code, Stop.ZERO_PC.code,
    Stop.BACKWARDS.code)


def sampler(ringbuf_fd: int, targets_fd: int | None) -> bytes:
    """The program; ``targets_fd``: a hash map of process ids to sample (None: all)."""
    a = Asm()
    a.mov(R6, R1, reg=True)
    a.call(GET_CURRENT_PID_TGID).mov(R7, R0, reg=True)
    if targets_fd is not None:
        a.mov(R1, R7, reg=True).alu(RSH, R1, 32)
        a.stx(4, R10, -4, R1)
        a.ld_map(R1, targets_fd).mov(R2, R10, reg=True).add(R2, -4)
        a.call(MAP_LOOKUP_ELEM).jump(JEQ, R0, 0, "out")
    a.ld_map(R1, ringbuf_fd).mov(R2, RECORD_SIZE).mov(R3, 0).call(RINGBUF_RESERVE)
    a.jump(JEQ, R0, 0, "out").mov(R8, R0, reg=True)
    sample_fields(a, "walk")
    _frame_pointer_walk(a)
    a.label("submit")
    a.mov(R1, R8, reg=True).mov(R2, 0).call(RINGBUF_SUBMIT)
    a.label("out")
    a.mov(R0, 0).exit()
    return a.assemble()


def sample_fields(a: Asm, then: str, no_user: str | None = None) -> None:
    """Fill the record at R8 but for its walk (R6: the context, R7: the pid/tgid word):
    kind, process, thread, time, CPU, period, the user registers (the sample's in user
    mode; in the kernel, its stack and the registers saved at entry, loaded by their own
    instructions: another pointer type), then go to ``then``; to ``no_user`` (default
    ``then``) for a task without user memory (a kernel thread, a process exiting), its
    registers 0 and no user frame."""
    a.st(4, R8, 0, KIND_SAMPLE)
    a.mov(R1, R7, reg=True).alu(RSH, R1, 32).stx(4, R8, 8, R1).stx(4, R8, 12, R7)
    a.call(KTIME_GET_NS).stx(8, R8, 16, R0)
    a.call(GET_SMP_PROCESSOR_ID).stx(4, R8, 24, R0)
    a.st(4, R8, 28, 0).st(4, R8, 32, 0).st(4, R8, 36, 0)
    a.ldx(8, R1, R6, CTX_PERIOD).stx(8, R8, 64, R1).st(8, R8, COOKIE_AT, 0)
    a.ldx(8, R1, R6, PT_CS).alu(AND, R1, 3).jump(JNE, R1, 3, "fields_kernel")
    a.st(4, R8, 4, FLAG_USER_REGS)
    a.ldx(8, R1, R6, PT_IP).stx(8, R8, 40, R1)
    a.ldx(8, R1, R6, PT_SP).stx(8, R8, 48, R1)
    a.ldx(8, R1, R6, PT_BP).stx(8, R8, 56, R1)
    a.goto(then)
    a.label("fields_kernel")
    a.st(4, R8, 4, FLAG_IN_KERNEL | FLAG_USER_REGS)
    a.mov(R1, R6, reg=True).mov(R2, R8, reg=True).add(R2, KERNEL_AT)
    a.mov(R3, 8 * MAX_FRAMES).mov(R4, 0).call(GET_STACK)
    a.jump(JSLE, R0, 0, "fields_no_kernel_stack")  # an error: no kernel frames
    a.stx(4, R8, 28, R0)
    a.label("fields_no_kernel_stack")
    a.call(GET_CURRENT_TASK_BTF)
    mm = task_mm_offset()
    if mm is not None:
        # A task whose memory is gone (exiting: exit_mmap) has no user stack to walk; perf
        # gives it no user chain either. Its registers are left 0, as a kernel thread's.
        a.ldx(8, R1, R0, mm).jump(JEQ, R1, 0, "fields_no_mm")
    a.mov(R1, R0, reg=True).call(TASK_PT_REGS)
    a.ldx(8, R1, R0, PT_IP).stx(8, R8, 40, R1)
    a.ldx(8, R1, R0, PT_SP).stx(8, R8, 48, R1)
    a.ldx(8, R1, R0, PT_BP).stx(8, R8, 56, R1)
    a.goto(then)
    if mm is not None:
        a.label("fields_no_mm")
        a.st(8, R8, 40, 0).st(8, R8, 48, 0).st(8, R8, 56, 0)
        a.goto(no_user or then)


def _frame_pointer_walk(a: Asm) -> None:
    """user[0] = ip; then [fp] = caller's fp, [fp + 8] = return address, while the frame
    pointer is aligned, moves up and the return address is not 0 (R7: frame count, R9:
    frame pointer)."""
    a.label("walk")
    user_base(a, R6)  # the context is no longer needed
    a.ldx(8, R1, R8, 40).stx(8, R6, 0, R1)
    a.mov(R7, 1).ldx(8, R9, R8, 56)
    a.label("step")
    a.jump(JGE, R7, MAX_FRAMES, "depth")
    a.jump(JSET, R9, 7, "unaligned").jump(JEQ, R9, 0, "unaligned")
    a.mov(R1, R10, reg=True).add(R1, -16).mov(R2, 16).mov(R3, R9, reg=True)
    a.call(PROBE_READ_USER).jump(JNE, R0, 0, "fault")
    a.ldx(8, R1, R10, -8).jump(JEQ, R1, 0, "zero")
    # user[count] = return address (count < 127: the verifier sees the bound)
    a.mov(R2, R7, reg=True).alu(LSH, R2, 3).add(R2, R6, reg=True)
    a.stx(8, R2, 0, R1)
    a.add(R7, 1)
    a.ldx(8, R1, R10, -16).jump(JLE, R1, R9, "backwards", reg=True)
    a.mov(R9, R1, reg=True).goto("step")
    for name, code in (("depth", STOP_DEPTH), ("unaligned", STOP_UNALIGNED),
                       ("fault", STOP_FAULT), ("zero", STOP_ZERO),
                       ("backwards", STOP_BACKWARDS)):
        a.label(name).st(4, R8, 36, code).goto("done")
    a.label("done")
    a.stx(4, R8, 32, R7)

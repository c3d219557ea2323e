"""The test eBPF interpreter (tests/support/bpf_interp.py) itself: it refuses what the
verifier refuses, computes what the kernel computes, and runs every program the
recorder loads (the frame-pointer sampler, the SFrame walker, the ``--defer`` pair)."""

from __future__ import annotations

import struct

import pytest
from tests.support.bpf_interp import Fault, Machine, Map, Program, Task, array, hash_map, ringbuf

from pysframe.record import asm
from pysframe.record.asm import R0, R1, R2, R3, R4, R10, Asm
from pysframe.record.defer_walk import deferring_walker, return_walker
from pysframe.record.sampler import (
    KERNEL_AT,
    KIND_DEFERRED,
    KIND_REQUEST,
    KIND_SAMPLE,
    PT_BP,
    PT_CS,
    PT_IP,
    PT_SP,
    RECORD,
    sampler,
    user_at,
)
from pysframe.record.walker import PROCS_VALUE, ROW, scratch_map

VALUE = array(16, 1)
MAPS = {7: VALUE}


class NoMemory:
    def read_bytes(self, address: int, size: int) -> bytes | None:
        return None


def run(a: Asm, maps: dict[int, Map] | None = None, memory: object = None) -> int:
    machine = Machine(Program.decode(a.assemble()), maps or MAPS, memory or NoMemory())  # type: ignore[arg-type]
    return machine.run(bytes(184))


def lookup(a: Asm) -> Asm:
    """R0 = the map value of key 0 (not checked against NULL)."""
    a.st(4, R10, -4, 0).ld_map(R1, 7).mov(R2, R10, reg=True).add(R2, -4)
    return a.call(1)


REFUSED = {
    "a register never written": lambda a: a.mov(R0, R2, reg=True).exit(),
    "R1-R5 after a helper call": lambda a: a.call(5).mov(R0, R1, reg=True).exit(),
    "uninitialised stack": lambda a: a.ldx(8, R0, R10, -8).exit(),
    "below the 512-byte frame": lambda a: a.st(8, R10, -520, 0).mov(R0, 0).exit(),
    "above the frame": lambda a: a.st(8, R10, 0, 0).mov(R0, 0).exit(),
    "misaligned stack": lambda a: a.st(8, R10, -12, 0).mov(R0, 0).exit(),
    "map value not checked for NULL": lambda a: lookup(a).ldx(8, R0, R0, 0).exit(),
    "out of the map value": lambda a: lookup(a).jump(asm.JEQ, R0, 0, "out")
    .ldx(8, R0, R0, 12).exit().label("out").exit(),
    "load through a scalar": lambda a: a.mov(R1, 4096).ldx(8, R0, R1, 0).exit(),
    "shift of a pointer": lambda a: a.mov(R1, R10, reg=True).alu(asm.LSH, R1, 1)
    .mov(R0, 0).exit(),
    "32-bit arithmetic on a pointer": lambda a: a.mov(R1, R10, reg=True)
    .alu(asm.ADD, R1, 8, wide=False).mov(R0, 0).exit(),
    "pointer compared with a scalar": lambda a: a.jump(asm.JGT, R10, 5, "x").label("x")
    .mov(R0, 0).exit(),
    "a write into the context": lambda a: a.st(8, R1, 0, 0).mov(R0, 0).exit(),
    "pointer stored into a map value": lambda a: lookup(a).jump(asm.JEQ, R0, 0, "out")
    .stx(8, R0, 0, R10).label("out").mov(R0, 0).exit(),
    "an uninitialised map key": lambda a: a.ld_map(R1, 7).mov(R2, R10, reg=True).add(R2, -4)
    .call(1).mov(R0, 0).exit(),
    "probe_read_user past the frame": lambda a: a.mov(R1, R10, reg=True).add(R1, -8)
    .mov(R2, 16).mov(R3, 0).call(112).mov(R0, 0).exit(),
    "a bpf_loop callback returning 2": lambda a: a.mov(R1, 3).ld_func(R2, "cb").mov(R3, 0)
    .mov(R4, 0).call(181).mov(R0, 0).exit().label("cb").mov(R0, 2).exit(),
    "a ring-buffer record never submitted": lambda a: a.ld_map(R1, 8).mov(R2, 8).mov(R3, 0)
    .call(131).mov(R0, 0).exit(),
    "falling off the end": lambda a: a.mov(R0, 0),
}


@pytest.mark.parametrize("name", REFUSED)
def test_what_the_verifier_refuses_faults(name: str) -> None:
    a = Asm()
    REFUSED[name](a)
    with pytest.raises(Fault):
        run(a, {7: array(16, 1), 8: ringbuf()})


def test_a_jump_into_an_ld_imm64_faults() -> None:
    a = Asm().mov(R2, 0).jump(asm.JEQ, R2, 0, "in").label("in").ld_imm64(R0, 1 << 40).exit()
    code = bytearray(a.assemble())
    struct.pack_into("<h", code, 8 + 2, 1)  # the jump lands on the constant's second half
    with pytest.raises(Fault, match="middle of an LD_IMM64"):
        Machine(Program.decode(bytes(code)), {}, NoMemory()).run(bytes(184))


ALU = [  # (op, wide, a, b, expected)
    (asm.ADD, True, (1 << 64) - 1, 2, 1), (asm.SUB, True, 0, 1, (1 << 64) - 1),
    (asm.MUL, False, 1 << 31, 4, 0), (asm.DIV, True, 7, 0, 0), (asm.MOD, True, 7, 0, 7),
    (asm.DIV, False, 1 << 33 | 9, 2, 4), (asm.ARSH, True, 1 << 63, 62, (1 << 64) - 2),
    (asm.ARSH, False, 1 << 31, 31, (1 << 32) - 1), (asm.RSH, False, (1 << 40) | 8, 3, 1),
    (asm.LSH, True, 3, 65, 6), (asm.XOR, True, 5, 3, 6), (asm.OR, False, 1 << 40, 1, 1),
    (asm.NEG, True, 1, 0, (1 << 64) - 1), (asm.MOV, False, 0, -1, (1 << 32) - 1),
]


@pytest.mark.parametrize(("op", "wide", "a", "b", "expected"), ALU)
def test_alu_as_the_kernel_computes(op: int, wide: bool, a: int, b: int, expected: int) -> None:
    program = Asm().ld_imm64(R0, a).ld_imm64(R1, b).alu(op, R0, R1, reg=True, wide=wide)
    assert run(program.exit()) == expected


@pytest.mark.parametrize(("op", "a", "b", "taken"), [
    (asm.JSGT, -1, 0, False), (asm.JGT, -1, 0, True), (asm.JSLE, -5, -5, True),
    (asm.JSET, 6, 1, False), (asm.JLT, 1, 2, True), (asm.JSGE, 0, -1, True)])
def test_jumps_signed_and_unsigned(op: int, a: int, b: int, taken: bool) -> None:
    program = Asm().ld_imm64(R1, a).ld_imm64(R2, b).mov(R0, 1)
    program.jump(op, R1, R2, "taken", reg=True).mov(R0, 0).label("taken").exit()
    assert run(program) == int(taken)


class Stack:
    """User memory: words at addresses."""

    def __init__(self, words: dict[int, int]) -> None:
        self.words = words

    def read_bytes(self, address: int, size: int) -> bytes | None:
        out = b""
        for at in range(address, address + size, 8):
            if at not in self.words:
                return None
            out += self.words[at].to_bytes(8, "little")
        return out[:size]


def context(pc: int, sp: int, fp: int, user: bool) -> bytes:
    regs = bytearray(184)
    for offset, value in ((PT_IP, pc), (PT_SP, sp), (PT_BP, fp), (PT_CS, 0x33 if user else 0x10)):
        struct.pack_into("<Q", regs, offset, value)
    return bytes(regs)


FP = 0x7FFF_0000_1000
CHAIN = Stack({FP: FP + 0x40, FP + 8: 0x401234, FP + 0x40: 0, FP + 0x48: 0x401111})


@pytest.mark.parametrize("user", [True, False])
def test_the_frame_pointer_sampler(user: bool) -> None:
    ring = ringbuf()
    task = Task(7, 8, 1, [0xFFFFFFFF81000000, 0xFFFFFFFF81000100],
                context(0x400500, FP - 32, FP, True))
    machine = Machine(Program.decode(sampler(3, None)), {3: ring}, CHAIN, task)
    machine.run(context(0x400500, FP - 32, FP, True) if user else
                context(0xFFFFFFFF81000000, 0xFFFF0000, 0, False))
    (record,) = ring.records
    fields = RECORD.unpack_from(record)
    assert fields[0] == KIND_SAMPLE and fields[2:4] == (7, 8) and fields[5] == 1
    assert fields[6] == (0 if user else 16)  # the kernel stack's bytes
    assert user_at(record) == KERNEL_AT + fields[6]  # the user frames follow the kernel's
    frames = struct.unpack_from(f"<{fields[7]}Q", record, user_at(record))
    assert frames == (0x400500, 0x401234, 0x401111) and fields[8] == 5  # saved FP 0: down
    if not user:
        assert struct.unpack_from("<2Q", record, KERNEL_AT) == tuple(task.kernel_stack)


def test_the_defer_programs_request_then_walk() -> None:
    """In a system call the sample asks for a walk (a cookie, no user stack); at the
    return, the walk comes with the same cookie and the thread's entry is gone."""
    ring, pending = ringbuf(), hash_map(4, 8, 16)
    maps = {3: ring, 4: array(scratch_map()[1], 4), 5: hash_map(4, PROCS_VALUE, 4),
            6: array(ROW.size, 1), 7: pending, 8: array(8, 1, per_cpu=True)}
    regs = bytearray(context(0x400500, FP - 32, FP, True))
    struct.pack_into("<Q", regs, 88, 0x400500)  # RCX = RIP: a syscall instruction's
    struct.pack_into("<Q", regs, 120, 1)  # orig_ax: the system call's number
    task = Task(7, 8, 0, [0xFFFFFFFF81000000], bytes(regs))
    request = Program.decode(deferring_walker(3, 4, 5, 6, 7, 8)[0])
    Machine(request, maps, CHAIN, task).run(context(0xFFFFFFFF81000000, 0, 0, False))
    Machine(request, maps, CHAIN, task).run(context(0xFFFFFFFF81000000, 0, 0, False))
    first, second = (RECORD.unpack_from(record) for record in ring.records)
    assert first[0] == second[0] == KIND_REQUEST and first[13] == second[13] != 0
    back = Program.decode(return_walker(3, 4, 5, 6, 7, False)[0])
    Machine(back, maps, CHAIN, task).run(bytes(184))
    walked = RECORD.unpack_from(ring.records[2])
    assert walked[0] == KIND_DEFERRED and walked[13] == first[13] and not pending.values
    assert user_at(ring.records[2]) == KERNEL_AT  # no kernel frames before the user's
    frames = struct.unpack_from(f"<{walked[7]}Q", ring.records[2], KERNEL_AT)
    assert frames == (0x400500, 0x401234, 0x401111)  # no tables: the frame-pointer step


def test_bpf_to_bpf_calls_keep_the_callers_registers() -> None:
    """R1-R5 go to the callee, R0 comes back, R6-R9 are the caller's; the callee's frame
    is its own (its R6 was never written there)."""
    a = Asm().mov(asm.R6, 40).mov(R1, 2).call_local("double").add(R0, asm.R6, reg=True).exit()
    a.label("double").mov(R0, R1, reg=True).add(R0, R1, reg=True).exit()
    assert run(a) == 44
    b = Asm().mov(asm.R6, 1).call_local("peek").exit().label("peek")
    b.mov(R0, asm.R6, reg=True).exit()
    with pytest.raises(Fault, match="R6 !read_ok"):
        run(b)


def test_jmp32_compares_the_low_halves() -> None:
    a = Asm().ld_imm64(R1, 1 << 32 | 5).mov(R0, 0)
    a._emit(asm.JMP32 | asm.JEQ, R1, 0, 1, 5)  # the assembler emits no JMP32 of its own
    a.exit().mov(R0, 1).exit()
    assert run(a) == 1

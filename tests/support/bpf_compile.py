"""The interpreter's instructions compiled to closures (:attr:`.bpf_interp.Program.code`).

Each instruction becomes one function ``(machine, registers) -> next pc`` (-1 at EXIT),
its operands bound once. The common case, scalars in the registers, is done inline;
anything else (a pointer, a register never written, a 32-bit or signed operation) goes
to the checked slow path of :mod:`.bpf_interp`, which applies the verifier's rules. A
jump out of the program or into an LD_IMM64's second half lands on a closure that faults.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from pysframe.record.asm import (
    ADD,
    ALU,
    ALU64,
    AND,
    CALL,
    EXIT,
    JA,
    JEQ,
    JGE,
    JGT,
    JLE,
    JLT,
    JMP,
    JNE,
    JSET,
    LDX,
    LSH,
    MEM,
    MOV,
    OR,
    RSH,
    ST,
    STX,
    SUB,
    XOR,
    X,
)

from .bpf_interp import (
    LD_IMM64,
    MASK64,
    SIZE_OF,
    UNINIT,
    Fault,
    Machine,
    Program,
    Ptr,
    Region,
    Value,
    _alu,
    _call,
    _condition,
    _imm64,
    _pointer,
    _read,
)

Code = Callable[[Machine, list[Value]], int]
_FAST_ALU: dict[int, Callable[[int, int], int]] = {
    ADD: lambda a, b: (a + b) & MASK64, SUB: lambda a, b: (a - b) & MASK64,
    AND: lambda a, b: a & b, OR: lambda a, b: a | b, XOR: lambda a, b: a ^ b,
    LSH: lambda a, b: (a << (b & 63)) & MASK64, RSH: lambda a, b: a >> (b & 63),
}
_FAST_JUMP: dict[int, Callable[[int, int], bool]] = {
    JEQ: lambda a, b: a == b, JNE: lambda a, b: a != b, JGT: lambda a, b: a > b,
    JGE: lambda a, b: a >= b, JLT: lambda a, b: a < b, JLE: lambda a, b: a <= b,
    JSET: lambda a, b: bool(a & b),
}
_CLEARED = [UNINIT] * 5
_WORDS = {1: struct.Struct("<B"), 2: struct.Struct("<H"), 4: struct.Struct("<I"),
          8: struct.Struct("<Q")}


def compile_program(program: Program) -> list[Code]:
    insns = program.insns
    count = len(insns)
    code = [_compile(program, pc) for pc in range(count)]
    for pc, insn in enumerate(insns):
        if insn[0] == LD_IMM64 and pc + 1 < count:
            code[pc + 1] = _faulting("jump into the middle of an LD_IMM64", pc + 1)
    return [*code, _faulting("fall out of the program", count)]


def _faulting(message: str, pc: int) -> Code:
    def run(m: Machine, regs: list[Value]) -> int:
        raise Fault(message, pc)
    return run


def _compile(program: Program, pc: int) -> Code:
    opcode, dst, src, offset, imm = program.insns[pc]
    kind = opcode & 7
    if kind in (ALU, ALU64):
        return _compile_alu(opcode, dst, src, imm, pc)
    if kind == LDX and opcode & 0xE0 == MEM:
        return _compile_load(SIZE_OF[opcode & 0x18], dst, src, offset, pc)
    if kind in (ST, STX) and opcode & 0xE0 == MEM:
        return _compile_store(opcode, dst, src, offset, imm, pc)
    if opcode == LD_IMM64:
        def load_imm64(m: Machine, regs: list[Value]) -> int:
            regs[dst] = _imm64(m, pc, src)
            return pc + 2
        return load_imm64
    if kind == JMP and opcode & 0xF0 in (EXIT, CALL, JA):
        return _compile_control(opcode & 0xF0, src, offset, imm, pc, len(program.insns))
    if kind == JMP or kind == 6:  # JMP32
        return _compile_jump(opcode, dst, src, offset, imm, pc, len(program.insns))
    return _faulting(f"unsupported opcode {opcode:#x}", pc)


def _compile_alu(opcode: int, dst: int, src: int, imm: int, pc: int) -> Code:
    op, wide, register = opcode & 0xF0, opcode & 7 == ALU64, bool(opcode & X)
    after = pc + 1
    fast = _FAST_ALU.get(op) if wide else None
    if op == MOV and wide and not register:
        constant = imm & MASK64

        def move_constant(m: Machine, regs: list[Value]) -> int:
            regs[dst] = constant
            return after
        return move_constant
    if op == MOV and wide:
        def move(m: Machine, regs: list[Value]) -> int:
            value = regs[src]
            regs[dst] = value if value is not UNINIT else _read(regs, src, pc)
            return after
        return move
    if fast is not None and not register:
        operand = imm & MASK64

        def alu_constant(m: Machine, regs: list[Value]) -> int:
            value = regs[dst]
            if type(value) is int:
                regs[dst] = fast(value, operand)
            else:
                regs[dst] = _alu(opcode, regs, dst, src, imm, pc)
            return after
        return alu_constant
    if fast is not None:
        def alu_register(m: Machine, regs: list[Value]) -> int:
            a, b = regs[dst], regs[src]
            if type(a) is int and type(b) is int:
                regs[dst] = fast(a, b)
            else:
                regs[dst] = _alu(opcode, regs, dst, src, imm, pc)
            return after
        return alu_register

    def alu_checked(m: Machine, regs: list[Value]) -> int:
        regs[dst] = _alu(opcode, regs, dst, src, imm, pc)
        return after
    return alu_checked


def _compile_load(size: int, dst: int, src: int, offset: int, pc: int) -> Code:
    after = pc + 1
    unpack = _WORDS[size].unpack_from

    def load(m: Machine, regs: list[Value]) -> int:
        pointer = regs[src]
        if type(pointer) is Ptr and not pointer.nullable:
            region = pointer.region
            at = pointer.offset + offset
            # A map value (or a reservation): in bounds is all the verifier asks.
            if (type(region) is Region and region.init is None and region.kind != "ctx"
                    and 0 <= at <= len(region.data) - size):
                regs[dst] = unpack(region.data, at)[0]
                return after
        region, at = _pointer(_read(regs, src, pc), pc, "load")
        regs[dst] = region.load(at + offset, size, pc)
        return after
    return load


def _compile_store(opcode: int, dst: int, src: int, offset: int, imm: int, pc: int) -> Code:
    size, register, after = SIZE_OF[opcode & 0x18], opcode & 7 == STX, pc + 1
    constant = imm & MASK64
    pack, mask = _WORDS[size].pack_into, (1 << 8 * size) - 1

    def store(m: Machine, regs: list[Value]) -> int:
        pointer = regs[dst]
        value = regs[src] if register else constant
        if type(pointer) is Ptr and not pointer.nullable and type(value) is int:
            region = pointer.region
            at = pointer.offset + offset
            if (type(region) is Region and region.init is None and region.writable
                    and 0 <= at <= len(region.data) - size):
                pack(region.data, at, value & mask)
                return after
        region, at = _pointer(_read(regs, dst, pc), pc, "store")
        region.store(at + offset, size, _read(regs, src, pc) if register else constant, pc)
        return after
    return store


def _compile_control(op: int, src: int, offset: int, imm: int, pc: int, count: int) -> Code:
    if op == EXIT:
        def leave(m: Machine, regs: list[Value]) -> int:
            _read(regs, 0, pc)
            return -1
        return leave
    if op == JA:
        target = pc + 1 + offset
        if not 0 <= target <= count:
            return _faulting("jump out of the program", pc)
        return lambda m, regs: target
    after = pc + 1

    def call(m: Machine, regs: list[Value]) -> int:
        regs[0] = _call(m, regs, src, imm, pc)
        regs[1:6] = _CLEARED
        return after
    return call


def _compile_jump(opcode: int, dst: int, src: int, offset: int, imm: int, pc: int,
                  count: int) -> Code:
    target, after = pc + 1 + offset, pc + 1
    if not 0 <= target <= count:
        return _faulting("jump out of the program", pc)
    test = _FAST_JUMP.get(opcode & 0xF0) if opcode & 7 == JMP else None
    operand = imm & MASK64
    register = bool(opcode & X)

    def jump(m: Machine, regs: list[Value]) -> int:
        a = regs[dst]
        b = regs[src] if register else operand
        if test is not None and type(a) is int and type(b) is int:
            return target if test(a, b) else after
        return target if _condition(opcode, regs, dst, src, imm, pc) else after
    return jump

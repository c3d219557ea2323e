"""An eBPF interpreter for tests: runs the programs :mod:`pysframe.record.asm` assembles
(``sframe record``'s walker and sampler) without a kernel, root or BPF.

It executes the instruction forms our assembler emits (ALU64 and ALU32 with immediate
or register operands, JMP and JMP32, LDX/STX/ST in the four sizes, LD_IMM64 with a map
fd or a subprogram, bpf-to-bpf calls, EXIT) and the helpers the programs call
(:data:`HELPERS`). Values are scalars (``int``, 64 bits) or pointers (:class:`Ptr`:
a region and an offset), so it can refuse, by raising :class:`Fault`, what the verifier
would refuse:

- reading a register never written (the caller-saved R1-R5 are cleared by every call);
- loading through a scalar, or through a map value pointer not checked against NULL;
- any access outside its region: the 512-byte frame below R10, a map value
  (``value_size``), the context, a ring-buffer reservation, the saved user registers;
- a stack access not aligned to its size (the verifier is strict about the stack);
- reading a stack byte never written (stricter than a privileged loader, where the
  verifier lets it pass: a read of junk is a bug in our programs either way);
- a store of a pointer anywhere but an 8-byte stack slot; writing read-only memory;
- arithmetic on a pointer other than adding or subtracting a scalar (or subtracting two
  pointers of one region), arithmetic on a pointer that may be NULL, ALU32 or JMP32 on
  a pointer, comparing a pointer with anything but 0;
- a helper argument of the wrong kind or out of bounds (a key not initialised, a
  ``probe_read_user`` destination too small), a ``bpf_loop`` callback returning
  anything but 0 or 1, a ring-buffer reservation not submitted at exit, a jump outside
  the program or into the middle of an LD_IMM64, too many instructions.

User memory (what ``bpf_probe_read_user`` reads) is any :class:`UserMemory`: a synthetic
stack, a perf sample's stack copy with the binaries' code, or a core.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from pysframe.record.asm import (
    ADD,
    ALU64,
    AND,
    ARSH,
    DIV,
    DW,
    JEQ,
    JGE,
    JGT,
    JLE,
    JLT,
    JMP,
    JNE,
    JSET,
    JSGE,
    JSGT,
    JSLE,
    JSLT,
    LD,
    LSH,
    MOD,
    MOV,
    MUL,
    NEG,
    OR,
    PSEUDO_CALL,
    PSEUDO_FUNC,
    PSEUDO_MAP_FD,
    RSH,
    SUB,
    XOR,
    B,
    H,
    W,
    X,
)

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1
STACK_SIZE = 512
MAX_CALL_DEPTH = 8
BPF_LOOP_MAX = 1 << 23
EFAULT, EINVAL, ENOENT, E2BIG = 14, 22, 2, 7
SIZE_OF = {B: 1, H: 2, W: 4, DW: 8}
_INSN = struct.Struct("<BBhi")


class Fault(Exception):
    """An access or an instruction the verifier would not allow (or one we do not run)."""

    def __init__(self, message: str, pc: int | None = None) -> None:
        super().__init__(message if pc is None else f"insn {pc}: {message}")
        self.pc = pc


class UserMemory(Protocol):
    """User memory as ``bpf_probe_read_user`` sees it: ``size`` bytes at ``address``, or
    None where any of them is unreadable."""

    def read_bytes(self, address: int, size: int) -> bytes | None: ...


# -- memory regions and values --------------------------------------------------------


@dataclass(eq=False)
class Region:
    """Memory a pointer can point into. ``init`` (the stack only): which bytes were
    written; ``spills``: pointers stored in 8-byte stack slots, by offset."""

    kind: str  # "stack", "map_value", "ctx", "regs", "ringbuf", "task"
    data: bytearray
    writable: bool = True
    init: bytearray | None = None
    spills: dict[int, Ptr] = field(default_factory=dict)

    def check(self, offset: int, size: int, write: bool, pc: int) -> None:
        if 0 <= offset <= len(self.data) - size and (self.writable or not write) and (
                self.init is None or not offset % size):
            return
        if offset < 0 or offset + size > len(self.data):
            where = (f"R10{offset - STACK_SIZE:+d}" if self.init is not None
                     else f"offset {offset}")
            raise Fault(f"{self.kind} access out of bounds: {where} size {size} "
                        f"(region of {len(self.data)} bytes)", pc)
        if write and not self.writable:
            raise Fault(f"write into read-only {self.kind}", pc)
        if self.kind == "stack" and offset % size:
            raise Fault(f"misaligned stack access: offset {offset - STACK_SIZE} size {size}",
                        pc)

    def load(self, offset: int, size: int, pc: int) -> int | Ptr:
        self.check(offset, size, False, pc)
        if self.init is not None:
            spilled = self.spills.get(offset - offset % 8)
            if spilled is not None:
                if size != 8:
                    raise Fault("partial read of a spilled pointer", pc)
                return spilled
            if self.init.find(0, offset, offset + size) >= 0:
                raise Fault(f"read of uninitialised stack at {offset - STACK_SIZE} "
                            f"size {size}", pc)
        return int.from_bytes(self.data[offset:offset + size], "little")

    def store(self, offset: int, size: int, value: int | Ptr, pc: int) -> None:
        self.check(offset, size, True, pc)
        if isinstance(value, Ptr):
            if self.init is None or size != 8:
                raise Fault(f"pointer stored into {self.kind} (size {size})", pc)
            self.spills[offset] = value
            self.init[offset:offset + 8] = b"\1" * 8
            return
        self.write(offset, (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))

    def write(self, offset: int, data: bytes) -> None:
        """Bytes written (by an instruction or a helper): initialised, no pointer left."""
        self.data[offset:offset + len(data)] = data
        if self.init is not None:
            self.init[offset:offset + len(data)] = b"\1" * len(data)
            if self.spills:
                for slot in range(offset - offset % 8, offset + len(data), 8):
                    self.spills.pop(slot, None)

    def read(self, offset: int, size: int, pc: int) -> bytes:
        """Bytes a helper reads (a key, a record): in bounds and initialised."""
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise Fault(f"helper reads {self.kind} out of bounds: offset {offset} "
                        f"size {size}", pc)
        if self.init is not None and not all(self.init[offset:offset + size]):
            raise Fault(f"helper reads uninitialised stack at {offset - STACK_SIZE}", pc)
        if self.spills and any(offset - 7 <= slot < offset + size for slot in self.spills):
            raise Fault("helper reads a spilled pointer", pc)
        return bytes(self.data[offset:offset + size])


@dataclass(frozen=True, eq=False)
class Ptr:
    """A pointer: ``region`` (a :class:`Region`, a :class:`Map`, a subprogram index or
    the task), ``offset`` into it; ``nullable``: a map lookup's result not yet checked
    against NULL (``ident`` ties the copies of one result together)."""

    region: object
    offset: int = 0
    nullable: bool = False
    ident: int = 0

    def moved(self, delta: int, pc: int) -> Ptr:
        if self.nullable:
            raise Fault("pointer arithmetic on a map value that may be NULL", pc)
        if not isinstance(self.region, Region):
            raise Fault(f"pointer arithmetic on {type(self.region).__name__}", pc)
        return Ptr(self.region, self.offset + _signed(delta), False, 0)


class Uninit:
    """A register never written (or cleared by a call)."""

    def __repr__(self) -> str:
        return "<uninit>"


UNINIT = Uninit()
Value = int | Ptr | Uninit


def _signed(value: int, bits: int = 64) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


# -- maps -------------------------------------------------------------------------------


@dataclass(eq=False)
class Map:
    """A BPF map: ``kind`` "array", "percpu_array" (one CPU), "hash" or "ringbuf"."""

    kind: str
    key_size: int
    value_size: int
    max_entries: int
    values: dict[bytes, Region] = field(default_factory=dict)
    #: The ring buffer's records, in order.
    records: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind in ("array", "percpu_array"):
            self.values = {}

    def lookup(self, key: bytes) -> Region | None:
        if self.kind in ("array", "percpu_array"):
            index = int.from_bytes(key, "little")
            if index >= self.max_entries:
                return None
            found = self.values.get(key)
            if found is None:
                found = self.values[key] = Region("map_value", bytearray(self.value_size))
            return found
        return self.values.get(key)

    def update(self, key: bytes, value: bytes) -> int:
        if len(key) != self.key_size or len(value) != self.value_size:
            raise ValueError(f"key or value of the wrong size for {self.kind} map")
        found = self.values.get(key)
        if found is not None:
            found.data[:] = value
            return 0
        if self.kind == "hash" and len(self.values) >= self.max_entries:
            return -E2BIG
        if self.kind != "hash" and int.from_bytes(key, "little") >= self.max_entries:
            return -E2BIG
        self.values[key] = Region("map_value", bytearray(value))
        return 0

    def delete(self, key: bytes) -> int:
        if self.kind != "hash":
            return -EINVAL
        return 0 if self.values.pop(key, None) is not None else -ENOENT


def array(value_size: int, max_entries: int, per_cpu: bool = False) -> Map:
    return Map("percpu_array" if per_cpu else "array", 4, value_size, max_entries)


def hash_map(key_size: int, value_size: int, max_entries: int) -> Map:
    return Map("hash", key_size, value_size, max_entries)


def ringbuf() -> Map:
    return Map("ringbuf", 0, 0, 0)


# -- the machine --------------------------------------------------------------------------


@dataclass
class Task:
    """What the helpers report about "current": ids, CPU, the kernel stack and the saved
    user registers (x86-64 ``struct pt_regs``, 168 bytes)."""

    tgid: int = 1
    tid: int = 1
    cpu: int = 0
    kernel_stack: list[int] = field(default_factory=list)
    pt_regs: bytes = bytes(168)
    #: Whether it has its memory (``task_struct.mm`` not NULL): not while it exits.
    has_mm: bool = True


@dataclass(frozen=True)
class Program:
    """Decoded instructions: (opcode, dst, src, offset, imm) each."""

    insns: tuple[tuple[int, int, int, int, int], ...]

    @cached_property
    def code(self) -> list[Callable[[Machine, list[Value]], int]]:
        """Each instruction as a closure: (machine, registers) -> the next pc."""
        from .bpf_compile import compile_program

        return compile_program(self)

    @classmethod
    def decode(cls, code: bytes) -> Program:
        if len(code) % 8:
            raise Fault("program length not a multiple of 8")
        out = []
        for at in range(0, len(code), 8):
            opcode, regs, offset, imm = _INSN.unpack_from(code, at)
            out.append((opcode, regs & 15, regs >> 4, offset, imm))
        return cls(tuple(out))


class Machine:
    """One run of a program: its maps by fd, the task, user memory, and the count of
    instructions executed (bounded by ``budget``)."""

    def __init__(self, program: Program, maps: dict[int, Map], memory: UserMemory,
                 task: Task | None = None, budget: int = 1 << 22,
                 coverage: set[int] | None = None) -> None:
        self.program, self.maps, self.memory = program, maps, memory
        #: The instructions executed, if given a set to add them to.
        self.coverage = coverage
        self.task = task or Task()
        self.budget = budget
        self.executed = 0
        self.depth = 0
        self.clock = 1_000_000
        self._idents = 0
        #: Ring-buffer reservations not yet submitted: their ring, by pointer identity.
        self.reservations: dict[int, Map] = {}
        self.regs_region = Region("regs", bytearray(self.task.pt_regs), writable=False)
        self.task_region = _task_region(self.task)

    def run(self, ctx: bytes) -> int:
        """Run from instruction 0 with R1 = the context (read-only); returns R0."""
        context = Region("ctx", bytearray(ctx), writable=False)
        result = self.call(0, [Ptr(context)])
        if self.reservations:
            raise Fault("ring-buffer reservation neither submitted nor discarded")
        if not isinstance(result, int):
            raise Fault("R0 is not a scalar at exit")
        return result

    def new_ident(self) -> int:
        self._idents += 1
        return self._idents

    def call(self, start: int, arguments: list[Value]) -> Value:
        """Run the subprogram at ``start`` in a new frame (R1.. = ``arguments``)."""
        if self.depth >= MAX_CALL_DEPTH:
            raise Fault("call stack too deep", start)
        stack = Region("stack", bytearray(STACK_SIZE), init=bytearray(STACK_SIZE))
        regs: list[Value] = [UNINIT] * 11
        regs[1:1 + len(arguments)] = arguments
        regs[10] = Ptr(stack, STACK_SIZE)
        self.depth += 1
        try:
            return _execute(self, start, regs)
        finally:
            self.depth -= 1

    def user_read(self, address: int, size: int) -> bytes | None:
        if address < 0 or address + size > 1 << 64:
            return None
        return self.memory.read_bytes(address, size)


# -- execution ------------------------------------------------------------------------------

LD_IMM64 = LD | DW | 0x00


class _Func:
    """A subprogram's address (LD_IMM64 with PSEUDO_FUNC): a ``bpf_loop`` callback."""

    __slots__ = ("start",)

    def __init__(self, start: int) -> None:
        self.start = start


def _task_region(task: Task) -> Region:
    """``bpf_get_current_task_btf()``'s task_struct: passed on to ``bpf_task_pt_regs``, and
    its ``mm`` read (at the running kernel's offset, from its BTF), nothing else."""
    from pysframe.record.btf import task_mm_offset

    mm = task_mm_offset()
    data = bytearray((mm or 0) + 8)
    if mm is not None and task.has_mm:
        data[mm:mm + 8] = (0xFFFF888000001000).to_bytes(8, "little")
    return Region("task", data, writable=False)


def _read(regs: list[Value], reg: int, pc: int) -> int | Ptr:
    value = regs[reg]
    if value is UNINIT:
        raise Fault(f"R{reg} !read_ok (never written, or cleared by a call)", pc)
    return value  # type: ignore[return-value]


def _pointer(value: Value, pc: int, what: str) -> tuple[Region, int]:
    """The region and offset a checked pointer points at."""
    if not isinstance(value, Ptr):
        raise Fault(f"{what} through a scalar ({value!r}): invalid mem access 'scalar'", pc)
    if value.nullable:
        raise Fault(f"{what} through a map value pointer not checked against NULL", pc)
    if not isinstance(value.region, Region):
        raise Fault(f"{what} through a {type(value.region).__name__} pointer", pc)
    if value.region.kind == "ctx" and value.offset:
        raise Fault("the context pointer was moved (dereference of modified ctx ptr)", pc)
    return value.region, value.offset


def _imm64(m: Machine, pc: int, src: int) -> Value:
    insns = m.program.insns
    if pc + 1 >= len(insns) or insns[pc + 1][0] != 0:
        raise Fault("LD_IMM64 without its second half", pc)
    low, high = insns[pc][4] & MASK32, insns[pc + 1][4] & MASK32
    if src == 0:
        return low | high << 32
    if src == PSEUDO_MAP_FD:
        if low not in m.maps:
            raise Fault(f"fd {low} is not a map", pc)
        return Ptr(m.maps[low])
    if src == PSEUDO_FUNC:
        return Ptr(_Func(pc + insns[pc][4] + 1))
    raise Fault(f"unsupported LD_IMM64 source {src}", pc)


def _alu(opcode: int, regs: list[Value], dst: int, src: int, imm: int, pc: int) -> Value:
    wide = opcode & 7 == ALU64
    op = opcode & 0xF0
    operand = _read(regs, src, pc) if opcode & X else imm & MASK64
    if op == MOV:
        if isinstance(operand, Ptr) and not wide:
            raise Fault("ALU32 move of a pointer", pc)
        return operand if isinstance(operand, Ptr) else operand & (MASK64 if wide else MASK32)
    target = _read(regs, dst, pc)
    if isinstance(target, Ptr) or isinstance(operand, Ptr):
        return _pointer_alu(op, wide, target, operand, pc)
    if not wide:
        return _scalar_alu(op, target & MASK32, operand & MASK32, 32, pc)
    return _scalar_alu(op, target, operand, 64, pc)


def _pointer_alu(op: int, wide: bool, target: int | Ptr, operand: int | Ptr, pc: int
                 ) -> Value:
    """Pointer arithmetic the verifier allows: pointer +/- scalar, scalar + pointer, the
    distance between two pointers into one region."""
    if not wide:
        raise Fault("ALU32 on a pointer", pc)
    if isinstance(target, Ptr) and not isinstance(operand, Ptr) and op in (ADD, SUB):
        return target.moved(operand if op == ADD else -operand, pc)
    if isinstance(operand, Ptr) and not isinstance(target, Ptr) and op == ADD:
        return operand.moved(target, pc)
    if (isinstance(target, Ptr) and isinstance(operand, Ptr) and op == SUB
            and target.region is operand.region and isinstance(target.region, Region)):
        return (target.offset - operand.offset) & MASK64
    raise Fault(f"forbidden pointer arithmetic (op {op:#x})", pc)


def _scalar_alu(op: int, a: int, b: int, bits: int, pc: int) -> int:
    mask = (1 << bits) - 1
    if op == ADD:
        return (a + b) & mask
    if op == SUB:
        return (a - b) & mask
    if op == MUL:
        return (a * b) & mask
    if op == DIV:
        return a // b if b else 0
    if op == MOD:
        return a % b if b else a
    if op == OR:
        return a | b
    if op == AND:
        return a & b
    if op == XOR:
        return a ^ b
    if op == LSH:
        return (a << (b & (bits - 1))) & mask
    if op == RSH:
        return a >> (b & (bits - 1))
    if op == ARSH:
        return (_signed(a, bits) >> (b & (bits - 1))) & mask
    if op == NEG:
        return -a & mask
    raise Fault(f"unsupported ALU operation {op:#x}", pc)


def _condition(opcode: int, regs: list[Value], dst: int, src: int, imm: int, pc: int
               ) -> bool:
    """Whether a conditional jump is taken (a NULL check marks the pointer checked)."""
    wide = opcode & 7 == JMP
    op = opcode & 0xF0
    a = _read(regs, dst, pc)
    b = _read(regs, src, pc) if opcode & X else imm & MASK64
    if isinstance(a, Ptr) or isinstance(b, Ptr):
        if not (wide and isinstance(a, Ptr) and b == 0 and op in (JEQ, JNE)):
            raise Fault("pointer comparison other than a NULL check", pc)
        if a.nullable:  # every copy of this lookup's result is now known non-NULL
            checked = Ptr(a.region, a.offset, False, a.ident)
            regs[:] = [checked if isinstance(r, Ptr) and r.nullable and r.ident == a.ident
                       else r for r in regs]
        return op == JNE
    bits = 64 if wide else 32
    mask = (1 << bits) - 1
    a &= mask
    b &= mask
    if op == JEQ:
        return a == b
    if op == JNE:
        return a != b
    if op == JGT:
        return a > b
    if op == JGE:
        return a >= b
    if op == JLT:
        return a < b
    if op == JLE:
        return a <= b
    if op == JSET:
        return bool(a & b)
    sa, sb = _signed(a, bits), _signed(b, bits)
    if op == JSGT:
        return sa > sb
    if op == JSGE:
        return sa >= sb
    if op == JSLT:
        return sa < sb
    if op == JSLE:
        return sa <= sb
    raise Fault(f"unsupported jump {opcode:#x}", pc)


def _call(m: Machine, regs: list[Value], src: int, imm: int, pc: int) -> Value:
    """A bpf-to-bpf call (R1-R5 passed, R6-R9 kept by the caller's frame) or a helper."""
    if src == PSEUDO_CALL:
        return m.call(pc + imm + 1, regs[1:6])
    helper = HELPERS.get(imm)
    if helper is None:
        raise Fault(f"helper {imm} is not interpreted", pc)
    return helper(m, regs[1:6], pc)


def _execute(m: Machine, pc: int, regs: list[Value]) -> Value:
    """Run from ``pc`` until EXIT; returns R0 (the instructions are compiled to closures,
    :mod:`.bpf_compile`, each returning the next pc, -1 at EXIT)."""
    code = m.program.code
    coverage = m.coverage
    executed = 0
    try:
        while pc >= 0:
            executed += 1
            if coverage is not None:
                coverage.add(pc)
            if not executed & 1023 and m.executed + executed > m.budget:
                raise Fault("instruction budget exhausted (a loop the verifier would "
                            "refuse?)", pc)
            pc = code[pc](m, regs)
    finally:
        m.executed += executed
    return _read(regs, 0, pc)


# -- helpers -------------------------------------------------------------------------------


def _scalar(value: Value, pc: int, what: str) -> int:
    if not isinstance(value, int):
        raise Fault(f"{what}: a scalar expected, got {value!r}", pc)
    return value


def _map(value: Value, pc: int, kind: str | None = None) -> Map:
    if not isinstance(value, Ptr) or not isinstance(value.region, Map):
        raise Fault(f"a map expected, got {value!r}", pc)
    if kind is not None and value.region.kind != kind:
        raise Fault(f"a {kind} map expected, got a {value.region.kind} map", pc)
    return value.region


def _memory(value: Value, pc: int, what: str) -> tuple[Region, int]:
    """A helper's memory argument: a checked pointer to the stack, a map value or a
    ring-buffer reservation."""
    region, offset = _pointer(value, pc, what)
    if region.kind not in ("stack", "map_value", "ringbuf"):
        raise Fault(f"{what}: stack, map value or ring-buffer memory expected, got "
                    f"{region.kind}", pc)
    return region, offset


def _lookup(m: Machine, args: list[Value], pc: int) -> Value:
    table = _map(args[0], pc)
    if table.kind == "ringbuf":
        raise Fault("lookup in a ring buffer", pc)
    region, offset = _memory(args[1], pc, "map key")
    found = table.lookup(region.read(offset, table.key_size, pc))
    return Ptr(found, 0, True, m.new_ident()) if found is not None else 0


def _update(m: Machine, args: list[Value], pc: int) -> Value:
    table = _map(args[0], pc)
    key, key_at = _memory(args[1], pc, "map key")
    value, value_at = _memory(args[2], pc, "map value")
    _scalar(args[3], pc, "flags")
    key_bytes = key.read(key_at, table.key_size, pc)
    value_bytes = value.read(value_at, table.value_size, pc)
    return table.update(key_bytes, value_bytes) & MASK64


def _delete(m: Machine, args: list[Value], pc: int) -> Value:
    table = _map(args[0], pc)
    key, key_at = _memory(args[1], pc, "map key")
    return table.delete(key.read(key_at, table.key_size, pc)) & MASK64


def _ktime(m: Machine, args: list[Value], pc: int) -> Value:
    m.clock += 1000
    return m.clock


def _cpu(m: Machine, args: list[Value], pc: int) -> Value:
    return m.task.cpu


def _pid_tgid(m: Machine, args: list[Value], pc: int) -> Value:
    return m.task.tgid << 32 | m.task.tid


def _written(m: Machine, dst: Value, size: Value, pc: int, what: str) -> tuple[Region, int, int]:
    """(region, offset, size) of a helper's output buffer, checked."""
    region, offset = _memory(dst, pc, what)
    length = _scalar(size, pc, f"{what} size")
    if not 0 <= offset <= len(region.data) - length or not region.writable:
        raise Fault(f"{what} of {length} bytes at offset {offset} outside its "
                    f"{region.kind} ({len(region.data)} bytes) or read-only", pc)
    return region, offset, length


def _probe_read_user(m: Machine, args: list[Value], pc: int) -> Value:
    region, offset, size = _written(m, args[0], args[1], pc, "probe_read_user buffer")
    source = _scalar(args[2], pc, "probe_read_user address")
    data = m.user_read(source, size)
    if data is None:
        region.write(offset, bytes(size))  # the kernel clears the buffer on a fault
        return -EFAULT & MASK64
    region.write(offset, data)
    return 0


def _get_stack(m: Machine, args: list[Value], pc: int) -> Value:
    context = args[0]
    if not (isinstance(context, Ptr) and isinstance(context.region, Region)
            and context.region.kind == "ctx" and context.offset == 0):
        raise Fault("get_stack: the context expected", pc)
    region, offset, size = _written(m, args[1], args[2], pc, "get_stack buffer")
    if _scalar(args[3], pc, "flags") & ~0xFF:
        return -EINVAL & MASK64
    words = b"".join(address.to_bytes(8, "little") for address in m.task.kernel_stack)
    copied = words[:size - size % 8]
    region.write(offset, copied.ljust(size, b"\0"))
    return len(copied)


def _ringbuf_output(m: Machine, args: list[Value], pc: int) -> Value:
    ring = _map(args[0], pc, "ringbuf")
    data, offset = _memory(args[1], pc, "ringbuf_output data")
    size = _scalar(args[2], pc, "ringbuf_output size")
    _scalar(args[3], pc, "flags")
    ring.records.append(data.read(offset, size, pc))
    return 0


def _ringbuf_reserve(m: Machine, args: list[Value], pc: int) -> Value:
    ring = _map(args[0], pc, "ringbuf")
    size = _scalar(args[1], pc, "ringbuf_reserve size")
    if _scalar(args[2], pc, "flags"):
        raise Fault("ringbuf_reserve flags must be 0", pc)
    ident = m.new_ident()
    m.reservations[ident] = ring
    return Ptr(Region("ringbuf", bytearray(size)), 0, True, ident)


def _ringbuf_submit(m: Machine, args: list[Value], pc: int) -> Value:
    record = args[0]
    if not (isinstance(record, Ptr) and isinstance(record.region, Region)
            and record.region.kind == "ringbuf" and record.offset == 0 and not record.nullable):
        raise Fault("ringbuf_submit: a checked reservation expected", pc)
    ring = m.reservations.pop(record.ident, None)
    if ring is None:
        raise Fault("ringbuf_submit of a record not reserved (or submitted twice)", pc)
    ring.records.append(bytes(record.region.data))
    return 0


def _current_task(m: Machine, args: list[Value], pc: int) -> Value:
    return Ptr(m.task_region)


def _task_pt_regs(m: Machine, args: list[Value], pc: int) -> Value:
    task = args[0]
    if not (isinstance(task, Ptr) and task.region is m.task_region and task.offset == 0):
        raise Fault("task_pt_regs: a task expected", pc)
    return Ptr(m.regs_region)


def _loop(m: Machine, args: list[Value], pc: int) -> Value:
    count = _scalar(args[0], pc, "bpf_loop count")
    callback, context = args[1], args[2]
    if not (isinstance(callback, Ptr) and isinstance(callback.region, _Func)):
        raise Fault("bpf_loop: a subprogram expected", pc)
    if _scalar(args[3], pc, "flags"):
        return -EINVAL & MASK64
    if count > BPF_LOOP_MAX:
        return -E2BIG & MASK64
    if context is UNINIT:
        raise Fault("bpf_loop: the callback's context is not set", pc)
    for index in range(count):
        result = m.call(callback.region.start, [index, context])
        if result not in (0, 1):
            raise Fault(f"bpf_loop callback returned {result!r} (0 or 1 expected)", pc)
        if result == 1:
            return index + 1
    return count


HELPERS: dict[int, Callable[[Machine, list[Value], int], Value]] = {
    1: _lookup, 2: _update, 3: _delete, 5: _ktime, 8: _cpu, 14: _pid_tgid, 67: _get_stack,
    112: _probe_read_user, 130: _ringbuf_output, 131: _ringbuf_reserve,
    132: _ringbuf_submit, 158: _current_task, 175: _task_pt_regs, 181: _loop,
}

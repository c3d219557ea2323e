"""A small eBPF assembler: instructions as method calls, jumps to named labels.

Written by hand because the alternative is a compiler at run time (clang) or a compiled
object shipped in the package; the programs ``sframe record`` loads are a few hundred
instructions, and writing them here keeps every instruction reviewable next to the
verifier's rules it must satisfy. Encoding: 8 bytes per instruction, ``{u8 opcode,
u8 dst:4 src:4, s16 offset, s32 immediate}``; ``ld_imm64`` takes two.
"""

from __future__ import annotations

import struct

from ..errors import PysframeError

# Registers.
R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 = range(11)
# Classes, sizes, modes, operations.
LD, LDX, ST, STX, ALU, JMP, JMP32, ALU64 = 0, 1, 2, 3, 4, 5, 6, 7
W, H, B, DW = 0x00, 0x08, 0x10, 0x18
IMM, MEM = 0x00, 0x60
K, X = 0x00, 0x08
ADD, SUB, MUL, DIV, OR, AND, LSH, RSH, NEG, MOD, XOR, MOV, ARSH = (
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0)
JA, JEQ, JGT, JGE, JSET, JNE, JSGT, JSGE, CALL, EXIT, JLT, JLE, JSLT, JSLE = (
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0)
SIZES = {1: B, 2: H, 4: W, 8: DW}
PSEUDO_MAP_FD, PSEUDO_CALL, PSEUDO_FUNC = 1, 1, 4

_INSN = struct.Struct("<BBhi")


class AsmError(PysframeError):
    """A program that cannot be assembled (an unknown label, a jump out of range)."""


class Asm:
    """Instructions in order; labels resolved by :meth:`assemble`."""

    def __init__(self) -> None:
        self._code: list[tuple[int, int, int, int, int, str | None]] = []
        self._labels: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._code)

    def _emit(self, opcode: int, dst: int = 0, src: int = 0, offset: int = 0, imm: int = 0,
              target: str | None = None) -> Asm:
        self._code.append((opcode, dst, src, offset, imm, target))
        return self

    def label(self, name: str) -> Asm:
        if name in self._labels:
            raise AsmError(f"label {name!r} defined twice")
        self._labels[name] = len(self._code)
        return self

    # -- arithmetic ------------------------------------------------------------------

    def alu(self, op: int, dst: int, value: int, *, reg: bool = False, wide: bool = True) -> Asm:
        """``dst op= value`` (a register when ``reg``), 64-bit unless ``wide`` is False."""
        return self._emit((ALU64 if wide else ALU) | op | (X if reg else K), dst,
                          value if reg else 0, 0, 0 if reg else value)

    def mov(self, dst: int, value: int, *, reg: bool = False) -> Asm:
        return self.alu(MOV, dst, value, reg=reg)

    def add(self, dst: int, value: int, *, reg: bool = False) -> Asm:
        return self.alu(ADD, dst, value, reg=reg)

    def ld_imm64(self, dst: int, value: int, src: int = 0) -> Asm:
        """A 64-bit constant (``src`` PSEUDO_MAP_FD: ``value`` is a map's fd)."""
        self._emit(LD | DW | IMM, dst, src, 0, value & 0xFFFFFFFF)
        return self._emit(0, 0, 0, 0, (value >> 32) & 0xFFFFFFFF)

    def ld_map(self, dst: int, fd: int) -> Asm:
        return self.ld_imm64(dst, fd, PSEUDO_MAP_FD)

    def ld_func(self, dst: int, target: str) -> Asm:
        """The address of subprogram ``target`` (for ``bpf_loop`` callbacks)."""
        self._emit(LD | DW | IMM, dst, PSEUDO_FUNC, 0, 0, target)
        return self._emit(0, 0, 0, 0, 0)

    # -- memory ----------------------------------------------------------------------

    def ldx(self, size: int, dst: int, src: int, offset: int) -> Asm:
        return self._emit(LDX | MEM | SIZES[size], dst, src, offset)

    def stx(self, size: int, dst: int, offset: int, src: int) -> Asm:
        return self._emit(STX | MEM | SIZES[size], dst, src, offset)

    def st(self, size: int, dst: int, offset: int, value: int) -> Asm:
        return self._emit(ST | MEM | SIZES[size], dst, 0, offset, value)

    # -- control ---------------------------------------------------------------------

    def jump(self, op: int, dst: int, value: int, target: str, *, reg: bool = False) -> Asm:
        """``if dst op value goto target`` (unsigned unless a signed ``op``)."""
        return self._emit(JMP | op | (X if reg else K), dst, value if reg else 0, 0,
                          0 if reg else value, target)

    def goto(self, target: str) -> Asm:
        return self._emit(JMP | JA, target=target)

    def call(self, helper: int) -> Asm:
        return self._emit(JMP | CALL, imm=helper)

    def call_local(self, target: str) -> Asm:
        return self._emit(JMP | CALL, src=PSEUDO_CALL, target=target)

    def exit(self) -> Asm:
        return self._emit(JMP | EXIT)

    # -- output ----------------------------------------------------------------------

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (opcode, dst, src, offset, imm, target) in enumerate(self._code):
            if target is not None:
                if target not in self._labels:
                    raise AsmError(f"unknown label {target!r}")
                distance = self._labels[target] - index - 1
                if opcode == LD | DW | IMM or opcode == JMP | CALL:
                    imm = distance  # pseudo function and local call: in the immediate
                else:
                    if not -32768 <= distance <= 32767:
                        raise AsmError(f"jump to {target!r} out of range")
                    offset = distance
            imm &= 0xFFFFFFFF
            out += _INSN.pack(opcode, (src << 4) | dst, offset,
                              imm - (1 << 32) if imm >= 1 << 31 else imm)
        return bytes(out)

    def offset_of(self, label: str) -> int:
        """The instruction index of ``label`` (for BTF func_info)."""
        return self._labels[label]

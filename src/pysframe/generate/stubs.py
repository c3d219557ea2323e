"""The CFA rule the file's own ``.eh_frame`` gives at each pc of its linker stubs (PLT).

GNU ld writes ``.eh_frame`` FDEs for the PLT sections it makes (x86-64: ``.plt``
with a DWARF expression that depends on the pc's place in its 16-byte entry,
``.plt.got`` and ``.plt.sec`` with the CIE's rule). Those are the rules the stubs'
instructions need, so ``validate --against-eh-frame`` compares a file's SFrame rows
for the stubs with them rather than with :mod:`.plt`'s emulation of ld. The rule is
worked out for every pc (stub sections are a few KB), evaluating a CFA expression
with the pc known and SP symbolic; only the few DWARF operators ld's expressions use
are understood (another expression gives no rule for its pcs).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from ..cfi.eh_frame import CFIError, cie_instructions, fde_instructions, parse_eh_frame
from ..cfi.instructions import (
    DW_CFA_advance_loc,
    DW_CFA_def_cfa,
    DW_CFA_def_cfa_expression,
    DW_CFA_def_cfa_offset,
    DW_CFA_def_cfa_register,
    DW_CFA_remember_state,
    DW_CFA_restore_state,
    DW_CFA_set_loc,
    Instruction,
)
from ..cfi.leb128 import DecodeError, read_sleb128, read_uleb128
from ..elf import ElfImage
from ..format.constants import DWARF_REGS
from .section import PLT_SECTIONS, abi_of

#: A CFA rule: (DWARF register, offset), or ("expr", expression bytes).
_Cfa = tuple[int, int] | tuple[str, bytes]
#: SP's value while evaluating an expression: any value works, the result is taken
#: relative to it; far from 0 so that subtracting stays positive.
_SP = 1 << 40


def stub_cfa_rules(image: ElfImage) -> dict[int, tuple[int, int]]:
    """(CFA register, offset) by pc for every pc of the PLT sections that the file's
    ``.eh_frame`` covers with a rule of that form (other pcs are left out)."""
    ranges = image.section_ranges(*PLT_SECTIONS)
    found = image.section(".eh_frame", relocated=True)
    if not ranges or found is None:
        return {}
    data, address, _ = found
    regs = DWARF_REGS[abi_of(image)]
    fdes, _ = parse_eh_frame(data, address, big_endian=image.big_endian,
                             address_size=image.elf_class // 8)
    rules: dict[int, tuple[int, int]] = {}
    for fde in fdes:
        if not any(lo <= fde.pc_begin < hi for lo, hi in ranges.values()):
            continue
        try:
            instructions = cie_instructions(data, fde.cie, image.big_endian) + \
                fde_instructions(data, fde, image.big_endian, address)
        except (CFIError, DecodeError):
            continue
        rows = _rows(instructions, fde.pc_begin)
        for pc in range(fde.pc_begin, fde.pc_begin + min(fde.pc_range, 1 << 16)):
            cfa = _at(rows, pc - fde.pc_begin)
            rule = _concrete(cfa, pc, regs.sp, regs.ra) if cfa is not None else None
            if rule is not None:
                rules[pc] = rule
    return rules


def _rows(instructions: list[Instruction], start: int) -> list[tuple[int, _Cfa | None]]:
    """(offset, CFA rule) at each row boundary (only the CFA is followed)."""
    location = 0
    cfa: _Cfa | None = None
    remembered: list[_Cfa | None] = []
    rows: list[tuple[int, _Cfa | None]] = [(0, None)]
    for insn in instructions:
        op = insn.op
        if op in (DW_CFA_advance_loc, DW_CFA_set_loc):
            location = location + insn.a if op == DW_CFA_advance_loc else insn.a - start
            rows.append((location, cfa))
        elif op == DW_CFA_def_cfa:
            cfa = (insn.a, insn.b)
        elif op == DW_CFA_def_cfa_register:
            cfa = (insn.a, cfa[1] if cfa is not None and isinstance(cfa[0], int) else 0)
        elif op == DW_CFA_def_cfa_offset and cfa is not None and isinstance(cfa[0], int):
            cfa = (cfa[0], insn.a)
        elif op == DW_CFA_def_cfa_expression:
            cfa = ("expr", insn.block)
        elif op == DW_CFA_remember_state:
            remembered.append(cfa)
        elif op == DW_CFA_restore_state and remembered:
            cfa = remembered.pop()
        if rows[-1][0] == location:
            rows[-1] = (location, cfa)
    return rows


def _at(rows: list[tuple[int, _Cfa | None]], offset: int) -> _Cfa | None:
    found = None
    for start, cfa in rows:
        if start > offset:
            break
        found = cfa
    return found


def _concrete(cfa: _Cfa, pc: int, sp: int, pc_reg: int) -> tuple[int, int] | None:
    if cfa[0] != "expr":
        reg, offset = cfa
        assert isinstance(reg, int) and isinstance(offset, int)
        return reg, offset
    block = cfa[1]
    assert isinstance(block, bytes)
    value = _evaluate(block, {sp: _SP, pc_reg: pc})
    return None if value is None else (sp, value - _SP)


def _evaluate(block: bytes, registers: dict[int, int]) -> int | None:
    """The value of a DWARF expression using only literals, bregN of ``registers`` and
    integer arithmetic; None for anything else."""
    stack: list[int] = []
    i = 0
    try:
        while i < len(block):
            op = block[i]
            i += 1
            if 0x30 <= op <= 0x4F:  # DW_OP_lit0..31
                stack.append(op - 0x30)
            elif 0x70 <= op <= 0x8F:  # DW_OP_breg0..31
                offset, i = read_sleb128(block, i, len(block))
                if op - 0x70 not in registers:
                    return None
                stack.append(registers[op - 0x70] + offset)
            elif op == 0x23:  # DW_OP_plus_uconst
                addend, i = read_uleb128(block, i, len(block))
                stack.append(stack.pop() + addend)
            elif op in _BINARY:
                right, left = stack.pop(), stack.pop()
                stack.append(_BINARY[op](left, right))
            else:
                return None
    except (IndexError, DecodeError):
        return None
    return stack[-1] if stack else None


def _shl(a: int, b: int) -> int:
    return a << min(b, 64)  # bounded: a hostile shift must not build a huge integer


def _ge(a: int, b: int) -> int:
    return int(a >= b)


_BINARY: dict[int, Callable[[int, int], int]] = {
    0x1A: operator.and_,  # DW_OP_and
    0x1C: operator.sub,   # DW_OP_minus
    0x22: operator.add,   # DW_OP_plus
    0x24: _shl,           # DW_OP_shl
    0x2A: _ge,            # DW_OP_ge
}

"""Where a function has saved one callee-saved register at a pc, from its CFI.

SFrame describes only the CFA, the return address and the frame pointer. A frame whose
CFA is based on another register (glibc's ``_dl_runtime_resolve_xsavec``: CFA = rbx + 16
after it realigns the stack) can be stepped over only if that register's value is known
in the frame, i.e. restored through every callee below it. This runs the few CFI
instructions of one FDE up to a pc for one register (offset rules, restore,
remember/restore state); anything else (expressions, a register copied to another) is
"unknown", and the caller gives up as before.
"""

from __future__ import annotations

from .instructions import (
    DW_CFA_advance_loc,
    DW_CFA_expression,
    DW_CFA_GNU_negative_offset_extended,
    DW_CFA_offset,
    DW_CFA_offset_extended,
    DW_CFA_offset_extended_sf,
    DW_CFA_register,
    DW_CFA_remember_state,
    DW_CFA_restore,
    DW_CFA_restore_extended,
    DW_CFA_restore_state,
    DW_CFA_same_value,
    DW_CFA_set_loc,
    DW_CFA_undefined,
    DW_CFA_val_expression,
    DW_CFA_val_offset,
    DW_CFA_val_offset_sf,
    Instruction,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: The register keeps its value through the frame (not saved, or not touched).
SAME = "same"
#: The rule is one this reader does not follow.
UNKNOWN = "unknown"

_SAVES = {DW_CFA_offset, DW_CFA_offset_extended, DW_CFA_offset_extended_sf,
          DW_CFA_GNU_negative_offset_extended}
_OTHER = {DW_CFA_register, DW_CFA_expression, DW_CFA_val_expression, DW_CFA_val_offset,
          DW_CFA_val_offset_sf}

Rule = int | str  # CFA offset of the saved value, SAME or UNKNOWN


def _one(insn: Instruction, regnum: int, rule: Rule, initial: Rule) -> Rule:
    op = insn.op
    if op in _SAVES and insn.a == regnum:
        return insn.b
    if op in (DW_CFA_restore, DW_CFA_restore_extended) and insn.a == regnum:
        return initial
    if op in (DW_CFA_same_value, DW_CFA_undefined) and insn.a == regnum:
        return SAME if op == DW_CFA_same_value else UNKNOWN
    if op in _OTHER and insn.a == regnum:
        return UNKNOWN
    return rule


def _run(instructions: Iterable[Instruction], regnum: int, rule: Rule, initial: Rule,
         location: int, pc: int) -> tuple[Rule, bool]:
    """The rule after the instructions that apply before ``pc``; True if ``pc`` was
    reached (the rest do not apply)."""
    stack: list[Rule] = []
    for insn in instructions:
        if insn.op == DW_CFA_advance_loc:  # advance_loc1/2/4 decode as this too
            location += insn.a
        elif insn.op == DW_CFA_set_loc:
            location = insn.a
        if location > pc:
            return rule, True
        if insn.op == DW_CFA_remember_state:
            stack.append(rule)
        elif insn.op == DW_CFA_restore_state:
            rule = stack.pop() if stack else UNKNOWN
        else:
            rule = _one(insn, regnum, rule, initial)
    return rule, False


def saved_register(cie: list[Instruction], fde: list[Instruction], pc_begin: int, pc: int,
                   regnum: int) -> Rule:
    """Where ``regnum`` was saved at ``pc`` (an offset from the CFA), SAME or UNKNOWN."""
    initial, _ = _run(cie, regnum, SAME, SAME, pc_begin, pc_begin)
    rule, _ = _run(fde, regnum, initial, initial, pc_begin, pc)
    return rule

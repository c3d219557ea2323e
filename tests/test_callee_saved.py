"""A caller whose CFA is based on a callee-saved register (rbx in glibc's
_dl_runtime_resolve_xsavec): the register is recovered from the callees' CFI."""

from __future__ import annotations

from pysframe.cfi.instructions import (
    DW_CFA_advance_loc,
    DW_CFA_def_cfa,
    DW_CFA_def_cfa_offset,
    DW_CFA_offset,
    DW_CFA_remember_state,
    DW_CFA_restore,
    DW_CFA_restore_state,
    Instruction,
)
from pysframe.cfi.saved import SAME, saved_register

RBX, RSP, RIP = 3, 7, 16
CIE = [Instruction(DW_CFA_def_cfa, RSP, 8), Instruction(DW_CFA_offset, RIP, -8)]
FDE = [
    Instruction(DW_CFA_advance_loc, 1), Instruction(DW_CFA_def_cfa_offset, 0, 16),
    Instruction(DW_CFA_offset, RBX, -16),  # push %rbx at 0x1000
    Instruction(DW_CFA_advance_loc, 9), Instruction(DW_CFA_remember_state),
    Instruction(DW_CFA_def_cfa_offset, 0, 8), Instruction(DW_CFA_restore, RBX),  # pop; ret
    Instruction(DW_CFA_advance_loc, 2), Instruction(DW_CFA_restore_state),
]


def test_saved_register_follows_the_rows() -> None:
    assert saved_register(CIE, FDE, 0x1000, 0x1000, RBX) == SAME  # before the push
    assert saved_register(CIE, FDE, 0x1000, 0x1001, RBX) == -16
    assert saved_register(CIE, FDE, 0x1000, 0x1009, RBX) == -16
    assert saved_register(CIE, FDE, 0x1000, 0x100a, RBX) == SAME  # after the pop
    assert saved_register(CIE, FDE, 0x1000, 0x100c, RBX) == -16  # state restored
    assert saved_register(CIE, FDE, 0x1000, 0x1001, 12) == SAME  # never saved

"""Recovering a callee-saved register in a caller frame, from the CFI of its callees.

Used only where SFrame cannot step (a caller's CFA based on a register other than SP and
FP, e.g. rbx in ``_dl_runtime_resolve_xsavec``): the register's value in that frame is
what the sampled register held, unless a callee between saved it, in which case it is
read from where the nearest such callee saved it (its CFA + the CFI offset). The FDEs are
found through ``.eh_frame_hdr``; a binary without one, or a rule this does not follow,
leaves the register unknown and the chain stops as before.
"""

from __future__ import annotations

from ..cfi.eh_frame import CFIError, cie_instructions, fde_instructions
from ..cfi.saved import SAME, saved_register
from .address_space import AddressSpace, Module
from .eh_index import eh_frame_index
from .memory import StackReader

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def _saved_in(module: Module, pc: int, regnum: int) -> int | str | None:
    """Where the function at runtime ``pc`` saved ``regnum`` (a CFA offset), SAME, or
    None when unknown."""
    if module.image is None:
        return None
    index = eh_frame_index(module.image)
    if index is None:
        return None
    link_pc = pc - module.bias
    try:
        fde = index.fde_for(link_pc)
        if fde is None:
            return None
        data = index.data
        rule = saved_register(cie_instructions(data, fde.cie, index.big_endian),
                              fde_instructions(data, fde, index.big_endian, index.address),
                              fde.pc_begin, link_pc, regnum)
    except (CFIError, ValueError, IndexError):
        return None
    return rule if isinstance(rule, int) or rule == SAME else None


def recover_register(regnum: int, callees: Sequence[tuple[int, int, bool]],
                     sampled: int | None, memory: StackReader,
                     space: AddressSpace) -> int | None:
    """``regnum``'s value in the frame above ``callees`` (innermost first: each callee's
    pc, its CFA, and whether its pc is exact), or None when it cannot be told."""
    for pc, cfa, exact in reversed(callees):
        lookup = pc if exact else pc - 1
        mapping = space.find(lookup)
        if mapping is None or mapping.module is None:
            return None
        rule = _saved_in(mapping.module, lookup, regnum)
        if rule is None:
            return None
        if isinstance(rule, int):
            return memory.read(cfa + rule)
    return sampled

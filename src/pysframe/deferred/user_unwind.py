"""The kernel's user-space unwinder (``kernel/unwind/user.c`` with the SFrame series).

Per frame it tries SFrame first (the process's registry), then frame pointers: a missing
row (-ENOENT) falls through to frame pointers, any other SFrame failure ends the walk,
and a frame-pointer step that fails ends it too. The kernel looks rows up at the
return address itself (not the address before it), as it does. One step is
:func:`pysframe.unwind.step.step` under the kernel's policy (:data:`~pysframe.unwind.step.KERNEL`):

- an outermost row (RA undefined) ends the walk, complete;
- CFA from SP, from FP (refused when FP is below SP) or from another register (the
  topmost frame only: only the entry registers are known), plus the offset, loaded
  if the rule says so;
- the CFA must move up (the topmost frame may keep SP) and be word-aligned;
- RA and FP from CFA-relative slots (RA may not be CFA + offset itself; FP kept when
  the row says nothing), or from registers in the topmost frame only;
- every read is a user read: it faults outside the mapped areas or above the user
  address limit.

The trace holds each frame's IP, the first one being the IP at kernel entry, and at
most :data:`MAX_ENTRIES` of them (the kernel's per-task cache fills one 4 KiB page).
The machine is the process's (:attr:`.mm.Mm.arch`, :mod:`.arch`): x86-64 as the series
enables it, AArch64 and s390x as their patches do (the topmost frame's return address
in the link register, pointer authentication stripped, s390x's CFA and back chain).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from ..format.lookup import FrameRow, RuleKind
from ..format.lookup import Rule as ValueRule
from ..records import record_class
from ..unwind.step import Regs, Rule, Stop, rule_of_row, step
from .arch import WORD, back_chain_rule

if TYPE_CHECKING:
    from .mm import Mm

#: (4096 - the cache's header of 16 bytes) / 8.
MAX_ENTRIES = 510
#: DWARF number of the x86-64 stack pointer.
SP_REG = 7


@record_class
class UserTrace:
    """The IPs the walk collected, why it ended, and how each step was made."""

    entries: list[int]
    stop: Stop
    #: One per step taken: "sframe" or "fp".
    methods: list[str]
    #: The address whose read faulted (stop MEMORY).
    fault: int | None = None


@record_class
class EntryRegisters:
    """The user registers saved at kernel entry (``task_pt_regs``); ``others`` by DWARF
    number, for register rules of the topmost frame; ``lr`` the link register (AArch64
    x30, s390x r14; None on x86-64)."""

    ip: int
    sp: int
    fp: int
    others: dict[int, int] | None = None
    lr: int | None = None


#: x86-64 at a function's first instruction (before ``push %rbp``): CFA = SP + 8, FP kept.
_FP_ENTRY_FRAME = Rule(SP_REG, WORD, ValueRule(RuleKind.CFA, -WORD, deref=True),
                       ValueRule(RuleKind.RETAIN), frame_pointer=True)
#: ``push %rbp`` and ``endbr64``: a function's first instruction as the kernel checks it.
_PUSH_RBP, _ENDBR64 = b"\x55", b"\xf3\x0f\x1e\xfa"


class _Walk:
    """One walk's state: ``unwind_user_state``."""

    def __init__(self, mm: Mm, registers: EntryRegisters) -> None:
        self.fault: int | None = None
        self.mm = mm
        self.arch = mm.arch
        self.policy = mm.arch.policy
        lr = registers.lr if self.policy.link_register is not None else None
        self.regs = Regs(registers.ip, registers.sp, registers.fp, lr, registers.others or {},
                         True)
        self.ip = registers.ip

    def step(self, rule: Rule, fp: int | None = None) -> Stop | None:
        """``unwind_user_next_common``: None on success (the state moved one frame up);
        ``fp``: the caller's FP whatever the rule gives (the back chain's 0)."""
        moved = step(rule, self.regs, self._read, self.policy)
        if type(moved) is Stop:
            return moved
        assert isinstance(moved, Regs)
        self.regs = moved if fp is None else moved._replace(fp=fp)
        self.ip = moved.pc
        return None

    def _read(self, address: int) -> int | None:
        value = self.mm.read(address)
        if value is None:
            self.fault = address
        return value

    def frame_pointer_step(self) -> Stop | None:
        """``unwind_user_next_fp``: the machine's fallback (:mod:`.arch`). x86-64: the
        entry frame at a function's first instruction, else rbp's chain; AArch64: the
        frame record at FP; s390x: the back chain (0: the outermost frame)."""
        rule = self.arch.fallback_rule
        if rule is None:
            caller_sp = self._read(self.regs.sp)
            if caller_sp is None:
                return Stop.MEMORY
            if caller_sp == 0:
                return Stop.OUTERMOST
            return self.step(back_chain_rule(self.regs.sp, caller_sp), fp=0)
        if self.regs.topmost and self.arch.fallback == "frame pointer":
            code = self.mm.read_bytes(self.regs.pc, 4)
            if code is not None and (code[:1] == _PUSH_RBP or code == _ENDBR64):
                return self.step(_FP_ENTRY_FRAME)
        return self.step(rule)


def unwind_user(mm: Mm, registers: EntryRegisters | None, max_entries: int = MAX_ENTRIES,
                frame_pointers: bool = True) -> UserTrace:
    """The kernel's walk of the user stack from the registers saved at kernel entry
    (None: a kernel thread, no user context)."""
    trace = UserTrace([], Stop.NOT_USER, [])
    if registers is None or max_entries <= 0:
        return trace
    walk = _Walk(mm, registers)
    use_sframe = len(mm.sframes) > 0  # current_has_sframe()
    while True:
        trace.entries.append(walk.ip)
        if len(trace.entries) >= max_entries:
            trace.stop = Stop.DEPTH
            return trace
        stop, method = _next(walk, mm, use_sframe, frame_pointers)
        if stop is not None:
            trace.stop = stop
            trace.fault = walk.fault if stop is Stop.MEMORY else None
            return trace
        trace.methods.append(method)


def _next(walk: _Walk, mm: Mm, use_sframe: bool, frame_pointers: bool
          ) -> tuple[Stop | None, str]:
    """``unwind_user_next``: SFrame, then frame pointers; (stop reason or None, method)."""
    if use_sframe:
        found = mm.sframes.find(walk.ip)
        if isinstance(found, FrameRow):
            if found.outermost:
                return Stop.OUTERMOST, "sframe"
            return walk.step(rule_of_row(found)), "sframe"
        if found != -errno.ENOENT:
            return Stop.SFRAME_ERROR, "sframe"
    if frame_pointers:
        # The kernel only ends the walk here; the failed check is kept as the reason.
        return walk.frame_pointer_step(), "fp"
    return Stop.NO_RULE, ""

"""The kernel's user-space unwinder (``kernel/unwind/user.c`` with the SFrame series).

Per frame it tries SFrame first (the process's registry), then frame pointers: a missing
row (-ENOENT) falls through to frame pointers, any other SFrame failure ends the walk,
and a frame-pointer step that fails ends it too. The kernel looks rows up at the
return address itself (not the address before it), as it does. One step:

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
x86-64 only (8-byte words), as the kernel enables it.
"""

from __future__ import annotations

import errno
from enum import Enum
from typing import TYPE_CHECKING

from ..format.lookup import FrameRow, Rule, RuleKind
from ..records import record_class

if TYPE_CHECKING:
    from .mm import Mm

#: (4096 - the cache's header of 16 bytes) / 8.
MAX_ENTRIES = 510
WORD = 8
#: DWARF numbers of the x86-64 stack and frame pointers.
SP_REG, FP_REG = 7, 6


class UserStop(Enum):
    """Why the kernel's walk ended."""

    OUTERMOST = "outermost frame"
    LIMIT = "frame limit"
    NO_METHOD = "neither SFrame nor frame pointers could step"
    SFRAME_ERROR = "SFrame section failed (removed)"
    FP_BELOW_SP = "frame pointer below stack pointer"
    BACKWARDS = "CFA did not move up"
    UNALIGNED = "CFA not word-aligned"
    FAULT = "user read faulted"
    REGISTER = "register rule outside the topmost frame"
    BAD_RULE = "rule the kernel refuses"
    NOT_USER = "no user context"


@record_class
class UserTrace:
    """The IPs the walk collected, why it ended, and how each step was made."""

    entries: list[int]
    stop: UserStop
    #: One per step taken: "sframe" or "fp".
    methods: list[str]
    #: The address whose read faulted (stop FAULT).
    fault: int | None = None


@record_class
class EntryRegisters:
    """The user registers saved at kernel entry (``task_pt_regs``); ``others`` by DWARF
    number, for register rules of the topmost frame."""

    ip: int
    sp: int
    fp: int
    others: dict[int, int] | None = None


#: A frame as the kernel describes it: CFA, RA and FP rules, and outermost.
_FP_FRAME = (Rule(RuleKind.REGISTER, 2 * WORD, FP_REG), Rule(RuleKind.CFA, -WORD, deref=True),
             Rule(RuleKind.CFA, -2 * WORD, deref=True))
#: At a function's first instruction (before ``push %rbp``): CFA = SP + 8, FP kept.
_FP_ENTRY_FRAME = (Rule(RuleKind.REGISTER, WORD, SP_REG), Rule(RuleKind.CFA, -WORD, deref=True),
                   Rule(RuleKind.RETAIN))
#: ``push %rbp`` and ``endbr64``: a function's first instruction as the kernel checks it.
_PUSH_RBP, _ENDBR64 = b"\x55", b"\xf3\x0f\x1e\xfa"


class _Walk:
    """One walk's state: ``unwind_user_state``."""

    def __init__(self, mm: Mm, registers: EntryRegisters) -> None:
        self.fault: int | None = None
        self.mm = mm
        self.registers = registers
        self.ip, self.sp, self.fp = registers.ip, registers.sp, registers.fp
        self.topmost = True

    def step(self, cfa_rule: Rule, ra_rule: Rule, fp_rule: Rule) -> UserStop | None:
        """``unwind_user_next_common``: None on success (the state moved one frame up)."""
        if cfa_rule.regnum == SP_REG:
            cfa = self.sp
        elif cfa_rule.regnum == FP_REG:
            if self.fp < self.sp:
                return UserStop.FP_BELOW_SP
            cfa = self.fp
        else:
            value = self._register(cfa_rule.regnum)
            if value is None:
                return UserStop.REGISTER
            cfa = value
        cfa = (cfa + cfa_rule.offset) & 0xFFFFFFFFFFFFFFFF
        if cfa_rule.deref:
            loaded = self._read(cfa)
            if loaded is None:
                return UserStop.FAULT
            cfa = loaded
        if cfa <= self.sp - self.topmost:
            return UserStop.BACKWARDS
        if cfa & (WORD - 1):
            return UserStop.UNALIGNED
        ra = self._value(ra_rule, cfa, None)
        if isinstance(ra, UserStop):
            return ra
        fp = self._value(fp_rule, cfa, self.fp)
        if isinstance(fp, UserStop):
            return fp
        self.ip, self.sp, self.fp, self.topmost = ra, cfa, fp, False
        return None

    def _value(self, rule: Rule, cfa: int, retained: int | None) -> int | UserStop:
        """RA (``retained`` None: no RA register on x86-64) or FP by ``rule``."""
        if rule.kind == RuleKind.RETAIN:
            if retained is None:
                return UserStop.REGISTER if not self.topmost else UserStop.BAD_RULE
            return retained
        if rule.kind == RuleKind.CFA:
            if not rule.deref:
                return UserStop.BAD_RULE  # a saved RA or FP is never a stack address
            address = cfa + rule.offset
        else:
            value = self._register(rule.regnum)
            if value is None:
                return UserStop.REGISTER
            address = value + rule.offset
            if not rule.deref:
                return address & 0xFFFFFFFFFFFFFFFF
        loaded = self._read(address)
        return UserStop.FAULT if loaded is None else loaded

    def _read(self, address: int) -> int | None:
        value = self.mm.read(address)
        if value is None:
            self.fault = address
        return value

    def _register(self, regnum: int) -> int | None:
        if not self.topmost:
            return None
        if regnum == SP_REG:
            return self.sp
        if regnum == FP_REG:
            return self.fp
        others = self.registers.others or {}
        return others.get(regnum)

    def frame_pointer_step(self) -> UserStop | None:
        """``unwind_user_next_fp``: the entry frame at a function's first instruction."""
        if self.topmost:
            code = self.mm.read_bytes(self.ip, 4)
            if code is not None and (code[:1] == _PUSH_RBP or code == _ENDBR64):
                return self.step(*_FP_ENTRY_FRAME)
        return self.step(*_FP_FRAME)


def unwind_user(mm: Mm, registers: EntryRegisters | None, max_entries: int = MAX_ENTRIES,
                frame_pointers: bool = True) -> UserTrace:
    """The kernel's walk of the user stack from the registers saved at kernel entry
    (None: a kernel thread, no user context)."""
    trace = UserTrace([], UserStop.NOT_USER, [])
    if registers is None or max_entries <= 0:
        return trace
    walk = _Walk(mm, registers)
    use_sframe = len(mm.sframes) > 0  # current_has_sframe()
    while True:
        trace.entries.append(walk.ip)
        if len(trace.entries) >= max_entries:
            trace.stop = UserStop.LIMIT
            return trace
        stop, method = _next(walk, mm, use_sframe, frame_pointers)
        if stop is not None:
            trace.stop = stop
            trace.fault = walk.fault if stop is UserStop.FAULT else None
            return trace
        trace.methods.append(method)


def _next(walk: _Walk, mm: Mm, use_sframe: bool, frame_pointers: bool
          ) -> tuple[UserStop | None, str]:
    """``unwind_user_next``: SFrame, then frame pointers; (stop reason or None, method)."""
    if use_sframe:
        found = mm.sframes.find(walk.ip)
        if isinstance(found, FrameRow):
            if found.outermost:
                return UserStop.OUTERMOST, "sframe"
            return walk.step(found.cfa, found.ra, found.fp), "sframe"
        if found != -errno.ENOENT:
            return UserStop.SFRAME_ERROR, "sframe"
    if frame_pointers:
        # The kernel only ends the walk here; the failed check is kept as the reason.
        return walk.frame_pointer_step(), "fp"
    return UserStop.NO_METHOD, ""

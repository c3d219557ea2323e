"""One unwinding step for every mode: the frame's :class:`Rule`, the :class:`Stop` reasons
and the :class:`Policy` that names where user-space tools and the kernel differ.

Like framehop's ``UnwindRule::exec(is_first_frame, regs, read_stack)``: a frame's rules are
a small immutable value, looked up once per address and cached by the caller (the scalar
tracer's plan cache), and :func:`step` applies them to the registers of one frame, giving
the caller's registers or why there is none. The scalar tracer (``unwind/unwinder.py``,
:data:`Policy.tools`) and the kernel's model (``deferred/user_unwind.py``, :data:`KERNEL`,
after ``kernel/unwind/user.c``: ``unwind_user_next_common``) call it; the batch engine and
the eBPF walker are tested against it. The walker's stop codes are :attr:`Stop.code`
(:data:`WALKER_STOPS`), so its records and the enum cannot drift apart.
"""

from __future__ import annotations

from ..enums import Enum
from ..format.constants import ABI, DWARF_REGS, S390X_SP_VAL_OFFSET
from ..format.lookup import FrameRow, RuleKind
from ..format.lookup import Rule as ValueRule
from ..records import NamedTuple, Protocol, record_class, replace

TYPE_CHECKING = False

_WORD_MASK = (1 << 64) - 1
_CFA, _RETAIN = RuleKind.CFA, RuleKind.RETAIN
#: AArch64 pointer authentication: a mangled return address keeps its 48 address bits.
PAC_MASK = (1 << 48) - 1


class Stop(Enum):
    """Why a chain ended, in every mode (the scalar tracer, the batch engine, the kernel's
    model, the eBPF walker). The value is the text printed (``--show-stops``, ``stack
    --json``); :attr:`code` is the eBPF walker's number for it (0: the walker never ends
    with it)."""

    _value_: str
    code: int

    def __new__(cls, text: str, code: int = 0) -> Stop:
        member = object.__new__(cls)
        member._value_ = text
        member.code = code
        return member

    OUTERMOST = "outermost frame (RA undefined)", 6
    NO_MODULE = "pc outside every mapped module"
    NO_RULE = "no SFrame rule and no usable frame pointer", 9
    MEMORY = "stack memory not in the copy", 3
    NO_ADVANCE = "stack pointer did not advance"
    BACKWARDS = "stack pointer moved backwards", 5
    ZERO_PC = "return address 0", 4
    DEPTH = "depth limit", 1
    COPY_ENDED = "stack copy ended (the caller's return address lies beyond it)"
    REGISTER = "CFA in a register that cannot be recovered in a caller"
    BAD_RA = "frame pointer gave a return address outside executable code"
    RECORDED = "end of the callchain the kernel recorded"
    NO_CALLCHAIN = "the recording has no callchain and no stack copy (sample ip only)"
    NO_STACK = "no stack copy in this sample (a kernel thread, or a thread in execve)"
    SFRAME_ERROR = "SFrame section failed (removed)"
    FP_BELOW_SP = "frame pointer below stack pointer"
    UNALIGNED = "CFA not word-aligned", 2
    BAD_RULE = "rule the kernel refuses"
    NOT_USER = "no user context"
    UNSUPPORTED = "rule the BPF walker lacks", 7
    PLT = "PLT entry", 8
    SIGNAL = "signal frame", 10
    # The kernel model's names for the same reasons (its ``UserStop`` before the merge):
    # aliases, not members of their own.
    LIMIT = DEPTH
    FAULT = MEMORY
    NO_METHOD = NO_RULE


#: The eBPF walker's stop codes: the one table its assembler and the reader of its records
#: use (0: the walk has not ended).
WALKER_STOPS: dict[int, Stop] = {stop.code: stop for stop in Stop if stop.code}


@record_class(frozen=True)
class Policy:
    """Every documented difference between the user-space tools and the kernel's walk
    (``kernel/unwind/user.c``), one field each, and the architecture's registers."""

    #: Rules of a caller are looked up one byte before its return address (inside the
    #: call; tools: gdb, perf, framehop), or at the return address itself (the kernel).
    lookup_before_return: bool
    #: The CFA must be a multiple of this (the kernel: the word size; 0: not checked).
    cfa_alignment: int
    #: A CFA based on FP ends the walk (FP_BELOW_SP) when FP is below SP (the kernel).
    fp_below_sp_refused: bool
    #: Register rules (RA or FP from a register, CFA from a register other than SP/FP)
    #: hold only in the topmost frame, SP and FP included (the kernel); tools know SP and
    #: FP in every frame, other registers only where the caller passes them.
    register_rules_topmost_only: bool
    #: The most frames a chain holds (tools: perf's 127; the kernel: 510, one page).
    max_frames: int
    #: A return address of 0 is the end of the chain (ZERO_PC: tools read it as the
    #: outermost frame); the kernel takes it as an entry like any other. For both an
    #: outermost row (RA undefined) ends the walk, complete.
    zero_ra_ends: bool
    #: The CFA is checked (moves up, aligned) as soon as it is known, before RA and FP are
    #: loaded (the kernel); tools load first, then check the return address and the CFA.
    cfa_checked_first: bool
    #: A caller whose SP equals the callee's is NO_ADVANCE (tools); the kernel has one
    #: check, "CFA did not move up": BACKWARDS.
    no_advance_apart: bool
    #: A saved FP that cannot be recovered (slot unreadable, register unknown) leaves FP
    #: unchanged (tools: in an epilogue the slot lies below SP); the kernel ends the walk.
    fp_kept_when_unknown: bool
    #: Rules the kernel refuses end the walk: RA or FP as the address CFA + offset
    #: (BAD_RULE), RA "unchanged" without a link register (BAD_RULE in the topmost frame,
    #: REGISTER above). Tools take the address as the value, and an unknown RA as NO_RULE.
    refuse_bad_rules: bool
    #: The frame-pointer method is a guess (tools): taken only when FP is aligned and not
    #: below SP (else NO_RULE), with both slots readable, the saved FP read first; the
    #: caller also checks the return address is code (BAD_RA). The kernel applies the
    #: frame-pointer rule as any other.
    frame_pointer_guess: bool
    #: Addresses computed from registers wrap at 2^64 as in C (the kernel); tools keep
    #: exact integers (an address below 0 is simply unreadable).
    wrap_addresses: bool
    #: DWARF numbers of SP and FP; of the link register (None: the RA is on the stack).
    sp_reg: int = 7
    fp_reg: int = 6
    link_register: int | None = None
    #: Added to the CFA to give the caller's SP (s390x: -160).
    sp_offset: int = 0
    #: AArch64: the frame-pointer method strips a pointer-authentication code from the
    #: saved x30 of a frame record (pac-ret signs it; the record does not say so).
    signed_frame_records: bool = False
    #: s390x: the frame-pointer method is the back chain (the word at SP is the caller's
    #: SP, r14 saved at the caller's SP + 112), x86-64's FP chain meaning nothing there.
    back_chain: bool = False

    @staticmethod
    def tools(abi: ABI, max_frames: int = 127) -> Policy:
        """The user-space tools' policy (the scalar tracer's) for ``abi``."""
        regs = DWARF_REGS[abi]
        return Policy(lookup_before_return=True, cfa_alignment=0, fp_below_sp_refused=False,
                      register_rules_topmost_only=False, max_frames=max_frames,
                      zero_ra_ends=True, cfa_checked_first=False, no_advance_apart=True,
                      fp_kept_when_unknown=True, refuse_bad_rules=False,
                      frame_pointer_guess=True, wrap_addresses=False, sp_reg=regs.sp,
                      fp_reg=regs.fp,
                      link_register=None if abi is ABI.AMD64_ENDIAN_LITTLE else regs.ra,
                      sp_offset=S390X_SP_VAL_OFFSET if abi.is_s390x else 0,
                      signed_frame_records=abi.is_aarch64, back_chain=abi.is_s390x)


    @staticmethod
    def kernel(abi: ABI) -> Policy:
        """The kernel's walk (``kernel/unwind/user.c``) on ``abi``'s machine: 8-byte words,
        510 entries; the architecture's SP, FP and link register (AArch64 x30, s390x r14:
        the topmost frame's RA when its row says "not saved", ``unwind_user_get_ra_reg``
        of the arm64 and s390 patches) and s390x's CFA = SP + 160 at the call."""
        return replace(Policy.tools(abi, 510), lookup_before_return=False, cfa_alignment=8,
                       fp_below_sp_refused=True, register_rules_topmost_only=True,
                       zero_ra_ends=False, cfa_checked_first=True, no_advance_apart=False,
                       fp_kept_when_unknown=False, refuse_bad_rules=True,
                       frame_pointer_guess=False, wrap_addresses=True)


#: The kernel's walk on x86-64 (the only machine the series enables by itself).
KERNEL = Policy.kernel(ABI.AMD64_ENDIAN_LITTLE)


@record_class(frozen=True)
class Rule:
    """How to find a frame's caller: CFA = [*](register ``cfa_base`` + ``cfa_offset``);
    RA and FP each by a value rule (unchanged, CFA-relative or register-based, maybe
    loaded). Register-based rules (a CFA base other than SP/FP, RA or FP from a register)
    are the rules that hold in the topmost frame only. ``outermost``: RA undefined, the
    chain ends; ``frame_pointer``: the frame-pointer method's rule (no table row);
    ``ra_mangled``: strip the pointer-authentication code from the RA."""

    cfa_base: int
    cfa_offset: int
    ra: ValueRule
    fp: ValueRule
    cfa_deref: bool = False
    outermost: bool = False
    ra_mangled: bool = False
    frame_pointer: bool = False

    @staticmethod
    def of_row(row: FrameRow) -> Rule:
        """The rule of an SFrame row."""
        cfa = row.cfa
        return Rule(cfa.regnum, cfa.offset, row.ra, row.fp, cfa.deref, row.outermost,
                    row.ra_mangled)


#: Rules by SFrame row (rows are shared by the lookups' caches; the row is kept so its id
#: is not reused while cached), bounded: starts over when full, as the plan cache does.
_ROW_RULES: dict[int, tuple[FrameRow, Rule]] = {}
ROW_RULES_LIMIT = 16384


def rule_of_row(row: FrameRow) -> Rule:
    """The rule of an SFrame row, cached."""
    found = _ROW_RULES.get(id(row))
    if found is not None and found[0] is row:
        return found[1]
    if len(_ROW_RULES) >= ROW_RULES_LIMIT:
        _ROW_RULES.clear()
    rule = Rule.of_row(row)
    _ROW_RULES[id(row)] = (row, rule)
    return rule


#: The frame-pointer method on x86-64: CFA = FP + 16, RA at CFA - 8, FP at CFA - 16.
FP_RULE = Rule(6, 16, ValueRule(RuleKind.CFA, -8, deref=True),
               ValueRule(RuleKind.CFA, -16, deref=True), frame_pointer=True)


if TYPE_CHECKING:  # a Protocol class costs start-up time; only the type checker needs it
    class Known(Protocol):
        """Registers known by DWARF number (a dict will do)."""

        def get(self, regnum: int, /) -> int | None: ...


class Regs(NamedTuple):
    """The registers of one frame as :func:`step` reads them. ``lr``: the link register
    (None: unknown); ``others``: other registers known, by DWARF number (None: none);
    ``topmost``: the frame the walk started in (its SP may stay)."""

    pc: int
    sp: int
    fp: int
    lr: int | None = None
    others: Known | None = None
    topmost: bool = False


if TYPE_CHECKING:
    from collections.abc import Callable

    #: Reads one word of the stack; None: unreadable.
    ReadWord = Callable[[int], int | None]


def step(rule: Rule, regs: Regs, read_word: ReadWord, policy: Policy) -> Regs | Stop:
    """The caller's registers by ``rule``, or why there is no caller. A failed read is
    MEMORY (the caller's ``read_word`` knows which address, and may say more)."""
    if rule.outermost:
        return Stop.OUTERMOST
    if rule.frame_pointer and policy.frame_pointer_guess:
        return _guess_frame_pointer(regs, read_word, policy)
    sp, fp, topmost = regs.sp, regs.fp, regs.topmost
    base = rule.cfa_base
    if base == policy.sp_reg:
        cfa = sp
    elif base == policy.fp_reg:
        if policy.fp_below_sp_refused and fp < sp:
            return Stop.FP_BELOW_SP
        cfa = fp
    else:
        value = _register(base, regs, policy)
        if value is None:
            return Stop.REGISTER
        cfa = value
    cfa += rule.cfa_offset
    if policy.wrap_addresses:
        cfa &= _WORD_MASK
    if rule.cfa_deref:
        loaded = read_word(cfa)
        if loaded is None:
            return Stop.MEMORY
        cfa = loaded
    new_sp = cfa + policy.sp_offset
    checked_first = policy.cfa_checked_first
    if checked_first and (new_sp <= sp or policy.cfa_alignment):
        stop = _check_cfa(cfa, new_sp, sp, topmost, policy)
        if stop is not None:
            return stop
    ra_rule = rule.ra
    if ra_rule.kind is _CFA and ra_rule.deref:  # the common rule, inline: RA on the stack
        loaded = read_word(cfa + ra_rule.offset)
        if loaded is None:
            return Stop.MEMORY
        ra = loaded & PAC_MASK if rule.ra_mangled else loaded
    else:
        found = _return_address(rule, cfa, regs, read_word, policy)
        if type(found) is Stop:
            return found
        ra = found  # type: ignore[assignment]
    fp_rule = rule.fp
    kind = fp_rule.kind
    if kind is _RETAIN:
        new_fp = fp
    elif kind is _CFA and fp_rule.deref:  # inline too: FP saved on the stack
        loaded = read_word(cfa + fp_rule.offset)
        if loaded is not None:
            new_fp = loaded
        elif policy.fp_kept_when_unknown:
            new_fp = fp
        else:
            return Stop.MEMORY
    else:
        saved = _frame_pointer(fp_rule, cfa, regs, read_word, policy)
        if type(saved) is Stop:
            return saved
        new_fp = saved  # type: ignore[assignment]
    if ra == 0 and policy.zero_ra_ends:
        return Stop.ZERO_PC
    if not checked_first and (new_sp <= sp or policy.cfa_alignment):
        stop = _check_cfa(cfa, new_sp, sp, topmost, policy)
        if stop is not None:
            return stop
    return Regs(ra, new_sp, new_fp)


def _check_cfa(cfa: int, new_sp: int, sp: int, topmost: bool, policy: Policy) -> Stop | None:
    """The stack must move up (the topmost frame may keep SP), the CFA be aligned."""
    if new_sp < sp:
        return Stop.BACKWARDS
    if new_sp == sp and not topmost:
        return Stop.NO_ADVANCE if policy.no_advance_apart else Stop.BACKWARDS
    if policy.cfa_alignment and cfa % policy.cfa_alignment:
        return Stop.UNALIGNED
    return None


def _register(regnum: int, regs: Regs, policy: Policy) -> int | None:
    """A register's value as a rule base; None: not known in this frame."""
    if policy.register_rules_topmost_only and not regs.topmost:
        return None
    if regnum == policy.sp_reg:
        return regs.sp
    if regnum == policy.fp_reg:
        return regs.fp
    if regnum == policy.link_register and regs.lr is not None:
        return regs.lr
    return regs.others.get(regnum) if regs.others is not None else None


def _return_address(rule: Rule, cfa: int, regs: Regs, read_word: ReadWord, policy: Policy
                    ) -> int | Stop:
    value = rule.ra
    kind = value.kind
    if kind == RuleKind.RETAIN:
        if regs.lr is None:
            if policy.refuse_bad_rules:
                return Stop.BAD_RULE if regs.topmost else Stop.REGISTER
            return Stop.NO_RULE
        ra = regs.lr
    else:
        address = _address(value, cfa, regs, policy)
        if type(address) is Stop:
            return address
        assert isinstance(address, int)
        if value.deref:
            loaded = read_word(address)
            if loaded is None:
                return Stop.MEMORY
            ra = loaded
        else:
            ra = address
    return ra & PAC_MASK if rule.ra_mangled else ra


def _frame_pointer(value: ValueRule, cfa: int, regs: Regs, read_word: ReadWord,
                   policy: Policy) -> int | Stop:
    if value.kind == RuleKind.RETAIN:
        return regs.fp
    address = _address(value, cfa, regs, policy)
    if type(address) is Stop:
        return regs.fp if policy.fp_kept_when_unknown else address
    assert isinstance(address, int)
    if not value.deref:
        return address
    loaded = read_word(address)
    if loaded is None:
        return regs.fp if policy.fp_kept_when_unknown else Stop.MEMORY
    return loaded


def _address(value: ValueRule, cfa: int, regs: Regs, policy: Policy) -> int | Stop:
    """Where an RA or FP rule points (its value when it loads nothing)."""
    if value.kind == RuleKind.CFA:
        if policy.refuse_bad_rules and not value.deref:
            return Stop.BAD_RULE  # a saved RA or FP is never a stack address
        return cfa + value.offset
    base = _register(value.regnum, regs, policy)
    if base is None:
        return Stop.REGISTER
    address = base + value.offset
    if policy.wrap_addresses and not value.deref:
        address &= _WORD_MASK
    return address


def _guess_frame_pointer(regs: Regs, read_word: ReadWord, policy: Policy) -> Regs | Stop:
    """The tools' frame-pointer step: [FP] = caller's FP, [FP + 8] = RA (its PAC stripped
    on AArch64), taken only if FP is aligned and not below SP; on s390x the back chain."""
    if policy.back_chain:
        return _guess_back_chain(regs, read_word, policy)
    sp, fp = regs.sp, regs.fp
    if fp < sp or fp & 7:
        return Stop.NO_RULE
    saved_fp = read_word(fp)
    if saved_fp is None:
        return Stop.MEMORY
    ra = read_word(fp + 8)
    if ra is None:
        return Stop.MEMORY
    if policy.signed_frame_records:
        ra &= PAC_MASK
    if ra == 0 and policy.zero_ra_ends:
        return Stop.ZERO_PC
    return Regs(ra, fp + 16, saved_fp)


#: s390x: r14's slot in a frame's register save area (r6 at 48, 8 bytes each).
S390X_R14_SLOT = 48 + 8 * 8


def _guess_back_chain(regs: Regs, read_word: ReadWord, policy: Policy) -> Regs | Stop:
    """The s390x back chain as the tools guess it (code built with ``-mbackchain``): the
    word at SP is the caller's SP, taken only if it is above SP and aligned (0, the
    outermost frame's, or anything else: NO_RULE, code without a back chain keeps other
    data there); RA in r14's slot of the caller's save area; FP unknown, kept."""
    sp = regs.sp
    caller_sp = read_word(sp)
    if caller_sp is None:
        return Stop.MEMORY
    if caller_sp <= sp or caller_sp & 7:
        return Stop.NO_RULE
    ra = read_word(caller_sp + S390X_R14_SLOT)
    if ra is None:
        return Stop.MEMORY
    if ra == 0 and policy.zero_ra_ends:
        return Stop.ZERO_PC
    return Regs(ra, caller_sp, regs.fp)

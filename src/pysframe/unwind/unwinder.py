"""The stack tracer: one frame at a time, SFrame first, frame pointers as fallback.

Like framehop: the rules of a frame are small values (:class:`~.step.Rule`) applied by one
step function (:func:`~.step.step`, under the tools' :class:`~.step.Policy`), failures are
explicit stop reasons (:class:`~.step.Stop`: memory unreadable, did not advance, moved
backwards, depth limit), and the lookup from address to rule goes through the SFrame
table's caches. What to do at a return address is decided once (a :mod:`plan <.plans>`)
and cached, bounded. The common default rule is precomputed in its plan and stepped
inline (the hot loop :func:`_run_defaults`: step()'s arithmetic and checks for that one
rule shape, kept equal to it by ``tests/test_step.py`` through the batch engine and by the
scalar/batch comparisons). Registers other than SP/FP (and the link register) are known
only in the topmost frame.

Chains are not memoized. Taking the outer frames of an earlier sample's chain, where
this sample's stack holds the same words, reused 80% of the Lua fixture recording's 66k
frames. It still cost more than it saved: a frame stepped here costs ~0.35 us, and the
memo ~4 us a sample (a probe per frame, one comparison of the words, keeping the chain).
End to end, it was 5-9% slower.
"""

from __future__ import annotations

from ..enums import StrEnum
from ..format.constants import ABI, DWARF_REGS, S390X_SP_VAL_OFFSET
from ..format.errors import SFrameError
from ..format.lookup import RuleKind
from ..records import NamedTuple
from .address_space import AddressSpace, Mapping
from .memory import StackMemory, StackReader, pair_reader
from .plans import (
    NO_MODULE,
    DefaultPlan,
    FramePointerPlan,
    NoModulePlan,
    Plan,
    PlanCache,
    RowPlan,
    SigreturnPlan,
)
from .signals import TRAMPOLINES, X86_64_SIGRETURN, interrupted
from .step import FP_RULE, Policy, Regs, Rule, Stop, rule_of_row, step

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

__all__ = ["EXACT_PC", "USER_LIMIT", "X86_64_SIGRETURN", "Frame", "FrameMethod", "Registers",
           "StackReads", "Stop", "Unwind", "Unwinder", "sigreturn_offsets", "unreadable"]


class FrameMethod(StrEnum):
    """How a frame was found; the value is the word printed (``--show-stops``, JSON)."""

    IP = "ip"  #: frame 0: the sampled pc
    SFRAME = "sframe"  #: recovered by an SFrame rule
    FP = "fp"  #: recovered by following the frame pointer
    SIGRETURN = "sigreturn"  #: the signal trampoline (its pc is exact)
    SIGNAL = "signal"  #: the frame a signal interrupted (its pc is exact)
    RECORDED = "recorded"  #: taken from the callchain the kernel recorded (printed as is)


#: Frame methods whose pc is exact rather than a return address (printed as is).
EXACT_PC = frozenset({FrameMethod.SIGRETURN, FrameMethod.SIGNAL, FrameMethod.RECORDED})

# The loop below reads these as module globals rather than enum class attributes.
_IP, _SFRAME, _FP = FrameMethod.IP, FrameMethod.SFRAME, FrameMethod.FP
_SIGRETURN, _SIGNAL = FrameMethod.SIGRETURN, FrameMethod.SIGNAL


class Frame(NamedTuple):
    """One frame of a chain, as consumers read it (:attr:`Unwind.frames`)."""

    pc: int
    #: IP (frame 0), SFRAME or FP (how this frame's caller was recovered is the next
    #: frame's method), SIGRETURN / SIGNAL around a signal frame.
    method: FrameMethod


class Unwind:
    """A chain, compact: the pc and method of each frame in two lists (no object per frame:
    the tracer's hot loop only appends), the mapping of each frame's lookup pc, and why it
    ended."""

    __slots__ = ("mappings", "methods", "pcs", "stop")

    def __init__(self, pcs: list[int] | None = None, methods: list[FrameMethod] | None = None,
                 stop: Stop = Stop.DEPTH, mappings: list[Mapping | None] | None = None) -> None:
        self.pcs: list[int] = [] if pcs is None else pcs
        self.methods: list[FrameMethod] = [] if methods is None else methods
        self.stop = stop
        #: The mapping holding each frame's (lookup) pc; None: unmapped.
        self.mappings: list[Mapping | None] = [] if mappings is None else mappings

    @property
    def frames(self) -> list[Frame]:
        """The frames as objects (built on demand)."""
        return [Frame(pc, method) for pc, method in zip(self.pcs, self.methods, strict=True)]

    def add(self, pc: int, method: FrameMethod) -> None:
        self.pcs.append(pc)
        self.methods.append(method)

    def __repr__(self) -> str:
        return f"Unwind(frames={self.frames!r}, stop={self.stop})"


class Registers:
    """The registers a step needs: pc, sp, fp, and the link register where there is one;
    ``others``: any other register known, by DWARF number (from ``sampled``, a perf
    sample's register values and where each DWARF register sits in them, made into a
    dict only when a rare rule asks: most chains never need one)."""

    __slots__ = ("_others", "_sampled", "fp", "lr", "pc", "sp")

    def __init__(self, pc: int, sp: int, fp: int, lr: int = 0,
                 others: dict[int, int] | None = None, *,
                 sampled: tuple[tuple[int, ...], dict[int, int]] | None = None) -> None:
        self.pc, self.sp, self.fp, self.lr = pc, sp, fp, lr
        self._others = others if others is not None or sampled is not None else {}
        self._sampled = sampled

    @property
    def others(self) -> dict[int, int]:
        if self._others is None:
            assert self._sampled is not None
            values, positions = self._sampled
            self._others = {number: values[index] for number, index in positions.items()}
        return self._others

    def get(self, regnum: int) -> int | None:
        """The value of another register by DWARF number (None: not known)."""
        return self.others.get(regnum)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Registers) and (self.pc, self.sp, self.fp, self.lr, self.others)
                == (other.pc, other.sp, other.fp, other.lr, other.others))

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaced

    def __repr__(self) -> str:
        return (f"Registers(pc={self.pc:#x}, sp={self.sp:#x}, fp={self.fp:#x}, lr={self.lr:#x}, "
                f"others={self.others!r})")



def sigreturn_offsets(data: Any, start: int, end: int) -> list[int]:
    """Where the x86-64 sigreturn trampoline's code starts in ``data`` (bytes or a
    mapped file) between ``start`` and ``end`` (file offsets): glibc's ``__restore_rt``,
    once in libc."""
    found = []
    last = end + len(X86_64_SIGRETURN) - 1  # a trampoline that starts before ``end``
    at = data.find(X86_64_SIGRETURN, start, last)
    while at >= 0:
        found.append(at)
        at = data.find(X86_64_SIGRETURN, at + 1, last)
    return found

USER_LIMIT = {ABI.AMD64_ENDIAN_LITTLE: 1 << 47, ABI.AARCH64_ENDIAN_LITTLE: 1 << 48,
              ABI.AARCH64_ENDIAN_BIG: 1 << 48, ABI.S390X_ENDIAN_BIG: 1 << 63}


def unreadable(memory: StackReader, address: int) -> Stop:
    """Why the word at ``address`` could not be read: past the end of a stack copy (the
    copy was too small for the whole stack), or not in the memory at all."""
    if isinstance(memory, StackMemory) and address + 8 > memory.end:
        return Stop.COPY_ENDED
    return Stop.MEMORY


class StackReads:
    """A step's reads of ``memory``, remembering the last that failed: a failed read is
    MEMORY to :func:`~.step.step`, here refined by its address (:func:`unreadable`)."""

    __slots__ = ("count", "memory", "missed", "missed_at")

    def __init__(self, memory: StackReader) -> None:
        self.memory = memory
        self.count = 0
        self.missed = 0
        self.missed_at = 0

    def read(self, address: int) -> int | None:
        self.count += 1
        value = self.memory.read(address)
        if value is None:
            self.missed, self.missed_at = address, self.count
        return value

    def reason(self, stop: Stop, rule: Rule) -> Stop:
        """``stop``, or for a failed read of the return address (or of a frame-pointer
        slot) whether the copy ended before it. A loaded CFA that is unreadable stays
        MEMORY, as it always has."""
        if stop is not Stop.MEMORY or (rule.cfa_deref and self.missed_at == 1):
            return stop
        return unreadable(self.memory, self.missed)


class Unwinder:
    def __init__(self, abi: ABI, max_depth: int = 127) -> None:
        #: Plans per (address-space layout, caller pc), reused across samples (the rule
        #: cache; bounded, see :data:`~.plans.PLAN_CACHE_LIMIT`).
        self._plans = PlanCache()
        self.abi = abi
        #: The byte order of the plans' pair readers (a stack copy read inline has it).
        self.big_endian = abi.big_endian
        regs = DWARF_REGS[abi]
        self.sp_reg, self.fp_reg, self.ra_reg = regs.sp, regs.fp, regs.ra
        self.max_depth = max_depth
        self.sp_offset = S390X_SP_VAL_OFFSET if abi.is_s390x else 0
        #: Return addresses at or above this are not user-space code (x86-64 and AArch64:
        #: 47/48-bit virtual addresses; s390x user space spans the lower half).
        self.user_limit = USER_LIMIT[abi]
        #: The tools' policy: how :func:`~.step.step` applies a rule here.
        self.policy = Policy.tools(abi, max_depth)
        #: The sigreturn trampolines recognized at a return address.
        self.trampolines = TRAMPOLINES.get(abi, ())
        #: Reads code that is in no file (a core's memory: qemu's signal trampoline page,
        #: a vdso): (address, size) -> bytes; None: only the files' code is read.
        self.code_in_memory: Callable[[int, int], bytes] | None = None

    def unwind(self, registers: Registers, memory: StackReader, space: AddressSpace, *,
               topmost: bool = True) -> Unwind:
        """The chain from ``registers``: the topmost frame's (the pc exact), or with
        ``topmost`` False a caller's (the pc a return address, its rules looked up one
        byte before it)."""
        result = Unwind([registers.pc], [_IP], Stop.DEPTH, [])
        pcs, methods, mappings = result.pcs, result.methods, result.mappings
        # Each frame's sp, and where the registers were last all known (frame 0 or a signal's
        # frame): to recover a callee-saved register from the callees' CFI, rarely needed.
        sps = [registers.sp]
        known_at = 0
        pc, sp, fp, lr = registers.pc, registers.sp, registers.fp, registers.lr
        cache = self._plans
        plans = cache.plans_for(space)
        # A perf stack copy is read inline (the hot path: no call per word); any other
        # memory through its read method.
        copy: Copy | None = ((memory.data, memory.base, memory.end, memory.unpack_from)
                             if type(memory) is StackMemory
                             and memory.big_endian == self.big_endian else None)
        sp_offset, max_depth = self.sp_offset, self.max_depth
        while len(pcs) < max_depth:
            if not topmost and copy is not None:
                pc, sp, fp, stop = _run_defaults(plans, pc, sp, fp, copy, result, sps,
                                                 sp_offset, max_depth)
                if stop is not None:
                    result.stop = stop
                    return result
                if len(pcs) >= max_depth:
                    break
            # A caller's plan is cached by its return address (its rules looked up one byte
            # before), a topmost frame's apart, by the bitwise complement of its pc (never
            # an address): the topmost pc is exact.
            key, lookup = (~pc, pc) if topmost else (pc, pc - 1)
            plan = plans.get(key)
            if plan is None:
                plan = self._plan(space, pc, lookup)
                plans = cache.remember(space, key, plan)
            mappings.append(plan.mapping)
            if type(plan) is DefaultPlan:
                default = (_step_on_copy(plan, sp, fp, topmost, copy, sp_offset)
                           if copy is not None
                           else _step_default(plan, sp, fp, topmost, memory, sp_offset))
                if type(default) is Stop:
                    result.stop = default
                    return result
                new_pc, new_sp, new_fp = default  # type: ignore[misc]
                method = _SFRAME
            elif type(plan) is SigreturnPlan:
                # A signal frame: the interrupted context is saved on the stack. Its pc is
                # exact (not a return address), and all its registers are known again.
                restored = self._signal_frame(sp, plan.kind, memory, result, sps)
                if restored is None:
                    result.stop = Stop.MEMORY
                    return result
                registers = restored
                pc, sp, fp, lr = restored.pc, restored.sp, restored.fp, restored.lr
                topmost, known_at = True, len(pcs) - 1
                continue
            else:
                assert not isinstance(plan, (DefaultPlan, SigreturnPlan))
                moved = self._step_other(plan, pc, sp, fp, lr, topmost, registers, memory,
                                         space)
                if moved is Stop.REGISTER and isinstance(plan, RowPlan) and not topmost:
                    callees = [(pcs[i], sps[i + 1], i == known_at or methods[i] in EXACT_PC)
                               for i in range(known_at, len(pcs) - 1)]
                    moved = self._step_recovering(plan.rule, pc, sp, fp, lr, callees,
                                                  registers, memory, space)
                if type(moved) is Stop:
                    result.stop = moved
                    return result
                new_pc, new_sp, new_fp, method = moved  # type: ignore[misc]
            pc, sp, fp = new_pc, new_sp, new_fp
            topmost = False
            pcs.append(pc)
            methods.append(method)
            sps.append(sp)
        mappings.append(space.find(pc if topmost else pc - 1))
        result.stop = Stop.DEPTH
        return result

    def _step_other(self, plan: RowPlan | FramePointerPlan | NoModulePlan, pc: int, sp: int,
                    fp: int, lr: int, topmost: bool, registers: Registers,
                    memory: StackReader, space: AddressSpace
                    ) -> tuple[int, int, int, FrameMethod] | Stop:
        """The caller's pc, sp, fp and how they were found, by :func:`~.step.step`: a
        general SFrame row, or the frame-pointer fallback; or why there is no caller."""
        if isinstance(plan, RowPlan):
            rule = plan.rule
            if rule.outermost:  # as step() says, without its set-up: most chains end here
                return Stop.OUTERMOST
            reads = StackReads(memory)
            known = Regs(pc, sp, fp, lr if topmost else None, registers if topmost else None,
                         topmost)
            moved = step(rule, known, reads.read, self.policy)
            method = _SFRAME
        else:
            rule = FP_RULE
            reads = StackReads(memory)
            moved = step(rule, Regs(pc, sp, fp, None, None, topmost), reads.read, self.policy)
            if moved is Stop.NO_RULE and isinstance(plan, NoModulePlan):
                return Stop.NO_MODULE
            # A register that is not a frame pointer gives junk: the step is taken only if
            # the return address could be one (canonical, in an executable mapping).
            if (type(moved) is Regs and moved.pc != 0
                    and (moved.pc >= self.user_limit or space.find(moved.pc - 1) is None)):
                return Stop.BAD_RA
            method = _FP
        if type(moved) is Stop:
            return reads.reason(moved, rule)
        assert isinstance(moved, Regs)
        return moved.pc, moved.sp, moved.fp, method

    def _step_recovering(self, rule: Rule, pc: int, sp: int, fp: int, lr: int,
                         callees: list[tuple[int, int, bool]], registers: Registers,
                         memory: StackReader, space: AddressSpace
                         ) -> tuple[int, int, int, FrameMethod] | Stop:
        """A step whose CFA is based on a callee-saved register other than SP and FP: the
        register's value in this frame recovered from the callees' CFI (x86-64)."""
        from .callee_saved import recover_register

        if self.abi is not ABI.AMD64_ENDIAN_LITTLE:
            return Stop.REGISTER
        regnum = rule.cfa_base
        value = recover_register(regnum, callees, registers.others.get(regnum), memory, space)
        if value is None:
            return Stop.REGISTER
        reads = StackReads(memory)
        moved = step(rule, Regs(pc, sp, fp, lr, {regnum: value}), reads.read, self.policy)
        if type(moved) is Stop:
            return reads.reason(moved, rule)
        assert isinstance(moved, Regs)
        return moved.pc, moved.sp, moved.fp, _SFRAME

    def plan_ahead(self, space: AddressSpace, pcs: Iterable[int]
                   ) -> list[tuple[int, Mapping | None]]:
        """Decide now the plans of topmost frames at the exact ``pcs`` in ``space`` (the
        samples ahead's), one after another; each pc planned, and the mapping its frame
        will have (the plan's). Decided between one sample's unwind and text and the
        next's, a plan had taken about twice as long, its code and tables cold in the CPU's
        caches (the Lua recording's 992: 11.5 us each, against 6 in a row). The same plans :meth:`unwind` decides, kept as it keeps them;
        a pc whose table faults is left to its frame, which drops the table then (nothing
        is dropped ahead of its time)."""
        cache = self._plans
        plans = cache.plans_for(space)
        room = cache.limit // 2 - len(cache)
        made: list[tuple[int, Mapping | None]] = []
        for pc in pcs:
            if len(made) >= room:
                break
            if ~pc in plans:
                continue
            try:
                plan = self._plan(space, pc, pc, quiet=True)
            except SFrameError:
                continue
            plans = cache.remember(space, ~pc, plan)
            made.append((pc, plan.mapping))
        return made

    def _plan(self, space: AddressSpace, pc: int, lookup_pc: int, quiet: bool = False
              ) -> Plan:
        """The plan for a frame at ``pc`` (rules looked up at ``lookup_pc``: pc - 1 for
        return addresses). A return into a sigreturn trampoline is a signal frame.
        ``quiet``: a table's fault is raised (:class:`SFrameError`), not dropped."""
        if self.trampolines:
            # The topmost frame (its pc exact) may also be in the trampoline's system call:
            # its pc just after it (x86-64: in padding that no code reaches otherwise).
            at_pc = space.find(pc)
            for kind, code in enumerate(self.trampolines):
                if self._code(at_pc, pc, len(code)) == code:
                    return SigreturnPlan(at_pc, kind)
                if pc == lookup_pc:
                    before = space.find(pc - len(code))
                    if self._code(before, pc - len(code), len(code)) == code:
                        return SigreturnPlan(before, kind)
            # (the return address's mapping is the lookup's, unless it starts there)
            if at_pc is not None and at_pc.start <= lookup_pc:
                return self._plan_in(at_pc, lookup_pc, quiet)
        return self._plan_in(space.find(lookup_pc), lookup_pc, quiet)

    def _code(self, mapping: Mapping | None, start: int, size: int) -> bytes | None:
        """``size`` bytes of code at ``start``: from the mapping's file, else (no file)
        from :attr:`code_in_memory`."""
        found = mapping.code(start, size) if mapping is not None else None
        if found is None and self.code_in_memory is not None and (
                mapping is None or mapping.module is None):
            found = self.code_in_memory(start, size)
        return found

    def _signal_frame(self, sp: int, kind: int, memory: StackReader, result: Unwind,
                      sps: list[int]) -> Registers | None:
        """Step into the frame a signal interrupted (its registers, from the signal frame
        at ``sp``), marking the trampoline's frame; None: the context is unreadable."""
        result.methods[-1] = _SIGRETURN
        restored = interrupted(self.abi, kind, sp, memory)
        if restored is None:
            return None
        result.add(restored.pc, _SIGNAL)
        sps.append(restored.sp)
        return Registers(restored.pc, restored.sp, restored.fp, restored.lr, restored.others)

    def _plan_in(self, mapping: Mapping | None, pc: int, quiet: bool = False) -> Plan:
        """What to do at ``pc``: the precomputed default rule where it applies, the general
        SFrame row otherwise, or the frame-pointer fallback where there is no row."""
        if mapping is None:
            return NO_MODULE
        module = mapping.module
        row = (None if module is None else module.row(pc) if quiet else module.find_fre(pc))
        if row is None:
            return FramePointerPlan(mapping)
        cfa, ra, fp = row.cfa, row.ra, row.fp
        if (not row.outermost and not row.ra_mangled and not cfa.deref
                and cfa.regnum in (self.sp_reg, self.fp_reg)
                and ra.kind == RuleKind.CFA and ra.deref
                and (fp.kind == RuleKind.RETAIN or (fp.kind == RuleKind.CFA and fp.deref))):
            fp_offset = fp.offset if fp.kind == RuleKind.CFA else None
            gap = None if fp_offset is None else ra.offset - fp_offset
            return DefaultPlan(mapping, cfa.regnum == self.sp_reg, cfa.offset, ra.offset,
                               fp_offset, None if gap is None or gap < 8
                               else pair_reader(self.big_endian, gap))
        return RowPlan(mapping, rule_of_row(row))


def _step_on_copy(plan: DefaultPlan, sp: int, fp: int, topmost: bool, copy: Copy,
                  sp_offset: int) -> tuple[int, int, int] | Stop:
    """:func:`_step_default` on a perf stack copy, its words read inline (no call for each:
    a topmost frame's step is one a sample)."""
    data, base, end, unpack = copy
    _, sp_based, cfa_offset, ra_offset, fp_offset, _ = plan
    cfa = (sp if sp_based else fp) + cfa_offset
    address = cfa + ra_offset
    if address < base or address + 8 > end:
        return Stop.COPY_ENDED if address + 8 > end else Stop.MEMORY
    new_pc = unpack(data, address - base)[0]
    if fp_offset is not None and base <= cfa + fp_offset <= end - 8:
        fp = unpack(data, cfa + fp_offset - base)[0]
    new_sp = cfa + sp_offset
    if new_pc == 0:
        return Stop.ZERO_PC
    if new_sp < sp or (new_sp == sp and not topmost):
        return Stop.BACKWARDS if new_sp < sp else Stop.NO_ADVANCE
    return new_pc, new_sp, fp


def _step_default(plan: DefaultPlan, sp: int, fp: int, topmost: bool, memory: StackReader,
                  sp_offset: int) -> tuple[int, int, int] | Stop:
    """The common default rule (CFA = SP/FP + offset, RA and FP on the stack), precomputed
    per pc: a few additions and at most two loads, then :func:`~.step.step`'s checks under
    the tools' policy, in its order."""
    _, sp_based, cfa_offset, ra_offset, fp_offset, _ = plan
    cfa = (sp if sp_based else fp) + cfa_offset
    new_pc = memory.read(cfa + ra_offset)
    if new_pc is None:
        return unreadable(memory, cfa + ra_offset)
    new_fp = fp
    if fp_offset is not None:
        saved = memory.read(cfa + fp_offset)
        if saved is not None:
            new_fp = saved
    new_sp = cfa + sp_offset
    if new_pc == 0:
        return Stop.ZERO_PC
    if new_sp < sp or (new_sp == sp and not topmost):
        return Stop.BACKWARDS if new_sp < sp else Stop.NO_ADVANCE
    return new_pc, new_sp, new_fp


if TYPE_CHECKING:
    #: A perf stack copy as the hot loop reads it: bytes, base address, end address, reader.
    Copy = tuple[bytes | memoryview, int, int, Callable[[bytes | memoryview, int], tuple[int]]]


def _run_defaults(plans: dict[int, Plan], pc: int, sp: int, fp: int, copy: Copy,
                  result: Unwind, sps: list[int], sp_offset: int, max_depth: int
                  ) -> tuple[int, int, int, Stop | None]:
    """The hot path of :meth:`Unwinder.unwind`: callers whose cached plan is the default
    rule, stepped in a tight loop with the stack copy read inline (the same checks as the
    general loop, in the same order). Returns the registers at the first frame that needs
    the general loop, and the stop reason if the chain ended.

    SP and FP are kept as offsets into the copy: addresses are 47-bit integers, each sum
    a new multi-digit int, where offsets are small ones. With the plans keyed by the
    return address itself (no pc - 1 a frame) and each frame's method added once at the
    end, the Lua recording's 62,000 frames here took 23 ms against 27. A chain that ends
    at an outermost row ends here too, as the general loop would end it."""
    data, base, end, unpack = copy
    pcs, mappings = result.pcs, result.mappings
    add_pc, add_sp, add_mapping = pcs.append, sps.append, mappings.append
    first = depth = len(pcs)
    last = end - 8 - base  # (the last offset a whole word of the copy starts at)
    at_sp, at_fp = sp - base, fp - base
    stop = None
    while depth < max_depth:
        plan = plans.get(pc)
        if type(plan) is not DefaultPlan:
            if type(plan) is RowPlan and plan.rule.outermost:  # (most chains end so: as
                add_mapping(plan.mapping)                      # the general loop ends them)
                stop = Stop.OUTERMOST
            break
        mapping, sp_based, cfa_offset, ra_offset, fp_offset, pair = plan
        cfa = (at_sp if sp_based else at_fp) + cfa_offset
        add_mapping(mapping)
        # (a pair reader comes with an FP slot below the RA's: both in the copy)
        if pair is not None and 0 <= (at := cfa + fp_offset) and cfa + ra_offset <= last:  # type: ignore[operator]
            saved_fp, new_pc = pair(data, at)
            at_fp = saved_fp - base
        else:
            at = cfa + ra_offset
            if not 0 <= at <= last:
                stop = Stop.COPY_ENDED if at > last else Stop.MEMORY
                break
            new_pc = unpack(data, at)[0]
            if fp_offset is not None:
                at = cfa + fp_offset
                if 0 <= at <= last:
                    at_fp = unpack(data, at)[0] - base
        if sp_offset:
            cfa += sp_offset
        if new_pc == 0:
            stop = Stop.ZERO_PC
            break
        if cfa <= at_sp:
            stop = Stop.BACKWARDS if cfa < at_sp else Stop.NO_ADVANCE
            break
        pc = new_pc
        at_sp = cfa
        add_pc(pc)
        add_sp(cfa + base)
        depth += 1
    if depth > first:
        result.methods += [_SFRAME] * (depth - first)
    return pc, at_sp + base, at_fp + base, stop

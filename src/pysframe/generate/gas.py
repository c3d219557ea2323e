"""Translate one function's CFI into an SFrame FDE the way GNU as does it.

The rules follow gas's SFrame generator (``gas/gen-sframe.c``) as summarised in
``shared/spec/sframe-format.md`` §4.2, in two flavours: binutils 2.46 (SFrame V3:
flexible FDEs, RA-undefined rows, signal frames, zero-FRE FDEs kept) and
binutils 2.41-2.45 (SFrame V2: anything beyond SP/FP-based CFA and stack-saved
RA/FP makes gas skip the function). A function gas would skip gives a
:class:`Skip` with gas's reason.

By default the rows are correct ones; with ``as_gnu`` they are gas's byte for byte,
including three bugs of the V2-era gas (2.41-2.45) that give wrong rows:
``.cfi_remember_state`` remembered the last finished row instead of the one being
built, and on x86-64 ``.cfi_undefined rip`` and ``.cfi_register rip, REG`` were
ignored (the row says RA at CFA-8, so an unwinder walks past the outermost frame or
reads a stale slot). Correct V2 output leaves such functions out (V2 has no
RA-undefined or RA-in-register rows) and restores the row being built.

Rows: the CIE's initial instructions and the FDE's instructions are replayed
in order; an advance closes the current row only if an instruction changed it
(unchanged rows merge into the previous one), like gas's scratch-row logic.
"""

from __future__ import annotations

from ..cfi.instructions import (
    NAMES,
    DW_CFA_AARCH64_negate_ra_state_with_pc,
    DW_CFA_advance_loc,
    DW_CFA_def_cfa,
    DW_CFA_def_cfa_expression,
    DW_CFA_def_cfa_offset,
    DW_CFA_def_cfa_register,
    DW_CFA_expression,
    DW_CFA_GNU_args_size,
    DW_CFA_GNU_window_save,
    DW_CFA_nop,
    DW_CFA_offset,
    DW_CFA_offset_extended,
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
    Instruction,
)
from ..cfi.leb128 import DecodeError, read_sleb128
from ..errors import PysframeError
from ..format.constants import ABI, DWARF_REGS, BaseReg, FDEType
from ..format.model import FDE, FRE
from ..format.validation import MAX_DWARF_REGNUM
from ..records import field, record_class

TYPE_CHECKING = False
if TYPE_CHECKING:  # (collections.abc imports collections: ~1 ms of a first run)
    from collections.abc import Callable

DW_OP_breg0 = 0x70
DW_OP_deref = 0x06


class Skip(PysframeError):
    """gas would emit no SFrame FDE for this function (``reason`` is gas's wording)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@record_class
class Saved:
    """Where FP or RA is: on the stack at CFA+offset, in a register, or *(reg+offset)."""

    kind: str  # "stack", "reg", "deref-reg"
    offset: int = 0
    reg: int = 0


@record_class
class Row:
    cfa_reg: int = -1
    cfa_offset: int = 0
    cfa_deref: bool = False
    fp: Saved | None = None
    ra: Saved | None = None
    ra_undefined: bool = False
    mangled: bool = False

    def copy(self) -> Row:
        # The constructor, not records.replace (~5x slower): a row is copied at every
        # advance of every function a first run makes.
        return Row(self.cfa_reg, self.cfa_offset, self.cfa_deref, self.fp, self.ra,
                   self.ra_undefined, self.mangled)


@record_class
class _Context:
    abi: ABI
    v3: bool
    sp: int
    fp: int
    ra: int
    ra_tracked: bool
    flex_ok: bool
    row: Row = field(default_factory=Row)
    #: The machine, asked at every row (an enum property costs ~0.2 us each time).
    s390x: bool = False
    aarch64: bool = False
    amd64: bool = False
    changed: bool = True
    first_row: Row | None = None
    remembered: list[Row] = field(default_factory=list)
    rows: list[tuple[int, Row]] = field(default_factory=list)
    needs_flex: bool = False
    #: Reproduce gas's wrong rows (see the module's description).
    as_gnu: bool = False
    #: Keep a function whose CFI has a DW_CFA_GNU_args_size (see :func:`translate`).
    args_size: bool = False


def strip_padding(instructions: list[Instruction]) -> list[Instruction]:
    """Drop the DW_CFA_nop padding at the end of a CIE's or FDE's instructions."""
    end = len(instructions)
    while end and instructions[end - 1].op == DW_CFA_nop:
        end -= 1
    return instructions[:end]


def translate(instructions: list[Instruction], start: int, size: int, abi: ABI, *, version: int = 3,
              signal: bool = False, b_key: bool = False, return_register: int | None = None,
              notes: list[str] | None = None, as_gnu: bool = False,
              args_size: bool = False) -> FDE:
    """The SFrame FDE gas makes for a function at ``start`` of ``size`` bytes whose CFI
    (CIE initial instructions followed by the FDE's) is ``instructions``.

    Raises :class:`Skip` when gas emits no FDE (V3: a signal frame whose rows
    cannot be translated still gives an FDE without FREs). Rows the CFI places at or
    past the function's end (only a damaged or hand-made FDE has them: gas's rows come
    from the function's own instructions) describe no instruction of it and are
    dropped, as a DWARF unwinder never reaches them; ``notes`` gets a line saying so.

    ``args_size``: translate a function gas skips for its DW_CFA_GNU_args_size escape (a
    non-zero size with an SP-based CFA; in V2 any). The size only tells an exception
    unwinder how far to move SP when it installs a landing pad (libgcc's
    ``_Unwind_GetArgsSize``); where the CFA is, each row's own rule says, the pushed
    arguments counted (compilers emit a ``.cfi_def_cfa_offset`` with every push), so a
    stack tracer loses nothing by ignoring it and gains the function (Rust and C++ code
    built by LLVM has many). Off: gas's choice.
    """
    regs = DWARF_REGS[abi]
    v3 = version >= 3
    amd64, aarch64 = abi.is_amd64, abi.is_aarch64
    context = _Context(abi, v3, regs.sp, regs.fp, regs.ra, not amd64, v3 and not aarch64,
                       s390x=abi.is_s390x, aarch64=aarch64, amd64=amd64, as_gnu=as_gnu,
                       args_size=args_size)
    try:
        if return_register is not None and return_register != regs.ra:
            raise Skip(f"non-default RA register {return_register}")
        _replay(context, instructions, start)
        rows = context.rows = _inside(context.rows, size, notes)
        fres = [_fre(context, offset, row) for offset, row in rows]
        if v3 and len(fres) > 0xFFFF:
            raise Skip("too many FREs")
        if not v3 and not fres:
            raise Skip("no SFrame FREs")
    except Skip:
        if v3 and signal:
            return FDE(start, size, [], signal=True, pauth_key_b=b_key)
        raise
    fde_type = FDEType.FLEX if context.needs_flex else FDEType.DEFAULT
    if fde_type == FDEType.FLEX:
        fres = [_flex_fre(context, offset, row) for offset, row in rows]
    return FDE(start, size, fres, fde_type=fde_type, signal=signal and v3, pauth_key_b=b_key)


def _inside(rows: list[tuple[int, Row]], size: int, notes: list[str] | None
            ) -> list[tuple[int, Row]]:
    """The rows that start inside a function of ``size`` bytes."""
    kept = [(offset, row) for offset, row in rows if offset < size]
    if len(kept) != len(rows) and notes is not None:
        dropped = len(rows) - len(kept)
        notes.append(f"{dropped} CFI row{'s' if dropped > 1 else ''} at or past the "
                     "function's end dropped")
    return kept


# --- replaying the instructions -----------------------------------------------------------

def _changed(context: _Context) -> Row:
    context.changed = True
    return context.row


def _replay(context: _Context, instructions: list[Instruction], start: int) -> None:
    location = 0
    context.rows = []
    context.row = Row()
    context.changed = True
    sp, fp, ra = context.sp, context.fp, context.ra
    plain_offsets = not context.s390x  # (s390x CFA offsets have a rule of their own)
    for insn in instructions:
        op = insn.op
        # The two most frequent instructions, in place when they do the usual thing (what
        # their handlers do then): a CFA offset from SP/FP, a register not tracked saved.
        if op == DW_CFA_def_cfa_offset:
            row = context.row
            if plain_offsets and (row.cfa_reg == sp or row.cfa_reg == fp) \
                    and insn.a < (1 << 31):
                context.changed = True
                row.cfa_offset = insn.a
                continue
        elif op == DW_CFA_offset or op == DW_CFA_offset_extended:
            if insn.a != fp and insn.a != ra:
                continue  # (other registers are not tracked)
        if op == DW_CFA_nop:
            # Entry padding is stripped by the caller, so this is an escaped DW_CFA_nop:
            # ignored by gas 2.46; 2.41-2.45 skipped every .cfi_escape.
            if not context.v3:
                raise Skip("CFI insn CFI_escape (0x103)")
            continue
        if op in (DW_CFA_advance_loc, DW_CFA_set_loc):
            new_location = location + insn.a if op == DW_CFA_advance_loc else insn.a - start
            if new_location < location:
                # Only DW_CFA_set_loc can go back; rows must ascend.
                raise Skip("DW_CFA_set_loc moves backwards")
            if new_location != location:
                _advance(context, location, new_location)
                location = new_location
            continue
        _apply(context, insn)
    # gas links in the last scratch row whether or not anything changed in it.
    context.rows.append((location, context.row))


def _advance(context: _Context, location: int, new_location: int) -> None:
    if context.changed:
        context.rows.append((location, context.row))
        if context.first_row is None:
            context.first_row = context.row
        context.row = context.row.copy()
        context.changed = False
    # else: the row continues (merged)


def _is_sp_or_fp(context: _Context, reg: int) -> bool:
    return reg in (context.sp, context.fp)


def _apply(context: _Context, insn: Instruction) -> None:
    """Apply one instruction other than an advance or a nop to the row being built."""
    handler = _HANDLERS.get(insn.op)
    if handler is None:
        raise Skip(f"CFI insn {NAMES.get(insn.op, hex(insn.op))}")
    handler(context, insn)


# --- the CFA ---

def _def_cfa(context: _Context, insn: Instruction) -> None:
    _set_cfa_register(context, insn.a, "def_cfa")
    row = _changed(context)
    row.cfa_reg, row.cfa_offset, row.cfa_deref = insn.a, insn.b, False
    _check_cfa_offset(context, insn.b, ".cfi_def_cfa")


def _def_cfa_register(context: _Context, insn: Instruction) -> None:
    _set_cfa_register(context, insn.a, "def_cfa_register")
    row = _changed(context)
    row.cfa_reg, row.cfa_deref = insn.a, False


def _def_cfa_offset(context: _Context, insn: Instruction) -> None:
    cfa_reg = context.row.cfa_reg
    if not _is_sp_or_fp(context, cfa_reg) and not (context.flex_ok and cfa_reg >= 0):
        raise Skip(".cfi_def_cfa_offset without CFA base register in effect")
    row = _changed(context)
    row.cfa_offset = insn.a
    _check_cfa_offset(context, insn.a, ".cfi_def_cfa_offset")


def _def_cfa_expression(context: _Context, insn: Instruction) -> None:
    _cfa_expression(context, insn.block)


def _args_size(context: _Context, insn: Instruction) -> None:
    if context.args_size:
        return  # for a landing pad only (see translate())
    if not context.v3:
        raise Skip("CFI insn CFI_escape (0x103)")
    if insn.a != 0 and context.row.cfa_reg != context.fp:
        raise Skip(".cfi_escape with op (0x2e)")


# --- saved registers ---

def _offset(context: _Context, insn: Instruction) -> None:
    _saved_on_stack(context, insn.a, insn.b)


def _val_offset(context: _Context, insn: Instruction) -> None:
    reg = insn.a
    sp_ok = 0 if not context.s390x else -160
    if reg == context.fp or (reg == context.ra and context.ra_tracked) or (
            reg == context.sp and insn.b != sp_ok):
        raise Skip(f"{NAMES[insn.op]} for register {reg}")


def _register_insn(context: _Context, insn: Instruction) -> None:
    _register(context, insn.a, insn.b)


def _restore_insn(context: _Context, insn: Instruction) -> None:
    _restore(context, insn.a)


def _undefined(context: _Context, insn: Instruction) -> None:
    reg = insn.a
    if reg == context.ra:
        if not context.v3:
            if context.ra_tracked:
                raise Skip("CFI insn DW_CFA_undefined for RA")
            if context.as_gnu:
                return  # 2.41-2.45 on x86-64: RA is not tracked, the directive is ignored
            # ... which leaves RA at CFA-8 in the outermost frame: V2 cannot say better.
            raise Skip("DW_CFA_undefined for RA (no RA-undefined rows in SFrame V2)")
        row = _changed(context)
        row.ra_undefined = True
    elif _is_sp_or_fp(context, reg):
        raise Skip(f"DW_CFA_undefined for register {reg}")


def _same_value(context: _Context, insn: Instruction) -> None:
    reg = insn.a
    if reg == context.ra and context.ra_tracked:
        row = _changed(context)
        row.ra = None
    elif reg == context.fp:
        row = _changed(context)
        row.fp = None


def _expression_insn(context: _Context, insn: Instruction) -> None:
    _expression(context, insn.a, insn.block)


def _val_expression(context: _Context, insn: Instruction) -> None:
    raise Skip(".cfi_escape with op (0x16)" if context.v3 else "CFI insn CFI_escape (0x103)")


# --- remembered states ---

def _remember_state(context: _Context, insn: Instruction) -> None:
    if context.v3 or not context.as_gnu:
        if context.first_row is None and not context.rows and context.row.cfa_reg < 0:
            raise Skip(".cfi_remember_state without prior SFrame FRE state")
        context.remembered.append(context.row.copy())
    else:
        # gas 2.41-2.45 remembered the last completed row, not the one being built.
        if not context.rows:
            raise Skip(".cfi_remember_state without prior SFrame FRE state")
        context.remembered.append(context.rows[-1][1].copy())


def _restore_state(context: _Context, insn: Instruction) -> None:
    if not context.remembered:
        raise Skip(".cfi_restore_state without a remembered state")
    saved = context.remembered.pop()
    row = _changed(context)
    mangled = row.mangled
    row.cfa_reg, row.cfa_offset, row.cfa_deref = saved.cfa_reg, saved.cfa_offset, saved.cfa_deref
    row.fp, row.ra, row.ra_undefined = saved.fp, saved.ra, saved.ra_undefined
    row.mangled = saved.mangled if context.aarch64 else mangled


# --- return-address signing (AArch64) ---

def _window_save(context: _Context, insn: Instruction) -> None:
    if not context.aarch64:
        raise Skip("CFI insn DW_CFA_GNU_window_save")
    row = _changed(context)
    row.mangled = not row.mangled


def _negate_ra_state_with_pc(context: _Context, insn: Instruction) -> None:
    raise Skip("CFI insn DW_CFA_AARCH64_negate_ra_state_with_pc")


#: What each instruction does to the row (advances and nops are handled by _replay;
#: anything else makes gas skip the function).
_HANDLERS: dict[int, Callable[[_Context, Instruction], None]] = {
    DW_CFA_def_cfa: _def_cfa,
    DW_CFA_def_cfa_register: _def_cfa_register,
    DW_CFA_def_cfa_offset: _def_cfa_offset,
    DW_CFA_offset: _offset,
    DW_CFA_offset_extended: _offset,
    DW_CFA_val_offset: _val_offset,
    DW_CFA_register: _register_insn,
    DW_CFA_remember_state: _remember_state,
    DW_CFA_restore_state: _restore_state,
    DW_CFA_restore: _restore_insn,
    DW_CFA_restore_extended: _restore_insn,
    DW_CFA_undefined: _undefined,
    DW_CFA_same_value: _same_value,
    DW_CFA_GNU_window_save: _window_save,
    DW_CFA_AARCH64_negate_ra_state_with_pc: _negate_ra_state_with_pc,
    DW_CFA_GNU_args_size: _args_size,
    DW_CFA_def_cfa_expression: _def_cfa_expression,
    DW_CFA_expression: _expression_insn,
    DW_CFA_val_expression: _val_expression,
}


def _check_cfa_offset(context: _Context, offset: int, what: str) -> None:
    if context.s390x:
        # A CFA below the stack pointer cannot be written (the word is (offset - 160) / 8
        # and readers refuse a negative result).
        if ((offset + 160) % 8 and (offset - 160) % 8) or offset < 0:
            raise Skip(f"{what} with unsupported offset value")
    if not -(1 << 31) <= offset < (1 << 31):
        raise Skip(f"{what} with unsupported offset value")


def _set_cfa_register(context: _Context, reg: int, what: str) -> None:
    if _is_sp_or_fp(context, reg):
        return
    if context.flex_ok:
        _check_register(reg)
        context.needs_flex = True
        return
    raise Skip(f"non-SP/FP register {reg} in .cfi_{what}")


def _check_register(reg: int) -> None:
    """A register a flexible FDE names must be one an ABI has (damaged CFI names others;
    gas names only registers it can assemble)."""
    if not 0 <= reg <= MAX_DWARF_REGNUM:
        raise Skip(f"DWARF register {reg} (no ABI has it)")


def _saved_on_stack(context: _Context, reg: int, offset: int) -> None:
    if reg == context.fp:
        row = _changed(context)
        row.fp = Saved("stack", offset)
    elif reg == context.ra:
        if context.amd64:
            row = _changed(context)
            if offset == -8:
                row.ra = None
            elif context.flex_ok:
                context.needs_flex = True
                row.ra = Saved("stack", offset)
            else:
                raise Skip(f"RA saved at offset {offset}")
        else:
            row = _changed(context)
            row.ra = Saved("stack", offset)
            row.ra_undefined = False
    # other registers (and SP) are not tracked


def _register(context: _Context, reg: int, other: int) -> None:
    if context.flex_ok:
        if reg in (context.fp, context.ra):
            _check_register(other)
        if reg == context.fp:
            context.needs_flex = True
            row = _changed(context)
            row.fp = Saved("reg", 0, other)
        elif reg == context.ra:
            context.needs_flex = True
            row = _changed(context)
            row.ra = Saved("reg", 0, other)
            row.ra_undefined = False
        elif reg == context.sp and not context.s390x:
            raise Skip(f"DW_CFA_register for SP ({reg})")
        return
    if not context.v3:
        # 2.41-2.45: only FP, and RA where it is tracked, cannot be represented (gas
        # ignored an x86-64 RA in a register, leaving the row's RA at CFA-8: wrong).
        if reg == context.fp or (reg == context.ra and (context.ra_tracked
                                                        or not context.as_gnu)):
            raise Skip(f"DW_CFA_register for register {reg}")
        return
    if reg in (context.ra, context.sp, context.fp):
        raise Skip(f"DW_CFA_register for register {reg}")


def _restore(context: _Context, reg: int) -> None:
    first = context.first_row or context.row
    if reg == context.fp:
        row = _changed(context)
        row.fp = first.fp
    elif reg == context.ra and context.ra_tracked:
        row = _changed(context)
        row.ra, row.ra_undefined = first.ra, first.ra_undefined


def _breg(block: bytes) -> tuple[int, int, int] | None:
    """(register, offset, length) of a leading DW_OP_bregN <sleb>."""
    if not block or not DW_OP_breg0 <= block[0] < DW_OP_breg0 + 32:
        return None
    try:
        offset, end = read_sleb128(block, 1, len(block))
    except DecodeError:
        return None
    return block[0] - DW_OP_breg0, offset, end


def _cfa_expression(context: _Context, block: bytes) -> None:
    parsed = _breg(block)
    if (context.v3 and context.amd64 and parsed is not None and parsed[0] == context.fp
            and parsed[2] + 1 == len(block) and block[-1] == DW_OP_deref):
        context.needs_flex = True
        row = _changed(context)
        row.cfa_reg, row.cfa_offset, row.cfa_deref = context.fp, parsed[1], True
        return
    raise Skip(".cfi_escape with op (0xf)" if context.v3 else "CFI insn CFI_escape (0x103)")


def _expression(context: _Context, reg: int, block: bytes) -> None:
    if not context.v3:
        raise Skip("CFI insn CFI_escape (0x103)")
    parsed = _breg(block)
    if (not context.s390x and reg == context.fp and parsed is not None
            and parsed[0] == context.fp and parsed[2] == len(block)):
        context.needs_flex = True
        row = _changed(context)
        # gas 2.46 writes register number -1 on AArch64 here (a control word of 0xfffffffb);
        # we write what gas writes.
        row.fp = Saved("deref-reg", parsed[1], context.fp if context.amd64 else -1)
        return
    tracked = {context.sp, context.fp, context.row.cfa_reg} | (
        {context.ra} if context.ra_tracked else set())
    if reg in tracked or context.s390x:
        raise Skip(".cfi_escape with op (0x10)")
    # other registers: ignored


# --- rows to FREs -------------------------------------------------------------------------

def _cfa_word(context: _Context, offset: int) -> int:
    if context.s390x:
        return (offset - 160) // 8
    return offset


def _fre(context: _Context, offset: int, row: Row) -> FRE:
    if row.ra_undefined:
        return FRE(offset, (), BaseReg.FP)  # gas writes the whole info byte as 0
    if row.cfa_reg < 0:
        raise Skip("no CFA rule")
    base = BaseReg.SP if row.cfa_reg == context.sp else BaseReg.FP
    if context.needs_flex:
        return FRE(offset, (), base)  # replaced by _flex_fre
    words = [_cfa_word(context, row.cfa_offset)]
    fp_on_stack = row.fp is not None and row.fp.kind == "stack"
    ra_on_stack = row.ra is not None and row.ra.kind == "stack"
    if context.ra_tracked:
        if fp_on_stack and not ra_on_stack and not context.s390x:
            raise Skip("FP without RA on stack")
        if ra_on_stack:
            assert row.ra is not None
            words.append(row.ra.offset)
        elif fp_on_stack:
            words.append(0)  # s390x: RA padding so FP stays the third word
    if fp_on_stack:
        assert row.fp is not None
        words.append(row.fp.offset)
    for word in words:  # (a loop, not a generator: every row of every function made)
        _offset_word(word)
    return FRE(offset, tuple(words), base, row.mangled)


def _offset_word(value: int) -> int:
    """``value`` as a data word: offsets are 32-bit at most (only damaged CFI has more)."""
    if not -(1 << 31) <= value < (1 << 31):
        raise Skip(f"offset {value} beyond 32 bits")
    return value


def _flex_pair(context: _Context, saved: Saved) -> list[int]:
    if saved.kind == "stack":
        return [2, _offset_word(saved.offset)]
    if saved.kind == "reg":
        return [(saved.reg << 3) | 1, 0]
    return [((saved.reg << 3) | 3) & 0xFFFFFFFF, _offset_word(saved.offset)]


def _flex_fre(context: _Context, offset: int, row: Row) -> FRE:
    if row.ra_undefined:
        return FRE(offset, (), BaseReg.FP)
    if row.cfa_reg < 0:
        raise Skip("no CFA rule")
    control = (row.cfa_reg << 3) | 1 | (2 if row.cfa_deref else 0)
    words = [control, _cfa_word(context, row.cfa_offset)]
    ra = row.ra
    if ra is not None:
        words += _flex_pair(context, ra)
    elif row.fp is not None:
        words.append(0)
    if row.fp is not None:
        words += _flex_pair(context, row.fp)
    return FRE(offset, tuple(words), BaseReg.FP, row.mangled)

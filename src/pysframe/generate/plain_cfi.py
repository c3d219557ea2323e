"""The SFrame FDE of a plain x86-64 function, read from its CFI bytes in one pass: what
:func:`~.section.translate_entry` gives (version 3, correct rows, DW_CFA_GNU_args_size
kept), for the CFI compilers emit for almost every function, or None for anything else,
which the general translation then reads.

Why a second reading: a first run makes each function the samples reach when it first
needs it, and the general one (instructions decoded into objects, then replayed row by
row as gas does it, each row a record) was ~30 us of a cc1 function's ~70. Plain means:
a CIE with the default return-address column and no signal frame; the instructions
advance, set the CFA from SP or FP (offsets below 2**31), save FP or RA (RA only at
CFA-8, where the default rule has it), restore, remember and restore states (a state
remembered after a CFA rule), GNU_args_size and nops; every row has a CFA rule and data
words of 32 bits. tests/test_plain_cfi.py holds it to the general translation over every
FDE of real binaries.
"""

from __future__ import annotations

from ..cfi.leb128 import DecodeError, read_uleb128
from ..errors import PysframeError
from ..format.constants import BaseReg
from ..format.model import FDE, FRE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..cfi.eh_frame import FDE as CFIFDE

_SP, _FP, _RA = 7, 6, 16
_WORD = 1 << 31
#: The rules of a row: (CFA register, CFA offset, FP's offset from the CFA or None).
_State = tuple[int, int, "int | None"]
#: A row: (where it starts, its rules).
_Row = tuple[int, int, int, "int | None"]


class _NotPlain(PysframeError):
    """The CFI is not plain: the general translation reads it (never raised further)."""

    def __init__(self) -> None:
        super().__init__("not plain CFI")


def plain_fde(data: bytes | memoryview, cfi: CFIFDE) -> FDE | None:
    """The FDE :func:`~.section.translate_entry` gives for the x86-64 function of ``cfi``
    (read from ``data``, its .eh_frame) when its CFI is plain (see the module docstring),
    else None."""
    cie = cfi.cie
    size = cfi.pc_range
    if (cie.return_register != _RA or cie.signal_frame or not 0 < size <= 0xFFFFFFFF
            or cie.address_size != 8):
        return None
    try:
        rows = _rows(data, cie.instructions_start, cie.instructions_end,
                     cfi.instructions_start, cfi.instructions_end, cie.code_align,
                     cie.data_align)
        fres = [_fre(row) for row in rows if row[0] < size]
    except (_NotPlain, DecodeError, IndexError):
        return None
    if len(fres) > 0xFFFF:
        return None  # (more than a version 3 FDE holds: gas skips it)
    return FDE(cfi.pc_begin, size, fres, pauth_key_b=cie.b_key)


def _fre(row: _Row) -> FRE:
    location, cfa_reg, cfa_offset, fp = row
    if cfa_reg < 0:
        raise _NotPlain  # (no CFA rule: gas skips the function)
    base = BaseReg.SP if cfa_reg == _SP else BaseReg.FP
    if fp is None:
        return FRE(location, (cfa_offset,), base)
    if not -_WORD <= fp < _WORD:
        raise _NotPlain
    return FRE(location, (cfa_offset, fp), base)


def _rows(data: bytes | memoryview, cie_start: int, cie_end: int, start: int, end: int,
          code_align: int, data_align: int) -> list[_Row]:
    """The rows of the CIE's initial instructions followed by the FDE's, as gas's replay
    makes them: a row is closed at an advance only if an instruction changed it, and the
    last one is kept in any case. The three most frequent instructions are read here, the
    others by :func:`_other`."""
    rows: list[_Row] = []
    remembered: list[_State] = []
    first: _Row | None = None  # the first row closed (what DW_CFA_restore goes back to)
    cfa_reg, cfa_offset, fp = -1, 0, None
    location, changed = 0, True
    for at, stop in ((cie_start, cie_end), (start, end)):
        while at < stop:
            byte = data[at]
            at += 1
            high = byte & 0xC0
            if high == 0x40 or 0x02 <= byte <= 0x04:  # DW_CFA_advance_loc, 1, 2, 4
                if high:
                    delta = byte & 0x3F
                else:
                    width = 1 << (byte - 2)
                    if at + width > stop:
                        raise _NotPlain
                    delta = int.from_bytes(data[at:at + width], "little")
                    at += width
                step = delta * code_align
                if step:
                    if changed:
                        row = (location, cfa_reg, cfa_offset, fp)
                        rows.append(row)
                        if first is None:
                            first = row
                        changed = False
                    location += step
            elif high == 0x80:  # DW_CFA_offset
                if at < stop and data[at] < 0x80:
                    factored, at = data[at], at + 1
                else:
                    factored, at = read_uleb128(data, at, stop)
                register = byte & 0x3F
                if register == _FP or register == _RA:
                    fp, changed = _saved(register, factored * data_align, fp), True
            elif byte == 0x0E:  # DW_CFA_def_cfa_offset
                if at < stop and data[at] < 0x80:
                    value, at = data[at], at + 1
                else:
                    value, at = read_uleb128(data, at, stop)
                if (cfa_reg != _SP and cfa_reg != _FP) or value >= _WORD:
                    raise _NotPlain
                cfa_offset, changed = value, True
            elif byte:  # (DW_CFA_nop: padding, or an escaped one: nothing)
                state, at, changes = _other(data, byte, at, stop, (cfa_reg, cfa_offset, fp),
                                            remembered, first, data_align)
                cfa_reg, cfa_offset, fp = state
                changed = changed or changes
    rows.append((location, cfa_reg, cfa_offset, fp))
    return rows


def _saved(register: int, offset: int, fp: int | None) -> int | None:
    """FP's offset once ``register`` (FP or RA) is saved at CFA+``offset``."""
    if register == _FP:
        return offset
    if offset != -8:
        raise _NotPlain  # (RA elsewhere: a flexible FDE)
    return fp


def _other(data: bytes | memoryview, byte: int, at: int, stop: int, state: _State,
           remembered: list[_State], first: _Row | None, data_align: int
           ) -> tuple[_State, int, bool]:
    """The instruction ``byte`` (operands from ``at``) other than an advance, a
    DW_CFA_offset or a DW_CFA_def_cfa_offset: (the CFA register, offset and FP's offset
    after it, where the next instruction is, whether it changed the row)."""
    cfa_reg, cfa_offset, fp = state
    if byte == 0x05:  # DW_CFA_offset_extended
        register, at = read_uleb128(data, at, stop)
        factored, at = read_uleb128(data, at, stop)
        if register == _FP or register == _RA:
            return (cfa_reg, cfa_offset, _saved(register, factored * data_align, fp)), at, True
        return state, at, False
    if byte & 0xC0 == 0xC0 or byte == 0x06:  # DW_CFA_restore, DW_CFA_restore_extended
        if byte == 0x06:
            register, at = read_uleb128(data, at, stop)
        else:
            register = byte & 0x3F
        if register != _FP:
            return state, at, False  # (RA is not tracked on x86-64)
        return (cfa_reg, cfa_offset, first[3] if first is not None else fp), at, True
    if byte == 0x0C or byte == 0x0D:  # DW_CFA_def_cfa, DW_CFA_def_cfa_register
        register, at = read_uleb128(data, at, stop)
        if byte == 0x0C:
            cfa_offset, at = read_uleb128(data, at, stop)
        if (register != _SP and register != _FP) or cfa_offset >= _WORD:
            raise _NotPlain
        return (register, cfa_offset, fp), at, True
    if byte == 0x0A:  # DW_CFA_remember_state
        if first is None and cfa_reg < 0:  # (no row closed, and no CFA rule yet)
            raise _NotPlain
        remembered.append(state)
        return state, at, False
    if byte == 0x0B:  # DW_CFA_restore_state
        if not remembered:
            raise _NotPlain
        return remembered.pop(), at, True
    if byte == 0x2E:  # DW_CFA_GNU_args_size: for landing pads only
        return state, read_uleb128(data, at, stop)[1], False
    raise _NotPlain


__all__ = ["plain_fde"]

"""DW_CFA instructions: decoding a CIE's or FDE's instruction bytes into small tuples.

Offsets are returned already multiplied by the data alignment factor and
advances by the code alignment factor, so consumers work in bytes.
"""

from __future__ import annotations

from ..records import NamedTuple, record_class
from .leb128 import DecodeError, read_encoded, read_sleb128, read_uleb128

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

DW_CFA_advance_loc = 0x40
DW_CFA_offset = 0x80
DW_CFA_restore = 0xC0
DW_CFA_nop = 0x00
DW_CFA_set_loc = 0x01
DW_CFA_advance_loc1 = 0x02
DW_CFA_advance_loc2 = 0x03
DW_CFA_advance_loc4 = 0x04
DW_CFA_offset_extended = 0x05
DW_CFA_restore_extended = 0x06
DW_CFA_undefined = 0x07
DW_CFA_same_value = 0x08
DW_CFA_register = 0x09
DW_CFA_remember_state = 0x0A
DW_CFA_restore_state = 0x0B
DW_CFA_def_cfa = 0x0C
DW_CFA_def_cfa_register = 0x0D
DW_CFA_def_cfa_offset = 0x0E
DW_CFA_def_cfa_expression = 0x0F
DW_CFA_expression = 0x10
DW_CFA_offset_extended_sf = 0x11
DW_CFA_def_cfa_sf = 0x12
DW_CFA_def_cfa_offset_sf = 0x13
DW_CFA_val_offset = 0x14
DW_CFA_val_offset_sf = 0x15
DW_CFA_val_expression = 0x16
DW_CFA_AARCH64_negate_ra_state_with_pc = 0x2C
DW_CFA_GNU_window_save = 0x2D  # also DW_CFA_AARCH64_negate_ra_state
DW_CFA_GNU_args_size = 0x2E
DW_CFA_GNU_negative_offset_extended = 0x2F

NAMES = {
    DW_CFA_advance_loc: "DW_CFA_advance_loc", DW_CFA_offset: "DW_CFA_offset",
    DW_CFA_restore: "DW_CFA_restore", DW_CFA_nop: "DW_CFA_nop", DW_CFA_set_loc: "DW_CFA_set_loc",
    DW_CFA_offset_extended: "DW_CFA_offset_extended",
    DW_CFA_restore_extended: "DW_CFA_restore_extended", DW_CFA_undefined: "DW_CFA_undefined",
    DW_CFA_same_value: "DW_CFA_same_value", DW_CFA_register: "DW_CFA_register",
    DW_CFA_remember_state: "DW_CFA_remember_state", DW_CFA_restore_state: "DW_CFA_restore_state",
    DW_CFA_def_cfa: "DW_CFA_def_cfa", DW_CFA_def_cfa_register: "DW_CFA_def_cfa_register",
    DW_CFA_def_cfa_offset: "DW_CFA_def_cfa_offset",
    DW_CFA_def_cfa_expression: "DW_CFA_def_cfa_expression", DW_CFA_expression: "DW_CFA_expression",
    DW_CFA_offset_extended_sf: "DW_CFA_offset_extended_sf", DW_CFA_def_cfa_sf: "DW_CFA_def_cfa_sf",
    DW_CFA_def_cfa_offset_sf: "DW_CFA_def_cfa_offset_sf", DW_CFA_val_offset: "DW_CFA_val_offset",
    DW_CFA_val_offset_sf: "DW_CFA_val_offset_sf", DW_CFA_val_expression: "DW_CFA_val_expression",
    DW_CFA_AARCH64_negate_ra_state_with_pc: "DW_CFA_AARCH64_negate_ra_state_with_pc",
    DW_CFA_GNU_window_save: "DW_CFA_GNU_window_save", DW_CFA_GNU_args_size: "DW_CFA_GNU_args_size",
    DW_CFA_GNU_negative_offset_extended: "DW_CFA_GNU_negative_offset_extended",
}


class Instruction(NamedTuple):
    """One CFI instruction: ``op`` (DW_CFA_*; the three primary ops use their base value),
    up to two integer operands, and the expression bytes for the *_expression ops.

    advance ops: ``a`` = advance in bytes (DW_CFA_set_loc: the new absolute location).
    Register ops: ``a`` = register; offsets in ``b`` are in bytes (factored).
    """

    op: int
    a: int = 0
    b: int = 0
    block: bytes = b""


@record_class
class _Operands:
    """The instruction bytes being decoded, the read position, and what scales operands."""

    data: bytes | memoryview
    offset: int
    end: int
    code_align: int
    data_align: int
    big_endian: bool
    address_size: int
    pointer_encoding: int
    section_address: int

    def uleb(self) -> int:
        value, self.offset = read_uleb128(self.data, self.offset, self.end)
        return value

    def sleb(self) -> int:
        value, self.offset = read_sleb128(self.data, self.offset, self.end)
        return value

    def block(self, at: int) -> bytes:
        """A ULEB128 length and that many bytes (a DWARF expression)."""
        length = self.uleb()
        if self.offset + length > self.end:
            raise DecodeError("truncated expression", at)
        block = bytes(self.data[self.offset:self.offset + length])
        self.offset += length
        return block


# --- one handler per group of extended opcodes: (operands, opcode, its offset) -> Instruction


def _no_operands(ops: _Operands, op: int, at: int) -> Instruction:
    return Instruction(op)


def _set_loc(ops: _Operands, op: int, at: int) -> Instruction:
    value, ops.offset = read_encoded(ops.data, ops.offset, ops.end, ops.pointer_encoding,
                                     ">" if ops.big_endian else "<", ops.address_size,
                                     ops.section_address)
    return Instruction(op, value)


_ADVANCE_SIZE = {DW_CFA_advance_loc1: 1, DW_CFA_advance_loc2: 2, DW_CFA_advance_loc4: 4}


def _advance_loc_n(ops: _Operands, op: int, at: int) -> Instruction:
    """DW_CFA_advance_loc1/2/4, returned as DW_CFA_advance_loc."""
    size = _ADVANCE_SIZE[op]
    if ops.offset + size > ops.end:
        raise DecodeError("truncated advance", at)
    delta = int.from_bytes(bytes(ops.data[ops.offset:ops.offset + size]),
                           "big" if ops.big_endian else "little")
    ops.offset += size
    return Instruction(DW_CFA_advance_loc, delta * ops.code_align)


def _register_offset(ops: _Operands, op: int, at: int) -> Instruction:
    register = ops.uleb()
    return Instruction(op, register, ops.uleb() * ops.data_align)


#: The signed-offset forms and the opcode they are returned as.
_UNSIGNED_FORM = {DW_CFA_offset_extended_sf: DW_CFA_offset_extended,
                  DW_CFA_val_offset_sf: DW_CFA_val_offset}


def _register_offset_sf(ops: _Operands, op: int, at: int) -> Instruction:
    register = ops.uleb()
    return Instruction(_UNSIGNED_FORM[op], register, ops.sleb() * ops.data_align)


def _negative_offset(ops: _Operands, op: int, at: int) -> Instruction:
    """DW_CFA_GNU_negative_offset_extended, returned as DW_CFA_offset_extended."""
    register = ops.uleb()
    return Instruction(DW_CFA_offset_extended, register, -ops.uleb() * ops.data_align)


def _one_uleb(ops: _Operands, op: int, at: int) -> Instruction:
    """One ULEB128 operand: a register, or an unfactored CFA offset or args size."""
    return Instruction(op, ops.uleb())


def _two_unscaled(ops: _Operands, op: int, at: int) -> Instruction:
    """DW_CFA_register (two registers) and DW_CFA_def_cfa (register, unfactored offset)."""
    first = ops.uleb()
    return Instruction(op, first, ops.uleb())


def _def_cfa_sf(ops: _Operands, op: int, at: int) -> Instruction:
    register = ops.uleb()
    return Instruction(DW_CFA_def_cfa, register, ops.sleb() * ops.data_align)


def _def_cfa_offset_sf(ops: _Operands, op: int, at: int) -> Instruction:
    return Instruction(DW_CFA_def_cfa_offset, ops.sleb() * ops.data_align)


def _cfa_expression(ops: _Operands, op: int, at: int) -> Instruction:
    return Instruction(op, 0, 0, ops.block(at))


def _register_expression(ops: _Operands, op: int, at: int) -> Instruction:
    register = ops.uleb()
    return Instruction(op, register, 0, ops.block(at))


if TYPE_CHECKING:
    _Handler = Callable[[_Operands, int, int], Instruction]

#: Decoder of each extended opcode (the three primary ones are decoded inline).
_HANDLERS: dict[int, _Handler] = {
    DW_CFA_nop: _no_operands,
    DW_CFA_set_loc: _set_loc,
    DW_CFA_advance_loc1: _advance_loc_n,
    DW_CFA_advance_loc2: _advance_loc_n,
    DW_CFA_advance_loc4: _advance_loc_n,
    DW_CFA_offset_extended: _register_offset,
    DW_CFA_val_offset: _register_offset,
    DW_CFA_offset_extended_sf: _register_offset_sf,
    DW_CFA_val_offset_sf: _register_offset_sf,
    DW_CFA_GNU_negative_offset_extended: _negative_offset,
    DW_CFA_restore_extended: _one_uleb,
    DW_CFA_undefined: _one_uleb,
    DW_CFA_same_value: _one_uleb,
    DW_CFA_def_cfa_register: _one_uleb,
    DW_CFA_register: _two_unscaled,
    DW_CFA_remember_state: _no_operands,
    DW_CFA_restore_state: _no_operands,
    DW_CFA_GNU_window_save: _no_operands,
    DW_CFA_AARCH64_negate_ra_state_with_pc: _no_operands,
    DW_CFA_def_cfa: _two_unscaled,
    DW_CFA_def_cfa_sf: _def_cfa_sf,
    DW_CFA_def_cfa_offset: _one_uleb,
    DW_CFA_def_cfa_offset_sf: _def_cfa_offset_sf,
    DW_CFA_GNU_args_size: _one_uleb,
    DW_CFA_def_cfa_expression: _cfa_expression,
    DW_CFA_expression: _register_expression,
    DW_CFA_val_expression: _register_expression,
}


def decode_instructions(data: bytes | memoryview, offset: int, end: int, *, code_align: int,
                        data_align: int, big_endian: bool, address_size: int = 8,
                        pointer_encoding: int = 0, section_address: int = 0
                        ) -> list[Instruction]:
    """Decode the instructions in ``data[offset:end]``.

    Raises :class:`~pysframe.cfi.leb128.DecodeError` for truncated operands or
    an unknown opcode (the caller reports it for that function only).
    """
    out: list[Instruction] = []
    append = out.append
    ops = _Operands(data, offset, end, code_align, data_align, big_endian, address_size,
                    pointer_encoding, section_address)
    handlers = _HANDLERS
    made = tuple.__new__  # (an Instruction made as the tuple it is: its __new__ is Python)
    while ops.offset < end:
        at = ops.offset
        byte = data[at]
        ops.offset = at + 1
        high = byte & 0xC0
        # The primary opcodes (operand in the low 6 bits) are most of any CFI, and a CFA
        # offset (every push and pop on x86-64) with a one-byte operand most of the rest:
        # decoded here.
        if high == DW_CFA_advance_loc:
            append(made(Instruction, (DW_CFA_advance_loc, (byte & 0x3F) * code_align, 0,
                                      b"")))
        elif high == DW_CFA_offset:
            if at + 1 < end and data[at + 1] < 0x80:
                ops.offset = at + 2
                append(made(Instruction, (DW_CFA_offset, byte & 0x3F,
                                          data[at + 1] * data_align, b"")))
            else:
                append(Instruction(DW_CFA_offset, byte & 0x3F, ops.uleb() * data_align))
        elif byte == DW_CFA_def_cfa_offset and at + 1 < end and data[at + 1] < 0x80:
            ops.offset = at + 2
            append(made(Instruction, (DW_CFA_def_cfa_offset, data[at + 1], 0, b"")))
        elif high == DW_CFA_restore:
            append(Instruction(DW_CFA_restore, byte & 0x3F))
        else:
            handler = handlers.get(byte)
            if handler is None:
                raise DecodeError(f"unknown CFA opcode {byte:#04x}", at)
            append(handler(ops, byte, at))
    return out

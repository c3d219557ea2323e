"""DW_CFA instructions: decoding a CIE's or FDE's instruction bytes into small tuples.

Offsets are returned already multiplied by the data alignment factor and
advances by the code alignment factor, so consumers work in bytes.
"""

from __future__ import annotations

from typing import NamedTuple

from .leb128 import DecodeError, read_encoded, read_sleb128, read_uleb128

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
    order = ">" if big_endian else "<"
    while offset < end:
        at = offset
        byte = data[offset]
        offset += 1
        high = byte & 0xC0
        if high == DW_CFA_advance_loc:
            append(Instruction(DW_CFA_advance_loc, (byte & 0x3F) * code_align))
            continue
        if high == DW_CFA_offset:
            value, offset = read_uleb128(data, offset, end)
            append(Instruction(DW_CFA_offset, byte & 0x3F, value * data_align))
            continue
        if high == DW_CFA_restore:
            append(Instruction(DW_CFA_restore, byte & 0x3F))
            continue
        op = byte
        if op == DW_CFA_nop:
            append(Instruction(op))
        elif op == DW_CFA_set_loc:
            value, offset = read_encoded(data, offset, end, pointer_encoding, order, address_size,
                                         section_address)
            append(Instruction(op, value))
        elif op in (DW_CFA_advance_loc1, DW_CFA_advance_loc2, DW_CFA_advance_loc4):
            size = {DW_CFA_advance_loc1: 1, DW_CFA_advance_loc2: 2, DW_CFA_advance_loc4: 4}[op]
            if offset + size > end:
                raise DecodeError("truncated advance", at)
            delta = int.from_bytes(bytes(data[offset:offset + size]),
                                   "big" if big_endian else "little")
            offset += size
            append(Instruction(DW_CFA_advance_loc, delta * code_align))
        elif op in (DW_CFA_offset_extended, DW_CFA_val_offset):
            register, offset = read_uleb128(data, offset, end)
            value, offset = read_uleb128(data, offset, end)
            append(Instruction(op, register, value * data_align))
        elif op in (DW_CFA_offset_extended_sf, DW_CFA_val_offset_sf):
            register, offset = read_uleb128(data, offset, end)
            value, offset = read_sleb128(data, offset, end)
            append(Instruction(DW_CFA_offset_extended if op == DW_CFA_offset_extended_sf
                               else DW_CFA_val_offset, register, value * data_align))
        elif op == DW_CFA_GNU_negative_offset_extended:
            register, offset = read_uleb128(data, offset, end)
            value, offset = read_uleb128(data, offset, end)
            append(Instruction(DW_CFA_offset_extended, register, -value * data_align))
        elif op in (DW_CFA_restore_extended, DW_CFA_undefined, DW_CFA_same_value,
                    DW_CFA_def_cfa_register):
            register, offset = read_uleb128(data, offset, end)
            append(Instruction(op, register))
        elif op == DW_CFA_register:
            register, offset = read_uleb128(data, offset, end)
            other, offset = read_uleb128(data, offset, end)
            append(Instruction(op, register, other))
        elif op in (DW_CFA_remember_state, DW_CFA_restore_state, DW_CFA_GNU_window_save,
                    DW_CFA_AARCH64_negate_ra_state_with_pc):
            append(Instruction(op))
        elif op == DW_CFA_def_cfa:
            register, offset = read_uleb128(data, offset, end)
            value, offset = read_uleb128(data, offset, end)
            append(Instruction(op, register, value))
        elif op == DW_CFA_def_cfa_sf:
            register, offset = read_uleb128(data, offset, end)
            value, offset = read_sleb128(data, offset, end)
            append(Instruction(DW_CFA_def_cfa, register, value * data_align))
        elif op == DW_CFA_def_cfa_offset:
            value, offset = read_uleb128(data, offset, end)
            append(Instruction(op, value))
        elif op == DW_CFA_def_cfa_offset_sf:
            value, offset = read_sleb128(data, offset, end)
            append(Instruction(DW_CFA_def_cfa_offset, value * data_align))
        elif op == DW_CFA_GNU_args_size:
            value, offset = read_uleb128(data, offset, end)
            append(Instruction(op, value))
        elif op == DW_CFA_def_cfa_expression:
            length, offset = read_uleb128(data, offset, end)
            if offset + length > end:
                raise DecodeError("truncated expression", at)
            append(Instruction(op, 0, 0, bytes(data[offset:offset + length])))
            offset += length
        elif op in (DW_CFA_expression, DW_CFA_val_expression):
            register, offset = read_uleb128(data, offset, end)
            length, offset = read_uleb128(data, offset, end)
            if offset + length > end:
                raise DecodeError("truncated expression", at)
            append(Instruction(op, register, 0, bytes(data[offset:offset + length])))
            offset += length
        else:
            raise DecodeError(f"unknown CFA opcode {op:#04x}", at)

    return out

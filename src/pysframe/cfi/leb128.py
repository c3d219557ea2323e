"""LEB128 and DWARF pointer-encoding readers with bounds checks."""

from __future__ import annotations

import struct

from ..errors import PysframeError

DW_EH_PE_omit = 0xFF
DW_EH_PE_absptr = 0x00
DW_EH_PE_uleb128 = 0x01
DW_EH_PE_udata2 = 0x02
DW_EH_PE_udata4 = 0x03
DW_EH_PE_udata8 = 0x04
DW_EH_PE_sleb128 = 0x09
DW_EH_PE_sdata2 = 0x0A
DW_EH_PE_sdata4 = 0x0B
DW_EH_PE_sdata8 = 0x0C
DW_EH_PE_pcrel = 0x10
DW_EH_PE_textrel = 0x20
DW_EH_PE_datarel = 0x30
DW_EH_PE_funcrel = 0x40
DW_EH_PE_aligned = 0x50
DW_EH_PE_indirect = 0x80


class DecodeError(PysframeError, ValueError):
    """A read ran past the end of its area or met an unknown encoding."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message, offset)


def _read_leb128(data: bytes | memoryview, offset: int, end: int, kind: str
                 ) -> tuple[int, int, int, int]:
    """(value bits, bit count, last byte, offset after) of a LEB128 number at ``offset``."""
    result = 0
    shift = 0
    while True:
        if offset >= end:
            raise DecodeError(f"truncated {kind}", offset)
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, shift, byte, offset
        if shift > 70:
            raise DecodeError(f"{kind} too long", offset)


def read_uleb128(data: bytes | memoryview, offset: int, end: int) -> tuple[int, int]:
    if offset < end and data[offset] < 0x80:  # one byte: most values in CFI and DWARF
        return data[offset], offset + 1
    result, _, _, offset = _read_leb128(data, offset, end, "ULEB128")
    return result, offset


def read_sleb128(data: bytes | memoryview, offset: int, end: int) -> tuple[int, int]:
    if offset < end and data[offset] < 0x80:  # one byte: bit 6 is the sign
        byte = data[offset]
        return (byte - 0x80 if byte & 0x40 else byte), offset + 1
    result, shift, last, offset = _read_leb128(data, offset, end, "SLEB128")
    if last & 0x40:
        result -= 1 << shift
    return result, offset


_FIXED = {
    DW_EH_PE_udata2: "H", DW_EH_PE_udata4: "I", DW_EH_PE_udata8: "Q",
    DW_EH_PE_sdata2: "h", DW_EH_PE_sdata4: "i", DW_EH_PE_sdata8: "q",
}


def read_encoded(data: bytes | memoryview, offset: int, end: int, encoding: int, order: str,
                 address_size: int, section_address: int, data_base: int = 0,
                 text_base: int = 0, func_base: int = 0) -> tuple[int, int]:
    """Read a pointer in DW_EH_PE ``encoding``; returns (value, next offset).

    ``section_address`` is the address of ``data[0]`` (for pcrel). Indirect
    pointers are returned as the address of the pointer (they cannot be followed here).
    """
    if encoding == DW_EH_PE_omit:
        return 0, offset
    start = offset
    form = encoding & 0x0F
    application = encoding & 0x70
    if application == DW_EH_PE_aligned:
        offset = (offset + address_size - 1) // address_size * address_size
        form = DW_EH_PE_absptr
    if form == DW_EH_PE_absptr:
        code = "Q" if address_size == 8 else "I"
        if offset + address_size > end:
            raise DecodeError("truncated pointer", offset)
        value = struct.unpack_from(order + code, data, offset)[0]
        offset += address_size
    elif form == DW_EH_PE_uleb128:
        value, offset = read_uleb128(data, offset, end)
    elif form == DW_EH_PE_sleb128:
        value, offset = read_sleb128(data, offset, end)
    elif form in _FIXED:
        code = _FIXED[form]
        size = struct.calcsize(code)
        if offset + size > end:
            raise DecodeError("truncated pointer", offset)
        value = struct.unpack_from(order + code, data, offset)[0]
        offset += size
    else:
        raise DecodeError(f"unknown pointer encoding {encoding:#x}", start)
    if application == DW_EH_PE_pcrel:
        value += section_address + start
    elif application == DW_EH_PE_datarel:
        value += data_base
    elif application == DW_EH_PE_textrel:
        value += text_base
    elif application == DW_EH_PE_funcrel:
        value += func_base
    elif application not in (0, DW_EH_PE_aligned):
        raise DecodeError(f"unknown pointer application {application:#x}", start)
    return value & ((1 << (8 * address_size)) - 1), offset

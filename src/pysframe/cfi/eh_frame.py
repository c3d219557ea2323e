"""CIEs and FDEs of .eh_frame and .debug_frame, parsed one entry at a time.

Each FDE keeps the byte range of its instructions; :meth:`FDE.instructions`
decodes them (with the CIE's initial instructions separately) on demand, so a
consumer that wants one function pays for one function.
"""

from __future__ import annotations

import struct

from ..records import field, record_class
from .errors import CFIError as CFIError  # re-exported: its home before
from .instructions import Instruction, decode_instructions
from .leb128 import (
    DecodeError,
    DW_EH_PE_absptr,
    DW_EH_PE_omit,
    read_encoded,
    read_sleb128,
    read_uleb128,
)


@record_class
class CIE:
    offset: int
    version: int
    augmentation: str
    code_align: int
    data_align: int
    return_register: int
    fde_encoding: int = DW_EH_PE_absptr
    lsda_encoding: int = DW_EH_PE_omit
    personality: int | None = None
    signal_frame: bool = False
    b_key: bool = False
    address_size: int = 8
    instructions_start: int = 0
    instructions_end: int = 0
    initial: list[Instruction] | None = field(default=None, repr=False)


@record_class
class FDE:
    offset: int
    cie: CIE
    pc_begin: int
    pc_range: int
    instructions_start: int
    instructions_end: int
    lsda: int | None = None

    @property
    def pc_end(self) -> int:
        return self.pc_begin + self.pc_range


class _Parser:
    def __init__(self, data: bytes | memoryview, section_address: int, big_endian: bool,
                 address_size: int, debug_frame: bool) -> None:
        self.data = memoryview(data)
        self.address = section_address
        self.big_endian = big_endian
        self.order = ">" if big_endian else "<"
        self.address_size = address_size
        self.debug_frame = debug_frame
        self.cies: dict[int, CIE] = {}

    def entries(self) -> tuple[list[FDE], list[CFIError]]:
        return self.entries_from(0)

    def entries_from(self, offset: int) -> tuple[list[FDE], list[CFIError]]:
        """The FDEs (and errors) of the entries from ``offset`` on."""
        data = self.data
        size = len(data)
        fdes: list[FDE] = []
        errors: list[CFIError] = []
        while offset + 4 <= size:
            start = offset
            length = struct.unpack_from(self.order + "I", data, offset)[0]
            offset += 4
            if length == 0:
                if self.debug_frame:
                    continue
                break  # .eh_frame terminator
            dwarf64 = length == 0xFFFFFFFF
            if dwarf64:
                if offset + 8 > size:
                    errors.append(CFIError("truncated 64-bit length", start))
                    break
                length = struct.unpack_from(self.order + "Q", data, offset)[0]
                offset += 8
            end = offset + length
            if end > size:
                errors.append(CFIError("entry runs past the end of the section", start))
                break
            id_size = 8 if dwarf64 else 4
            if offset + id_size > end:
                errors.append(CFIError("entry too short for its CIE id", start))
                offset = end
                continue
            id_field = offset
            cie_id = struct.unpack_from(self.order + ("Q" if dwarf64 else "I"), data, offset)[0]
            offset += id_size
            is_cie = (cie_id == (0xFFFFFFFFFFFFFFFF if dwarf64 else 0xFFFFFFFF)) \
                if self.debug_frame else cie_id == 0
            try:
                if is_cie:
                    self._cie(start, offset, end)
                else:
                    cie_offset = cie_id if self.debug_frame else id_field - cie_id
                    fdes.append(self._fde(start, offset, end, cie_offset))
            except (CFIError, DecodeError) as error:
                errors.append(error if isinstance(error, CFIError) else CFIError(str(error)))
            except (struct.error, IndexError, ValueError) as error:
                # A field the checks above let through still pointed outside the data.
                errors.append(CFIError(f"malformed entry: {error}", start))
            offset = end
        return fdes, errors

    def fde_at(self, offset: int) -> FDE:
        """Parse the single FDE at ``offset`` (and its CIE)."""
        data = self.data
        if not 0 <= offset <= len(data) - 8:
            raise CFIError("FDE offset outside .eh_frame", offset)
        length = struct.unpack_from(self.order + "I", data, offset)[0]
        body = offset + 4
        if length == 0xFFFFFFFF:
            length = struct.unpack_from(self.order + "Q", data, body)[0]
            body += 8
            id_size = 8
        else:
            id_size = 4
        end = body + length
        if end > len(data) or length < id_size:
            raise CFIError("FDE runs past the end of the section", offset)
        cie_id = struct.unpack_from(self.order + ("Q" if id_size == 8 else "I"), data, body)[0]
        if cie_id == 0:
            raise CFIError("a CIE where an FDE was expected", offset)
        return self._fde(offset, body + id_size, end, body - cie_id)

    def cie_at(self, offset: int) -> CIE:
        cie = self.cies.get(offset)
        if cie is not None:
            return cie
        data = self.data
        if not 0 <= offset <= len(data) - 4:
            raise CFIError("outside the section")
        length = struct.unpack_from(self.order + "I", data, offset)[0]
        body = offset + 4
        dwarf64 = length == 0xFFFFFFFF
        if dwarf64:
            length = struct.unpack_from(self.order + "Q", data, body)[0]
            body += 8
        end = body + length
        if end > len(data):
            raise CFIError("CIE runs past the end of the section", offset)
        return self._cie(offset, body + (8 if dwarf64 else 4), end)

    def _cie(self, start: int, offset: int, end: int) -> CIE:
        data = self.data
        if offset >= end:
            raise CFIError("truncated CIE", start)
        version = data[offset]
        offset += 1
        terminator = bytes(data[offset:end]).find(b"\0")
        if terminator < 0:
            raise CFIError("CIE augmentation string not terminated", start)
        augmentation = bytes(data[offset:offset + terminator]).decode("latin-1")
        offset += terminator + 1
        address_size = self.address_size
        if version >= 4:
            if offset + 2 > end:
                raise CFIError("truncated CIE", start)
            address_size = data[offset] or address_size
            offset += 2
        code_align, offset = read_uleb128(data, offset, end)
        data_align, offset = read_sleb128(data, offset, end)
        if version == 1:
            if offset >= end:
                raise CFIError("truncated CIE", start)
            return_register = data[offset]
            offset += 1
        else:
            return_register, offset = read_uleb128(data, offset, end)
        cie = CIE(start, version, augmentation, code_align, data_align, return_register,
                  address_size=address_size)
        if augmentation.startswith("z"):
            length, offset = read_uleb128(data, offset, end)
            aug_end = offset + length
            if aug_end > end:
                raise CFIError("CIE augmentation data runs past the entry", start)
            for letter in augmentation[1:]:
                if letter == "L":
                    cie.lsda_encoding = data[offset]
                    offset += 1
                elif letter == "R":
                    cie.fde_encoding = data[offset]
                    offset += 1
                elif letter == "P":
                    encoding = data[offset]
                    offset += 1
                    cie.personality, offset = read_encoded(
                        data, offset, aug_end, encoding & 0x7F, self.order, address_size,
                        self.address)
                elif letter == "S":
                    cie.signal_frame = True
                elif letter == "B":
                    cie.b_key = True
                elif letter == "G":
                    pass  # MTE-tagged frames: nothing for unwinding
                else:
                    break  # unknown letter: the rest of the data is skipped by its length
            offset = aug_end
        elif augmentation not in ("", "eh"):
            # Without 'z' the size of unknown augmentation data is unknown.
            raise CFIError(f"unsupported CIE augmentation {augmentation!r}", start)
        if augmentation == "eh":
            offset += address_size
        cie.instructions_start = offset
        cie.instructions_end = end
        self.cies[start] = cie
        return cie

    def _fde(self, start: int, offset: int, end: int, cie_offset: int) -> FDE:
        try:
            cie = self.cie_at(cie_offset)
        except CFIError as error:
            raise CFIError(f"the FDE's CIE (at {cie_offset:#x}): {error.message}", start) from None
        data = self.data
        encoding = cie.fde_encoding if not self.debug_frame else DW_EH_PE_absptr
        pc_begin, offset = read_encoded(data, offset, end, encoding, self.order,
                                        cie.address_size, self.address)
        pc_range, offset = read_encoded(data, offset, end, encoding & 0x0F, self.order,
                                        cie.address_size, self.address)
        lsda = None
        if cie.augmentation.startswith("z"):
            length, offset = read_uleb128(data, offset, end)
            if cie.lsda_encoding != DW_EH_PE_omit and length:
                lsda, _ = read_encoded(data, offset, offset + length, cie.lsda_encoding,
                                       self.order, cie.address_size, self.address)
            offset += length
        if offset > end:
            raise CFIError("FDE augmentation data runs past the entry", start)
        return FDE(start, cie, pc_begin, pc_range, offset, end, lsda)


def parse_eh_frame(data: bytes | memoryview, section_address: int, *, big_endian: bool = False,
                   address_size: int = 8) -> tuple[list[FDE], list[CFIError]]:
    """All FDEs of an .eh_frame section (and the errors of entries that could not be read)."""
    return _Parser(data, section_address, big_endian, address_size, False).entries()


def fde_ranges(data: bytes | memoryview, section_address: int, *, big_endian: bool = False,
               address_size: int = 8) -> list[tuple[int, int, int]]:
    """(pc_begin, pc_range, offset) of every FDE :func:`parse_eh_frame` returns, in the
    same order, without making the FDEs: the entries are walked as it walks them, and an
    FDE whose CIE says ``pcrel|sdata4`` addresses and no LSDA (what GCC and Clang write)
    is read in place; any other goes through the full parser, errors and all."""
    parser = _Parser(data, section_address, big_endian, address_size, False)
    view = parser.data
    size = len(view)
    word = struct.Struct(parser.order + "I").unpack_from
    head = struct.Struct(parser.order + "II").unpack_from  # (length, CIE pointer)
    pair = struct.Struct(parser.order + "ii").unpack_from
    #: CIE offset -> the address mask of its FDEs when they can be read in place, else 0.
    plain: dict[int, int] = {}
    found: list[tuple[int, int, int]] = []
    append = found.append
    offset = 0
    while offset + 4 <= size:
        start = offset
        if offset + 8 <= size:  # (the usual entry: its length and CIE pointer in one read)
            length, cie_id = head(view, offset)
        else:
            length, cie_id = word(view, offset)[0], 0
        if length == 0:
            break
        if length == 0xFFFFFFFF:  # 64-bit entries: the full parser from here on
            rest, _ = _Parser(data, section_address, big_endian, address_size, False
                              ).entries_from(start)
            return found + [(fde.pc_begin, fde.pc_range, fde.offset) for fde in rest]
        end = offset + 4 + length
        if end > size:
            break
        if offset + 8 > end or cie_id == 0:
            offset = end
            continue
        cie_offset = offset + 4 - cie_id
        fast = plain.get(cie_offset)
        if fast is None:
            fast = plain[cie_offset] = plain_address_mask(parser, cie_offset)
        if fast and offset + 17 <= end and view[offset + 16] < 0x80 \
                and offset + 17 + view[offset + 16] <= end:
            begin, extent = pair(view, offset + 8)
            append(((section_address + offset + 8 + begin) & fast, extent & fast, start))
        else:
            try:
                fde = parser._fde(start, offset + 8, end, cie_offset)
                found.append((fde.pc_begin, fde.pc_range, start))
            except (CFIError, DecodeError, struct.error, IndexError, ValueError):
                pass
        offset = end
    return found


def plain_address_mask(parser: _Parser, cie_offset: int) -> int:
    """The mask of the addresses of the FDEs of the CIE at ``cie_offset`` when they can be
    read in place (``pcrel|sdata4`` addresses, no LSDA, a "z" augmentation: what GCC and
    Clang write), else 0 (also for a CIE that cannot be read)."""
    try:
        cie = parser.cie_at(cie_offset)
    except (CFIError, DecodeError, struct.error, IndexError, ValueError):
        return 0
    if (cie.fde_encoding == 0x1B and cie.lsda_encoding == DW_EH_PE_omit
            and cie.augmentation.startswith("z")):
        return (1 << 8 * cie.address_size) - 1
    return 0


def parse_debug_frame(data: bytes | memoryview, section_address: int = 0, *,
                      big_endian: bool = False, address_size: int = 8
                      ) -> tuple[list[FDE], list[CFIError]]:
    """All FDEs of a .debug_frame section."""
    return _Parser(data, section_address, big_endian, address_size, True).entries()


def cie_instructions(data: bytes | memoryview, cie: CIE, big_endian: bool) -> list[Instruction]:
    """The CIE's initial instructions (decoded once, then cached on the CIE)."""
    if cie.initial is None:
        cie.initial = decode_instructions(data, cie.instructions_start, cie.instructions_end,
                                          code_align=cie.code_align, data_align=cie.data_align,
                                          big_endian=big_endian, address_size=cie.address_size,
                                          pointer_encoding=cie.fde_encoding)
    return cie.initial


def fde_instructions(data: bytes | memoryview, fde: FDE, big_endian: bool,
                     section_address: int = 0) -> list[Instruction]:
    """The FDE's own instructions."""
    cie = fde.cie
    return decode_instructions(data, fde.instructions_start, fde.instructions_end,
                               code_align=cie.code_align, data_align=cie.data_align,
                               big_endian=big_endian, address_size=cie.address_size,
                               pointer_encoding=cie.fde_encoding, section_address=section_address)


class EhFrameIndex:
    """Per-function access to .eh_frame through the binary-search table of .eh_frame_hdr.

    Only the FDE covering a PC (and its CIE) is parsed, so looking up one
    function of libc costs microseconds instead of a pass over all its CFI.
    """

    def __init__(self, eh_frame: bytes | memoryview, eh_frame_address: int,
                 eh_frame_hdr: bytes | memoryview, hdr_address: int, *, big_endian: bool = False,
                 address_size: int = 8) -> None:
        self._parser = _Parser(eh_frame, eh_frame_address, big_endian, address_size, False)
        self._eh_frame_address = eh_frame_address
        #: The .eh_frame bytes, address and byte order (to decode an FDE's instructions).
        self.data, self.address, self.big_endian = eh_frame, eh_frame_address, big_endian
        hdr = memoryview(eh_frame_hdr)
        if len(hdr) < 4 or hdr[0] != 1:
            raise CFIError("unsupported .eh_frame_hdr version", 0)
        order = ">" if big_endian else "<"
        pointer_encoding, count_encoding, table_encoding = hdr[1], hdr[2], hdr[3]
        offset = 4
        _, offset = read_encoded(hdr, offset, len(hdr), pointer_encoding, order, address_size,
                                 hdr_address, data_base=hdr_address)
        count, offset = read_encoded(hdr, offset, len(hdr), count_encoding, order, address_size,
                                     hdr_address, data_base=hdr_address)
        if table_encoding != 0x3B:  # DW_EH_PE_datarel | DW_EH_PE_sdata4, what ld writes
            raise CFIError(f"unsupported .eh_frame_hdr table encoding {table_encoding:#x}", 3)
        if offset + count * 8 > len(hdr):
            raise CFIError(".eh_frame_hdr table runs past the section", offset)
        pairs = struct.unpack_from(order + "i" * (2 * count), hdr, offset)
        self._starts = [hdr_address + value for value in pairs[0::2]]
        self._fdes = [hdr_address + value for value in pairs[1::2]]

    def __len__(self) -> int:
        return len(self._starts)

    def fde_for(self, pc: int) -> FDE | None:
        """The FDE whose range covers ``pc``, or ``None``."""
        from bisect import bisect_right

        position = bisect_right(self._starts, pc) - 1
        if position < 0:
            return None
        offset = self._fdes[position] - self._eh_frame_address
        fde = self._parser.fde_at(offset)
        return fde if fde.pc_begin <= pc < fde.pc_end else None

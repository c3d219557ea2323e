"""``sframe upgrade``: SFrame V2 sections of relocatable objects rewritten as V3, so that
they link with binutils 2.46 and later (whose ld ignores V2 input sections, "unexpected
SFrame section type", and so drops every function they describe).

In an object, a V2 FDE's 32-bit start field is PC-relative through a relocation (gas
writes ``R_X86_64_PC32``, ``R_AARCH64_PREL32``, ``R_390_PC32`` against the function's
section, the function's offset in the addend, whether or not the 2.45 erratum flag is
set). V3's field is 64 bits wide: the section is converted with the format's own
:func:`~pysframe.format.encode.convert` and re-encoded, and each relocation is moved to
its FDE's new field and widened to the 64-bit PC-relative type, same symbol, same addend.
The section becomes ``SHT_GNU_SFRAME`` as gas 2.46 writes it.

V2 has no bit for a signal frame; V3 has, and gas 2.46 sets it from ``.cfi_signal_frame``.
The object's own ``.eh_frame`` still says it (augmentation "S" of the FDE's CIE): an FDE
whose start relocation (symbol, addend) and size match a signal-frame FDE's ``pc_begin``
relocation and range is marked, as gas 2.46 marks it (found by linking the upgraded
objects with ld 2.47.50 and comparing objdump's dump with gas 2.46's).

The file is rewritten as ``inject`` does (written by hand: no Python library writes ELF):
the new section contents and a new section header table are appended, nothing else
moves. Static archives are rebuilt member by member, their symbol index (``/``, and
``/SYM64/``) with the members' new offsets. The input is never changed.
"""

from __future__ import annotations

import struct
from typing import Any

from ..cfi.eh_frame import parse_eh_frame
from ..elf import ElfImage
from ..format.constants import HEADER_SIZE, VERSION_2, VERSION_3
from ..format.decode import decode
from ..format.encode import convert, encode
from .archive import rebuild_archive
from .errors import GenerateError
from .inject import SHT_GNU_SFRAME
from .rewrite import OFFSET, SIZE, append, section_rows, write_rows

SHT_RELA = 4
#: (machine, 32-bit PC-relative type) -> 64-bit PC-relative type.
WIDER = {("EM_X86_64", 2): 24, ("EM_AARCH64", 261): 260, ("EM_S390", 5): 23}
_RELA = struct.Struct("<QQq")
V2_ENTRY, V3_ENTRY = 20, 16


def upgrade_object(image: ElfImage) -> bytes | None:
    """The file with its V2 SFrame sections as V3 (None: it has none to upgrade)."""
    if image.elf_type != "REL" or image.elf_class != 64 or image.big_endian:
        if image.elf_type != "REL":
            raise GenerateError("only relocatable objects (.o) and archives are upgraded: "
                                "a linked file's SFrame is rebuilt by `sframe generate`")
        raise GenerateError("only 64-bit little-endian objects are upgraded")
    data = bytearray(image.data)
    headers, shstrndx = section_rows(data)
    names = image.section_headers()
    changed = False
    signals: set[tuple[int, int, int]] | None = None
    for section in image.sframe_sections():
        index = next((h.number for h in names if h.name == section.name
                      and h.offset == section.file_offset), None)
        if index is None:
            continue
        raw = bytes(data[headers[index][4]:headers[index][4] + headers[index][5]])
        section_model = decode(raw)
        if section_model.version != VERSION_2:
            continue
        relocations = [i for i, h in enumerate(headers) if h[1] == SHT_RELA and h[7] == index]
        upgraded = convert(section_model, VERSION_3)
        if signals is None:  # read once, for every SFrame section of the object
            signals = _signal_frames(data, headers, names)
        for rela_index in relocations:
            for at, symbol, addend in _relocations(data, headers[rela_index]):
                fde, within = divmod(at - HEADER_SIZE, V2_ENTRY)
                if at >= HEADER_SIZE and within == 0 and fde < len(upgraded.fdes):
                    entry = upgraded.fdes[fde]
                    entry.signal = entry.signal or (symbol, addend, entry.size) in signals
        v3 = encode(upgraded)
        for rela_index in relocations:
            table = bytes(data[headers[rela_index][4]:
                               headers[rela_index][4] + headers[rela_index][5]])
            new_table = _widened(table, image.machine, len(section_model.fdes))
            headers[rela_index][OFFSET] = append(data, new_table)
            headers[rela_index][SIZE] = len(new_table)
        headers[index][OFFSET] = append(data, v3)
        headers[index][SIZE] = len(v3)
        headers[index][1] = SHT_GNU_SFRAME
        changed = True
    if not changed:
        return None
    write_rows(data, headers, shstrndx)
    return bytes(data)


def _relocations(data: bytearray, header: list[int]) -> list[tuple[int, int, int]]:
    """(offset, symbol, addend) of each entry of a RELA section."""
    table = bytes(data[header[OFFSET]:header[OFFSET] + header[SIZE]])
    return [(offset, info >> 32, addend) for offset, info, addend in
            (_RELA.unpack_from(table, at) for at in
             range(0, len(table) - len(table) % _RELA.size, _RELA.size))]


def _signal_frames(data: bytearray, headers: list[list[int]], names: list[Any]
                   ) -> set[tuple[int, int, int]]:
    """(symbol, addend, size) of the object's .eh_frame FDEs whose CIE says "S" (the
    relocation of the FDE's pc_begin names its function). Unreadable CFI: none."""
    found: set[tuple[int, int, int]] = set()
    for header in names:
        if header.name != ".eh_frame":
            continue
        row = headers[header.number]
        fdes, _ = parse_eh_frame(bytes(data[row[OFFSET]:row[OFFSET] + row[SIZE]]), 0)
        signal_at = {fde.offset + 8: fde.pc_range for fde in fdes if fde.cie.signal_frame}
        for rela in headers:
            if rela[1] == SHT_RELA and rela[7] == header.number:
                found |= {(symbol, addend, signal_at[at]) for at, symbol, addend
                          in _relocations(data, rela) if at in signal_at}
    return found


def _widened(table: bytes, machine: str, fde_count: int) -> bytes:
    """The V2 start-field relocations moved to the V3 fields and widened to 64 bits."""
    out = bytearray()
    for at in range(0, len(table) - len(table) % _RELA.size, _RELA.size):
        offset, info, addend = _RELA.unpack_from(table, at)
        kind, symbol = info & 0xFFFFFFFF, info >> 32
        fde, within = divmod(offset - HEADER_SIZE, V2_ENTRY)
        wider = WIDER.get((machine, kind))
        if offset < HEADER_SIZE or within != 0 or fde >= fde_count or wider is None:
            raise GenerateError(f"relocation at {offset:#x} (type {kind}) is not a V2 "
                                "FDE start field: not upgraded")
        out += _RELA.pack(HEADER_SIZE + fde * V3_ENTRY, (symbol << 32) | wider, addend)
    return bytes(out)


# --- static archives ----------------------------------------------------------------------

def upgrade_archive(data: bytes) -> tuple[bytes, int]:
    """The archive with every member's V2 SFrame upgraded (the symbol index rewritten for
    the new member offsets), and how many members changed."""
    def rewrite(name: str, contents: bytes) -> bytes | None:
        if not contents.startswith(b"\x7fELF"):
            return None
        return upgrade_object(ElfImage(name, contents))

    return rebuild_archive(data, rewrite)

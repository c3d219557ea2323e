"""The in-memory ELF object a JIT hands to debuggers for its code (the GDB JIT interface's
"symfile"): the code's symbols, its ``.sframe`` and an ``.eh_frame``, at the code's own
addresses.

Written by hand: pyelftools reads ELF, it does not write it, and the object is small and
fixed: ``.text`` (a copy of the code, at its address), ``.eh_frame`` (a CIE and one FDE per
function, from the same CFI instructions the ``.sframe`` rows come from, through
:func:`pysframe.generate.gas.translate`), ``.sframe`` (a :class:`~.growable.GrowableSection`
compacted), ``.symtab``, ``.strtab`` and ``.shstrtab``. gdb (and LLDB) read the first
two; our tools read ``.sframe`` and the symbols.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ..cfi.instructions import (
    DW_CFA_advance_loc,
    DW_CFA_def_cfa,
    DW_CFA_def_cfa_offset,
    DW_CFA_def_cfa_register,
    DW_CFA_offset,
    DW_CFA_restore,
    Instruction,
)
from ..format.constants import ABI
from ..generate.gas import translate
from ..records import record_class
from .growable import GrowableSection

#: x86-64: the CIE's rules at a function's entry (CFA = RSP + 8, RA at CFA - 8).
AMD64_CIE = (Instruction(DW_CFA_def_cfa, 7, 8), Instruction(DW_CFA_offset, 16, -8))
DATA_ALIGN, RA_REGISTER = -8, 16
DW_EH_PE_PCREL_SDATA4 = 0x1B
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB = 1, 2, 3
SHF_ALLOC, SHF_EXECINSTR = 2, 4
EM_X86_64, ET_EXEC = 62, 2


@record_class
class JitCode:
    """One compiled function: its name, address, machine code, and its CFI after the
    CIE's (``DW_CFA_advance_loc`` by bytes, offsets in bytes)."""

    name: str
    address: int
    code: bytes
    cfi: tuple[Instruction, ...]


@record_class
class UnwindTables:
    """A compiled unit's ``.eh_frame`` and ``.sframe``, for the addresses they are written
    at in the JIT's own memory (their PC-relative fields depend on them)."""

    eh_frame_address: int
    eh_frame: bytes
    sframe_address: int
    sframe: bytes

    @property
    def end(self) -> int:
        return self.sframe_address + len(self.sframe)


def unwind_tables(functions: Sequence[JitCode], address: int) -> UnwindTables:
    """The tables of ``functions`` laid out from ``address`` (8-byte aligned)."""
    ordered = sorted(functions, key=lambda function: function.address)
    eh_address = align_up(address, 8)
    eh_frame = eh_frame_bytes(ordered, eh_address)
    sframe_address = align_up(eh_address + len(eh_frame), 8)
    section = GrowableSection(ABI.AMD64_ENDIAN_LITTLE, address=sframe_address,
                              budget=1 << 30)
    for function in ordered:
        section.add(translate([*AMD64_CIE, *function.cfi], function.address,
                              len(function.code), ABI.AMD64_ENDIAN_LITTLE))
    section.compact()
    return UnwindTables(eh_address, eh_frame, sframe_address, section.section_bytes())


def symfile(functions: Sequence[JitCode], tables: UnwindTables) -> bytes:
    """The ELF object describing ``functions`` (in any order) and their ``tables``. The
    tables' addresses must be memory of their own: a debugger maps every allocated
    section of every JIT object, and one overlapping another's code hides it."""
    ordered = sorted(functions, key=lambda function: function.address)
    text_start = ordered[0].address
    text_end = max(function.address + len(function.code) for function in ordered)
    text = bytearray(text_end - text_start)
    for function in ordered:
        at = function.address - text_start
        text[at:at + len(function.code)] = function.code
    strtab = bytearray(b"\0")
    symbols = [bytes(24)]
    for function in ordered:
        name_at = len(strtab)
        strtab += function.name.encode() + b"\0"
        # st_name, st_info (GLOBAL FUNC), st_other, st_shndx (.text), st_value, st_size
        symbols.append(struct.pack("<IBBHQQ", name_at, 0x12, 0, 1, function.address,
                                   len(function.code)))
    return _elf([(".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, text_start, bytes(text),
                  0, 0, 16, 0),
                 (".eh_frame", SHT_PROGBITS, SHF_ALLOC, tables.eh_frame_address,
                  tables.eh_frame, 0, 0, 8, 0),
                 (".sframe", SHT_PROGBITS, SHF_ALLOC, tables.sframe_address, tables.sframe,
                  0, 0, 8, 0),
                 (".symtab", SHT_SYMTAB, 0, 0, b"".join(symbols), 5, 1, 8, 24),
                 (".strtab", SHT_STRTAB, 0, 0, bytes(strtab), 0, 0, 1, 0)])


def code_object(name: str, address: int, code: bytes, eh_frame: bytes, eh_address: int
                ) -> bytes:
    """An ELF object of one function known only from its code and ``.eh_frame`` (at
    ``eh_address``), as a jitdump describes it: ``.text``, ``.eh_frame``, a symbol."""
    symbols = bytes(24) + struct.pack("<IBBHQQ", 1, 0x12, 0, 1, address, len(code))
    sections = [(".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, address, code, 0, 0, 16, 0)]
    if eh_frame:
        sections.append((".eh_frame", SHT_PROGBITS, SHF_ALLOC, eh_address, eh_frame, 0, 0, 8,
                         0))
    link = len(sections) + 2  # .symtab's string table follows it
    sections += [(".symtab", SHT_SYMTAB, 0, 0, symbols, link, 1, 8, 24),
                 (".strtab", SHT_STRTAB, 0, 0, b"\0" + name.encode() + b"\0", 0, 0, 1, 0)]
    return _elf(sections)


def eh_frame_bytes(functions: Sequence[JitCode], address: int) -> bytes:
    """``.eh_frame`` at ``address``: one CIE (``zR``, PC-relative 4-byte addresses) and an
    FDE per function, then the zero terminator."""
    cie_body = (struct.pack("<IB", 0, 1) + b"zR\0" + _uleb(1) + _sleb(DATA_ALIGN)
                + _uleb(RA_REGISTER) + _uleb(1) + bytes([DW_EH_PE_PCREL_SDATA4])
                + _instructions(AMD64_CIE))
    out = bytearray(_entry(cie_body))
    for function in functions:
        at = len(out)
        # CIE pointer: the distance back to the CIE from this field (4 bytes in).
        pc_field = address + at + 8
        body = (struct.pack("<Iii", at + 4, function.address - pc_field, len(function.code))
                + _uleb(0) + _instructions(function.cfi))
        out += _entry(body)
    return bytes(out + bytes(4))


def _entry(body: bytes) -> bytes:
    body += bytes(-(len(body) + 4) % 8)  # DW_CFA_nop padding to the address size
    return struct.pack("<I", len(body)) + body


def _instructions(instructions: Sequence[Instruction]) -> bytes:
    """The CFI instructions the JIT uses, encoded (advances in bytes, offsets in bytes)."""
    out = bytearray()
    for insn in instructions:
        if insn.op == DW_CFA_advance_loc:
            out += bytes([0x40 | insn.a]) if insn.a < 64 else bytes([0x02, insn.a & 0xFF])
        elif insn.op == DW_CFA_offset:
            out += bytes([0x80 | insn.a]) + _uleb(insn.b // DATA_ALIGN)
        elif insn.op == DW_CFA_restore:
            out += bytes([0xC0 | insn.a])
        elif insn.op == DW_CFA_def_cfa:
            out += bytes([DW_CFA_def_cfa]) + _uleb(insn.a) + _uleb(insn.b)
        elif insn.op == DW_CFA_def_cfa_register:
            out += bytes([DW_CFA_def_cfa_register]) + _uleb(insn.a)
        elif insn.op == DW_CFA_def_cfa_offset:
            out += bytes([DW_CFA_def_cfa_offset]) + _uleb(insn.a)
        else:
            raise ValueError(f"CFI op {insn.op:#x} is not one the JIT writes")
    return bytes(out)


def _elf(sections: list[tuple[str, int, int, int, bytes, int, int, int, int]]) -> bytes:
    """An ELF64 little-endian x86-64 file of ``sections`` (name, type, flags, address,
    contents, link, info, alignment, entry size) and their name table, no segments."""
    names = bytearray(b"\0")
    name_offsets = []
    for name in [*(section[0] for section in sections), ".shstrtab"]:
        name_offsets.append(len(names))
        names += name.encode() + b"\0"
    body = bytearray()
    placed = []
    for _, _, _, _, contents, _, _, align, _ in sections:
        body += bytes(-(64 + len(body)) % max(align, 1))
        placed.append(64 + len(body))
        body += contents
    placed.append(64 + len(body))
    body += names
    headers_at = align_up(64 + len(body), 8)
    body += bytes(headers_at - 64 - len(body))
    headers = bytearray(bytes(64))  # the null section
    for index, (_, kind, flags, address, contents, link, info, align, entsize) in enumerate(
            sections):
        headers += struct.pack("<IIQQQQIIQQ", name_offsets[index], kind, flags, address,
                               placed[index], len(contents), link, info, align, entsize)
    headers += struct.pack("<IIQQQQIIQQ", name_offsets[-1], SHT_STRTAB, 0, 0, placed[-1],
                           len(names), 0, 0, 1, 0)
    count = len(sections) + 2
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack("<HHIQQQIHHHHHH", ET_EXEC, EM_X86_64, 1, 0, 0, headers_at,
                                 0, 64, 0, 0, 64, count, count - 1)
    return header + bytes(body) + bytes(headers)


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte | (0 if done else 0x80))
        if done:
            return bytes(out)

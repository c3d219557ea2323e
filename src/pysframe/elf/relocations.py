"""The relocations of a 64-bit relocatable object, read by hand: the RELA entries against
one section and the symbols they name, and the relocation an SFrame FDE's start field takes.

What gas writes (checked with gas 2.47.50 on x86-64, AArch64 and s390x): one PC-relative
relocation per FDE, at the FDE's start field, against the section symbol of the
function's text section with the function's offset as addend. 8 bytes wide in V3
(``R_X86_64_PC64``, ``R_AARCH64_PREL64``, ``R_390_PC64``), 4 in V1/V2 (``R_X86_64_PC32``,
``R_AARCH64_PREL32``, ``R_390_PC32``), whatever the header's PCREL flag says (PR
ld/32666). ld takes the function of each FDE from that relocation, so an FDE without one
describes nothing (ld 2.47.50 crashed on such a section, issue 28).
"""

from __future__ import annotations

from typing import NamedTuple

from ..format.constants import FDE_SIZE
from ..format.decode import read_header
from ..format.errors import SFrameError
from ..format.validation import Finding
from .headers import (
    LAYOUTS,
    SHF_EXECINSTR,
    SHT_REL,
    SHT_RELA,
    SHT_SYMTAB,
    ElfError,
    SectionHeader,
)
from .sections import ElfImage

SHF_ALLOC = 0x2
SHN_LORESERVE = 0xFF00
STB_LOCAL = 0
STT_SECTION = 3

#: The PC-relative relocation gas writes for an FDE start field, by (machine, width).
START_FIELD_TYPES = {("EM_X86_64", 8): 24, ("EM_X86_64", 4): 2,
                     ("EM_AARCH64", 8): 260, ("EM_AARCH64", 4): 261,
                     ("EM_S390", 8): 23, ("EM_S390", 4): 5}
#: The no-op types ld skips between the start-field relocations (PR ld/33401).
NONE_TYPES = {"EM_X86_64": {0}, "EM_AARCH64": {0, 256}, "EM_S390": {0}}
CHECK = "relocations"


class Relocation(NamedTuple):
    number: int  # the entry's index in its table
    offset: int
    type: int
    symbol: int
    addend: int


class Symbol(NamedTuple):
    info: int
    shndx: int
    value: int
    size: int

    @property
    def local(self) -> bool:
        return self.info >> 4 == STB_LOCAL

    @property
    def is_section(self) -> bool:
        return self.info & 0xF == STT_SECTION


def relocation_tables(image: ElfImage, target: int) -> list[SectionHeader]:
    """The RELA sections that relocate section ``target`` (:class:`ElfError` for REL ones:
    the 64-bit targets SFrame has use RELA only)."""
    found = []
    for header in image.section_headers():
        if header.type in (SHT_RELA, SHT_REL) and header.info == target:
            if header.type == SHT_REL:
                raise ElfError(image.path, f"{header.name}: REL relocations (this target uses "
                               "RELA)", header.offset, unsupported=True)
            found.append(header)
    return found


def read_relocations(image: ElfImage, table: SectionHeader) -> list[Relocation]:
    """The entries of the RELA section ``table`` (a 64-bit object's)."""
    rela = LAYOUTS[(True, image.big_endian)].rela
    if table.entsize not in (0, rela.size) or table.size % rela.size:
        raise ElfError(image.path, f"{table.name}: entry size {table.entsize}, section size "
                       f"{table.size} (RELA entries are {rela.size} bytes)", table.offset)
    data = image.section_bytes(table)
    return [Relocation(number, offset, info & 0xFFFFFFFF, info >> 32, addend)
            for number, (offset, info, addend) in enumerate(rela.iter_unpack(data))]


def read_symbols(image: ElfImage, index: int) -> list[Symbol]:
    """The entries of the symbol table at section ``index``."""
    headers = image.section_headers()
    if not 0 < index < len(headers) or headers[index].type != SHT_SYMTAB:
        raise ElfError(image.path, f"section {index} is not the symbol table")
    table = headers[index]
    layout = LAYOUTS[(True, image.big_endian)].symbol
    data = image.section_bytes(table)
    return [Symbol(info, shndx, value, size) for _, info, _, shndx, value, size
            in layout.iter_unpack(data[:len(data) - len(data) % layout.size])]


# --- validate: the relocations of an SFrame section in a relocatable object ---------------

def sframe_relocation_findings(image: ElfImage, header: SectionHeader) -> list[Finding]:
    """What is wrong with the relocations of the SFrame section ``header`` of a 64-bit
    relocatable object: not allocated, an FDE start field without its one PC-relative
    relocation against a function inside an executable section, relocations elsewhere.
    Nothing for sections whose header cannot be read (the format checks say why)."""
    if image.elf_type != "REL" or image.elf_class != 64:
        return []
    raw = image.section_bytes(header)
    try:
        sframe = read_header(raw)
    except SFrameError:
        return []
    width = 8 if sframe.version >= 3 else 4
    wanted = START_FIELD_TYPES.get((image.machine, width))
    if wanted is None:
        return []
    findings: list[Finding] = []
    if not header.flags & SHF_ALLOC:
        findings.append(Finding(CHECK, "the section is not allocated (SHF_ALLOC): ld does not "
                                "link it as SFrame"))
    fields = {sframe.fdes_start + i * FDE_SIZE[sframe.version]: i
              for i in range(sframe.num_fdes)}
    seen: dict[int, Relocation] = {}
    sizes = {at: _field(raw, at + width, sframe.big_endian) for at in fields}
    headers = image.section_headers()
    for table in relocation_tables(image, header.number):
        symbols = read_symbols(image, table.link)
        for relocation in read_relocations(image, table):
            if relocation.type in NONE_TYPES.get(image.machine, ()):
                continue
            at = relocation.offset
            fde = fields.get(at)
            where = f"{table.name} entry {relocation.number}"
            if fde is None:
                findings.append(Finding(CHECK, f"{where} (type {relocation.type}) relocates "
                                        f"offset {at:#x}, which is no FDE's start field", at))
                continue
            if at in seen:
                findings.append(Finding(CHECK, f"{where}: a second relocation of the start "
                                        "field", at, fde))
                continue
            seen[at] = relocation
            problem = _start_problem(relocation, wanted, width, symbols, headers, sizes[at])
            if problem:
                findings.append(Finding(CHECK, f"{where}: {problem}", at, fde))
    for at, fde in fields.items():
        if at not in seen:
            findings.append(Finding(CHECK, "the start field has no relocation (ld cannot "
                                    "tell which function the FDE describes)", at, fde))
    return findings


def _field(raw: bytes, at: int, big_endian: bool) -> int:
    """The u32 at ``at`` (the FDE's function size, after the start field)."""
    return int.from_bytes(raw[at:at + 4], "big" if big_endian else "little")


def _start_problem(relocation: Relocation, wanted: int, width: int, symbols: list[Symbol],
                   headers: list[SectionHeader], size: int) -> str | None:
    if relocation.type != wanted:
        return (f"type {relocation.type}, not the {width}-byte PC-relative type {wanted} "
                "gas writes")
    if not 0 < relocation.symbol < len(symbols):
        return f"names symbol {relocation.symbol} of {len(symbols)}"
    symbol = symbols[relocation.symbol]
    if not 0 < symbol.shndx < min(SHN_LORESERVE, len(headers)):
        return f"symbol {relocation.symbol} is not defined in a section of this object"
    text = headers[symbol.shndx]
    if not text.flags & SHF_EXECINSTR:
        return f"symbol {relocation.symbol} is in {text.name}, which is not executable"
    start = symbol.value + relocation.addend
    if start < 0 or start + size > text.size:
        return (f"the function [{start:#x}, {start + size:#x}) is not inside {text.name} "
                f"(size {text.size:#x})")
    return None

"""JIT objects (``pysframe.sources.jit_interface``: in-memory ELF files a JIT registered)
as mappings of an address space: each object's ``.text`` range, unwound with its
``.sframe`` and named by its symbols. A JIT frame's file shows as :data:`JIT_FILENAME`. An
object that is not a readable ELF file, or whose ``.sframe`` is corrupt, costs its own
frames only (reported). (A jitdump's code loads are mapped by the recording's session,
``pysframe.session.jitdump``, which generates their tables.)"""

from __future__ import annotations

from ..elf import ElfError, ElfImage
from ..elf.headers import SHT_DYNSYM, SHT_NOBITS, SHT_SYMTAB, SectionHeader
from ..errors import summarized
from ..format.decode import SFrameReader
from ..format.errors import SFrameError
from ..format.lookup import SFrameLookup
from ..records import Protocol
from .address_space import JIT_FILENAME, AddressSpace, Mapping, Module

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


class JitCode(Protocol):
    """A registered JIT object (``sources.jit_interface.JitObject`` fits): where its bytes
    are and the bytes (an ELF file)."""

    @property
    def address(self) -> int: ...

    @property
    def data(self) -> bytes: ...


def descriptor_address(space: AddressSpace, symbol: str) -> int | None:
    """The runtime address of ``symbol`` (the JIT interface's ``__jit_debug_descriptor``)
    in a module of ``space``."""
    for mapping in space.mappings:
        module = mapping.module
        if module is None or module.image is None:
            continue
        value = _object_symbol(module.image, symbol)
        if value is not None:
            return value + module.bias
    return None


def _object_symbol(image: ElfImage, name: str) -> int | None:
    """The value of the first symbol called ``name`` (in table order) that is defined and
    not 0, in ``image``'s ``.dynsym``, else its ``.symtab``; None when neither has one, or
    when a section of that name is not a symbol table.

    Read by hand: the name is searched in the string table (``bytes.find``) and only the
    entries pointing there are read. pyelftools' map of every symbol name cost ~70 ms of
    each ``sframe stack`` (libc's .dynsym and the program's .symtab), and its import ~20 ms
    more, for a symbol almost no process has."""
    try:
        sections = image.section_headers()
    except ElfError:
        return None
    needle = name.encode("utf-8", "surrogateescape") + b"\0"
    for table_name in (".dynsym", ".symtab"):
        table = next((s for s in sections if s.name == table_name), None)
        if table is None:
            continue
        if table.type not in (SHT_DYNSYM, SHT_SYMTAB) or table.link >= len(sections):
            return None
        value = _defined_value(image, table, sections[table.link], needle)
        if value is not None:
            return value
    return None


def _defined_value(image: ElfImage, table: SectionHeader, strings: SectionHeader,
                   needle: bytes) -> int | None:
    """:func:`_object_symbol` in one symbol table, ``needle`` the name and its NUL."""
    data, layout = image.data, image.header.layout
    entry = layout.symbol
    if (table.offset + table.size > len(data) or strings.offset + strings.size > len(data)
            or strings.type == SHT_NOBITS):
        return None
    names = data[strings.offset:strings.offset + strings.size]
    entries = data[table.offset:table.offset + table.size]
    found: list[tuple[int, int, int]] = []  # (entry index, st_shndx, st_value)
    position = names.find(needle)
    while position >= 0:
        # st_name comes first in both classes: a match counts at an entry's start only.
        key = position.to_bytes(4, "little" if layout.order == "<" else "big")
        at = entries.find(key)
        while at >= 0:
            if at % entry.size == 0 and at + entry.size <= len(entries):
                row = entry.unpack_from(entries, at)
                shndx, value = (row[3], row[4]) if layout.wide else (row[5], row[1])
                found.append((at // entry.size, shndx, value))
            at = entries.find(key, at + 1)
        position = names.find(needle, position + 1)
    return next((value for _, shndx, value in sorted(found) if shndx and value), None)


def jit_mappings(objects: Sequence[JitCode]) -> tuple[list[Mapping], list[str]]:
    """A mapping per object with code (and the problems, one line each)."""
    mappings: list[Mapping] = []
    problems: list[str] = []
    for found in objects:
        where = f"JIT object at {found.address:#x}"
        try:
            image = ElfImage(f"{JIT_FILENAME} {found.address:#x}", found.data)
            text = image.section_header(".text")
            if text is None or not text.size:
                problems.append(f"{where}: no .text section")
                continue
            sections = image.sframe_sections()
            lookup = (SFrameLookup(SFrameReader(sections[0].raw, sections[0].address))
                      if sections else None)
        except (ElfError, SFrameError) as error:
            problems.append(f"{where}: {error}")
            continue
        origin = ".sframe" if lookup is not None else "no SFrame: the object has none"
        module = Module(image.path, None, 0, lookup, origin, image)  # (unique: caches key on it)
        mappings.append(Mapping(text.address, text.address + text.size, 0, JIT_FILENAME,
                                None, module))
    return mappings, summarized(problems, "JIT objects")


def add_jit_code(space: AddressSpace, mappings: list[Mapping]) -> None:
    """Put the JIT mappings into ``space`` (over the anonymous memory they sit in)."""
    space.add_all(mappings)

"""JIT objects (``pysframe.sources.jit_interface``: in-memory ELF files a JIT registered)
as mappings of an address space: each object's ``.text`` range, unwound with its
``.sframe`` and named by its symbols. A JIT frame's file shows as :data:`JIT_FILENAME`. An
object that is not a readable ELF file, or whose ``.sframe`` is corrupt, costs its own
frames only (reported). (A jitdump's code loads are mapped by the recording's session,
``pysframe.session.jitdump``, which generates their tables.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..elf import ElfError, ElfImage
from ..errors import summarized
from ..format.decode import SFrameReader
from ..format.errors import SFrameError
from ..format.lookup import SFrameLookup
from .address_space import AddressSpace, Mapping, Module

JIT_FILENAME = "[jit]"


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
    try:
        for table in (".dynsym", ".symtab"):
            section = image.section_by_name(table)
            if section is None:
                continue
            for symbol in section.get_symbol_by_name(name) or []:
                if symbol["st_shndx"] != "SHN_UNDEF" and symbol["st_value"]:
                    return int(symbol["st_value"])
    except (ElfError, ValueError, AttributeError):
        return None
    return None


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

"""JIT objects (:mod:`pysframe.sources.jit_interface`) as mappings of an address space:
each object's ``.text`` range, unwound with its ``.sframe`` and named by its symbols. A
JIT frame's file shows as :data:`JIT_FILENAME`. An object that is not a readable ELF
file, or whose ``.sframe`` is corrupt, costs its own frames only (reported)."""

from __future__ import annotations

from ..elf import ElfError, ElfImage
from ..format.decode import SFrameReader
from ..format.errors import SFrameError
from ..format.lookup import SFrameLookup
from ..generate.cache import sframe_for
from ..generate.errors import GenerateError
from ..jit.symfile import code_object
from ..sources.jit_interface import DESCRIPTOR_SYMBOL, JitObject
from ..sources.jitdump import CodeLoad
from .address_space import AddressSpace, Mapping, Module

JIT_FILENAME = "[jit]"


def descriptor_address(space: AddressSpace) -> int | None:
    """The runtime address of ``__jit_debug_descriptor`` in a module of ``space``."""
    for mapping in space.mappings:
        module = mapping.module
        if module is None or module.image is None:
            continue
        value = _object_symbol(module.image, DESCRIPTOR_SYMBOL)
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


def jit_mappings(objects: list[JitObject]) -> tuple[list[Mapping], list[str]]:
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
    return mappings, problems


def add_jit_code(space: AddressSpace, mappings: list[Mapping]) -> None:
    """Put the JIT mappings into ``space`` (over the anonymous memory they sit in)."""
    for mapping in mappings:
        space.add(mapping)


def jitdump_mappings(loads: list[CodeLoad], where: str) -> tuple[list[Mapping], list[str]]:
    """A mapping per code load of a jitdump (``where``: the dump's path, for problems):
    named by the load's name, unwound with SFrame generated from its ``.eh_frame``."""
    mappings: list[Mapping] = []
    problems: list[str] = []
    for load in loads:
        eh_frame, eh_address = _eh_frame_of(load)
        try:
            image = ElfImage(f"{JIT_FILENAME} {load.address:#x}",
                             code_object(load.name, load.address, load.code, eh_frame,
                                         eh_address))
            lookup = None
            if eh_frame:
                data, address = sframe_for(image, use_cache=False)
                lookup = SFrameLookup(SFrameReader(data, address))
        except (ElfError, SFrameError, GenerateError, ValueError) as error:
            problems.append(f"{where}: code {load.name} at {load.address:#x}: {error}")
            continue
        origin = "generated" if lookup is not None else "no SFrame: no unwinding info"
        module = Module(image.path, None, 0, lookup, origin, image)
        mappings.append(Mapping(load.address, load.address + len(load.code), 0, JIT_FILENAME,
                                None, module))
    return mappings, problems


def _eh_frame_of(load: CodeLoad) -> tuple[bytes, int]:
    """The load's ``.eh_frame`` and its address: found from its ``.eh_frame_hdr`` (whose
    first table entry is the function, relative to the header), else where perf inject
    --jit puts it (after the code, at its size rounded up to 8)."""
    header_size = load.eh_frame_hdr_size
    if not load.unwinding:
        return b"", 0
    eh_frame = load.unwinding[:len(load.unwinding) - header_size]
    header = load.unwinding[len(eh_frame):]
    if len(header) >= 20 and header[0] == 1 and header[3] == 0x3B:
        first = int.from_bytes(header[12:16], "little", signed=True)
        return eh_frame, load.address - first - len(eh_frame)
    return eh_frame, load.address + (len(load.code) + 7) // 8 * 8

"""A jitdump's code loads (``pysframe.sources.jitdump``) as mappings of a recording's
address space: each named by its load's name and unwound with SFrame generated from the
``.eh_frame`` the JIT wrote (never cached: the code lives only in the dump)."""

from __future__ import annotations

from ..elf import ElfError, ElfImage
from ..format.decode import SFrameReader
from ..format.errors import SFrameError
from ..format.lookup import SFrameLookup
from ..generate.cache import sframe_for
from ..generate.errors import GenerateError
from ..jit.symfile import code_object
from ..sources.jitdump import CodeLoad
from ..unwind.address_space import JIT_FILENAME, Mapping, Module


def jitdump_mappings(loads: list[CodeLoad], where: str) -> tuple[list[Mapping], list[str]]:
    """A mapping per code load of a jitdump (``where``: the dump's path, for problems):
    named by the load's name, unwound with SFrame generated from its ``.eh_frame``."""
    mappings: list[Mapping] = []
    problems: list[str] = []
    for load in loads:
        eh_frame, eh_address = _eh_frame_of(load)
        path = f"{JIT_FILENAME} {load.address:#x}"
        try:
            lookup = None
            if not eh_frame:  # named only: its object made if a frame is ever named
                image: ElfImage = _CodeImage(path, load)
            else:
                image = ElfImage(path, code_object(load.name, load.address, load.code,
                                                   eh_frame, eh_address))
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


class _CodeImage(ElfImage):
    """The object of a code load without unwinding information, made on first use: a JIT
    writes hundreds of thousands of loads, and a recording names a few of them."""

    def __init__(self, path: str, load: CodeLoad) -> None:
        self.path = path
        self._load: CodeLoad | None = load

    def __getattr__(self, name: str) -> object:
        load = self.__dict__.pop("_load", None)
        if load is None:
            raise AttributeError(name)
        ElfImage.__init__(self, self.path, code_object(load.name, load.address, load.code,
                                                       b"", 0))
        return getattr(self, name)


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

"""A binary's ``.eh_frame`` by function, through its ``.eh_frame_hdr`` search table: one
index per binary image (parsed once, kept for the last :data:`INDEX_LIMIT` images), for
the callee-saved registers of :mod:`.callee_saved` and the function starts of profiles.
"""

from __future__ import annotations

from ..cfi.eh_frame import CFIError, EhFrameIndex
from ..elf import ElfImage
from ..errors import PysframeError
from .address_space import Module

#: One .eh_frame index per binary image (None: the binary has none usable).
_indexes: dict[int, tuple[ElfImage, EhFrameIndex | None]] = {}
INDEX_LIMIT = 256


def eh_frame_index(image: ElfImage) -> EhFrameIndex | None:
    """The image's index, or None when it has no ``.eh_frame`` and ``.eh_frame_hdr`` that
    can be read."""
    found = _indexes.get(id(image))
    if found is not None and found[0] is image:
        return found[1]
    index: EhFrameIndex | None = None
    try:
        eh_frame, hdr = image.section(".eh_frame"), image.section(".eh_frame_hdr")
        if eh_frame is not None and hdr is not None:
            index = EhFrameIndex(eh_frame[0], eh_frame[1], hdr[0], hdr[1],
                                 big_endian=image.big_endian)
    except (PysframeError, ValueError):
        index = None
    if len(_indexes) >= INDEX_LIMIT:
        _indexes.clear()
    _indexes[id(image)] = (image, index)
    return index


def function_start(module: Module, pc: int) -> int | None:
    """The runtime address where the function containing runtime ``pc`` starts, as the FDE
    covering it says; None when the module's ``.eh_frame`` has none (or cannot be read)."""
    if module.image is None:
        return None
    index = eh_frame_index(module.image)
    if index is None:
        return None
    try:
        fde = index.fde_for(pc - module.bias)
    except (CFIError, ValueError, IndexError, PysframeError):
        return None
    return None if fde is None else fde.pc_begin + module.bias

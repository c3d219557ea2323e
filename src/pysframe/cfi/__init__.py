"""DWARF call-frame information: .eh_frame and .debug_frame, decoded per function.

Hand-written because pyelftools decodes all of a library's CFI up front (about
0.5 s for libc), offers no per-function access and fails on
DW_CFA_GNU_args_size. This decoder reads one CIE/FDE at a time from a
``memoryview`` and keeps each function's instructions as small tuples.

The API is the names below: parsing (:func:`parse_eh_frame`, :func:`parse_debug_frame`,
:class:`EhFrameIndex` for one function through ``.eh_frame_hdr``), the instructions of
an entry (:func:`cie_instructions`, :func:`fde_instructions`, :func:`decode_instructions`
giving :class:`Instruction` tuples) and the LEB128 readers. The ``DW_CFA_*`` opcode
numbers and their ``NAMES`` are constants of :mod:`.instructions`.
"""

from ..exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .eh_frame import (
        CIE,
        FDE,
        EhFrameIndex,
        cie_instructions,
        fde_instructions,
        parse_debug_frame,
        parse_eh_frame,
    )
    from .errors import CFIError
    from .instructions import Instruction, decode_instructions
    from .leb128 import DecodeError, read_sleb128, read_uleb128

_HOMES = {
    "CFIError": ".errors",
    **dict.fromkeys(["CIE", "FDE", "EhFrameIndex", "cie_instructions",
                     "fde_instructions", "parse_debug_frame", "parse_eh_frame"], ".eh_frame"),
    **dict.fromkeys(["Instruction", "decode_instructions"], ".instructions"),
    **dict.fromkeys(["DecodeError", "read_sleb128", "read_uleb128"], ".leb128"),
}

__all__ = [
    "CIE",
    "FDE",
    "CFIError",
    "DecodeError",
    "EhFrameIndex",
    "Instruction",
    "cie_instructions",
    "decode_instructions",
    "fde_instructions",
    "parse_debug_frame",
    "parse_eh_frame",
    "read_sleb128",
    "read_uleb128",
]

__getattr__ = lazy_exports(__name__, _HOMES)

"""DWARF call-frame information: .eh_frame and .debug_frame, decoded per function.

Hand-written because pyelftools decodes all of a library's CFI up front (about
0.5 s for libc), offers no per-function access and fails on
DW_CFA_GNU_args_size. This decoder reads one CIE/FDE at a time from a
``memoryview`` and keeps each function's instructions as small tuples.
"""

from .eh_frame import CIE, FDE, CFIError, EhFrameIndex, parse_debug_frame, parse_eh_frame
from .instructions import Instruction, decode_instructions

__all__ = ["CIE", "FDE", "CFIError", "EhFrameIndex", "Instruction", "decode_instructions", "parse_debug_frame",
           "parse_eh_frame"]

"""The SFrame format: object model, decoder, encoder, lookup and the objdump-style dump.

Hand-written because no Python library reads or writes SFrame.
"""

from .constants import ABI, BaseReg, FDEType, FREType, PCType
from .decode import FDEEntry, Header, SFrameReader, decode, read_header, sframe_extent
from .encode import convert, encode
from .errors import (
    BadMagicError,
    CorruptError,
    EncodeError,
    SFrameError,
    TruncatedError,
    UnsupportedVersionError,
)
from .model import FDE, FRE, Section, default_section

__all__ = [
    "ABI",
    "FDE",
    "FRE",
    "BadMagicError",
    "BaseReg",
    "CorruptError",
    "EncodeError",
    "FDEEntry",
    "FDEType",
    "FREType",
    "Header",
    "PCType",
    "SFrameError",
    "SFrameReader",
    "Section",
    "TruncatedError",
    "UnsupportedVersionError",
    "convert",
    "decode",
    "default_section",
    "encode",
    "read_header",
    "sframe_extent",
]

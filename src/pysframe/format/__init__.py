"""The SFrame format: object model, decoder, encoder, lookup and the objdump-style dump.

Hand-written because no Python library reads or writes SFrame. Apart from
``decode`` and ``encode``, the names below are loaded on first use (PEP 562).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .constants import ABI, BaseReg, FDEType, FREType, PCType
    from .decode import FDEEntry, Header, SFrameReader, read_header, sframe_extent
    from .encode import convert
    from .errors import (
        BadMagicError,
        CorruptError,
        EncodeError,
        SFrameError,
        TruncatedError,
        UnsupportedVersionError,
    )
    from .model import FDE, FRE, Section, default_section

# ``decode`` and ``encode`` are also submodule names: importing the submodule would bind
# the module to the package attribute, so these two functions are bound eagerly.
from .decode import decode
from .encode import encode

_HOMES = {
    **dict.fromkeys(("ABI", "BaseReg", "FDEType", "FREType", "PCType"), ".constants"),
    **dict.fromkeys(("FDEEntry", "Header", "SFrameReader", "read_header", "sframe_extent"),
                    ".decode"),
    "convert": ".encode",
    **dict.fromkeys(("BadMagicError", "CorruptError", "EncodeError", "SFrameError",
                     "TruncatedError", "UnsupportedVersionError"), ".errors"),
    **dict.fromkeys(("FDE", "FRE", "Section", "default_section"), ".model"),
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home, __name__), name)

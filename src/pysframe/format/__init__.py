"""The SFrame format: object model, decoder, encoder, lookup, validation and the dumps.

Hand-written because no Python library reads or writes SFrame. The public API is
the names in ``__all__``, imported from here (``from pysframe.format import
SFrameReader, SFrameLookup``); the modules behind them are the implementation:

- reading: :class:`SFrameReader` (bounds-checked, lazy), :func:`decode` (the whole
  :class:`Section` model), :func:`read_header`, :func:`sframe_extent`;
- writing: :func:`encode`, :func:`convert` (V2 <-> V3), :func:`relocate` (a section
  moved, for the same code), :func:`default_section`;
- looking up a PC: :class:`SFrameLookup` built from a reader, giving a
  :class:`FrameRow` of :class:`Rule` values;
- checking: :func:`validate` yields :class:`Finding` values;
- dumping: :func:`dump_text` / :func:`dump_bytes` / :func:`dump_lines` (objdump's
  text, in the :class:`DumpStyle` of a binutils release) and :func:`section_json`;
- errors: every bad input raises a subclass of :class:`SFrameError`.

Apart from ``decode`` and ``encode``, the names are loaded on first use
(PEP 562), so importing this package imports neither numpy nor pyelftools.
"""

from ..exports import lazy_exports

# ``decode`` and ``encode`` are also submodule names: importing the submodule would bind
# the module to the package attribute, so these two functions are bound eagerly.
from .decode import decode
from .encode import encode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .constants import ABI, BaseReg, FDEType, FREType, PCType
    from .decode import FDEEntry, Header, SFrameReader, read_header, sframe_extent
    from .dump import dump_bytes, dump_lines, dump_text
    from .dump_style import STYLE_2_40, STYLE_2_44, STYLE_2_46, DumpStyle, style_for
    from .encode import convert, relocate
    from .errors import (
        BadMagicError,
        CorruptError,
        EncodeError,
        SFrameError,
        TruncatedError,
        UnsupportedVersionError,
    )
    from .jsondump import section_json
    from .lookup import RETAIN, FrameRow, Rule, RuleKind, SFrameLookup
    from .model import FDE, FRE, Section, default_section
    from .validation import CHECKS, ERROR, WARNING, Finding, validate


_HOMES = {
    **dict.fromkeys(("ABI", "BaseReg", "FDEType", "FREType", "PCType"), ".constants"),
    **dict.fromkeys(("FDEEntry", "Header", "SFrameReader", "read_header", "sframe_extent"),
                    ".decode"),
    **dict.fromkeys(("dump_bytes", "dump_lines", "dump_text"), ".dump"),
    **dict.fromkeys(("STYLE_2_40", "STYLE_2_44", "STYLE_2_46", "DumpStyle", "style_for"),
                    ".dump_style"),
    **dict.fromkeys(("convert", "relocate"), ".encode"),
    **dict.fromkeys(("BadMagicError", "CorruptError", "EncodeError", "SFrameError",
                     "TruncatedError", "UnsupportedVersionError"), ".errors"),
    "section_json": ".jsondump",
    **dict.fromkeys(("RETAIN", "FrameRow", "Rule", "RuleKind", "SFrameLookup"), ".lookup"),
    **dict.fromkeys(("FDE", "FRE", "Section", "default_section"), ".model"),
    **dict.fromkeys(("CHECKS", "ERROR", "WARNING", "Finding", "validate"), ".validation"),
}

__all__ = [
    "ABI",
    "CHECKS",
    "ERROR",
    "FDE",
    "FRE",
    "RETAIN",
    "STYLE_2_40",
    "STYLE_2_44",
    "STYLE_2_46",
    "WARNING",
    "BadMagicError",
    "BaseReg",
    "CorruptError",
    "DumpStyle",
    "EncodeError",
    "FDEEntry",
    "FDEType",
    "FREType",
    "Finding",
    "FrameRow",
    "Header",
    "PCType",
    "Rule",
    "RuleKind",
    "SFrameError",
    "SFrameLookup",
    "SFrameReader",
    "Section",
    "TruncatedError",
    "UnsupportedVersionError",
    "convert",
    "decode",
    "default_section",
    "dump_bytes",
    "dump_lines",
    "dump_text",
    "encode",
    "read_header",
    "relocate",
    "section_json",
    "sframe_extent",
    "style_for",
    "validate",
]

__getattr__ = lazy_exports(__name__, _HOMES)

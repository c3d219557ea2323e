"""Generating SFrame from DWARF CFI, with the rules of GNU as (per function) and GNU ld
(PLT entries, merging, sorting).

The API is the names below, imported from here (loaded on first use): :func:`generate`
(a whole section for an ELF file), :func:`sframe_for` (a file's own or generated section,
cached by build id), :func:`inject` (a copy of a file with the section added),
:func:`compare_with_cfi` (a section against the file's CFI), :func:`translate` (one
function's CFI as gas translates it) and :class:`GenerateError`.
"""

from ..exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .cache import sframe_for
    from .compare import compare_with_cfi, section_for_comparison
    from .errors import GenerateError
    from .gas import Skip, translate
    from .inject import inject
    from .section import Generated, generate

_HOMES = {
    "sframe_for": ".cache",
    "compare_with_cfi": ".compare",
    "section_for_comparison": ".compare",
    "GenerateError": ".errors",
    "Skip": ".gas",
    "translate": ".gas",
    "inject": ".inject",
    "Generated": ".section",
    "generate": ".section",
}

__all__ = [
    "GenerateError",
    "Generated",
    "Skip",
    "compare_with_cfi",
    "generate",
    "inject",
    "section_for_comparison",
    "sframe_for",
    "translate",
]

__getattr__ = lazy_exports(__name__, _HOMES)

"""perf's rules for ELF symbols, for both readings of a symbol table (:mod:`.symbol_lists`,
:mod:`.perf_symbols`): the symbols it takes, and its choice between two symbols that start
at one address (its ``choose_best_symbol``).

The symbols perf 6.1 takes (symbol-elf.c, checked with perf on hand-made files): named
FUNC, IFUNC and OBJECT symbols and NOTYPE labels, defined in a section that is loaded
(SHF_ALLOC); a label only if it is not hidden or internal and its section's name contains
"text" or "data" (``_start`` of ld.so, a label in ``.text``; not ``__bss_start``, not a
label in ``.mycode``). ARM mapping symbols (``$a``, ``$d``, ``$t``, ``$x``) are not
symbols."""

from __future__ import annotations

from ..elf import ElfImage
from ..elf.headers import (
    SHF_ALLOC,
    SHT_DYNSYM,
    SHT_SYMTAB,
    STT_FUNC,
    STT_GNU_IFUNC,
    STT_OBJECT,
    STV_HIDDEN,
    STV_INTERNAL,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


#: The kinds of symbol perf takes besides NOTYPE labels, and the visibilities that keep a
#: label out.
TAKEN_KINDS = (STT_FUNC, STT_GNU_IFUNC, STT_OBJECT)
UNSEEN = (STV_HIDDEN, STV_INTERNAL)


def last_end(start: int) -> int:
    """Where perf ends the last symbol of a table when it has no size (its
    ``symbols__fixup_end``): one page past the page it starts in (past 64 bits for a
    symbol in the last page: each caller says what it does then)."""
    return (start + 0xFFF) // 0x1000 * 0x1000 + 0x1000


def symbol_section(image: ElfImage, section_name: str) -> tuple[bytes, bytes] | None:
    """(the entries, the string table's bytes) of the symbol table ``section_name``, for
    both readings; None for no such table, one whose string table is past the section
    headers, either running past the file, or entries of another size than the layout's."""
    section = image.section_header(section_name)
    if section is None or section.type not in (SHT_SYMTAB, SHT_DYNSYM):
        return None
    sections = image.section_headers()
    if section.link >= len(sections):
        return None
    strtab, data = sections[section.link], image.data
    start, size = section.offset, section.size
    if (start + size > len(data) or strtab.offset + strtab.size > len(data)
            or size % image.header.layout.symbol.size):
        return None
    return bytes(data[start:start + size]), bytes(data[strtab.offset:strtab.offset + strtab.size])


def taken_sections(image: ElfImage) -> tuple[list[bool], list[bool]]:
    """Per section index: (perf loads symbols there: SHF_ALLOC, perf takes NOTYPE labels
    there: also a name containing "text" or "data")."""
    sections = image.section_headers()
    loaded = [bool(section.flags & SHF_ALLOC) for section in sections]
    labels = [ok and ("text" in section.name or "data" in section.name)
              for ok, section in zip(loaded, sections, strict=True)]
    return loaded, labels


def _leading_underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


#: What perf's choice between two symbols at one address looks at: whether the symbol
#: has a size (after :func:`.symbols._fixed_ends`), its binding and its name.
Facts = tuple[bool, str, str]


def better(a: Facts, b: Facts, shown: Callable[[str], str] | None = None) -> bool:
    """Whether perf keeps ``a`` rather than ``b`` for the same start address (its
    ``choose_best_symbol``). perf compares the names it prints: ``shown`` (its
    demangler) gives them."""
    a_sized, a_binding, a_name = a
    b_sized, b_binding, b_name = b
    if a_sized != b_sized:
        return a_sized
    if (a_binding == "STB_WEAK") != (b_binding == "STB_WEAK"):
        return b_binding == "STB_WEAK"
    if (a_binding == "STB_GLOBAL") != (b_binding == "STB_GLOBAL"):
        return a_binding == "STB_GLOBAL"
    return name_first(a_name, b_name, shown)


def name_first(a_name: str, b_name: str, shown: Callable[[str], str] | None = None) -> bool:
    """:func:`better` between two symbols of one size and binding: whether perf keeps the
    one named ``a_name`` (the names it prints: ``shown``'s)."""
    if shown is not None:
        a_name, b_name = shown(a_name), shown(b_name)
    if _leading_underscores(a_name) != _leading_underscores(b_name):
        return _leading_underscores(a_name) < _leading_underscores(b_name)
    return len(a_name) >= len(b_name)  # a full tie keeps the earlier symbol, as perf does

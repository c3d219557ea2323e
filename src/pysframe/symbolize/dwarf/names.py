"""Function names as gdb 13 prints them in ``bt``, and the attribute lookups they need.

* gdb makes ``DW_AT_linkage_name`` (else ``DW_AT_MIPS_linkage_name``) a function symbol's
  linkage name when there is one, and for C (and every language without a demangled
  form) the name it prints is that linkage name: an asm-renamed C declaration such as
  glibc's ``__libc_write`` prints as ``__GI___libc_write``. Without one it is
  ``DW_AT_name``.
* Attributes are looked up the way gdb's ``dwarf2_attr`` does: on the DIE, else through
  its ``DW_AT_specification`` / ``DW_AT_abstract_origin`` (across units and into the
  supplementary file).
* C++: gdb prints the linkage name demangled (with the return type of templates dropped)
  and then without its parameters, or the whole name when its C++ name parser rejects it
  (:mod:`pysframe.symbolize.cplus`). Without a linkage name (and for Rust and Fortran)
  gdb qualifies ``DW_AT_name`` with the enclosing namespaces, classes and modules.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from ..cplus import cplus_function_name, demangle
from .forms import LOCAL_REFERENCE_NAMES, REF_ADDR_NAME, SUPPLEMENTARY_REFERENCE_NAMES
from .info import Info
from .units import Units, children

if TYPE_CHECKING:
    from elftools.dwarf.die import DIE

_MAX_HOPS = 16                  # DW_AT_specification / abstract_origin chain length
#: DW_AT_language values gdb treats as C++ (C++ variants, Objective C++), Fortran and
#: Rust: their frames print scope-qualified names.
CPLUS_LANGUAGES = frozenset((0x04, 0x11, 0x19, 0x1A, 0x21, 0x2A, 0x2B))
QUALIFIED_LANGUAGES = CPLUS_LANGUAGES | {0x07, 0x08, 0x0E, 0x22, 0x23, 0x2D, 0x1C}
_QUALIFYING_PARENTS = frozenset(("DW_TAG_namespace", "DW_TAG_module", "DW_TAG_class_type",
                                 "DW_TAG_structure_type", "DW_TAG_union_type",
                                 "DW_TAG_interface_type"))


class Names:
    """Attributes as gdb's ``dwarf2_attr`` finds them, and the names gdb prints."""

    def __init__(self, units: Units) -> None:
        self._units = units
        self._parents: dict[tuple[int, int], DIE | None] = {}

    # -- references and attributes

    def reference(self, die: DIE, name: str) -> DIE | None:
        """The DIE that attribute ``name`` of ``die`` refers to, or None."""
        attribute = die.attributes[name]
        form = attribute.form
        value = attribute.raw_value
        if not isinstance(value, int):
            return None
        if form in LOCAL_REFERENCE_NAMES:
            return die.cu.get_DIE_from_refaddr(die.cu.cu_offset + value)
        if form == REF_ADDR_NAME:
            return _die_at(self._units.info_of(die), value)
        supplementary = self._units.supplementary
        if form in SUPPLEMENTARY_REFERENCE_NAMES and supplementary is not None:
            return _die_at(supplementary, value)
        return None

    def _origin(self, die: DIE) -> DIE | None:
        """Where gdb's ``dwarf2_attr`` looks next: the DIE named by the DIE's (last)
        DW_AT_specification or DW_AT_abstract_origin attribute."""
        link = None
        for name in die.attributes:
            if name in ("DW_AT_specification", "DW_AT_abstract_origin"):
                link = name
        return self.reference(die, link) if link is not None else None

    def holder(self, die: DIE, name: str) -> DIE | None:
        """The DIE that holds attribute ``name`` for ``die``: itself or one along its origin
        chain (gdb's ``dwarf2_attr``)."""
        current: DIE | None = die
        for _ in range(_MAX_HOPS):
            if current is None:
                return None
            if name in current.attributes:
                return current
            current = self._origin(current)
        return None

    def attribute(self, die: DIE, name: str) -> Any:
        """The value of attribute ``name`` on ``die`` or along its origin chain."""
        holder = self.holder(die, name)
        return holder.attributes[name].value if holder is not None else None

    def flag(self, die: DIE, name: str) -> bool:
        """gdb's ``dwarf2_flag_true_p``."""
        value = self.attribute(die, name)
        return isinstance(value, int) and value != 0

    def string(self, die: DIE, name: str) -> str | None:
        value = self.attribute(die, name)
        if isinstance(value, bytes) and value:
            return value.decode("utf-8", "replace")
        if isinstance(value, str) and value:
            return value
        return None

    # -- names

    def has_name(self, die: DIE) -> bool:
        return (self.string(die, "DW_AT_name") is not None
                or self.linkage_name(die) is not None)

    def linkage_name(self, die: DIE) -> str | None:
        return (self.string(die, "DW_AT_linkage_name")
                or self.string(die, "DW_AT_MIPS_linkage_name"))

    def print_name(self, die: DIE, language: int) -> str | None:
        """The name gdb prints for the function DIE ``die``."""
        name = self.string(die, "DW_AT_name")
        if language in CPLUS_LANGUAGES:
            linkage = self.linkage_name(die)
            demangled = demangle(linkage) if linkage is not None else None
            if demangled is not None:
                return cplus_function_name(demangled)
        if language in QUALIFIED_LANGUAGES:
            if name is None:
                return self.linkage_name(die)
            return "::".join([*self._scopes(die), name])
        return self.linkage_name(die) or name

    def _scopes(self, die: DIE) -> list[str]:
        """Names of the namespaces, classes and modules enclosing the declaration of
        ``die``, outermost first."""
        declaration = die
        for _ in range(_MAX_HOPS):
            following = self._origin(declaration)
            if following is None:
                break
            declaration = following
        scopes: list[str] = []
        parent = self._parent(declaration)
        while parent is not None and parent.tag in _QUALIFYING_PARENTS:
            value = parent.attributes.get("DW_AT_name")
            text = value.value if value is not None else None
            if isinstance(text, bytes) and text:
                scopes.append(text.decode("utf-8", "replace"))
            elif parent.tag == "DW_TAG_namespace":
                scopes.append("(anonymous namespace)")
            else:
                break
            parent = self._parent(parent)
        scopes.reverse()
        return scopes

    def _parent(self, die: DIE) -> DIE | None:
        """The parent of ``die`` (found from the top of its unit, forward steps only)."""
        key = (id(die.dwarfinfo), die.offset)
        if key in self._parents:
            return self._parents[key]
        found: DIE | None = None
        search = die.cu.get_top_DIE()
        while found is None and search.offset < die.offset:
            closest: DIE | None = None
            for child in children(search):
                self._parents[(key[0], child.offset)] = search
                if child.offset == die.offset:
                    found = search
                    break
                if child.offset > die.offset:
                    break
                closest = child
            if found is None:
                if closest is None:
                    break
                search = closest
        self._parents[key] = found
        return found


def language(die: DIE) -> int:
    """The DW_AT_language of ``die``'s unit (0 when absent)."""
    found = die.cu.get_top_DIE().attributes.get("DW_AT_language")
    value = found.value if found is not None else 0
    return value if isinstance(value, int) else 0


def _die_at(info: Info, offset: int) -> DIE | None:
    """The DIE at ``offset`` of ``info``'s ``.debug_info``."""
    units = info.unit_offsets()
    index = bisect_right(units, offset) - 1
    if index < 0:
        return None
    cu = info.info.get_CU_at(units[index])
    return cu.get_DIE_from_refaddr(offset)

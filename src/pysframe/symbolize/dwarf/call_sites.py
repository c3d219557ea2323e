"""Call sites and gdb's tail-call frames.

gdb also prints frames for functions that tail-called (jumped to) the next frame's
function, which no unwinder can see. It builds them from the DWARF call sites (gdb 13:
``read_call_site_scope`` in dwarf2/read.c, ``call_site_find_chain`` in dwarf2/loc.c,
``dwarf2_tailcall_sniffer_first`` and ``pretend_pc`` in dwarf2/frame-tailcall.c): the
caller's call site at the return address names a callee; when that is not the function
of the frame below, gdb searches the tail-call sites of the functions from there for
paths to it, and shows the frames every path agrees on. The rules are in the docstrings
of ``DwarfNames.call_site_targets`` and ``DwarfNames.tail_call_chain``. The call sites
of a unit are indexed, straight from the bytes (:class:`~.scan.CallSiteScanner`), only
when an address in it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from elftools.common.exceptions import DWARFError

from ...errors import PysframeError
from .forms import RANGES_OFFSET_NAMES, REFERENCE_NAMES
from .frames import Frames
from .info import DWARF_ERRORS
from .names import QUALIFIED_LANGUAGES, Names, language
from .scan import TAG_SUBPROGRAM, CallSiteScanner, RawCallSite
from .units import Unit, Units

if TYPE_CHECKING:
    from elftools.dwarf.die import DIE

# gdb's function marks that the DW_TAG_call_site list is complete (DW_AT_call_all_calls,
# DW_AT_GNU_all_call_sites, DW_AT_call_all_tail_calls, DW_AT_GNU_all_tail_call_sites).
_ALL_CALLS_FLAGS = ("DW_AT_call_all_calls", "DW_AT_GNU_all_call_sites",
                    "DW_AT_call_all_tail_calls", "DW_AT_GNU_all_tail_call_sites")
# Where gdb's read_call_site_scope looks for the callee, in this order.
_TARGET_ATTRIBUTES = ("DW_AT_call_target", "DW_AT_GNU_call_site_target", "DW_AT_call_origin",
                      "DW_AT_abstract_origin")
_TAG_INLINED_SUBROUTINE = 0x1D
_TAG_LEXICAL_BLOCK = 0x0B
# The scopes whose children gdb's process_die may skip: subprogram, inlined subroutine,
# lexical, try and catch blocks.
_SKIPPABLE_SCOPES = (TAG_SUBPROGRAM, _TAG_INLINED_SUBROUTINE, _TAG_LEXICAL_BLOCK, 0x32, 0x25)
_MAX_TAIL_STEPS = 100_000       # call sites entered by one tail-call search (gdb: no limit)

#: A symbol lookup by name: (address, external) or None.
SymbolLookup = Callable[[str], tuple[int, bool] | None]


@dataclass(slots=True)
class CallSiteIndex:
    """The call sites of one unit: by return pc (DIE order) and, for the tail calls, by
    the function that makes them (DIE order)."""

    by_pc: dict[int, list[RawCallSite]]
    tails: dict[int, list[RawCallSite]]
    valid: bool = True


@dataclass(slots=True, frozen=True)
class Target:
    """A call site's callee as gdb 13 records it (``call_site_target``): ``addresses``
    (PHYSADDR, or ADDRESSES: one per range of the callee), ``name`` (PHYSNAME: a minimal
    symbol to look up), ``none`` (a DWARF expression, or nothing usable: gdb's
    NO_ENTRY_VALUE_ERROR whenever it needs the target) or ``unknown`` (a name gdb would
    compute and this package does not: C++ without a linkage name)."""

    kind: str
    addresses: tuple[int, ...] = ()
    name: str | None = None


_NO_TARGET = Target("none")
_UNKNOWN_TARGET = Target("unknown")


class NoEntryValue(PysframeError):
    """gdb's NO_ENTRY_VALUE_ERROR: ``call_site_find_chain`` gives up, no tail-call frame."""


class Unknown(PysframeError):
    """What gdb would do depends on what this package does not know (another file's
    symbols, names it does not compute, a search past the work limit)."""


#: What a tail-call search can raise when it cannot tell gdb's answer.
CHAIN_ERRORS: tuple[type[BaseException], ...] = (*DWARF_ERRORS, Unknown)


@dataclass(slots=True)
class Chain:
    """gdb's ``call_site_chain``: the call sites (return pcs) of the first path found,
    outermost first, and how many of its first (``callers``) and last (``callees``) sites
    every path found has in common (``chain_candidate``)."""

    sites: list[int]
    pcs: list[int]
    callers: int
    callees: int

    def intersect(self, sites: list[int]) -> bool:
        """Keep only what ``sites`` (another path) shares; False when nothing is left."""
        length = len(sites)
        # gdb only lowers a count at the first difference within the shorter length.
        for index in range(min(self.callers, length)):
            if self.sites[index] != sites[index]:
                self.callers = index
                break
        for index in range(min(self.callees, length)):
            if self.sites[-1 - index] != sites[-1 - index]:
                self.callees = index
                break
        return self.callers != 0 or self.callees != 0

    def frames(self) -> list[int]:
        """The pcs of gdb's virtual tail-call frames, innermost first (gdb's
        ``pretended_chain_levels`` and ``pretend_pc``): the common callees from the last,
        then the common callers from the last; all of them when every path agrees."""
        length = len(self.sites)
        if self.callers == length and self.callees == length:
            levels = length
        else:
            levels = min(self.callers + self.callees, length)
        frames: list[int] = []
        for level in range(levels):
            if level < self.callees:
                frames.append(self.pcs[length - level - 1])
            elif self.callees != length and level - self.callees < self.callers:
                frames.append(self.pcs[self.callers - (level - self.callees) - 1])
            else:
                break
        return frames


class CallSites:
    """The call sites of one file's DWARF: the one gdb keeps for a return pc, and its
    target as gdb records it."""

    def __init__(self, units: Units, names: Names) -> None:
        self._units = units
        self._names = names
        self._indexes: dict[int, CallSiteIndex] = {}
        self._scopes_processed: dict[int, bool] = {}
        self._targets: dict[int, Target] = {}

    def targets(self, return_address: int) -> list[int] | str | None:
        """The callee of the call site gdb's ``call_site_for_pc`` finds for
        ``return_address``: addresses, a minimal-symbol name, or None (no call site, or
        one whose target gdb cannot use without a frame)."""
        for unit_offset in self._units.offsets_at(return_address - 1):
            unit = self._units.unit(unit_offset)
            if unit is None:
                continue
            # gdb looks only in the unit of return_address - 1.
            index = self.index(unit)
            site = self.winner(unit, index, return_address)
            if site is None:
                return None
            target = self.target(unit, site)
            if target.kind == "addresses":
                return list(target.addresses) or None
            if target.kind == "name":
                return target.name
            return None
        return None

    def index(self, unit: Unit) -> CallSiteIndex:
        """The call sites of ``unit``, scanned on first need (DWARFError, every time,
        when that failed)."""
        key = unit.cu.cu_offset
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = CallSiteIndex({}, {}, valid=False)
            sites = CallSiteScanner(self._units.main, unit.cu).call_sites()
            for site in sites:
                index.by_pc.setdefault(site.pc, []).append(site)
                if site.tail:
                    owner = site.owner()
                    if owner is not None:
                        index.tails.setdefault(owner, []).append(site)
            index.valid = True
        if not index.valid:
            raise DWARFError("unreadable call sites")
        return index

    def winner(self, unit: Unit, index: CallSiteIndex, pc: int) -> RawCallSite | None:
        """The call site gdb keeps for return pc ``pc``: the first in DIE order that gdb
        reads (it ignores later ones with a complaint)."""
        for site in index.by_pc.get(pc, ()):
            if all(self._scope_processed(unit, tag, offset) for tag, offset in site.scopes):
                return site
        return None

    def _scope_processed(self, unit: Unit, tag: int, offset: int) -> bool:
        """Whether gdb's ``process_die`` reads the children of the enclosing DIE: a function
        (``read_func_scope``) needs a name and valid pc bounds; a block
        (``read_lexical_block_scope``, also an inlined subroutine without DW_AT_call_line
        or DW_AT_call_file) must not have invalid ones."""
        if tag not in _SKIPPABLE_SCOPES:
            return True
        known = self._scopes_processed.get(offset)
        if known is None:
            die = unit.cu.get_DIE_from_refaddr(offset)
            if tag == _TAG_INLINED_SUBROUTINE and (
                    self._names.attribute(die, "DW_AT_call_line") is None
                    or self._names.attribute(die, "DW_AT_call_file") is None):
                tag = _TAG_LEXICAL_BLOCK
            ranges = self._units.die_ranges(die)
            if tag in (TAG_SUBPROGRAM, _TAG_INLINED_SUBROUTINE):
                known = bool(ranges) and self._names.has_name(die)
            else:
                known = ranges is None or bool(ranges)
            self._scopes_processed[offset] = known
        return known

    def target(self, unit: Unit, site: RawCallSite) -> Target:
        target = self._targets.get(site.offset)
        if target is None:
            target = self._read_target(unit.cu.get_DIE_from_refaddr(site.offset))
            self._targets[site.offset] = target
        return target

    def _read_target(self, die: DIE) -> Target:
        """The callee of call site ``die`` as gdb 13's ``read_call_site_scope`` records it."""
        names = self._names
        holder: DIE | None = None
        name = ""
        for name in _TARGET_ATTRIBUTES:
            holder = names.holder(die, name)
            if holder is not None:
                break
        if holder is None:
            return _NO_TARGET
        if holder.attributes[name].form not in REFERENCE_NAMES:
            # A DWARF expression (even a constant DW_OP_addr): gdb evaluates it only with
            # the caller's frame, which the tail-call search never has.
            return _NO_TARGET
        target = names.reference(holder, name)
        if target is None:
            return _UNKNOWN_TARGET
        if names.flag(target, "DW_AT_declaration") \
                and names.holder(target, "DW_AT_specification") is None:
            physname = names.linkage_name(target)
            if physname is None:
                if language(target) in QUALIFIED_LANGUAGES:
                    return _UNKNOWN_TARGET          # gdb computes a qualified physname
                physname = names.string(target, "DW_AT_name")
            return Target("name", name=physname) if physname else _NO_TARGET
        ranges_holder = names.holder(target, "DW_AT_ranges")
        if ranges_holder is not None \
                and ranges_holder.attributes["DW_AT_ranges"].form in RANGES_OFFSET_NAMES:
            # One address per range: the cold part of a split function too.
            return Target("addresses", tuple(
                low for low, high in self._units.range_list(ranges_holder)
                if low != 0 and low < high))
        entry = self._units.entry(target)
        return Target("addresses", (entry,)) if entry is not None else _NO_TARGET


@dataclass(slots=True)
class TailCalls:
    """gdb's search for tail-call paths between a call site's target and the function
    of the frame below."""

    _units: Units
    _names: Names
    _frames: Frames
    _call_sites: CallSites
    _symbol: SymbolLookup
    _tail_lists: dict[int, list[tuple[Unit, RawCallSite]] | None] = field(default_factory=dict)

    def tail_call_pcs(self, targets: list[int], callee: int) -> list[int]:
        """The pcs of gdb's tail-call frames, innermost first (see
        ``DwarfNames.tail_call_chain``); raises Unknown when this cannot tell."""
        if callee in targets:
            return []
        try:
            chain = self._find_chain(targets, callee)
        except NoEntryValue:
            return []
        return chain.frames() if chain is not None else []

    def _find_chain(self, targets: list[int], callee: int) -> Chain | None:
        """gdb's ``call_site_find_chain_1`` / ``call_site_find_chain_2``, without recursion:
        a depth-first search from the functions at ``targets`` through their tail-call
        sites, in gdb's order, never entering a call site (by return pc) twice on one path;
        each path whose last site calls ``callee`` is intersected into the result (None
        once nothing is common to all paths: gdb stops there)."""
        result: Chain | None = None
        chain: list[RawCallSite] = []
        on_chain: set[int] = set()
        pending: list[Iterator[tuple[Unit, RawCallSite]]] = [self._candidates(targets)]
        steps = 0
        while pending:
            step = next(pending[-1], None)
            if step is None:
                pending.pop()
                if chain:
                    on_chain.discard(chain.pop().pc)
                continue
            unit, site = step
            if site.pc in on_chain:
                continue
            steps += 1
            if steps > _MAX_TAIL_STEPS:
                raise Unknown("tail-call search too long")
            on_chain.add(site.pc)
            chain.append(site)
            addresses = self._site_addresses(unit, site)
            if callee in addresses:
                offsets = [item.offset for item in chain]
                if result is None:
                    result = Chain(offsets, [item.pc for item in chain], len(chain),
                                   len(chain))
                elif not result.intersect(offsets):
                    return None
                on_chain.discard(chain.pop().pc)
            else:
                pending.append(self._candidates(addresses))
        return result

    def _candidates(self, addresses: Iterable[int]) -> Iterator[tuple[Unit, RawCallSite]]:
        for address in addresses:
            yield from self._tail_list(address)

    def _tail_list(self, address: int) -> list[tuple[Unit, RawCallSite]]:
        """gdb's ``func_addr_to_tail_call_list`` and ``TYPE_TAIL_CALL_LIST``: the tail-call
        sites of the function whose entry is ``address``, last in DIE order first (gdb
        prepends them as it reads them). Only functions marked as listing all their calls
        have the list; a site whose return pc an earlier site of the unit already has is
        dropped, as are sites in functions or blocks gdb ignores (no name, bad ranges).
        NoEntryValue when no function starts exactly at ``address``."""
        if address in self._tail_lists:
            cached = self._tail_lists[address]
            if cached is None:
                raise NoEntryValue(hex(address))
            return cached
        found = self._frames.at(address)
        if found is None or self._units.entry(found[1][-1]) != address:
            self._tail_lists[address] = None
            raise NoEntryValue(hex(address))
        unit, dies, _names = found
        function = dies[-1]
        sites: list[tuple[Unit, RawCallSite]] = []
        if any(self._names.flag(function, flag) for flag in _ALL_CALLS_FLAGS):
            index = self._call_sites.index(unit)
            for site in index.tails.get(function.offset, ()):
                if self._call_sites.winner(unit, index, site.pc) is site:
                    sites.append((unit, site))
            sites.reverse()
        self._tail_lists[address] = sites
        return sites

    def _site_addresses(self, unit: Unit, site: RawCallSite) -> tuple[int, ...]:
        """gdb's ``call_site_target::iterate_over_addresses`` without a caller frame."""
        target = self._call_sites.target(unit, site)
        if target.kind == "addresses":
            return target.addresses
        if target.kind == "name" and target.name is not None:
            symbol = self._symbol(target.name)
            if symbol is None:
                # gdb looks the name up in every object file: maybe another one has it.
                raise Unknown(target.name)
            return (symbol[0],)
        if target.kind == "unknown":
            raise Unknown("call site target")
        raise NoEntryValue("call site target")

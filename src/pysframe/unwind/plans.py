"""What the tracer does at a pc (a plan), and the bounded cache of plans.

A plan is decided once per (address-space layout, return address) from the SFrame
table and the code, then reused by every sample that returns through that pc,
as framehop's rule cache does. Each plan is a small immutable, typed value that also
carries the mapping of the pc; the tracer dispatches on its type. Plans are named
tuples rather than frozen dataclasses: defining five frozen dataclasses costs about
2.5 ms of every run's start-up (16 million instructions, measured with callgrind),
a named tuple a tenth of that, and instances are as cheap to read.
"""

from __future__ import annotations

from ..records import NamedTuple
from .address_space import AddressSpace, Mapping
from .step import Rule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class DefaultPlan(NamedTuple):
    """The common rule, precomputed: CFA = (SP if ``sp_based`` else FP) + ``cfa_offset``,
    RA loaded from CFA + ``ra_offset``, FP from CFA + ``fp_offset`` (``None``: unchanged).
    ``pair``: where FP is saved below RA, what reads both at once from CFA + ``fp_offset``
    (FP, then RA: :func:`~.memory.pair_reader` in the ABI's byte order), else None."""

    mapping: Mapping
    sp_based: bool
    cfa_offset: int
    ra_offset: int
    fp_offset: int | None
    pair: Callable[[bytes | memoryview, int], tuple[int, ...]] | None


class RowPlan(NamedTuple):
    """Any other SFrame row (outermost, register-based, mangled RA ...), applied by
    :func:`~.step.step`."""

    mapping: Mapping
    rule: Rule


class FramePointerPlan(NamedTuple):
    """A mapped pc without an SFrame row: the frame-pointer rule (else Stop.NO_RULE)."""

    mapping: Mapping


class NoModulePlan(NamedTuple):
    """A pc in no mapping: follow the frame pointer (else Stop.NO_MODULE)."""

    mapping: None = None


class SigreturnPlan(NamedTuple):
    """A return into a sigreturn trampoline: the signal context on the stack gives the
    interrupted frame's registers. ``mapping``: None for a trampoline in no file (qemu's
    trampoline page, a vdso not on disk); ``kind``: which of the architecture's
    trampolines (:data:`~.signals.TRAMPOLINES`)."""

    mapping: Mapping | None
    kind: int = 0


Plan = DefaultPlan | RowPlan | FramePointerPlan | NoModulePlan | SigreturnPlan

NO_MODULE = NoModulePlan()

#: The most entries (plans, plus one per layout) the cache holds. When it is full it starts
#: over empty: a process rarely returns through more distinct pcs than this, and a plan is
#: cheap to decide again. 16384 plans are a few MB at most.
PLAN_CACHE_LIMIT = 16384


class PlanCache:
    """Plans by return address (a topmost frame's by its pc's bitwise complement: see
    :meth:`~.unwinder.Unwinder.unwind`), one table per address-space layout, bounded by
    ``limit``.

    A layout is (space, ``space.version``): the version changes with every mapping added,
    so a plan of an older layout is never served. The cache keeps a reference to each
    space it has a table for, so a space's ``id`` cannot be reused by another space while
    the table keyed by it exists.
    """

    __slots__ = ("_layouts", "_size", "limit")

    def __init__(self, limit: int = PLAN_CACHE_LIMIT) -> None:
        self.limit = limit
        self._layouts: dict[tuple[int, int], tuple[AddressSpace, dict[int, Plan]]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def plans_for(self, space: AddressSpace) -> dict[int, Plan]:
        """The plans of the space's current layout, by return address (only to read: new plans
        go through :meth:`remember`)."""
        found = self._layouts.get((id(space), space.version))
        return found[1] if found is not None else {}

    def remember(self, space: AddressSpace, pc: int, plan: Plan) -> dict[int, Plan]:
        """Store ``plan`` for ``pc`` in the space's current layout; returns that layout's
        plans (a new table if the cache was full and started over)."""
        if self._size >= self.limit:
            self._layouts.clear()
            self._size = 0
        key = (id(space), space.version)
        found = self._layouts.get(key)
        if found is None:
            found = self._layouts[key] = (space, {})
            self._size += 1
        found[1][pc] = plan
        self._size += 1
        return found[1]

"""The kernel's deferred user-space unwinding, modelled: tracers' requests and cookies
(:mod:`.infrastructure`), the per-process SFrame registry (:mod:`.registry`) over a
process's memory (:mod:`.mm`), and the kernel's user unwinder (:mod:`.user_unwind`).

This stage follows ``unwind`` (it shares its SFrame lookups, not its tracer: the kernel
walks with fewer rules and stricter checks than our own unwinder).
"""

from .infrastructure import (
    BITS_PER_LONG,
    RESERVED_BITS,
    DeferredUnwinder,
    Task,
    UnwindWork,
    cookie_parts,
    make_cookie,
)
from .mm import USER_LIMIT, Mm, Vma
from .registry import (
    PR_ADD_SFRAME,
    PR_REMOVE_SFRAME,
    Removal,
    SFrameRegistration,
    SFrameRegistry,
    SFrameSection,
)
from .user_unwind import MAX_ENTRIES, EntryRegisters, UserTrace, unwind_user

__all__ = [
    "BITS_PER_LONG",
    "MAX_ENTRIES",
    "PR_ADD_SFRAME",
    "PR_REMOVE_SFRAME",
    "RESERVED_BITS",
    "USER_LIMIT",
    "DeferredUnwinder",
    "EntryRegisters",
    "Mm",
    "Removal",
    "SFrameRegistration",
    "SFrameRegistry",
    "SFrameSection",
    "Task",
    "UnwindWork",
    "UserTrace",
    "Vma",
    "cookie_parts",
    "make_cookie",
    "unwind_user",
]

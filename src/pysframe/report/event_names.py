"""Event names as ``perf script`` prints them in a sample's header.

The name a recording's EVENT_DESC feature holds wins: what the user typed (``cpu-clock:u``)
or the name perf gave the event it fell back to (``cycles:P`` on a machine without a PMU
is recorded as ``cpu-clock:ppp``). A recording without one (``sframe record``'s) is named
as perf names it then: the event's own name and the modifiers its attribute's exclude
bits and precise level stand for. Learnt by running perf 6.1 on recordings whose
EVENT_DESC was taken out and whose attribute bits were set one by one (tests/
test_event_names.py). perf 7.2 differs in one rule, see :func:`modifiers`.
"""

from __future__ import annotations

from ..sources.perf_records import EventAttr

SOFTWARE = ("cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations",
            "minor-faults", "major-faults", "alignment-faults", "emulation-faults", "dummy")
HARDWARE = ("cycles", "instructions", "cache-references", "cache-misses", "branches",
            "branch-misses", "bus-cycles", "stalled-cycles-frontend",
            "stalled-cycles-backend", "ref-cycles")
#: Hardware cache events: the cache, and the operations it counts (load, store, prefetch).
CACHES = (("L1-dcache", "lsp"), ("L1-icache", "lp"), ("LLC", "lsp"), ("dTLB", "lsp"),
          ("iTLB", "l"), ("branch", "l"), ("node", "lsp"))
#: The operations, as named with a miss and with an access.
OPERATIONS = (("load", "loads"), ("store", "stores"), ("prefetch", "prefetches"))
TYPE_HARDWARE, TYPE_SOFTWARE, TYPE_CACHE, TYPE_RAW = 0, 1, 3, 4

#: perf_event_attr flag bits.
EXCLUDE_USER, EXCLUDE_KERNEL, EXCLUDE_HV = 1 << 4, 1 << 5, 1 << 6
EXCLUDE_HOST, EXCLUDE_GUEST = 1 << 19, 1 << 20
PRECISE_SHIFT = 15


def event_name(attr: EventAttr | None) -> str:
    """The name perf prints for the event of ``attr``."""
    if attr is None:
        return "unknown"
    if attr.name is not None:
        return attr.name
    base = base_name(attr.type, attr.config)
    if base is None:  # perf 6.1's words (7.2: "unknown event PMU=6 config=0x5")
        return f"unknown attr type: {attr.type}"
    return base + modifiers(attr.flags)


def base_name(kind: int, config: int) -> str | None:
    """The event's name without modifiers, from its type and config (None: a type perf
    does not name without EVENT_DESC: tracepoints, breakpoints, PMUs of their own)."""
    if kind == TYPE_SOFTWARE:
        return SOFTWARE[config] if config < len(SOFTWARE) else "unknown-software"
    if kind == TYPE_HARDWARE:
        return HARDWARE[config] if config < len(HARDWARE) else "unknown-hardware"
    if kind == TYPE_RAW:
        return f"raw {config:#x}"
    if kind == TYPE_CACHE:
        return cache_name(config)
    return None


def cache_name(config: int) -> str:
    """A hardware cache event's name: cache, operation, result (access or miss) from the
    config's three low bytes, checked in that order."""
    cache, operation, result = config & 0xFF, config >> 8 & 0xFF, config >> 16 & 0xFF
    if cache >= len(CACHES):
        return "unknown-ext-hardware-cache-type"
    if operation >= len(OPERATIONS):
        return "unknown-ext-hardware-cache-op"
    if result > 1:
        return "unknown-ext-hardware-cache-result"
    name, counted = CACHES[cache]
    missed, accessed = OPERATIONS[operation]
    if missed[0] not in counted:
        return "invalid-cache"
    return f"{name}-{missed}-misses" if result else f"{name}-{accessed}"


def modifiers(flags: int) -> str:
    """``:`` and the modifier letters perf 6.1 derives from the attribute: the contexts
    counted (k, u, h) when any is excluded, the precise level (p, pp, ppp), then host and
    guest (H, G) when the host is excluded or the guest exclusion is not the default
    (excluded when k/u/h or p was given, else not); empty when no letter is printed.
    perf 7.2 prints H and G whenever either is excluded: ``cpu-clock:`` for nothing
    excluded (6.1: ``cpu-clock:HG``), ``cpu-clock:H`` for the guest alone (6.1: none)."""
    letters = ""
    guest_default = False
    if flags & (EXCLUDE_USER | EXCLUDE_KERNEL | EXCLUDE_HV):
        letters += _counted(flags, ((EXCLUDE_KERNEL, "k"), (EXCLUDE_USER, "u"),
                                    (EXCLUDE_HV, "h")))
        guest_default = True
    precise = flags >> PRECISE_SHIFT & 3
    if precise:
        letters += "p" * precise
        guest_default = True
    if flags & EXCLUDE_HOST or bool(flags & EXCLUDE_GUEST) == guest_default:
        letters += _counted(flags, ((EXCLUDE_HOST, "H"), (EXCLUDE_GUEST, "G")))
    return f":{letters}" if letters else ""


def _counted(flags: int, contexts: tuple[tuple[int, str], ...]) -> str:
    return "".join(letter for bit, letter in contexts if not flags & bit)


def base_event(name: str) -> str:
    """The event of a printed name without its modifiers (``cpu-clock:u`` -> ``cpu-clock``)."""
    return name.partition(":")[0]

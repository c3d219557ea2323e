"""A target's JIT code, read through the GDB JIT interface in its memory (live or a core).

The runtime keeps ``__jit_debug_descriptor`` (``u32 version, u32 action, entry *relevant,
entry *first``) in some loaded image, and a doubly linked list of ``jit_code_entry``
(``next, prev, symfile address, symfile size``) holding in-memory ELF objects
(``shared/spec/jit.md`` section 1). Everything read is the target's word: the list is
walked at most :data:`MAX_ENTRIES` steps and never twice through one entry, a symfile is
taken only whole and at most :data:`MAX_SYMFILE` bytes, all of them together at most
:data:`MAX_TOTAL`; what does not hold is reported, one line each, and skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ..errors import summarized
from ..records import record_class

DESCRIPTOR_SYMBOL = "__jit_debug_descriptor"
MAX_ENTRIES = 100_000
MAX_SYMFILE = 64 << 20
MAX_TOTAL = 512 << 20
_DESCRIPTOR = struct.Struct("<IIQQ")
_ENTRY = struct.Struct("<QQQQ")

#: Reads ``size`` bytes at an address of the target (None or short where it cannot).
ReadBytes = Callable[[int, int], "bytes | None"]


@record_class
class JitObject:
    """One registered object: its list entry, where its bytes are, and the bytes."""

    entry: int
    address: int
    data: bytes


def jit_objects(read_bytes: ReadBytes, descriptor: int) -> tuple[list[JitObject], list[str]]:
    """The objects registered with the descriptor at ``descriptor``, and the problems met
    (each a line naming the address)."""
    raw = read_bytes(descriptor, _DESCRIPTOR.size)
    if raw is None or len(raw) < _DESCRIPTOR.size:
        return [], [f"JIT descriptor at {descriptor:#x}: unreadable"]
    version, _, _, entry = _DESCRIPTOR.unpack(raw)
    if version != 1:
        return [], [f"JIT descriptor at {descriptor:#x}: version {version}, not 1"]
    objects: list[JitObject] = []
    problems: list[str] = []
    seen: set[int] = set()
    total = 0
    while entry:
        if entry in seen or len(seen) >= MAX_ENTRIES:
            problems.append(f"JIT entry list at {entry:#x}: "
                            + ("loops back" if entry in seen else f"over {MAX_ENTRIES} entries"))
            break
        seen.add(entry)
        raw = read_bytes(entry, _ENTRY.size)
        if raw is None or len(raw) < _ENTRY.size:
            problems.append(f"JIT entry at {entry:#x}: unreadable")
            break
        following, _, address, size = _ENTRY.unpack(raw)
        if size > MAX_SYMFILE or total + size > MAX_TOTAL:
            problems.append(f"JIT object at {address:#x}: {size:,} bytes, over the limit")
        else:
            data = read_bytes(address, size) if size else b""
            if data is None or len(data) != size:
                problems.append(f"JIT object at {address:#x} ({size:,} bytes): unreadable")
            else:
                objects.append(JitObject(entry, address, data))
                total += size
        entry = following
    return objects, summarized(problems, f"JIT descriptor at {descriptor:#x}")

"""Kernel symbols for the kernel frames of perf samples, from ``/proc/kallsyms``.

Used only when the running kernel is the recorded one (same build id, from
``/sys/kernel/notes``) and kallsyms shows real addresses; otherwise kernel
frames stay ``[unknown]``, as perf prints them without symbols.

Reading kallsyms takes ~0.3 s (about 200,000 lines), at every run; the table is kept
in the private cache by kernel build id, valid for one boot (the addresses move with
KASLR at each boot: ``/proc/sys/kernel/random/boot_id`` is part of the entry's source),
and checked for shape when read back.
"""

from __future__ import annotations

import marshal
import operator
import sys
from itertools import islice

from ..cachedir import describe, load, store
from ..elf.headers import find_build_id
from ..errors import PysframeError
from ..inputs import read_text
from .symbols import Symbol, SymbolTable

_TEXT_TYPES = {"T": "STB_GLOBAL", "t": "STB_LOCAL", "W": "STB_WEAK", "w": "STB_WEAK"}


def running_kernel_build_id(path: str = "/sys/kernel/notes") -> bytes | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return find_build_id(data, [(0, len(data))], big_endian=sys.byteorder == "big")


def load_kallsyms(path: str = "/proc/kallsyms") -> SymbolTable | None:
    """Text symbols of the running kernel (``None`` if unreadable or addresses are hidden)."""
    symbols = []
    try:
        with open(path) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) < 3 or fields[1] not in _TEXT_TYPES or len(fields) > 3:
                    continue  # module symbols ("[module]") are left out like perf's vmlinux map
                address = int(fields[0], 16)
                symbols.append(Symbol(address, address, fields[2], _TEXT_TYPES[fields[1]], 0))
    except (OSError, ValueError):
        return None
    if not symbols or all(symbol.start == 0 for symbol in symbols):
        return None
    return SymbolTable(symbols)


#: Kernel symbol tables in the cache: one per kernel build id (and payload format).
KALLSYMS_KIND = "kernel/kallsyms.p1"


def kernel_symbols_for(recorded_build_id: bytes | None) -> SymbolTable | None:
    """kallsyms if the running kernel is the one that was recorded, else ``None``."""
    if recorded_build_id is None or running_kernel_build_id() != recorded_build_id:
        return None
    boot = _boot_id()
    if boot is None:
        return load_kallsyms()
    source = describe(0, [boot, KALLSYMS_KIND.encode()])
    payload = load(KALLSYMS_KIND, recorded_build_id, source)
    if payload is not None:
        cached = _table_from(payload)
        if cached is not None:
            return cached
    table = load_kallsyms()
    if table is not None:
        store(KALLSYMS_KIND, recorded_build_id,
              marshal.dumps((table.starts, table.ends, table.names)), source)
    return table


def _boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> bytes | None:
    try:
        text = read_text(path, 128).strip()
    except PysframeError:
        return None
    return text.encode() if len(text) == 36 else None


def _table_from(payload: bytes) -> SymbolTable | None:
    """The table a cache entry holds, or None if it is not a well-formed one."""
    try:
        starts, ends, names = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if not (isinstance(starts, list) and isinstance(ends, list) and isinstance(names, list)
            and len(starts) == len(ends) == len(names)
            and set(map(type, starts)) <= {int} and set(map(type, ends)) <= {int}
            and set(map(type, names)) <= {str}
            and all(map(operator.le, starts, islice(starts, 1, None)))):
        return None
    return SymbolTable.from_arrays(starts, ends, names)

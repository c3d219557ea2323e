"""Kernel symbols for the kernel frames of perf samples, from ``/proc/kallsyms``.

Used only when the running kernel is the recorded one (same build id, from
``/sys/kernel/notes``) and kallsyms shows real addresses; otherwise kernel
frames stay ``[unknown]``, as perf prints them without symbols.
"""

from __future__ import annotations

import sys

from ..elf.headers import find_build_id
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


def kernel_symbols_for(recorded_build_id: bytes | None) -> SymbolTable | None:
    """kallsyms if the running kernel is the one that was recorded, else ``None``."""
    if recorded_build_id is None or running_kernel_build_id() != recorded_build_id:
        return None
    return load_kallsyms()

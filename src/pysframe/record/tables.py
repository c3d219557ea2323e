"""SFrame tables in the walker's maps: rows loaded once per binary, mappings per process.

A binary's table (its own ``.sframe`` merged with its CFI, or generated from the CFI, as
``sframe script`` uses; cached by build id) is flattened (:mod:`pysframe.unwind.flat`,
cached too) and written into the ``rows`` array at the next free index: processes that
map the same file share it. A process's entry in ``procs`` lists its executable
mappings with their load bias and row range, from ``/proc/PID/maps``.
"""

from __future__ import annotations

from ..format.constants import ABI
from ..sources.live import read_maps
from ..unwind.flat_cache import cached_flat
from ..unwind.modules import BinaryFinder
from .bpf_sys import Fd, map_update
from .walker import MAPPING, MAPPINGS, PROCS_VALUE, ROW


class TableLoader:
    """Loads tables into ``rows`` (``capacity`` rows) and process entries into ``procs``."""

    def __init__(self, rows: Fd, procs: Fd, capacity: int, finder: BinaryFinder | None = None
                 ) -> None:
        self.rows, self.procs, self.capacity = rows, procs, capacity
        self.finder = finder or BinaryFinder()
        self.used = 0
        #: (path, build id) -> (first row, rows); (0, 0): no table.
        self.tables: dict[tuple[str, bytes | None], tuple[int, int]] = {}

    def _table(self, key: tuple[str, bytes | None], module: object) -> tuple[int, int]:
        found = self.tables.get(key)
        if found is not None:
            return found
        lookup = getattr(module, "lookup", None)
        found = (0, 0)
        if lookup is not None:
            flat = cached_flat(lookup, ABI.AMD64_ENDIAN_LITTLE, key[1])
            count = 0 if flat.rare_all else len(flat.starts)
            if count and self.used + count <= self.capacity:
                first = self.used
                for index, (start, word) in enumerate(zip(flat.starts.tolist(),
                                                          flat.words.tolist(), strict=True)):
                    map_update(self.rows, (first + index).to_bytes(4, "little"),
                               ROW.pack(start, word))
                self.used += count
                found = (first, count)
        self.tables[key] = found
        return found

    def load_process(self, pid: int) -> int:
        """Write ``pid``'s entry from its maps; returns how many mappings have rows."""
        entries = []
        for entry in read_maps(pid):
            if "x" not in entry.perms or not entry.path.startswith("/"):
                continue
            module = self.finder.module(entry.path, None, entry.start, entry.pgoff)
            if module is None:
                continue
            first, count = self._table((module.path, module.build_id), module)
            if count:
                entries.append(MAPPING.pack(entry.start, entry.end, module.bias, first, count))
        entries = entries[:MAPPINGS]
        value = len(entries).to_bytes(4, "little") + bytes(4) + b"".join(entries)
        map_update(self.procs, pid.to_bytes(4, "little"), value.ljust(PROCS_VALUE, b"\0"))
        return len(entries)

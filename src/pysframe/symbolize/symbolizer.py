"""Frames to text: ``sym+0xoff`` and the dso, per mapping, with a cache per module."""

from __future__ import annotations

from ..unwind.modules import Mapping
from .symbols import SymbolTable, load_symbols


class Symbolizer:
    def __init__(self) -> None:
        self._tables: dict[tuple[str, bytes | None], SymbolTable | None] = {}

    def table(self, mapping: Mapping) -> SymbolTable | None:
        module = mapping.module
        if module is None or module.image is None:
            return None
        key = (module.path, module.build_id)
        if key not in self._tables:
            self._tables[key] = load_symbols(module.image)
        return self._tables[key]

    def symbol(self, mapping: Mapping | None, address: int) -> str:
        """``name+0xoff`` for a runtime ``address`` in ``mapping``, or ``[unknown]``."""
        if mapping is None or mapping.module is None:
            return "[unknown]"
        table = self.table(mapping)
        found = table.lookup(address - mapping.module.bias) if table is not None else None
        if found is None:
            return "[unknown]"
        name, offset = found
        return f"{name}+{offset:#x}"

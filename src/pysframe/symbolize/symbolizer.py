"""Frames to text: ``sym+0xoff`` and the dso, per mapping, with a cache per module."""

from __future__ import annotations

from ..unwind.address_space import Mapping
from .symbols import SymbolTable, load_symbols


class Symbolizer:
    def __init__(self) -> None:
        self._tables: dict[tuple[str, bytes | None], SymbolTable | None] = {}
        # Samples repeat the same frames: one string per (module, link-time address).
        self._names: dict[tuple[int, int], str] = {}

    def table(self, mapping: Mapping) -> SymbolTable | None:
        module = mapping.module
        if module is None or module.image is None:
            return None
        key = (module.path, module.build_id)
        if key not in self._tables:
            self._tables[key] = load_symbols(module.image)
        return self._tables[key]

    def function(self, mapping: Mapping | None, address: int) -> str:
        """The function name alone (for stack aggregation), or ``[unknown]``."""
        text = self.symbol(mapping, address)
        return text.rsplit("+0x", 1)[0] if text != "[unknown]" else text

    def symbol(self, mapping: Mapping | None, address: int) -> str:
        """``name+0xoff`` for a runtime ``address`` in ``mapping``, or ``[unknown]``."""
        if mapping is None or mapping.module is None:
            return "[unknown]"
        key = (id(mapping.module.image), address - mapping.module.bias)
        text = self._names.get(key)
        if text is None:
            table = self.table(mapping)
            found = table.lookup(key[1]) if table is not None else None
            text = "[unknown]" if found is None else f"{found[0]}+{found[1]:#x}"
            self._names[key] = text
        return text

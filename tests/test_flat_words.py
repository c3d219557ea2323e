"""The flat rows' rule words are kept by what each row's rules are made of (flat._WORDS):
with that memo, warmed by other tables in any order, every table flattens as it does
without it. Over the fixtures' own tables: V1, V2 and V3, x86-64, AArch64 (with RA
mangling) and s390x (whose V2 offsets decode differently), as GNU as/ld wrote them.

An internal-consistency check (the memo against the computation it stands for); the
rows themselves are checked against perf and the GNU tools elsewhere."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.conftest import FIXTURES, manifest_entries, needs_fixtures

from pysframe.elf import ElfImage
from pysframe.format.constants import ABI
from pysframe.format.decode import SFrameReader
from pysframe.format.lookup import SFrameLookup
from pysframe.unwind import flat


def _linked() -> list[dict[str, Any]]:
    """One linked fixture with SFrame per (toolchain, architecture, variant)."""
    chosen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in manifest_entries():
        if entry.get("sframe_sections") and entry["elf_type"] != "REL":
            chosen.setdefault((entry["toolchain"], entry["arch"], entry["variant"]), entry)
    return list(chosen.values())


def _tables() -> list[tuple[str, SFrameLookup, ABI]]:
    tables = []
    for entry in _linked():
        image = ElfImage(str(FIXTURES / entry["path"]))
        for section in image.sframe_sections():
            reader = SFrameReader(section.raw, section.address)
            tables.append((entry["path"], SFrameLookup(reader), reader.abi()))
    return tables


def _same(a: flat.FlatTable, b: flat.FlatTable) -> bool:
    return (np.array_equal(a.starts, b.starts) and np.array_equal(a.words, b.words)
            and a.masks == b.masks and a.rare_all == b.rare_all)


@needs_fixtures
def test_the_word_memo_changes_no_table(monkeypatch: pytest.MonkeyPatch) -> None:
    tables = _tables()
    abis = {abi for _, _, abi in tables}
    assert len(tables) >= 20 and len(abis) >= 3, (len(tables), abis)
    monkeypatch.setattr(flat, "_WORDS_KEPT", 0)
    monkeypatch.setattr(flat, "_WORDS", {})
    plain = [flat.flatten(lookup, abi) for _, lookup, abi in tables]
    assert sum(len(table.starts) for table in plain) > 1000
    monkeypatch.setattr(flat, "_WORDS_KEPT", 1 << 14)
    for order in (range(len(tables)), range(len(tables) - 1, -1, -1)):  # warmed by the
        memo: dict[tuple[object, ...], int] = {}                       # others, both ways
        monkeypatch.setattr(flat, "_WORDS", memo)
        made = {i: flat.flatten(tables[i][1], tables[i][2]) for i in order}
        assert memo
        for i, expected in enumerate(plain):
            assert _same(made[i], expected), tables[i][0]

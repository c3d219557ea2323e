"""Two memos of rows by shape: the flat rows' rule words (flat._WORDS) and the encoded
rows' bytes after their start (encode._BODIES). With each, warmed by other tables in any
order, every table flattens and encodes as it does without it. Over the fixtures' own
tables: V1, V2 and V3, x86-64, AArch64 (with RA mangling) and s390x (big-endian, whose V2
offsets decode differently), as GNU as/ld wrote them.

Internal-consistency checks (each memo against the computation it stands for); the rows
themselves are checked against perf and the GNU tools elsewhere (and the encoded bytes
against the files' own, here too)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from tests.conftest import FIXTURES, manifest_entries, needs_fixtures

from pysframe.elf import ElfImage
from pysframe.format.constants import ABI
from pysframe.format.decode import SFrameReader, decode
from pysframe.format.lookup import SFrameLookup
from pysframe.unwind import flat

#: The module (the package's ``encode`` is its function).
encoding = importlib.import_module("pysframe.format.encode")


def _linked() -> list[dict[str, Any]]:
    """One linked fixture with SFrame per (toolchain, architecture, variant)."""
    chosen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in manifest_entries():
        if entry.get("sframe_sections") and entry["elf_type"] != "REL":
            chosen.setdefault((entry["toolchain"], entry["arch"], entry["variant"]), entry)
    return list(chosen.values())


def _sections() -> list[tuple[str, bytes, int]]:
    found = []
    for entry in _linked():
        image = ElfImage(str(FIXTURES / entry["path"]))
        found += [(entry["path"], bytes(section.raw), section.address)
                  for section in image.sframe_sections()]
    return found


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


@needs_fixtures
def test_the_row_bytes_memo_changes_no_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    sections = _sections()
    assert len(sections) >= 20
    models = [decode(data, address) for _, data, address in sections]
    for order in (range(len(models)), range(len(models) - 1, -1, -1)):
        memo: dict[tuple[object, ...], bytes] = {}
        monkeypatch.setattr(encoding, "_BODIES", memo)
        made = {i: encoding.encode(models[i]) for i in order}
        assert memo
        for i, (path, data, _) in enumerate(sections):
            assert made[i] == data, path


def test_rows_of_one_shape_encode_in_each_table_s_byte_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rows (two-byte words, so the byte order shows) in a big-endian and a
    little-endian table."""
    from pysframe.format.constants import VERSION_3
    from pysframe.format.model import FDE, FRE, Section

    rows = [FRE(0, (300, -16)), FRE(4, (300, -16, -24))]
    tables = [Section(VERSION_3, abi, fdes=[FDE(0x1000, 0x40, list(rows))])
              for abi in (ABI.S390X_ENDIAN_BIG, ABI.AMD64_ENDIAN_LITTLE)]
    monkeypatch.setattr(encoding, "_BODIES_KEPT", 0)
    plain = [encoding.encode(table) for table in tables]
    assert plain[0] != plain[1]
    monkeypatch.setattr(encoding, "_BODIES_KEPT", 1 << 14)
    for order in ([0, 1], [1, 0]):
        monkeypatch.setattr(encoding, "_BODIES", {})
        made = {i: encoding.encode(tables[i]) for i in order}
        assert [made[0], made[1]] == plain

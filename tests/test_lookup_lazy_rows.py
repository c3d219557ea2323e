"""A lookup reads a function's rows' starts at its first use and decodes a row only when
asked for it: every answer (a row, none, or the error and its offset) is the one of a
lookup that decodes every row of the function at its first use, on the fixtures' tables
and on hostile copies of them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, needs_fixtures
from pysframe.elf import ElfImage
from pysframe.format.decode import SFrameReader
from pysframe.format.errors import SFrameError
from pysframe.format.lookup import FrameRow, SFrameLookup

TABLES = [FIXTURES / "2.46" / arch / "O2" / "prog" for arch in ("x86_64", "aarch64", "s390x")]


class EagerLookup(SFrameLookup):
    """The lookup as it was: every row of a function decoded at the function's first use
    (its errors raised then)."""

    __slots__ = ()

    def _function_rows(self, index: int) -> tuple[list[int], list[int], list[FrameRow | None],
                                                  object]:
        cached = self._rows.get(index)
        if cached is None:
            cached = super()._function_rows(index)
            _, offsets, _, entry = cached
            for at in offsets:
                self._reader.read_fre(entry, at)
        return cached  # type: ignore[return-value]


def _answer(lookup: SFrameLookup, pc: int) -> object:
    try:
        return lookup.find_fre_stepwise(pc)
    except SFrameError as error:
        return (type(error).__name__, error.message, error.offset)


def _pcs(reader: SFrameReader, rng: random.Random) -> list[int]:
    pcs: list[int] = []
    for index in range(reader.num_fdes):
        try:
            entry = reader.fde(index)
        except SFrameError:
            continue
        pcs += [entry.start + rng.randrange(max(entry.size, 1) + 2) for _ in range(2)]
    rng.shuffle(pcs)
    return pcs


def _same_answers(raw: bytes, address: int, seed: int) -> None:
    try:
        lazy, eager = (kind(SFrameReader(raw, address)) for kind in (SFrameLookup, EagerLookup))
    except SFrameError:
        return
    for pc in _pcs(lazy.reader, random.Random(seed)):
        assert _answer(lazy, pc) == _answer(eager, pc), hex(pc)


@needs_fixtures
@pytest.mark.parametrize("path", TABLES, ids=lambda path: path.parts[-3])
def test_lazy_rows_answer_as_eager_ones(path: Path) -> None:
    own = ElfImage(str(path)).sframe_sections()[0]
    _same_answers(own.raw, own.address, 1)


@needs_fixtures
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(TABLES))),
       st.lists(st.tuples(st.integers(0, 1 << 20), st.one_of(
           st.sampled_from([1 << bit for bit in range(8)]), st.integers(1, 255))),
           min_size=1, max_size=8),
       st.integers(0, 1 << 16))
def test_hostile_tables_answer_as_eager_ones(table: int, changes: list[tuple[int, int]],
                                             seed: int) -> None:
    """Bytes flipped in the rows: the same rows, and the same errors at the same lookups
    (a row whose words run past the table, a bad size code, starts out of order)."""
    own = ElfImage(str(TABLES[table])).sframe_sections()[0]
    raw = bytearray(own.raw)
    rows_at = SFrameReader(own.raw, own.address).header.fres_start
    for where, flipped in changes:
        raw[rows_at + where % (len(raw) - rows_at)] ^= flipped
    _same_answers(bytes(raw), own.address, seed)

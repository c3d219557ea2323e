"""An on-demand table's functions of a file's own version 3 table, written from their
stored rows (issue 29): every one is the single-function table the decoded way gives (its
FDE decoded, encoded again under the generated header and validated, as the whole merge
validates it), on every fixture with its own table and on hostile copies of one; the
others are left to that way. And, by GNU objdump, each such table dumps with the rows
objdump gives the function in the program's own table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.oracles import need_binutils

from conftest import FIXTURES, needs_fixtures
from pysframe.elf import ElfImage
from pysframe.format.decode import FDEEntry, SFrameReader
from pysframe.format.encode import relocate, single_function
from pysframe.format.errors import SFrameError
from pysframe.format.validation import plain_stored_rows
from pysframe.generate.errors import IrregularFunction
from pysframe.generate.function_index import FunctionIndex
from pysframe.generate.function_maker import FunctionMaker
from pysframe.generate.merged_index import own_number
from pysframe.generate.on_demand import on_demand_table

LUA = FIXTURES / "real" / "lua-2.46-x86_64" / "lua"

#: What making an own function gave when it was not its table.
IRREGULAR = "irregular"


def _own_tables() -> list[Path]:
    found = [path for version in ("2.46", "2.47.50")
             for path in sorted((FIXTURES / version).glob("*/*/*"))
             if path.name in ("prog", "prog-nopie", "libt.so")]
    return [*found, LUA]


def _decoded_way(maker: FunctionMaker, reader: SFrameReader, number: int
                 ) -> bytes | str:
    """The function as it was made before: decoded, encoded again and validated (one the
    validator leaves out is irregular: the whole merge makes it from the CFI)."""
    try:
        made = maker._validated(reader.to_fde(reader.fde(number)))
    except (SFrameError, IrregularFunction, IndexError):
        return IRREGULAR
    return IRREGULAR if made is None else made


def _made(maker: FunctionMaker, index: FunctionIndex, position: int) -> bytes | str:
    try:
        made = maker.make(index, position)
    except IrregularFunction:
        return IRREGULAR
    assert made is not None  # (an own FDE is never left out: irregular instead)
    return made[0]


def _maker_of(path: Path) -> tuple[FunctionMaker, FunctionIndex, SFrameReader]:
    image = ElfImage(str(path))
    table = on_demand_table(image, use_cache=False)
    assert table is not None
    index = table._prepare()
    assert index is not None
    maker = table._maker()
    assert maker.own_reader is not None
    return maker, index, maker.own_reader


@needs_fixtures
@pytest.mark.parametrize("path", _own_tables() if FIXTURES.exists() else [],
                         ids=lambda path: "/".join(path.parts[-4:]))
def test_own_functions_are_the_decoded_ways(path: Path) -> None:
    """Each own FDE the index keeps is made as the decoded way makes it; most from their
    stored rows, and the others (PC-masking PLT rows, flexible FDEs...) decoded."""
    maker, index, reader = _maker_of(path)
    stored = decoded = 0
    for position, ref in enumerate(index.refs):
        number = own_number(ref)
        if number is None:
            continue
        plain = plain_stored_rows(reader, reader.fde(number), maker.text) is not None
        stored += plain
        decoded += not plain
        assert _made(maker, index, position) == _decoded_way(maker, reader, number), number
    assert stored > decoded


@needs_fixtures
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 704), st.lists(st.tuples(st.integers(0, 1 << 16), st.one_of(
    st.sampled_from([1 << bit for bit in range(8)]), st.integers(1, 255))), min_size=1,
    max_size=4))
def test_hostile_own_functions_are_made_as_the_decoded_way_makes_them(
        number: int, changes: list[tuple[int, int]]) -> None:
    """One FDE of a copy of the Lua program's own table with bytes changed in its index
    entry, its attribute record or its rows (starts, info bytes, words): it is made from
    its stored rows only when the decoded way makes the same table, and refused alike."""
    maker, _, reader = _maker_of_lua()
    entry = reader.fde(number % reader.num_fdes)
    rows_end = reader.fre_block_end(entry)
    attribute = entry.fres_offset - 5
    places = [*range(entry.offset, entry.offset + 16), *range(attribute, rows_end)]
    raw = bytearray(reader.data)
    for where, flipped in changes:
        raw[places[where % len(places)]] ^= flipped
    _same_as_decoded(maker, SFrameReader(bytes(raw), reader.address), entry.index)


#: (what is changed, how) in an FDE of the Lua program's table with rows of 1-byte starts:
#: each is made as the decoded way makes it (or left to it).
_CHANGES = {
    "an unused FDE info bit": lambda raw, at, rows: raw.__setitem__(at.info, raw[at.info] | 0x40),
    "the signal bit": lambda raw, at, rows: raw.__setitem__(at.info, raw[at.info] | 0x80),
    "PC-masking": lambda raw, at, rows: raw.__setitem__(at.info, raw[at.info] | 0x10),
    "a pauth key": lambda raw, at, rows: raw.__setitem__(at.info, raw[at.info] | 0x20),
    "a flexible FDE": lambda raw, at, rows: raw.__setitem__(at.info + 1, 1),
    "FDE type bits beyond the type": lambda raw, at, rows: raw.__setitem__(at.info + 1, 0x20),
    "repetitions": lambda raw, at, rows: raw.__setitem__(at.info + 2, 1),
    "a mangled RA": lambda raw, at, rows: raw.__setitem__(rows[1] + 1, raw[rows[1] + 1] | 0x80),
    "a row at the function's end": lambda raw, at, rows: raw.__setitem__(rows[-1], at.size),
    "a row past it": lambda raw, at, rows: raw.__setitem__(rows[-1], at.size + 1),
    "the last row just inside": lambda raw, at, rows: raw.__setitem__(rows[-1], at.size - 1),
    "a first row after the start": lambda raw, at, rows: raw.__setitem__(rows[0], 1),
    "two rows at one start": lambda raw, at, rows: raw.__setitem__(rows[1], raw[rows[0]]),
    "no words": lambda raw, at, rows: raw.__setitem__(rows[1] + 1, raw[rows[1] + 1] & 0xE1),
    "three words": lambda raw, at, rows: raw.__setitem__(
        rows[1] + 1, (raw[rows[1] + 1] & 0xE1) | 6),
    "no rows": lambda raw, at, rows: raw.__setitem__(at.info - 2, 0),
    "a size of 0": lambda raw, at, rows: raw.__setitem__(slice(at.size_at, at.size_at + 4),
                                                         bytes(4)),
    "no rows and a size of 0": lambda raw, at, rows: (
        raw.__setitem__(at.info - 2, 0),
        raw.__setitem__(slice(at.size_at, at.size_at + 4), bytes(4))),
}


class _Places:
    """Where an FDE's fields are in the table."""

    def __init__(self, entry: FDEEntry) -> None:
        self.info = entry.fres_offset - 3  # (the attribute record's info byte)
        self.size_at = entry.offset + 8  # (the index entry's size field)
        self.size = entry.size


@needs_fixtures
@pytest.mark.parametrize("change", sorted(_CHANGES))
def test_changed_own_functions_are_made_as_the_decoded_way_makes_them(change: str) -> None:
    maker, _, reader = _maker_of_lua()
    number = next(k for k in range(reader.num_fdes)
                  if (e := reader.fde(k)).num_fres >= 3 and e.info & 0xF == 0
                  and plain_stored_rows(reader, e, maker.text) is not None)
    entry = reader.fde(number)
    rows = [at for at, _, _, _ in reader.fre_heads(entry)]
    raw = bytearray(reader.data)
    _CHANGES[change](raw, _Places(entry), rows)
    stored = _same_as_decoded(maker, SFrameReader(bytes(raw), reader.address), number)
    assert stored == (change in _STAYS_PLAIN)


#: The changes after which the FDE is still made from its stored rows.
_STAYS_PLAIN = {"an unused FDE info bit", "the signal bit", "FDE type bits beyond the type",
                "the last row just inside", "no rows"}


def _same_as_decoded(maker: FunctionMaker, hostile: SFrameReader, number: int) -> bool:
    """FDE ``number`` of ``hostile`` is made from its stored rows only as the decoded way
    makes it, and refused alike; whether it was made so."""
    expected = _decoded_way(maker, hostile, number)
    try:
        changed = hostile.fde(number)
        stored_end = plain_stored_rows(hostile, changed, maker.text)
    except SFrameError:
        assert expected == IRREGULAR
        return False
    if stored_end is None:
        return False  # left to the decoded way
    made = single_function(maker._section, changed.start, changed.size, changed.info,
                           hostile.buffer[changed.fres_offset:stored_end], changed.num_fres)
    assert made == expected
    return True


_LUA: list[tuple[FunctionMaker, FunctionIndex, SFrameReader]] = []


def _maker_of_lua() -> tuple[FunctionMaker, FunctionIndex, SFrameReader]:
    if not _LUA:
        _LUA.append(_maker_of(LUA))
    return _LUA[0]


def _dumped_functions(objdump: str, path: Path) -> dict[str, str]:
    """objdump --sframe's block of each function of ``path``: its ``pc = ..., size = ...``
    line, then its rows."""
    text = subprocess.run([objdump, "--sframe", str(path)], capture_output=True, text=True,
                          check=True, timeout=60).stdout
    blocks: dict[str, str] = {}
    for block in text.split("\n\n"):
        head, _, rows = block.strip().partition("\n")
        if head.startswith("func idx ["):
            blocks[head.split("]: ", 1)[1]] = rows
    return blocks


@needs_fixtures
@pytest.mark.parametrize("arch", ["x86_64", "aarch64", "s390x"])
def test_own_functions_written_from_stored_rows_are_dumped_by_objdump_as_in_the_file(
        arch: str, tmp_path: Path) -> None:
    """The oracle: a function's single-function table written from its stored rows, put in
    place of the program's own .sframe (moved to its address, zero-padded), is dumped by
    GNU objdump --sframe (2.47.50) with the very rows objdump gives that function in the
    program's own table."""
    objdump = need_binutils("objdump", "2.47.50", arch)
    objcopy = need_binutils("objcopy", "2.47.50", arch)
    path = FIXTURES / "2.46" / arch / "O2" / "prog"
    expected = _dumped_functions(objdump, path)
    own = ElfImage(str(path)).sframe_sections()[0]
    maker, index, reader = _maker_of(path)
    checked = 0
    for position, ref in enumerate(index.refs):
        number = own_number(ref)
        if number is None or plain_stored_rows(reader, reader.fde(number), maker.text) is None:
            continue
        if checked and position % 97:  # (a spread of the program's functions)
            continue
        made = maker.make(index, position)
        assert made is not None and made[1] is None  # (written from its stored rows)
        table = relocate(made[0], 0, own.address)
        section = tmp_path / f"{position}.sframe"
        section.write_bytes(table + bytes(len(own.raw) - len(table)))
        copy = tmp_path / f"prog-{position}"
        subprocess.run([objcopy, "--update-section", f".sframe={section}", str(path),
                        str(copy)], check=True, capture_output=True, timeout=60)
        dumped = _dumped_functions(objdump, copy)
        assert len(dumped) == 1
        [(head, rows)] = dumped.items()
        assert expected[head] == rows, head
        checked += 1
    assert checked >= 10

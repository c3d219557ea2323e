"""The whole-table fault check's shortcut (SFrameReader.plainly_readable, taken first by
SFrameLookup.first_fault) says a table is clean only where the check FDE by FDE finds no
fault: on the version 3 tables of the fixtures (x86-64, AArch64, s390x; gas 2.46 and
2.47.50, with PLT, flexible and outermost rows) and on copies of them with bytes changed,
cut or counts moved; and it takes the clean ones (the Lua fixture's own table)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, needs_fixtures
from pysframe.elf import ElfError, ElfImage
from pysframe.format.decode import SFrameReader
from pysframe.format.errors import SFrameError
from pysframe.format.lookup import SFrameLookup


def _tables() -> list[tuple[bytes, int]]:
    found = []
    paths = [*sorted(FIXTURES.glob("2.4[67]*/*/O2/*")),
             FIXTURES / "real" / "lua-2.46-x86_64" / "lua"]
    for path in paths:
        if path.suffix == ".txt" or not path.is_file():
            continue
        try:
            sections = ElfImage(str(path)).sframe_sections()
        except ElfError:  # (not an ELF file)
            continue
        found += [(bytes(section.raw), section.address) for section in sections
                  if section.raw[2:3] == b"\x03"]
    return found


TABLES = _tables() if (FIXTURES / "manifest.json").exists() else []


class _Stepwise(SFrameReader):
    """A reader that never takes the shortcut: first_fault reads FDE by FDE."""

    def plainly_readable(self, used: int) -> bool:
        return False


def _fault(data: bytes, address: int, shortcut: bool) -> str | None:
    """first_fault's answer (its message, or None), with or without the shortcut."""
    try:
        lookup = SFrameLookup((SFrameReader if shortcut else _Stepwise)(data, address))
    except SFrameError as error:
        return f"unreadable: {error.message}"
    fault = lookup.first_fault()
    return None if fault is None else fault.message


@needs_fixtures
def test_the_fixtures_tables_get_the_same_answer_and_lua_takes_the_shortcut() -> None:
    assert len(TABLES) >= 10
    for data, address in TABLES:
        assert _fault(data, address, True) == _fault(data, address, False)
    lua = ElfImage(str(FIXTURES / "real" / "lua-2.46-x86_64" / "lua")).sframe_sections()[0]
    reader = SFrameReader(lua.raw, lua.address)
    assert reader.plainly_readable(2)


@needs_fixtures
@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_changed_tables_get_the_same_answer(data: st.DataObject) -> None:
    raw, address = data.draw(st.sampled_from(TABLES))
    changed = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(28, len(changed) - 1))  # (past the header: it reads)
        changed[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        changed = changed[:data.draw(st.integers(28, len(changed)))]
    shortcut = _fault(bytes(changed), address, True)
    assert shortcut == _fault(bytes(changed), address, False)


@pytest.mark.parametrize("used", [0, 1, 2, 3])
@needs_fixtures
def test_the_shortcut_never_passes_what_the_rows_fail(used: int) -> None:
    """Whatever words a row may have, a table the shortcut passes reads FDE by FDE."""
    for data, address in TABLES:
        reader = SFrameReader(data, address)
        if reader.plainly_readable(used):
            lookup = SFrameLookup(reader)
            for index in range(reader.num_fdes):
                lookup._risky_rows(index, used)  # raises where a row fails


@needs_fixtures
def test_each_attribute_byte_changed_gets_the_same_answer() -> None:
    """Every byte of the attribute records (row count, info, info2, repetition size) of
    the Lua table's first FDEs, its PLT ones among them, set to values that break them:
    the shortcut and the FDE-by-FDE check agree (a PC-masking FDE without a repetition
    size, a flexible or unknown FDE type, a count past the rows)."""
    lua = ElfImage(str(FIXTURES / "real" / "lua-2.46-x86_64" / "lua")).sframe_sections()[0]
    reader = SFrameReader(lua.raw, lua.address)
    masking = [index for index in range(reader.num_fdes) if reader.fde(index).pc_type]
    assert masking  # (the PLT's)
    for index in sorted({0, 1, 2, masking[0], masking[-1], reader.num_fdes - 1}):
        attribute = reader.fde(index).fres_offset - 5
        for at in range(attribute, attribute + 5):
            for value in (0, 1, 2, 0x80, 0xFF, lua.raw[at] ^ 1):
                changed = bytearray(lua.raw)
                changed[at] = value
                assert (_fault(bytes(changed), lua.address, True)
                        == _fault(bytes(changed), lua.address, False)), (index, at, value)

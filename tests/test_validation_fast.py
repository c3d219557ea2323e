"""The validator's fast reading (:func:`plainly_valid`, used for rows made per function)
never passes what :func:`validate` refuses: over the fixtures' own tables (gas and ld,
every ABI) and the tables generated for system libraries, each FDE alone; and each rule
broken on purpose is caught by both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import FIXTURES, manifest_entries, needs_fixtures
from pysframe.elf import ElfImage
from pysframe.format.constants import ABI, F_FDE_FUNC_START_PCREL, VERSION_3
from pysframe.format.decode import SFrameReader
from pysframe.format.encode import encode
from pysframe.format.errors import SFrameError
from pysframe.format.model import FDE, Section
from pysframe.format.validation import ERROR, encoded_errors, plainly_valid, validate
from pysframe.generate.cache import table_for
from pysframe.records import replace

SYSTEM = [Path("/usr/lib/x86_64-linux-gnu/libc.so.6"),
          Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")]


def _alone(abi: ABI, fde: FDE) -> Section:
    """``fde`` as the only function of a section with the generator's header."""
    return Section(version=VERSION_3, abi=abi, flags=F_FDE_FUNC_START_PCREL,
                   cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0, address=0,
                   fdes=[replace(fde, fre_off=None)])


def _errors(section: Section, text: list[tuple[int, int]]) -> list[str] | None:
    """validate's errors for ``section`` encoded; None when it cannot be encoded."""
    try:
        data = encode(section)
    except SFrameError:
        return None
    return [f.message for f in validate(data, 0, text) if f.severity == ERROR]


def _tables() -> Iterator[tuple[str, ABI, list[FDE], list[tuple[int, int]]]]:
    for entry in manifest_entries():
        if entry["elf_type"] == "REL" or not entry.get("sframe_sections"):
            continue
        image = ElfImage(str(FIXTURES / entry["path"]))
        for found in image.sframe_sections():
            section = SFrameReader(found.relocated, found.address).to_section()
            yield entry["path"], section.abi, section.fdes, image.executable_ranges()
    for path in SYSTEM:
        image = ElfImage(str(path))
        table = table_for(image, use_cache=False)
        section = SFrameReader(table.data, table.address).to_section()
        yield path.name, section.abi, section.fdes, image.executable_ranges()


@needs_fixtures
def test_what_it_passes_validate_passes() -> None:
    plain = checked = 0
    abis = set()
    for where, abi, fdes, text in _tables():
        for fde in fdes:
            section = _alone(abi, fde)
            errors = _errors(section, text)
            if errors is None:
                continue
            checked += 1
            if plainly_valid(section, text):
                plain += 1
                abis.add(abi)
                assert not errors, (where, hex(fde.start), errors)
    assert abis >= {ABI.AMD64_ENDIAN_LITTLE, ABI.AARCH64_ENDIAN_LITTLE, ABI.S390X_ENDIAN_BIG}
    assert plain >= 0.9 * checked, (plain, checked)  # the fast path is the usual one


def _a_plain_fde() -> tuple[FDE, list[tuple[int, int]]]:
    image = ElfImage(str(SYSTEM[0]))
    table = table_for(image, use_cache=False)
    fdes = SFrameReader(table.data, table.address).to_section().fdes
    text = image.executable_ranges()
    fde = next(f for f in fdes if len(f.fres) >= 3
               and plainly_valid(_alone(ABI.AMD64_ENDIAN_LITTLE, f), text))
    return fde, text


def _row(fde: FDE, k: int, **changes: object) -> FDE:
    fres = list(fde.fres)
    fres[k] = replace(fres[k], **changes)
    return replace(fde, fres=fres)


BROKEN: dict[str, Callable[[FDE, list[tuple[int, int]]], FDE]] = {
    "size 0": lambda f, _: replace(f, size=0),
    "outside the text": lambda f, text: replace(f, start=max(hi for _, hi in text) + 64),
    "first row not at 0": lambda f, _: _row(f, 0, start=1),
    "rows not ascending": lambda f, _: _row(f, 2, start=f.fres[1].start),
    "a row past the end": lambda f, _: _row(f, len(f.fres) - 1, start=f.size),
    "four words on AMD64": lambda f, _: _row(f, 1, words=(*f.fres[1].words, 8, 8)[:4]),
    "mangled RA on AMD64": lambda f, _: _row(f, 1, mangled_ra=True),
    "pauth key B on AMD64": lambda f, _: replace(f, pauth_key_b=True),
}


@pytest.mark.parametrize("broken", BROKEN, ids=list(BROKEN))
def test_each_broken_rule_is_caught_by_both(broken: str) -> None:
    fde, text = _a_plain_fde()
    section = _alone(ABI.AMD64_ENDIAN_LITTLE, BROKEN[broken](fde, text))
    assert _errors(section, text), broken  # a real fault, by validate's own reading
    assert not plainly_valid(section, text)



def _whole_sections() -> Iterator[tuple[str, Section, list[tuple[int, int]]]]:
    """Whole tables as the generator's header has them: the fixtures' own (gas, ld) and
    libc's and libstdc++'s generated ones."""
    for where, abi, fdes, text in _tables():
        section = Section(version=VERSION_3, abi=abi, flags=F_FDE_FUNC_START_PCREL,
                          cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0, address=0,
                          fdes=[replace(fde, fre_off=None) for fde in fdes])
        yield where, section, text


@needs_fixtures
def test_a_whole_tables_errors_are_validates() -> None:
    """encoded_errors gives what validate gives, for tables with and without errors (each
    table also with one function broken)."""
    tables = 0
    for where, section, text in _whole_sections():
        try:
            data = encode(section)
        except SFrameError:
            continue
        tables += 1
        expected = [f.message for f in validate(data, 0, text) if f.severity == ERROR]
        assert [f.message for f in encoded_errors(section, data, text)] == expected, where
        if len(section.fdes) > 2:
            broken = replace(section, fdes=list(section.fdes))
            broken.fdes[1] = replace(broken.fdes[1], size=0)
            data = encode(broken)
            expected = [(f.message, f.offset, f.fde) for f in validate(data, 0, text)
                        if f.severity == ERROR]
            assert expected
            assert [(f.message, f.offset, f.fde)
                    for f in encoded_errors(broken, data, text)] == expected, where
    assert tables >= 50

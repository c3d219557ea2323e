"""The FDE ranges of an .eh_frame read as numpy columns (pysframe.cfi.fde_columns, what a
first `script` indexes binaries with) are what the one-by-one reading gives
(cfi.eh_frame.fde_ranges), on real sections of three machines and on damaged ones; and the
on-demand index made from them is the same."""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from pysframe.cfi.eh_frame import fde_ranges
from pysframe.elf import ElfImage
from pysframe.generate import on_demand
from pysframe.generate.cache import _STUBS

np = pytest.importorskip("numpy")

from pysframe.cfi.fde_columns import fde_columns  # noqa: E402

BINARIES = [Path("/usr/lib/gcc/x86_64-linux-gnu/12/cc1"),
            Path("/usr/lib/x86_64-linux-gnu/libc.so.6"), Path("/bin/ls"),
            Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),  # LSDAs: read one by one
            FIXTURES / "2.46" / "aarch64" / "O2" / "prog",
            FIXTURES / "2.46" / "s390x" / "O2" / "prog",  # big-endian
            FIXTURES / "real" / "lua-2.46-x86_64" / "lua"]


def _section(path: Path) -> tuple[bytes, int, ElfImage]:
    if not path.exists():
        pytest.fail(f"{path} is missing (../shared/fixtures, Debian's system binaries)")
    image = ElfImage(str(path))
    found = image.section(".eh_frame", relocated=True)
    assert found is not None
    return bytes(found[0]), found[1], image


def _both(data: bytes, address: int, image: ElfImage) -> None:
    options = {"big_endian": image.big_endian, "address_size": image.elf_class // 8}
    expected = fde_ranges(data, address, **options)
    columns = fde_columns(data, address, **options)
    if columns is None:  # only where the one-by-one reading turns to the full parser
        assert b"\xff\xff\xff\xff" in data
        return
    assert list(zip(*(column.tolist() for column in columns), strict=True)) == expected


@pytest.mark.parametrize("path", BINARIES, ids=lambda path: "/".join(path.parts[-3:]))
def test_the_columns_are_the_ranges_read_one_by_one(path: Path) -> None:
    data, address, image = _section(path)
    _both(data, address, image)
    assert len(fde_ranges(data, address, big_endian=image.big_endian)) > 10


@pytest.mark.parametrize("path", BINARIES[1:3] + BINARIES[5:6],
                         ids=lambda path: "/".join(path.parts[-3:]))
def test_damaged_sections_give_what_the_ranges_give(path: Path) -> None:
    """Cut anywhere, lengths and CIE pointers and augmentation lengths overwritten, a
    64-bit entry, an early terminator: the same FDEs, errors skipped the same way."""
    data, address, image = _section(path)
    rng = random.Random(29)
    order = ">" if image.big_endian else "<"
    entries = [offset for _, _, offset in fde_ranges(data, address,
                                                      big_endian=image.big_endian)]
    for _ in range(40):
        damaged = bytearray(data)
        at = rng.choice(entries)
        kind = rng.randrange(6)
        if kind == 0:
            damaged = damaged[:rng.randrange(len(damaged))]
        elif kind == 1:
            struct.pack_into(order + "I", damaged, at, rng.choice([0, 3, 7, 0xFFFFFFF0]))
        elif kind == 2:
            struct.pack_into(order + "I", damaged, at + 4, rng.randrange(1 << 32))
        elif kind == 3:
            damaged[at + 16] = rng.choice([0x7F, 0x80, 0xFF, 40])
        elif kind == 4:
            struct.pack_into(order + "I", damaged, at, 0xFFFFFFFF)
        else:
            struct.pack_into(order + "I", damaged, at, 0)
        _both(bytes(damaged), address, image)


@pytest.mark.parametrize("path", BINARIES[:2] + BINARIES[4:5],
                         ids=lambda path: "/".join(path.parts[-3:]))
def test_the_index_is_the_same_either_way(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = ElfImage(str(path))
    stubs = list(image.section_ranges(*_STUBS).values())
    columns = on_demand._cfi_entries(image, stubs)
    monkeypatch.delitem(sys.modules, "numpy")  # (the reading one by one: `sframe stack`'s)
    one_by_one = on_demand._cfi_entries(image, stubs)
    monkeypatch.undo()
    assert columns == one_by_one and columns

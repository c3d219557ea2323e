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

from pysframe.cfi.fde_columns import fde_columns, hinted_offsets  # noqa: E402

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
    """The columns are the ranges read one by one, with no hints, the binary's own
    (.eh_frame_hdr's: for a damaged section, stale) and junk ones."""
    options = {"big_endian": image.big_endian, "address_size": image.elf_class // 8}
    expected = fde_ranges(data, address, **options)
    for hints in _hints(image, address, len(data)):
        columns = fde_columns(data, address, **options, hints=hints)
        if columns is None:  # only where the one-by-one reading turns to the full parser
            assert b"\xff\xff\xff\xff" in data
            continue
        assert list(zip(*(column.tolist() for column in columns), strict=True)) == expected


def _hints(image: ElfImage, address: int, size: int) -> list[np.ndarray | None]:
    """None, the binary's own hints, and those shuffled, thinned, doubled, moved a byte,
    or joined by offsets in the middle of entries and outside the section."""
    hdr = image.section(".eh_frame_hdr", relocated=True)
    assert hdr is not None
    own = hinted_offsets(hdr[0], hdr[1], address, big_endian=image.big_endian)
    assert own is not None and len(own) > 10
    rng = np.random.default_rng(29)
    junk = rng.integers(-64, size + 64, len(own) // 3)
    return [None, own, rng.permutation(own), own[::3], np.concatenate((own, own)), own + 1,
            np.concatenate((own[::2], junk)), junk]


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
    found = image.section(".eh_frame", relocated=True)
    assert found is not None
    columns = on_demand._cfi_entries(image, stubs, found[:2])
    monkeypatch.delitem(sys.modules, "numpy")  # (the reading one by one: `sframe stack`'s)
    one_by_one = on_demand._cfi_entries(image, stubs, found[:2])
    monkeypatch.undo()
    assert columns == one_by_one and columns


def test_a_search_table_not_as_ld_writes_it_gives_no_hints() -> None:
    """Version 1, the pointer and count 4 bytes, a table of datarel sdata4 pairs inside the
    section: hints (each FDE's offset into .eh_frame); anything else: none."""
    table = struct.pack("<4i", 0x10, 0x140, 0x20, 0x180)  # (pc, FDE) pairs, from the hdr
    good = bytes([1, 0x1B, 0x03, 0x3B]) + struct.pack("<iI", -0x100, 2) + table
    hints = hinted_offsets(good, 0x2000, 0x2100)
    assert hints is not None and hints.tolist() == [0x40, 0x80]
    for bad in (bytes([2]) + good[1:], good[:1] + bytes([0x1C]) + good[2:],
                good[:2] + bytes([0x04]) + good[3:], good[:3] + bytes([0x3C]) + good[4:],
                good[:-1], good[:10]):
        assert hinted_offsets(bad, 0x2000, 0x2100) is None, bad

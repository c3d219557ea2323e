"""The index of a binary without its own ``.sframe``, made as columns
(:mod:`pysframe.generate.column_index`, a batch run's) is the one made entry by entry
(:func:`~pysframe.generate.merged_index.merged_entries` and the regularity check,
``sframe stack``'s): on real binaries and on hand-made entries that overlap, are empty,
reach past 2**62 or meet crti/crtn's. Internal consistency: the entry-by-entry index is
the one held to the whole generated table (and so to GNU ld) by test_on_demand."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

from conftest import FIXTURES  # noqa: E402
from pysframe.elf import ElfImage  # noqa: E402
from pysframe.generate import on_demand  # noqa: E402
from pysframe.generate.abi import abi_of  # noqa: E402
from pysframe.generate.column_index import column_index  # noqa: E402
from pysframe.generate.function_index import FunctionIndex  # noqa: E402
from pysframe.generate.merged_index import merged_entries  # noqa: E402
from pysframe.generate.on_demand import OnDemandTable  # noqa: E402

BINARIES = [Path("/usr/lib/gcc/x86_64-linux-gnu/12/cc1"),
            Path("/usr/lib/x86_64-linux-gnu/libc.so.6"), Path("/bin/ls"),
            Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
            FIXTURES / "2.46" / "x86_64" / "O2" / "libt.so",
            FIXTURES / "2.44" / "x86_64" / "O2" / "prog",
            FIXTURES / "2.46" / "s390x" / "O2" / "prog"]


def _columns(index: FunctionIndex | None) -> tuple[list[int], list[int], list[int]] | None:
    return None if index is None else (index.starts, index.ends, index.refs)


@pytest.mark.parametrize("path", BINARIES, ids=lambda path: "/".join(path.parts[-3:]))
def test_a_binary_is_indexed_the_same_either_way(path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if not path.exists():
        pytest.fail(f"{path} is missing (../shared/fixtures, Debian's system binaries)")
    image = ElfImage(str(path))
    table = OnDemandTable(image, abi_of(image), use_cache=False)
    table.own = None  # (the index of its CFI alone, as a binary without .sframe has it)
    maker = table._maker()
    stubs = list(image.section_ranges(*on_demand._STUBS).values())
    as_columns = on_demand._scan(image, maker.plt_fdes(), stubs, maker.crt_from, maker.eh_frame())
    monkeypatch.delitem(sys.modules, "numpy")  # (entry by entry: `sframe stack`'s reading)
    one_by_one = on_demand._scan(image, maker.plt_fdes(), stubs, maker.crt_from, maker.eh_frame())
    monkeypatch.undo()
    assert one_by_one is not None and len(one_by_one.starts) > 10
    assert _columns(as_columns) == _columns(one_by_one)


def _by_entries(cfi: list[tuple[int, int, int]], ld_rules: list[tuple[int, int, int]],
                crt: list[tuple[int, int, int]]) -> FunctionIndex | None:
    entries = merged_entries([], cfi, ld_rules, crt, [], False)
    return on_demand._regular_index(entries) if entries is not None else None


def _by_columns(cfi: list[tuple[int, int, int]], ld_rules: list[tuple[int, int, int]],
                crt: list[tuple[int, int, int]]) -> FunctionIndex | None:
    starts = np.array([start for start, _, _ in cfi], np.uint64)
    sizes = np.array([end - start for start, end, _ in cfi], np.uint64)
    offsets = np.array([offset for _, _, offset in cfi], np.int64)
    return column_index(starts, sizes, offsets, ld_rules, crt)


@pytest.mark.parametrize("case", [
    "apart", "overlapping", "one inside another", "same start", "near 2**62", "past 2**64",
    "crt overlapped", "crt apart", "ld's rules between", "nothing"])
def test_hand_made_entries_are_indexed_the_same_either_way(case: str) -> None:
    cfi = [(0x1000, 0x1010, 0x40), (0x1010, 0x1040, 0x80), (0x2000, 0x2100, 0xC0)]
    ld_rules: list[tuple[int, int, int]] = []
    crt: list[tuple[int, int, int]] = []
    if case == "overlapping":
        cfi.append((0x1030, 0x1050, 0x100))
    elif case == "one inside another":
        cfi.append((0x2010, 0x2020, 0x100))
    elif case == "same start":
        cfi.append((0x1000, 0x1008, 0x100))
    elif case == "near 2**62":
        cfi.append(((1 << 62) - 0x10, (1 << 62), 0x100))
    elif case == "past 2**64":
        cfi.append(((1 << 64) - 0x10, (1 << 64) + 0x10, 0x100))
    elif case == "crt overlapped":
        crt = [(0x1008, 0x1020, ~5), (0x3000, 0x3010, ~6)]
    elif case == "crt apart":
        crt = [(0x0F00, 0x0F10, ~5)]
    elif case == "ld's rules between":
        ld_rules = [(0x1800, 0x1900, ~0), (0x1900, 0x1980, ~1)]
    elif case == "nothing":
        cfi = []
    assert _columns(_by_columns(cfi, ld_rules, crt)) == _columns(_by_entries(cfi, ld_rules, crt))


def test_random_entries_are_indexed_the_same_either_way() -> None:
    rng = random.Random(29)
    for _ in range(300):
        cfi = [(start, start + rng.randint(1, 0x80), rng.randrange(0, 1 << 20))
               for start in (rng.randrange(0x1000, 0x3000) for _ in range(rng.randint(0, 12)))]
        crt = [(start, start + 0x10, ~k) for k, start in
               enumerate(rng.sample(range(0x1000, 0x3000, 0x10), rng.randint(0, 2)))]
        assert _columns(_by_columns(cfi, [], crt)) == _columns(_by_entries(cfi, [], crt)), cfi

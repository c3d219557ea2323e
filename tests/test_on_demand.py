"""Tables on demand (issue 29, item 1): the rows made per function are the whole table's,
for every function; odd CFI gets the whole table; the cache entry of made functions is
verified before use."""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import FIXTURES, needs_fixtures
from pysframe.cfi.eh_frame import fde_ranges, parse_eh_frame
from pysframe.elf import ElfImage
from pysframe.format.decode import SFrameReader
from pysframe.format.lookup import FrameRow, MadeLookup, SFrameLookup
from pysframe.generate import on_demand
from pysframe.generate.cache import table_for
from pysframe.generate.merged_index import merged_entries, own_number, own_ref
from pysframe.generate.on_demand import (
    KIND,
    OnDemandTable,
    _decoded,
    _index_columns,
    _made_with,
    on_demand_table,
)
from pysframe.records import replace
from pysframe.session.tables import GeneratedTables

SYSTEM = [Path("/usr/lib/x86_64-linux-gnu/libc.so.6"),
          Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),  # C++: LSDA FDEs
          Path("/bin/ls")]  # a PIE with .plt and .plt.got
FIXTURE = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"  # its own .sframe, a .plt


def _whole(image: ElfImage) -> SFrameLookup:
    table = table_for(image, use_cache=False)
    return SFrameLookup(SFrameReader(table.data, table.address))


def _probes(whole: SFrameLookup, image: ElfImage) -> list[int]:
    """Every row start of the whole table (and the byte before), every FDE's bounds."""
    pcs: set[int] = set()
    reader = whole.reader
    for i in range(reader.num_fdes):
        entry = reader.fde(i)
        pcs.update((entry.start - 1, entry.start + entry.size - 1, entry.start + entry.size))
        for _, fre in reader.fres_with_offsets(entry):
            pcs.update((entry.start + fre.start - 1, entry.start + fre.start))
    found = image.section(".eh_frame", relocated=True)
    assert found is not None
    for start, size, _ in fde_ranges(found[0], found[1]):
        pcs.update((start, start + size // 2, start + size))
    return sorted(pcs)


def _same_rows(whole: SFrameLookup, lazy: OnDemandTable, pcs: list[int]) -> None:
    def plain(row: FrameRow | None) -> FrameRow | None:  # the index in its own table
        return None if row is None else replace(row, fde_index=0)

    for pc in pcs:
        assert plain(lazy.find_fre(pc)) == plain(whole.find_fre(pc)), hex(pc)


def _stripped(tmp_path: Path, path: Path) -> ElfImage:
    """A copy of ``path`` without its own .sframe (so it gets an on-demand table)."""
    copy = tmp_path / (path.name + ".nosframe")
    subprocess.run(["objcopy", "--remove-section", ".sframe", str(path), str(copy)], check=True)
    return ElfImage(str(copy))


@pytest.mark.parametrize("path", SYSTEM, ids=lambda path: path.name)
def test_rows_made_per_function_are_the_whole_tables(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not here")
    image = ElfImage(str(path))
    lazy = on_demand_table(image, use_cache=False)
    assert lazy is not None
    whole = _whole(image)
    _same_rows(whole, lazy, _probes(whole, image))
    assert lazy.whole is None  # every function made on its own


@needs_fixtures
@pytest.mark.skipif(shutil.which("objcopy") is None, reason="no objcopy")
def test_a_fixture_without_its_sframe_gets_the_whole_tables_rows(tmp_path: Path) -> None:
    image = _stripped(tmp_path, FIXTURE)
    lazy = on_demand_table(image, use_cache=False)
    assert lazy is not None
    whole = _whole(image)
    _same_rows(whole, lazy, _probes(whole, image))
    assert lazy.whole is None and lazy.index is not None
    assert any(ref < 0 for ref in lazy.index.refs)  # the PLT's rows: ld's rules


def test_fde_ranges_are_the_parsers_fdes() -> None:
    for path in SYSTEM:
        if not path.exists():
            continue
        found = ElfImage(str(path)).section(".eh_frame", relocated=True)
        assert found is not None
        fdes, _ = parse_eh_frame(found[0], found[1])
        assert fde_ranges(found[0], found[1]) == [(f.pc_begin, f.pc_range, f.offset)
                                                 for f in fdes]


def _patched(tmp_path: Path, source: Path, name: str, section: str,
             patch: Callable[[bytearray], None]) -> ElfImage:
    """A copy of ``source`` whose ``section`` bytes went through ``patch``."""
    image = ElfImage(str(source))
    header = image.section_header(section)
    assert header is not None
    data = bytearray(Path(source).read_bytes())
    part = bytearray(data[header.offset:header.offset + header.size])
    patch(part)
    data[header.offset:header.offset + header.size] = part
    copy = tmp_path / name
    copy.write_bytes(bytes(data))
    return ElfImage(str(copy))


def test_hostile_eh_frame_hdr_changes_nothing(tmp_path: Path) -> None:
    """The search table is not read: garbage in it (wrong, unsorted, pointing outside)
    costs no row."""
    libc = SYSTEM[0]
    if not libc.exists():
        pytest.skip("no libc")

    def garbage(part: bytearray) -> None:
        part[4:] = bytes((i * 37) & 0xFF for i in range(len(part) - 4))

    image = _patched(tmp_path, libc, "libc-hdr", ".eh_frame_hdr", garbage)
    lazy = on_demand_table(image, use_cache=False)
    assert lazy is not None
    whole = _whole(image)
    _same_rows(whole, lazy, _probes(whole, image)[::7])


def test_overlapping_fdes_get_the_whole_table(tmp_path: Path) -> None:
    """An FDE whose range runs over the next function: which of the two the whole table
    keeps depends on both, so the binary gets the whole table."""
    libc = SYSTEM[0]
    if not libc.exists():
        pytest.skip("no libc")
    image = ElfImage(str(libc))
    found = image.section(".eh_frame")
    assert found is not None
    ranges = fde_ranges(found[0], found[1])
    offset = ranges[len(ranges) // 2][2]

    def widen(part: bytearray) -> None:
        struct.pack_into("<i", part, offset + 12, 0x100000)

    image = _patched(tmp_path, libc, "libc-overlap", ".eh_frame", widen)
    lazy = on_demand_table(image, use_cache=False)
    assert lazy is not None
    whole = _whole(image)
    _same_rows(whole, lazy, _probes(whole, image)[::5])
    assert lazy.whole is not None


def _entry(cache: Path) -> Path:
    kind = KIND.split("/")[1]
    found = list(cache.rglob(f"*.{kind}"))
    assert len(found) == 1, found
    return found[0]


def test_made_functions_are_kept_and_verified(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    libc = SYSTEM[0]
    if not libc.exists():
        pytest.skip("no libc")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    image = ElfImage(str(libc))
    whole = _whole(image)
    pcs = _probes(whole, image)[::50]
    first = on_demand_table(image)
    assert first is not None
    _same_rows(whole, first, pcs)
    first.save()
    made = len(first._made)
    assert made > 10
    # Warm: the index and the functions come from the cache (no pass over .eh_frame).
    warm = on_demand_table(image)
    assert warm is not None
    warm._prepare()
    assert len(warm._made) == made and warm.generation == 0
    _same_rows(whole, warm, pcs)
    assert warm.generation == 0  # nothing made again
    # Accumulated: a later run adds the functions it makes to the entry.
    more = on_demand_table(image)
    assert more is not None
    _same_rows(whole, more, _probes(whole, image)[25::50])
    more.save()
    again = on_demand_table(image)
    assert again is not None and again._prepare() is not None
    assert len(again._made) > made
    # Tampered: the entry is not used (made again, the same rows).
    entry = _entry(tmp_path / "cache")
    data = bytearray(entry.read_bytes())
    data[-3] ^= 0xFF
    entry.write_bytes(bytes(data))
    tampered = on_demand_table(image)
    assert tampered is not None and tampered._prepare() is not None
    assert not tampered._made
    _same_rows(whole, tampered, pcs)


def _payload(starts: list[int], ends: list[int], made: dict[int, bytes],
             form: int = 2) -> bytes:
    """A cache payload as on_demand lays it out (written here from its description)."""
    n, positions = len(starts), sorted(made)
    return (struct.pack("<III", form, n, len(made))
            + struct.pack(f"<{n}Q{n}Q{n}q", *starts, *ends, *range(n))
            + struct.pack(f"<{len(made)}I{len(made)}I", *positions,
                          *(len(made[k]) for k in positions))
            + b"".join(made[k] for k in positions))


def test_malformed_payloads_are_refused() -> None:
    good = _payload([0x1000, 0x1010], [0x1010, 0x1020], {1: b"tbl"})
    found = _decoded(good)
    assert found is not None
    assert (found[0].starts, found[0].ends, found[0].refs) == ([0x1000, 0x1010],
                                                              [0x1010, 0x1020], [0, 1])
    assert found[1] == {1: b"tbl"}
    assert _decoded(_payload([0x1000], [0x1010], {0: b""}))[1] == {0: None}  # type: ignore[index]
    refused = [
        _payload([0x1010, 0x1000], [0x1020, 0x1010], {}),  # unsorted
        _payload([0x1000, 0x1010], [0x1018, 0x1020], {}),  # overlapping
        _payload([0x1000, 0x1010], [0x1000, 0x1020], {}),  # empty range
        _payload([0x1000, 0x1010], [0x1010, 1 << 62], {}),  # outside [0, 2**62)
        _payload([0x1000, 0x1010], [0x1010, 0x1020], {2: b"x"}),  # no such function
        _payload([0x1000, 0x1010], [0x1010, 0x1020], {1: b"tbl"}, form=1),  # older layout
        good[:-1], good + b"x", good[:10],
        good[:12 + 48] + struct.pack("<II", 1, 1) + struct.pack("<II", 3, 3) + b"tbltbl",
    ]
    for payload in refused:
        assert _decoded(payload) is None, payload


def test_a_save_joins_the_functions_of_an_entry_with_the_same_index_only() -> None:
    """What another run kept joins this run's functions when its index is this one, read
    the way :func:`_decoded` reads the functions; another index, or a malformed entry,
    gives none of its functions."""
    good = _payload([0x1000, 0x1010], [0x1010, 0x1020], {1: b"tbl"})
    index = _decoded(good)
    assert index is not None
    columns = _index_columns(index[0])
    assert _made_with(good, columns) == {1: b"tbl"}
    other = _decoded(_payload([0x1000, 0x1010], [0x1008, 0x1020], {}))
    assert other is not None and _made_with(good, _index_columns(other[0])) is None
    for payload in (good[:-1], good + b"x", good[:10],
                    _payload([0x1000, 0x1010], [0x1010, 0x1020], {2: b"x"}),
                    _payload([0x1000, 0x1010], [0x1010, 0x1020], {1: b"tbl"}, form=1)):
        assert _made_with(payload, columns) is None, payload


def test_a_cached_function_that_is_not_one_fde_in_its_range_is_made_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each cached function's table is checked on its first use, not on loading: one that
    is junk, or one FDE of another function, is made again, with the whole table's rows."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    image = ElfImage(str(SYSTEM[0]))
    whole = _whole(image)
    first = on_demand_table(image)
    assert first is not None and first.index is None
    index = first._prepare()
    assert index is not None
    pcs = _probes(whole, image)
    inside = [pc for pc in pcs if index.position(pc) is not None]
    junk, borrowed, kept = (index.position(pc) for pc in (inside[100], inside[5000],
                                                             inside[9000]))
    assert len({junk, borrowed, kept}) == 3
    other = first.function(kept)  # a real table, of another function than the two below
    assert other is not None
    first._made = {junk: b"junk", borrowed: first._made[kept], kept: first._made[kept]}
    first._dirty = True
    first.save()
    warm = on_demand_table(image)
    assert warm is not None and warm._prepare() is not None
    assert set(warm._made) == {junk, borrowed, kept} and warm.generation == 0
    wanted = [pc for pc in pcs if index.position(pc) in (junk, borrowed, kept)]
    _same_rows(whole, warm, wanted)
    assert warm.generation == 2  # the two bad ones made again; the kept one used as is
    assert warm._made[junk] != b"junk" and warm._made[borrowed] != first._made[kept]


def test_generated_tables_give_on_demand_tables_only_where_they_may(tmp_path: Path) -> None:
    tables = GeneratedTables(use_cache=False)
    libc = SYSTEM[0]
    if libc.exists():
        assert tables.table(ElfImage(str(libc))).on_demand is not None
    if FIXTURE.exists():  # its own version 3 .sframe, merged per function
        assert tables.table(ElfImage(str(FIXTURE))).on_demand is not None
        older = FIXTURES / "2.44" / "x86_64" / "O2" / "prog"  # version 2: merged whole
        table = tables.table(ElfImage(str(older)))
        assert table.on_demand is None and table.data and table.damage is None
        damaged = FIXTURES / "2.40" / "x86_64" / "O2" / "prog"  # made from its CFI, said
        table = tables.table(ElfImage(str(damaged)))
        assert table.on_demand is None and table.data and table.damage is not None
    recorder = GeneratedTables(use_cache=False, apart=True)  # the BPF map: whole tables
    if libc.exists():
        assert recorder.table(ElfImage(str(libc))).on_demand is None


def _own_tables() -> list[Path]:
    """Every linked fixture with its own version 3 .sframe, and the Lua program."""
    found = [path for version in ("2.46", "2.47.50")
             for path in sorted((FIXTURES / version).glob("*/*/*"))
             if path.name in ("prog", "prog-nopie", "libt.so")]
    return [*found, FIXTURES / "real" / "lua-2.46-x86_64" / "lua"]


@needs_fixtures
@pytest.mark.parametrize("path", _own_tables() if FIXTURES.exists() else [],
                         ids=lambda path: "/".join(path.parts[-4:]))
def test_own_tables_merged_per_function_are_the_whole_merges(path: Path) -> None:
    """A file's own .sframe merged with its CFI per function gives the rows of the whole
    merge (cache.table_for) at every row start and FDE bound of either table and of the
    CFI; an own FDE the whole merge leaves out (AArch64's: a control word the validator
    refuses) turns the table whole when its function is made."""
    image = ElfImage(str(path))
    lazy = on_demand_table(image, use_cache=False)
    assert lazy is not None and not lazy.own_damaged() and lazy.index is not None
    assert any(ref < -(1 << 32) for ref in lazy.index.refs)  # the own table's FDEs
    whole = _whole(image)
    pcs = set(_probes(whole, image))
    own = image.sframe_sections()[0]
    reader = SFrameReader(own.raw, own.address)
    for number in range(reader.num_fdes):
        entry = reader.fde(number)
        pcs.update((entry.start - 1, entry.start, entry.start + entry.size))
    _same_rows(whole, lazy, sorted(pc for pc in pcs if pc >= 0))
    assert (lazy.whole is not None) == (image.machine == "EM_AARCH64")


def test_a_function_the_merge_leaves_out_past_its_own_fdes_refuses_the_index() -> None:
    """The whole merge adds a CFI function whose start no own FDE covers, leaves one out
    where it overlaps a kept own FDE, and takes ld's stub rules over the own ones; one
    left out that reaches past the own FDEs it overlaps would come back in a second round
    where no lookup makes the own FDE, so no index is given."""
    own = [(0x100, 0x200, 0), (0x200, 0x280, 1), (0x20, 0x30, 2)]  # the last: a stub
    cfi = [(0x100, 0x200, 8), (0x180, 0x1F0, 16), (0x300, 0x340, 24)]
    plt = [(0x10, 0x40, ~0)]
    entries = merged_entries(own, cfi, plt, [(0x400, 0x410, ~1)], [(0x10, 0x40)], True)
    assert entries == [(0x10, 0x40, ~0), (0x100, 0x200, own_ref(0)),
                       (0x200, 0x280, own_ref(1)), (0x300, 0x340, 24),
                       (0x400, 0x410, ~1)]
    assert own_number(own_ref(1)) == 1 and own_number(~0) is None and own_number(24) is None
    # ld's rules not placed: the own stub FDE is kept and ld's stub overlapping it is out
    kept = merged_entries(own, cfi, plt, [], [(0x10, 0x40)], False)
    assert kept is None  # ld's stub (0x10-0x40) reaches past the own one (0x20-0x30)
    assert merged_entries(own, cfi, [(0x20, 0x30, ~0)], [], [(0x10, 0x40)], False) == [
        (0x20, 0x30, own_ref(2)), (0x100, 0x200, own_ref(0)), (0x200, 0x280, own_ref(1)),
        (0x300, 0x340, 24)]
    # a CFI function from inside one own FDE to past the next: refused
    assert merged_entries(own, [*cfi, (0x1F0, 0x290, 32)], plt, [], [(0x10, 0x40)],
                          True) is None
    # one that ends where the own FDEs end: inside them, left out
    assert (0x1F0, 0x280, 32) not in (merged_entries(
        own, [*cfi, (0x1F0, 0x280, 32)], plt, [], [(0x10, 0x40)], True) or [])


@needs_fixtures
def test_an_own_table_whose_cfi_cannot_be_indexed_is_merged_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the merged index cannot be made (here: .eh_frame unreadable to the index),
    the whole merge decides: the same rows, from a table made whole, no exception."""
    from pysframe.cfi.errors import CFIError

    def unreadable(*_: object, **__: object) -> None:
        raise CFIError("unreadable .eh_frame", 0x40)

    monkeypatch.setattr(on_demand, "_cfi_entries", unreadable)
    image = ElfImage(str(FIXTURE))
    lazy = on_demand_table(image, use_cache=False)
    assert lazy is not None and not lazy.own_damaged()
    assert lazy.index is None and lazy.whole is not None
    whole = _whole(image)
    _same_rows(whole, lazy, _probes(whole, image)[::7])


@needs_fixtures
def test_a_cached_index_naming_an_own_fde_the_table_lacks_turns_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache entry whose index names own FDE 10**6 (the table has a few dozen): the function is
    not made from it; the table turns whole and gives the whole merge's rows."""
    from pysframe.cachedir import store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    image = ElfImage(str(FIXTURE))
    first = on_demand_table(image)
    assert first is not None and first.index is None
    index = first._prepare()
    assert index is not None and first._key is not None and first._source is not None
    at = next(k for k, ref in enumerate(index.refs) if own_number(ref) is not None)
    refs = list(index.refs)
    refs[at] = own_ref(10**6)
    store(KIND, first._key, on_demand._encoded(_index_columns(
        on_demand.FunctionIndex(index.starts, index.ends, refs)), {}), first._source)
    warm = on_demand_table(image)
    assert warm is not None and warm._prepare() is not None and warm.index is not None
    assert own_number(warm.index.refs[at]) == 10**6  # the entry was taken as it is
    whole = _whole(image)
    pcs = [pc for pc in _probes(whole, image) if warm.index.position(pc) == at]
    assert pcs
    _same_rows(whole, warm, pcs)
    assert warm.whole is not None


def test_a_made_lookup_is_set_up_at_its_first_lookup_and_finds_what_a_lookup_finds() -> None:
    """A function's lookup is read (its starts, its fixed rules) only when it is first
    asked for a row; what it finds then is what a lookup of the same bytes finds, and the
    FDE it was made from stays (one made from the CFI has one; most of the file's own are
    written from their stored rows, with none made: tests/test_own_functions.py)."""
    image = ElfImage(str(FIXTURE))
    table = on_demand_table(image, use_cache=False)
    assert table is not None
    ranges = table.index_ranges()
    assert ranges is not None and table.index is not None
    checked, from_cfi = 0, 0
    for position, (start, end) in enumerate(zip(*ranges, strict=True)):
        lookup = table.function(position)
        if lookup is None:
            continue
        assert isinstance(lookup, MadeLookup)
        if own_number(table.index.refs[position]) is None:
            assert lookup.made_from is not None
            from_cfi += 1
        made_from = lookup.made_from
        with pytest.raises(AttributeError):
            object.__getattribute__(lookup, "_starts")  # (not set up yet)
        plain = SFrameLookup(SFrameReader(lookup.reader.data, 0))
        for pc in range(start, min(end, start + 64), 3):
            assert lookup.find_fre(pc) == plain.find_fre(pc), hex(pc)
        assert lookup.made_from is made_from and lookup.sorted_verified
        checked += 1
    assert checked > 100 and from_cfi > 0


@needs_fixtures
@pytest.mark.parametrize("path", [FIXTURE, FIXTURES / "real" / "lua-2.46-x86_64" / "lua",
                                  Path("/usr/lib/x86_64-linux-gnu/libc.so.6")],
                         ids=lambda path: path.name)
def test_eh_frame_is_read_once_for_the_index_and_the_functions(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is scanned from the copy of .eh_frame its functions are made from (made
    before a -j run's fork, not again in each worker): one read of the section."""
    if not path.exists():
        pytest.fail(f"{path} is missing")
    image = ElfImage(str(path))
    reads: list[str] = []
    section = image.section

    def counted(name: str, relocated: bool = False) -> tuple[bytes, int, int] | None:
        reads.append(name)
        return section(name, relocated)

    monkeypatch.setattr(image, "section", counted)
    table = on_demand_table(image, use_cache=False)
    assert table is not None
    ranges = table.index_ranges()
    assert ranges is not None
    for position in range(0, len(ranges[0]), 7):
        table.function(position)
    assert reads.count(".eh_frame") == 1

"""The batch engine's flat copy of an on-demand table, brought up to date function by
function (:mod:`pysframe.unwind.flat_on_demand`), is the copy made afresh from the same
functions, and gives the whole generated table's rules in every made function; the flat
rows of made functions kept in the cache (:class:`~pysframe.unwind.flat_cache.FunctionRows`)
come back the same and are not used when the entry was tampered with."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

from conftest import FIXTURES  # noqa: E402
from pysframe.elf import ElfImage  # noqa: E402
from pysframe.format.constants import FDEType, PCType  # noqa: E402
from pysframe.format.decode import SFrameReader  # noqa: E402
from pysframe.format.lookup import SFrameLookup  # noqa: E402
from pysframe.generate.cache import table_for  # noqa: E402
from pysframe.generate.merged_index import own_number  # noqa: E402
from pysframe.generate.on_demand import OnDemandTable, on_demand_table  # noqa: E402
from pysframe.unwind import flat_cache  # noqa: E402
from pysframe.unwind.flat import KIND_MASK, PENDING, FlatTable, flatten, made_rows  # noqa: E402
from pysframe.unwind.flat_cache import FUNCTIONS_KIND, FunctionRows  # noqa: E402
from pysframe.unwind.flat_on_demand import OnDemandFlat  # noqa: E402

LIBC = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
#: A PIE with .plt and .plt.got: PLT functions (PCMASK) among the made ones.
LS = Path("/bin/ls")


def _table(path: Path) -> OnDemandTable:
    if not path.exists():
        pytest.fail(f"{path} is missing: the tests' system binaries are Debian's")
    table = on_demand_table(ElfImage(str(path)), use_cache=False)
    assert table is not None and table.index_ranges() is not None
    return table


def _same(one: FlatTable, other: FlatTable) -> None:
    assert np.array_equal(one.starts, other.starts)
    assert np.array_equal(one.words, other.words)
    assert [(m.start, m.end, m.rep_size, m.row_starts, m.words) for m in one.masks] == [
        (m.start, m.end, m.rep_size, m.row_starts, m.words) for m in other.masks]


@pytest.mark.parametrize("path", [LIBC, LS], ids=lambda p: p.name)
def test_updates_splice_what_a_fresh_copy_holds(path: Path) -> None:
    table = _table(path)
    assert table.index is not None
    starts, ends = table.index.starts, table.index.ends
    kept = OnDemandFlat(table, table.abi)
    pending = kept.update()
    assert len(pending.starts) == 2 * len(starts)
    assert int(np.count_nonzero(pending.words == PENDING)) == len(starts)
    rng = random.Random(29)
    plt = [p for p, ref in enumerate(table.index.refs) if ref < 0]
    rounds = [plt, *(rng.sample(range(len(starts)), min(40, len(starts))) for _ in range(5))]
    made: set[int] = set()
    for positions in rounds:
        for position in positions:
            table.ensure(starts[position])
        made.update(positions)
        spliced = kept.update()
        _same(spliced, OnDemandFlat(table, table.abi).update())
        # Nothing else moved: the functions not made yet are still pending.
        pending_starts = set(spliced.starts[spliced.words == PENDING].tolist())
        assert pending_starts == {starts[p] for p in range(len(starts)) if p not in made}
    if path == LS:
        assert any((spliced.words & np.uint64(3)) == KIND_MASK)  # PLT blocks spliced in
    # In every made function, the rules are the whole table's.
    whole_table = table_for(ElfImage(str(path)), use_cache=False)
    whole = flatten(SFrameLookup(SFrameReader(whole_table.data, whole_table.address)),
                    table.abi)
    pcs = np.array(sorted({pc for p in made for pc in range(starts[p], ends[p],
                                                            max(1, (ends[p] - starts[p]) // 7))}),
                   np.uint64)
    assert np.array_equal(spliced.lookup(pcs), whole.lookup(pcs))


@pytest.mark.parametrize("path", [LIBC, LS], ids=lambda p: p.name)
def test_words_now_are_what_a_spliced_copy_gives(path: Path) -> None:
    """Between updates, the words of pcs in functions made since the last one come from
    those functions' own rows (not spliced yet): what an update would then give, for pcs
    in made functions, in functions not made, at their edges, and outside every one."""
    table = _table(path)
    assert table.index is not None
    starts, ends = table.index.starts, table.index.ends
    kept = OnDemandFlat(table, table.abi)
    kept.update()
    rng = random.Random(31)
    plt = [p for p, ref in enumerate(table.index.refs) if ref < 0]
    probes = sorted({pc for p in range(len(starts)) for pc in (starts[p], ends[p] - 1, ends[p],
                                                                (starts[p] + ends[p]) // 2)}
                    | {0, starts[0] - 1, ends[-1] + 0x100})
    pcs = np.array(probes, np.uint64)
    for positions in [plt, *(rng.sample(range(len(starts)), min(40, len(starts)))
                             for _ in range(4))]:
        for position in positions:
            table.ensure(starts[position])
        now = kept.words_now(pcs)
        assert np.array_equal(now, OnDemandFlat(table, table.abi).update().lookup(pcs))
        if rng.random() < 0.5:
            kept.update()  # (some rounds spliced, some left for the next words_now)
    assert np.array_equal(kept.update().lookup(pcs),
                          OnDemandFlat(table, table.abi).update().lookup(pcs))


def test_a_table_turned_whole_gives_the_whole_rows() -> None:
    table = _table(LIBC)
    kept = OnDemandFlat(table, table.abi)
    kept.update()
    table._turn_whole()
    assert table.whole is not None
    _same(kept.update(), flatten(table.whole, table.abi))
    pcs = np.array(table.whole.reader.fde_start(0) + np.arange(0, 64, 4), np.uint64)
    assert np.array_equal(kept.words_now(pcs), flatten(table.whole, table.abi).lookup(pcs))


def _made_lookups(table: OnDemandTable, count: int) -> list[SFrameLookup]:
    assert table.index is not None
    for start in table.index.starts[:count]:
        table.ensure(start)
    return [lookup for _, lookup in table.made_after(0) if lookup is not None]


def test_function_rows_come_back_from_the_cache(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    table = _table(LIBC)
    lookups = _made_lookups(table, 60)
    assert len(lookups) > 20
    first = FunctionRows(b"libc-test-id", table.abi)
    flattened = [first.flat(lookup) for lookup in lookups]
    first.save()
    # PLT blocks (masks) are flattened at every run: only the others are kept.
    kept = [(lookup, made) for lookup, made in zip(lookups, flattened, strict=True)
            if not made.masks and not made.rare_all]
    assert len(kept) > 20

    def refused(_lookup: SFrameLookup, _abi: object) -> FlatTable:
        raise AssertionError("flattened again: the cache entry was not used")

    monkeypatch.setattr(flat_cache, "flatten", refused)
    warm = FunctionRows(b"libc-test-id", table.abi)
    for lookup, made in kept:
        _same(warm.flat(lookup), made)
    # A function whose table bytes differ is not found (flattened anew).
    other = SFrameLookup(SFrameReader(bytes(lookups[0].reader.data) + b"\0", 0))
    with pytest.raises(AssertionError, match="flattened again"):
        warm.flat(other)
    # A tampered entry is not used at all.
    entry = flat_cache.entry_path(FUNCTIONS_KIND, b"libc-test-id")
    assert entry is not None
    data = bytearray(Path(entry).read_bytes())
    data[len(data) // 2] ^= 0x40
    Path(entry).write_bytes(bytes(data))
    assert FunctionRows(b"libc-test-id", table.abi).rows == {}


def test_malformed_function_rows_are_refused() -> None:
    good = flat_cache._functions_encoded({
        b"d" * 16: (np.array([16, 20, 40], np.uint64), np.array([0, 1, 0], np.uint64))})
    assert len(flat_cache._functions_decoded(good)) == 1
    assert flat_cache._functions_decoded(good[:-8]) == {}  # short
    assert flat_cache._functions_decoded(good + b"\0" * 8) == {}  # trailing bytes
    unsorted = flat_cache._functions_encoded({
        b"d" * 16: (np.array([40, 20], np.uint64), np.array([0, 0], np.uint64))})
    assert flat_cache._functions_decoded(unsorted) == {}
    masked = flat_cache._functions_encoded({
        b"d" * 16: (np.array([16], np.uint64), np.array([KIND_MASK], np.uint64))})
    assert flat_cache._functions_decoded(masked) == {}
    assert flat_cache._functions_decoded(b"\x07\0\0\0\0\0\0\0") == {}  # another format


MADE_FROM = [LIBC, LS, FIXTURES / "2.46" / "aarch64" / "O2" / "prog",
             FIXTURES / "2.46" / "aarch64" / "O2" / "libt.so",
             FIXTURES / "2.46" / "s390x" / "O2" / "prog",
             FIXTURES / "real" / "lua-2.46-x86_64" / "lua"]


@pytest.mark.parametrize("path", MADE_FROM, ids=lambda path: "/".join(path.parts[-3:]))
def test_a_function_just_made_is_flattened_from_its_fde_as_decoded(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first run flattens each function it makes from the FDE it was encoded from
    (flat.made_rows), not from its bytes decoded again: the same rows, every function of
    each binary (own FDEs of a V3 .sframe merged, PLT blocks, x86-64, AArch64, s390x),
    row shapes met for the first time included (no shape known at the start)."""
    monkeypatch.setattr("pysframe.unwind.flat._WORDS", {})
    if not path.exists():
        pytest.fail(f"{path} is missing (../shared/fixtures, Debian's system binaries)")
    table = on_demand_table(ElfImage(str(path)), use_cache=False)
    if table is None or table.index_ranges() is None:
        pytest.fail(f"{path}: no on-demand table")
    ranges = table.index_ranges()
    assert ranges is not None
    from_model = ordinary = 0
    for position in range(len(ranges[0])):
        lookup = table.function(position)
        if lookup is None:
            continue
        assert table.index is not None
        # (the file's own functions, written from their stored rows: no FDE to read)
        assert (lookup.made_from is not None or own_number(table.index.refs[position])
                is not None)
        header = lookup.reader.header
        shape = (table.abi, lookup.reader.abi(), header.version, header.cfa_fixed_fp_offset,
                 header.cfa_fixed_ra_offset)
        read = made_rows(lookup, shape)  # (first: any shape of it met here first)
        decoded = SFrameLookup(SFrameReader(lookup.reader.data, 0))
        _same(flatten(lookup, table.abi), flatten(decoded, table.abi))
        assert flatten(lookup, table.abi).rare_all == flatten(decoded, table.abi).rare_all
        if read is not None:
            _same(read, flatten(decoded, table.abi))
        from_model += read is not None
        fde = lookup.made_from
        ordinary += (fde is not None and fde.fde_type == FDEType.DEFAULT
                     and fde.pc_type == PCType.INC and bool(fde.fres))
    assert from_model >= ordinary, "the rows were decoded again, not read"

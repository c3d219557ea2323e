"""AddressSpace.add and add_all against the plain model of mapping one range over others
(every older mapping cut around the new one): the same layouts, in any order of any
overlaps; and a million JIT code loads laid out in seconds (issue 25, item 7)."""

from __future__ import annotations

import random
import time

import pytest

from pysframe.records import replace
from pysframe.unwind.address_space import AddressSpace, Mapping


def model(layers: list[Mapping]) -> list[tuple[int, int, int, str]]:
    """Each layer mapped over the earlier ones, by scanning them all (the old add)."""
    kept: list[Mapping] = []
    for new in layers:
        if new.end <= new.start:
            continue
        out = []
        for m in kept:
            if m.end <= new.start or m.start >= new.end:
                out.append(m)
                continue
            if m.start < new.start:
                out.append(replace(m, end=new.start))
            if m.end > new.end:
                out.append(replace(m, start=new.end, pgoff=m.pgoff + (new.end - m.start)))
        out.append(new)
        kept = sorted(out, key=lambda m: m.start)
    return [(m.start, m.end, m.pgoff, m.filename) for m in kept]


def shape(space: AddressSpace) -> list[tuple[int, int, int, str]]:
    return [(m.start, m.end, m.pgoff, m.filename) for m in space.mappings]


def layers(rng: random.Random, count: int, span: int) -> list[Mapping]:
    found = []
    for index in range(count):
        start = rng.randrange(span)
        length = rng.choice([0, 1, rng.randrange(1, 40), rng.randrange(1, span // 2 + 2)])
        found.append(Mapping(start, start + length, rng.randrange(1000), f"m{index}", None))
    return found


@pytest.mark.parametrize("seed", range(40))
def test_add_and_add_all_equal_the_model(seed: int) -> None:
    rng = random.Random(seed)
    first, second = layers(rng, rng.randrange(1, 30), 400), layers(rng, rng.randrange(60, 200), 400)
    one_by_one, bulk = AddressSpace(), AddressSpace()
    for mapping in first:
        one_by_one.add(mapping)
        bulk.add(mapping)
    assert shape(one_by_one) == model(first)
    for mapping in second:
        one_by_one.add(mapping)
    bulk.add_all(second)
    expected = model(first + second)
    assert shape(one_by_one) == expected
    assert shape(bulk) == expected
    for address in range(-1, 402):
        found = bulk.find(address)
        owner = next((m for m in expected if m[0] <= address < m[1]), None)
        assert (found and found.filename) == (owner and owner[3])


def test_a_copy_keeps_its_layout_while_the_space_changes() -> None:
    space = AddressSpace()
    space.add(Mapping(0x1000, 0x3000, 0, "a", None))
    snapshot = space.copy()
    space.add(Mapping(0x2000, 0x2800, 0, "b", None))
    assert shape(snapshot) == [(0x1000, 0x3000, 0, "a")]
    assert snapshot.find(0x2100).filename == "a" and space.find(0x2100).filename == "b"
    assert snapshot.version != space.version


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_million_code_loads_in_seconds(shuffled: bool) -> None:
    """A JIT's code loads one after the other (rising addresses) or all at once from a
    jitdump in any order, some over earlier code at the same address (code freed and
    reused): each in O(log n). The old add took minutes for 30,000."""
    count = 1_000_000
    addresses = [0x7F00_0000_0000 + 64 * (k % (count - 1000)) for k in range(count)]
    if shuffled:
        random.Random(7).shuffle(addresses)
    loads = [Mapping(a, a + 48, 0, "[jit]", None) for a in addresses]
    started = time.process_time()
    space = AddressSpace()
    if shuffled:
        space.add_all(loads)
    else:
        for mapping in loads:
            space.add(mapping)
    seconds = time.process_time() - started
    assert len(space.mappings) == count - 1000
    assert space.find(addresses[-1] + 10) is loads[-1]
    assert seconds < 30, seconds  # a bound far from the measured (~2-6 s), not a benchmark


def test_overlapping_is_the_mappings_a_range_touches() -> None:
    """The mappings that overlap [start, end), in address order, against a scan of all."""
    rng = random.Random(7)
    space = AddressSpace()
    for mapping in layers(rng, 200, 1 << 16):
        space.add(mapping)
    for _ in range(500):
        start = rng.randrange(1 << 16)
        end = start + rng.randrange(1, 1 << 12)
        assert space.overlapping(start, end) == [
            m for m in space.mappings if m.start < end and start < m.end]

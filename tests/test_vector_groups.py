"""session.vector: a chunk's samples described once per thread and grouped by snapshot
with numpy (was a dict lookup and two appends per sample: ~1.5 ms of each 4,096-sample
chunk). The text of recordings with several processes is held to perf's elsewhere
(test_script_vector, test_script_system_wide); here the grouping's own rules."""

from __future__ import annotations

import numpy as np

from pysframe.session.vector import _by_space
from pysframe.unwind.address_space import AddressSpace


def _spaces(count: int) -> list[AddressSpace]:
    return [AddressSpace() for _ in range(count)]


def test_samples_grouped_by_snapshot_in_order_of_first_sample() -> None:
    a, b, c = _spaces(3)
    # Two threads share snapshot b (one process), one thread each for a and c.
    described = [("x", c), ("y", b), ("z", a), ("w", b)]
    code = np.array([0, 1, 3, 2, 1, 0, 3, 2, 2], np.int64)
    taken = np.ones(len(code), np.bool_)
    groups = _by_space(code, described, taken)
    assert [space for space, _ in groups] == [c, b, a]
    assert [rows.tolist() for _, rows in groups] == [[0, 5], [1, 2, 4, 6], [3, 7, 8]]


def test_samples_not_taken_are_left_out_and_empty_groups_dropped() -> None:
    a, b = _spaces(2)
    described = [("x", a), ("y", b)]
    code = np.array([0, 1, 0, 1], np.int64)
    taken = np.array([True, False, True, False])
    groups = _by_space(code, described, taken)
    assert [(space, rows.tolist()) for space, rows in groups] == [(a, [0, 2])]
    assert _by_space(code, described, np.zeros(4, np.bool_)) == []


def test_one_snapshot_takes_every_sample_without_sorting() -> None:
    (a,) = _spaces(1)
    described = [("x", a), ("y", a)]
    code = np.array([1, 0, 1], np.int64)
    groups = _by_space(code, described, np.ones(3, np.bool_))
    assert [(space, rows.tolist()) for space, rows in groups] == [(a, [0, 1, 2])]

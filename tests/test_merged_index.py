"""The merge's test of a function added to a file's own FDEs (it must not reach past
them where it overlaps them: :func:`pysframe.generate.merged_index.merged_entries`) gives,
with its shortcut for a function inside one own FDE, what overlapping and not lying
inside the FDEs' union say, on made ranges that touch, nest, straddle and run past."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pysframe.generate.merged_index import _inside, _reaches_past, overlaps

#: Ranges on a small grid, so that edges meet often.
_EDGES = st.lists(st.integers(0, 60), min_size=0, max_size=16, unique=True).map(sorted)


def _apart(edges: list[int]) -> list[tuple[int, int, int]]:
    """Sorted ranges apart from each other (they may touch), from sorted edges."""
    return [(edges[k], edges[k + 1], k) for k in range(0, len(edges) - 1, 2)]


@settings(max_examples=600, deadline=None)
@given(_EDGES, st.integers(0, 64), st.integers(0, 12))
def test_reaching_past_is_overlapping_and_not_inside(edges: list[int], start: int,
                                                     size: int) -> None:
    ranges = _apart(edges)
    starts = [low for low, _, _ in ranges]
    entry = (start, start + size, -1)
    expected = overlaps(entry, ranges, starts) and not _inside(entry, ranges)
    assert _reaches_past(entry, ranges, starts) == expected


def test_the_shortcut_and_the_walk_on_hand_made_cases() -> None:
    ranges = [(10, 20, 0), (20, 30, 1), (40, 50, 2)]
    starts = [10, 20, 40]
    assert not _reaches_past((12, 18, -1), ranges, starts)  # inside one
    assert not _reaches_past((15, 28, -1), ranges, starts)  # inside two that touch
    assert _reaches_past((25, 45, -1), ranges, starts)      # across a gap
    assert not _reaches_past((31, 39, -1), ranges, starts)  # in the gap: no overlap
    assert _reaches_past((5, 15, -1), ranges, starts)       # starts before them

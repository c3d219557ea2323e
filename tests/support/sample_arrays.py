"""Two :class:`~pysframe.sources.perf_arrays.SampleArrays` compared field by field."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pysframe.sources import perf_scan
from pysframe.sources.perf_arrays import SampleArrays


def record_joins(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every recording's walk split in two processes (whatever its size); the list gets
    whether each split's halves were joined."""
    monkeypatch.setattr(perf_scan, "SPLIT_FROM", 0)
    joins: list[bool] = []
    joined = perf_scan._joined

    def spy(walk: Any, found: Any) -> bool:
        joins.append(joined(walk, found))
        return joins[-1]

    monkeypatch.setattr(perf_scan, "_joined", spy)
    return joins


def assert_same(split: SampleArrays | None, serial: SampleArrays | None) -> None:
    assert (split is None) == (serial is None)
    if split is None or serial is None:
        return
    for name in SampleArrays.__record_fields__:
        mine, theirs = getattr(split, name), getattr(serial, name)
        if name == "events":
            assert [(n, r.offset, type(r)) for n, r in mine] == [
                (n, r.offset, type(r)) for n, r in theirs]
            assert mine == theirs
        elif name == "attr":
            assert mine == theirs
        else:
            assert mine.dtype == theirs.dtype, name
            assert np.array_equal(mine, theirs), name

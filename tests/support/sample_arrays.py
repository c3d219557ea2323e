"""Two :class:`~pysframe.sources.perf_arrays.SampleArrays` compared field by field."""

from __future__ import annotations

import numpy as np

from pysframe.sources.perf_arrays import SampleArrays


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

"""The array scan of a dwarf recording gives what the record-by-record path gives: the
same samples in the same (perf's) order with the same fields, and the other records at
the same places."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, REPO
from pysframe.sources.perf_data import Sample, open_perf_data
from pysframe.sources.perf_order import time_ordered

np = pytest.importorskip("numpy")
from pysframe.sources.perf_arrays import sample_arrays  # noqa: E402

RECORDINGS = [*sorted(FIXTURES.glob("real/lua-*/perf*.data")),
              *sorted((REPO / "tests" / "data").glob("*.perf.data"))]


@pytest.mark.skipif(not RECORDINGS, reason="no recordings here")
@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_arrays_match_the_records(path: Path) -> None:
    with open_perf_data(str(path)) as data:
        arrays = sample_arrays(data)
        records = list(time_ordered(data))
        if arrays is None:
            # Declined: only shapes it does not take (compressed records, no stack copies).
            assert data.inflated or not any(isinstance(r, Sample) and r.stack is not None
                                            for r in records)
            return
        if path.parent.name.startswith("lua"):
            # The order is perf's, not the file's (this recording is not in time order).
            assert sorted(arrays.offset.tolist()) != arrays.offset.tolist()
        samples = [r for r in records if isinstance(r, Sample)]
        assert arrays.offset.tolist() == [s.offset for s in samples]
        assert arrays.tid.tolist() == [s.tid for s in samples]
        assert arrays.pid.tolist() == [s.pid for s in samples]
        assert arrays.time.tolist() == [s.time for s in samples]
        assert arrays.period.tolist() == [s.period for s in samples]
        assert arrays.cpu.tolist() == [s.cpu for s in samples]
        assert arrays.ip.tolist() == [s.ip for s in samples]
        assert arrays.stack_len.tolist() == [len(s.stack) if s.stack and s.regs else 0
                                             for s in samples]
        with_stack = [i for i, s in enumerate(samples) if s.stack and s.regs]
        assert [int(arrays.stack_pos[i]) for i in with_stack] == [
            samples[i].stack_offset for i in with_stack]
        events, position = [], 0
        for record in records:
            if isinstance(record, Sample):
                position += 1
            else:
                events.append((position, record.offset))
        assert [(before, record.offset) for before, record in arrays.events] == events

"""A ``script -j`` worker only follows the samples before its share
(:meth:`pysframe.sources.perf_data.PerfData.follow`): each read as its place and time,
checked as a whole read checks it, so a malformed one fails (and is skipped) as before;
and the worker's share is what a whole read of every sample gives, a sample read while
following but delivered in the share (time order holds records read ahead) read whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.perf_rewrite import without_rounds
from tests.test_sample_parser import _outcome, records

from conftest import FIXTURES
from pysframe.session.perf import PerfUnwinder
from pysframe.sources.perf_data import PerfData, open_perf_data
from pysframe.sources.perf_records import (
    RECORD_SAMPLE,
    EventAttr,
    Followed,
    RecordParser,
    sample_parser,
)

LUA = FIXTURES / "real" / "lua-2.46-x86_64"


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.sampled_from([0, 1 << 40]))
def test_a_followed_sample_is_checked_as_a_whole_read(drawn: tuple[EventAttr, bytes, int],
                                                      base: int) -> None:
    """Followed where the layout-once parse reads a sample (its time, where it is), else
    what a whole read gives (the general parse: a sample, or its error); inflated records
    (``base``) are always read whole."""
    attr, data, size = drawn
    buffer = memoryview(data)
    whole = _outcome(lambda: RecordParser([attr]).parse(buffer, RECORD_SAMPLE, 2, 0, size,
                                                        base))
    layout = sample_parser(attr)
    assert layout is not None
    laid_out = layout[0](buffer, 2, 0, size, base)
    following = RecordParser([attr])
    following.follow(True)
    followed = _outcome(lambda: following.parse(buffer, RECORD_SAMPLE, 2, 0, size, base))
    if laid_out is not None and not base:
        assert whole == ("sample", laid_out)
        assert followed == ("sample", Followed(0, laid_out.time))
    else:
        assert followed == whole


def _everything(path: Path = LUA / "perf.data") -> list[tuple[int, int, tuple[int, ...], str]]:
    with open_perf_data(str(path)) as data:
        everything = _chains(PerfUnwinder(data, [str(LUA)]).samples())
    assert len(everything) == 3171
    return everything


def _chains(samples: Any) -> list[tuple[int, int, tuple[int, ...], str]]:
    return [(u.sample.offset, u.sample.time, tuple(u.unwind.pcs), u.unwind.stop.value)
            for u in samples]


@pytest.mark.parametrize("first", [1, 1600, 3170])
def test_a_share_after_followed_samples_is_the_whole_reads(first: int,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    everything = _everything()
    read_again: list[int] = []
    record_at = PerfData.record_at

    def counted(self: PerfData, location: int, spill: Any) -> Any:
        read_again.append(location)
        return record_at(self, location, spill)

    monkeypatch.setattr(PerfData, "record_at", counted)
    with open_perf_data(str(LUA / "perf.data")) as data:
        unwinder = PerfUnwinder(data, [str(LUA)])
        share = _chains(unwinder.samples(first, None, unwinder.from_first_sample()))
        assert data._parser is not None and not data._parser.following  # (off again)
    assert share == everything[first:]
    # Time order delivers records read up to a round ahead: past the first round (read
    # whole before the share began), some samples read while following were in the
    # share, and were read whole then.
    assert bool(read_again) == (first > 1)


def test_followed_samples_in_an_indexed_order(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A recording without FINISHED_ROUND, read past what streaming holds: the order is
    an index, its records read again by place while following (as Followed); the share
    is the whole reads' all the same."""
    import pysframe.sources.perf_order as order

    bare = tmp_path / "bare.data"
    bare.write_bytes(without_rounds((LUA / "perf.data").read_bytes()))
    everything = _everything()
    monkeypatch.setattr(order, "PENDING_BYTES", 200_000)
    monkeypatch.setattr(order, "PENDING_RECORDS", 300)
    indexed: list[int] = []
    read_in_order = order._read_in_order

    def counted(*args: Any) -> Any:
        indexed.append(1)
        return read_in_order(*args)

    monkeypatch.setattr(order, "_read_in_order", counted)
    with open_perf_data(str(bare)) as data:
        unwinder = PerfUnwinder(data, [str(LUA)])
        share = _chains(unwinder.samples(1600, None, unwinder.from_first_sample()))
    assert indexed and share == everything[1600:]

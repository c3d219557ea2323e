"""The rows ``sframe record`` loads into the walker's map (no root needed): PLT blocks
written out as plain rows give every pc the rule the batch tracer's lookup gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from pysframe.format.constants import ABI
from pysframe.record.tables import walker_rows
from pysframe.unwind.flat import KIND_MASK, flatten
from pysframe.unwind.modules import BinaryFinder

PROGRAMS = sorted(FIXTURES.glob("2.4*/x86_64/*/prog"))


@pytest.mark.skipif(not PROGRAMS, reason="no fixture binaries (../shared/fixtures) here")
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda path: "/".join(path.parts[-4:-1]))
def test_every_pc_gets_the_batch_lookups_rule(path: Path) -> None:
    module = BinaryFinder().module(str(path), None, 0, 0)
    assert module is not None and module.lookup is not None
    flat = flatten(module.lookup, ABI.AMD64_ENDIAN_LITTLE)
    assert flat.masks  # the PLT blocks of these programs are PCMASK functions
    starts, words = walker_rows(flat)
    assert not np.any((words & np.uint64(3)) == KIND_MASK)  # no row left for the walker to stop at
    assert np.all(np.diff(starts.astype(np.int64)) >= 0)  # still sorted: one binary search
    pcs = np.arange(int(flat.starts[0]) - 16, int(flat.starts[-1]) + 16, dtype=np.uint64)
    index = np.searchsorted(starts, pcs, side="right").astype(np.int64) - 1
    found = np.where(index >= 0, words[np.maximum(index, 0)], np.uint64(0))
    assert np.array_equal(found, flat.lookup(pcs))

"""pysframe.heap: glibc keeps the memory a chunk frees for the next chunk (no new page
faults for arrays of the same size), measured in a child process's own fault count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.perf_text import held_to_perfs_text

from conftest import FIXTURES
from pysframe.heap import glibc

#: A child makes 20 "chunks", each allocating five arrays of 0.5-4 MiB (3,456 pages in
#: all) and freeing them together, as a chunk of the batch pipeline does, and prints the
#: minor faults they cost it.
_CHILD = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from pysframe.heap import keep_freed_memory
    assert keep_freed_memory()
SIZES = [1 << 19, 1 << 18, 1 << 16, 3 << 17, 1 << 19]
def chunk():
    arrays = [np.ones(n) for n in SIZES]
    return sum(a.sum() for a in arrays)
chunk()  # (the first chunk's pages, and numpy's own first-use allocations, not counted)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    chunk()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def test_this_machine_runs_glibc() -> None:
    # (CI's machine does; elsewhere the tuning is skipped, which the next test covers)
    assert glibc()


def test_freed_arrays_are_reused_not_faulted_in_again() -> None:
    plain, kept = faults("plain"), faults("keep")
    # Without it glibc hands most of each chunk's memory back (its own mappings, the
    # heap's top trimmed) and faults it in again: here 38,000 faults for 20 chunks.
    assert plain >= 20 * 1000, plain
    # With it the first chunk's pages serve the next twenty.
    assert kept < 1000, kept


def test_not_glibc_leaves_the_allocator_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import pysframe.heap as heap

    monkeypatch.setattr(heap, "glibc", lambda: False)
    assert heap.keep_freed_memory() is False


def test_the_batch_pipeline_sets_it_and_the_scalar_path_does_not(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``sframe script`` tunes the allocator on the batch path only (the sample-by-sample
    path makes no arrays of that size); the text is perf's either way."""
    import pysframe.heap as heap
    from pysframe.cli.script import ENGINE_VARIABLE, run_script

    recording = FIXTURES / "real" / "lua-2.46-x86_64"
    calls: list[str] = []
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: calls.append("kept") or True)
    for engine in ("scalar", "vector"):
        monkeypatch.setenv(ENGINE_VARIABLE, engine)
        output = tmp_path / f"{engine}.txt"
        run_script(str(recording / "perf.data"), binaries=[str(recording)], output=str(output),
                   show_stops=False, report=lambda message: None, jobs=1)
        assert calls == ([] if engine == "scalar" else ["kept"])
        held_to_perfs_text(recording / "perf.data", output.read_bytes())

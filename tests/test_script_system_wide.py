"""A system-wide ``--call-graph dwarf`` recording (``perf record -a``) has two events: the
sampled one and the dummy event perf adds for the side band. The batch pipeline takes it
(before, any second event sent the whole recording sample by sample: a warm ``script`` of
one took 3.4 s where perf took 1.5 s), and gives what the sample-by-sample path gives,
byte for byte, with perf's own sample lines. A recording with two sampled events, or
with a sample naming no event, is left to the sample-by-sample path, which names each
sample's event as perf does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_perf, unavailable
from tests.support.parity import as_perf61

np = pytest.importorskip("numpy")

from pysframe.sources.perf_arrays import sample_arrays  # noqa: E402
from pysframe.sources.perf_data import Mmap, Sample, open_perf_data  # noqa: E402
from pysframe.sources.perf_order import time_ordered  # noqa: E402
from pysframe.sources.perf_records import (  # noqa: E402
    SAMPLE_ADDR,
    SAMPLE_IDENTIFIER,
    SAMPLE_IP,
    SAMPLE_TID,
    SAMPLE_TIME,
)

SFRAME = [sys.executable, "-m", "pysframe"]
#: Busy for ~0.3 s in a few processes (a shell loop, then date and ls) while perf samples
#: every CPU.
WORKLOAD = ["sh", "-c", "i=0; while [ $i -lt 60000 ]; do i=$((i+1)); done; date; ls /"]


def _record(directory: Path, *events: str) -> Path:
    perf = need_perf()
    data = directory / "system.data"
    chosen = [word for event in events for word in ("-e", event)]
    made = subprocess.run([perf, "record", "-q", "-a", "-F", "999", *chosen, "--call-graph",
                           "dwarf,4096", "-o", str(data), "--", *WORKLOAD],
                          capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        unavailable(f"perf cannot record system-wide here: {made.stderr.strip()[-200:]}")
    return data


def _script(data: Path, cache: Path, engine: str | None) -> str:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    if engine is not None:
        env["PYSFRAME_ENGINE"] = engine
    done = subprocess.run([*SFRAME, "script", "-i", str(data)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-500:]
    return done.stdout


def _headers(text: str) -> list[str]:
    """The sample lines."""
    return [line for line in text.splitlines() if line and not line[0].isspace()]


@pytest.fixture(scope="module")
def system_wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _record(tmp_path_factory.mktemp("system"), "cpu-clock")


def test_the_arrays_take_a_recording_with_perfs_dummy_event(system_wide: Path) -> None:
    with open_perf_data(str(system_wide)) as data:
        assert len(data.attrs) >= 2, "perf -a added no second event: nothing is tested"
        arrays = sample_arrays(data)
        assert arrays is not None
        samples = [r for r in time_ordered(data) if isinstance(r, Sample)]
    assert arrays.attr is data.attrs[0]
    assert arrays.offset.tolist() == [s.offset for s in samples]
    assert arrays.tid.tolist() == [s.tid for s in samples]
    assert arrays.time.tolist() == [s.time for s in samples]
    assert arrays.period.tolist() == [s.period for s in samples]
    assert arrays.cpu.tolist() == [s.cpu for s in samples]


def test_batch_and_sample_by_sample_agree_with_perfs_samples(system_wide: Path,
                                                             tmp_path: Path) -> None:
    batch = _script(system_wide, tmp_path / "cache", "vector")
    default = _script(system_wide, tmp_path / "cache", None)
    scalar = _script(system_wide, tmp_path / "cache", "scalar")
    assert batch == scalar
    assert default == scalar
    theirs = _headers(_perf_script(system_wide))
    assert as_perf61(_headers(scalar), theirs) == theirs  # every sample, as perf


@pytest.mark.parametrize("step", [None, 4096], ids=["default-step", "a-step-a-page"])
@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_sample_naming_no_event_is_left_to_the_record_path(
        system_wide: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str,
        step: int | None) -> None:
    """Wherever the sample is: the scan gathers the samples' fields as it passes them (one
    release step at a time: a page here, so nearly every sample is its own gather), and one
    naming no event, in the first gather or a later one, leaves the whole recording to the
    record path; so does the walk split between two processes (the sample in either
    half)."""
    import pysframe.sources.perf_scan as perf_scan

    if step is not None:
        monkeypatch.setattr(perf_scan, "RELEASE_STEP", step)
    damaged = tmp_path / "damaged.data"
    raw = bytearray(system_wide.read_bytes())
    with open_perf_data(str(system_wide)) as data:
        arrays = sample_arrays(data)
        assert arrays is not None and len(arrays.offset) > 2
        known = {identifier for attr in data.attrs for identifier in attr.ids}
        # The id: IDENTIFIER (the first word), or ID after IP, TID, TIME (perf 6.1 -a).
        sample_type = data.attrs[0].sample_type
        word = 1 if sample_type & SAMPLE_IDENTIFIER else 1 + (
            sample_type & (SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR)).bit_count()
        in_file = sorted(arrays.offset.tolist())
        chosen = {"first": 0, "middle": len(in_file) // 2, "last": len(in_file) - 1}[which]
        at = in_file[chosen] + 8 * word
    unknown = max(known) + 1000
    assert int.from_bytes(raw[at:at + 8], "little") in known
    raw[at:at + 8] = unknown.to_bytes(8, "little")
    damaged.write_bytes(bytes(raw))
    with open_perf_data(str(damaged)) as data:
        assert sample_arrays(data) is None
    monkeypatch.setattr(perf_scan, "SPLIT_FROM", 0)
    with open_perf_data(str(damaged)) as data:
        assert sample_arrays(data, split=True) is None
    if step is None and which == "middle":
        assert _script(damaged, tmp_path / "cache", None) == _script(
            damaged, tmp_path / "cache", "scalar")


def test_the_arrays_are_the_same_whatever_the_release_step(
        system_wide: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gathered a page at a time (nearly every sample its own gather) or 16 MB at a time:
    the same arrays."""
    import pysframe.sources.perf_scan as perf_scan

    with open_perf_data(str(system_wide)) as data:
        whole = sample_arrays(data)
    monkeypatch.setattr(perf_scan, "RELEASE_STEP", 4096)
    with open_perf_data(str(system_wide)) as data:
        paged = sample_arrays(data)
    assert whole is not None and paged is not None
    for name in ("offset", "misc", "size", "pid", "tid", "time", "cpu", "period", "ip",
                 "chain_count", "chain_pos", "regs_pos", "stack_pos", "stack_len"):
        assert getattr(whole, name).tolist() == getattr(paged, name).tolist(), name
    assert [(at, record.offset) for at, record in whole.events] == [
        (at, record.offset) for at, record in paged.events]


def _perf_script(data: Path) -> str:
    done = subprocess.run([need_perf(), "script", "--no-inline", "-i", str(data)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-500:]
    return done.stdout


def test_two_sampled_events_are_told_apart_as_perf_does(tmp_path: Path) -> None:
    # Their samples carry ID, not IDENTIFIER: each sample's event is the one its ID names
    # (before, every sample was named after the first event), and perf aligns the names
    # to the longest ("  cpu-clock:" beside "task-clock:").
    data_path = _record(tmp_path, "cpu-clock", "task-clock")
    with open_perf_data(str(data_path)) as data:
        assert len({attr.config for attr in data.attrs if attr.ids}) >= 2
        assert sample_arrays(data) is None
    text = _script(data_path, tmp_path / "cache", None)
    names = {line.split(":")[-2].split()[-1] for line in _headers(text)}
    assert {"cpu-clock", "task-clock"} <= names
    theirs = _headers(_perf_script(data_path))
    assert as_perf61(_headers(text), theirs) == theirs


def test_workers_write_no_vdso_copies(system_wide: Path, tmp_path: Path) -> None:
    """A recording made on the running kernel names its vDSO: each process that meets the
    mapping reads the running one from its own memory and writes no file (a copy in a
    private temporary directory, removed at exit, cost ~1 ms of every run; before that, a
    -j worker, ending with os._exit, left one in /tmp at every run). Chunks of 32 samples,
    so that a recording of a few hundred is split between two processes."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), TMPDIR=str(temporary),
               PYSFRAME_ENGINE="vector")
    program = ("import sys\nimport pysframe.session.vector as vector\n"
               "from pysframe.cli.entry import main\nvector.CHUNK = 32\n"
               "sys.argv = ['sframe', 'script', '-j', '2', '-i', sys.argv[1]]\nmain()\n")
    done = subprocess.run([sys.executable, "-c", program, str(system_wide)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-500:]
    with open_perf_data(str(system_wide)) as data:
        records = list(data.records())
    assert any(isinstance(record, Mmap) and record.filename == "[vdso]"
               for record in records), "no vDSO mapped: nothing is tested"
    assert done.stdout.count("\n\n") == sum(isinstance(record, Sample) for record in records)
    assert list(temporary.iterdir()) == []


def test_the_walk_split_between_two_processes_gives_the_same_arrays(
        system_wide: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two events, side-band records all through the file (the child's half parsed here from
    their offsets): the same arrays and events as the serial walk, the halves joined."""
    from tests.support.sample_arrays import assert_same, record_joins

    with open_perf_data(str(system_wide)) as data:
        serial = sample_arrays(data)
    joined = record_joins(monkeypatch)
    with open_perf_data(str(system_wide)) as data:
        split = sample_arrays(data, split=True)
    assert serial is not None and joined == [True]
    assert_same(split, serial)

"""``sframe script`` makes the binaries' tables ready before unwinding (a first run's whole
tables generated in parallel) from the files the recording maps first. The batch pipeline
takes them from the mappings its walk read, rather than reading the start of the records
once more before the walk (~10 ms of every run of the deep bench recording); the
sample-by-sample path reads them as before. Both ask for the same files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.perf_text import held_to_perfs_text

from conftest import FIXTURES


def test_the_batch_pipeline_takes_the_files_from_its_walk(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import pysframe.session.perf as perf_session
    from pysframe.cli.script import ENGINE_VARIABLE, run_script

    pytest.importorskip("numpy")
    recording = FIXTURES / "real" / "lua-2.46-x86_64"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    asked: list[tuple[bool, list[tuple[str, bytes | None]]]] = []
    real = perf_session.recorded_files

    def noting(data: Any, records: Any = None) -> list[tuple[str, bytes | None]]:
        files = real(data, records)
        asked.append((records is None, files))
        return files

    monkeypatch.setattr(perf_session, "recorded_files", noting)
    for engine in ("scalar", "vector"):
        monkeypatch.setenv(ENGINE_VARIABLE, engine)
        output = tmp_path / f"{engine}.txt"
        run_script(str(recording / "perf.data"), binaries=[str(recording)], output=str(output),
                   show_stops=False, report=lambda message: None, jobs=1)
        held_to_perfs_text(recording / "perf.data", output.read_bytes())
    (scalar_read, scalar_files), (batch_read, batch_files) = asked
    assert scalar_read and not batch_read  # (the batch pipeline read no record for them)
    assert batch_files == scalar_files and any(
        path.endswith("/lua") for path, _ in batch_files)


def test_records_already_read_give_what_the_start_of_the_file_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The files from every record, in any order, are the ones the start of the records
    gives: mappings past the limit are left out, the others taken in file order."""
    import pysframe.session.perf as perf_session
    from pysframe.session.perf import recorded_files
    from pysframe.sources.perf_data import Mmap, open_perf_data

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    with open_perf_data(str(path)) as data:
        every = list(data.records())
        assert recorded_files(data, reversed(every)) == recorded_files(data)
        # A limit before the first mapping: only the build-id table's files, both ways.
        first = min(record.offset for record in every if isinstance(record, Mmap))
        monkeypatch.setattr(perf_session, "SCAN_LIMIT", first - data.data_offset)
        assert recorded_files(data, reversed(every)) == recorded_files(data) == [
            (entry.filename, entry.build_id) for entry in data.build_ids()
            if not entry.kernel and entry.filename.startswith("/")
            and not entry.filename.endswith(".ko")]

"""``sframe script`` makes the binaries' tables ready before unwinding (a first run's whole
tables generated in parallel) from the files the recording maps first. The batch pipeline
takes them from the mappings its walk read, rather than reading the start of the records
once more before the walk (~10 ms of every run of the deep bench recording). The
sample-by-sample path asks for the build-id table's files first, and reads the start of
the records for the others only when tables were generated for those (~3 ms of a warm run
of the Lua recording): the text is the same either way."""

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
    asked: list[tuple[str, list[tuple[str, bytes | None]]]] = []
    real = perf_session.recorded_files

    def noting(data: Any, records: Any = None) -> list[tuple[str, bytes | None]]:
        files = real(data, records)
        asked.append(("start" if records is None else "given", files))
        return files

    monkeypatch.setattr(perf_session, "recorded_files", noting)
    for engine in ("scalar", "vector"):
        monkeypatch.setenv(ENGINE_VARIABLE, engine)
        output = tmp_path / f"{engine}.txt"
        run_script(str(recording / "perf.data"), binaries=[str(recording)], output=str(output),
                   show_stops=False, report=lambda message: None, jobs=1)
        held_to_perfs_text(recording / "perf.data", output.read_bytes())
    # The sample-by-sample path: the build-id table's files (no record given), and no
    # reading of the records: a first run of the fixture makes every table a function at
    # a time. The batch pipeline: the files of the records its walk read.
    (scalar_how, named), (batch_how, batch_files) = asked
    assert scalar_how == batch_how == "given"
    assert named == [(entry.filename, entry.build_id) for entry in _build_ids(recording)
                     if not entry.kernel and entry.filename.startswith("/")]
    assert set(named) < set(batch_files) and any(
        path.endswith("/lua") for path, _ in batch_files)


def _build_ids(recording: Path) -> list[Any]:
    from pysframe.sources.perf_data import open_perf_data

    with open_perf_data(str(recording / "perf.data")) as data:
        return list(data.build_ids())


@pytest.mark.parametrize("generated", [0, 2])
def test_the_start_is_read_when_the_named_files_had_tables_generated(
        monkeypatch: pytest.MonkeyPatch, generated: int) -> None:
    """The start of the records is read for the other mappings when the warm-up generated
    the build-id table's files' tables (a first run with whole tables to make), and not
    otherwise."""
    import pysframe.session.perf as perf_session
    from pysframe.cli.script import _tables_ready
    from pysframe.sources.perf_data import open_perf_data

    asked: list[list[tuple[str, bytes | None]]] = []

    class Finder:
        def prefetch(self, files: list[tuple[str, bytes | None]], *, progress: bool) -> int:
            asked.append(files)
            return generated if len(asked) == 1 else 0

    class Unwinder:
        finder = Finder()

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
    with open_perf_data(str(path)) as data:
        _tables_ready(data, Unwinder())
        walked = perf_session.recorded_files(data)
        named = [(entry.filename, entry.build_id) for entry in data.build_ids()
                 if not entry.kernel and entry.filename.startswith("/")]
    assert asked == ([named, walked] if generated else [named])
    assert len(walked) > len(named)  # (libm: mapped, no sample in it)


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

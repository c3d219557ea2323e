"""First run (issue 12, item 8): the tables a recording's binaries lack are generated in
parallel before unwinding, cached by build id, and are the tables a run without the
prefetch would use."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, needs_fixtures
from pysframe.elf import ElfImage
from pysframe.generate.cache import cached_table, sframe_for
from pysframe.session.tables import GeneratedTables
from pysframe.unwind.modules import BinaryFinder

BINARIES = [FIXTURES / "2.44" / "x86_64" / "O2" / "prog",  # version 2: whole merges
            FIXTURES / "2.44" / "x86_64" / "O2" / "libt.so",
            FIXTURES / "2.44" / "x86_64" / "O0" / "prog"]


@needs_fixtures
def test_prefetch_fills_the_cache_with_the_tables_module_would_make(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    images = [ElfImage(str(path)) for path in BINARIES]
    assert all(cached_table(image) is None for image in images)
    finder = BinaryFinder(tables=GeneratedTables())
    files = [(str(path), image.build_id()) for path, image in zip(BINARIES, images, strict=True)]
    assert finder.prefetch(files, progress=True, workers=2) == 3
    capsys.readouterr()  # the progress bar (rich), removed when done
    for image in images:
        table = cached_table(image)
        assert table is not None
        assert table == sframe_for(image, use_cache=False)[0]
    for (path, build_id), image in zip(files, images, strict=True):
        module = finder.module(path, build_id, 0, 0)
        assert module is not None and module.lookup is not None
        assert module.lookup.reader.data == sframe_for(image, use_cache=False)[0]
    # A second prefetch (warm) generates nothing.
    assert BinaryFinder(tables=GeneratedTables()).prefetch(files, workers=2) == 0


def test_prefetch_leaves_unreadable_files_to_module(tmp_path: object,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from pysframe.errors import Problems

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bad = Path(str(tmp_path)) / "not-elf"
    bad.write_bytes(b"\x7fELF" + bytes(60))
    problems = Problems()
    finder = BinaryFinder(problems=problems, tables=GeneratedTables())
    assert finder.prefetch([(str(bad), None), ("/no/such/file", None)], workers=2) == 0
    assert not problems  # reported by module(), for a file the samples need
    assert finder.module(str(bad), None, 0, 0) is None
    assert problems

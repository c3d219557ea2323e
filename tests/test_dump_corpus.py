"""The corpus runner: our dump of every fixture ELF file against objdump's own output.

In the manner of pyelftools' readelf test runner: every ``<file>.objdump.txt``
in ../shared/fixtures (made by the objdump of the binutils that built the
file) is compared with ``sframe dump <file>``, byte for byte, and each section
is re-encoded from the object model to the identical bytes.
"""

from __future__ import annotations

import difflib
import io
import os
from contextlib import redirect_stdout
from typing import Any

import pytest

from conftest import FIXTURES, manifest_entries, needs_fixtures
from pysframe.cli.dump import load_elf, run_dump
from pysframe.format.decode import decode
from pysframe.format.encode import encode

ENTRIES = manifest_entries()


def _ids(entry: dict[str, Any]) -> str:
    return str(entry["path"])


def _dump(paths: list[str]) -> str:
    out = io.StringIO()
    errors: list[str] = []
    with redirect_stdout(out):
        status = run_dump(paths, as_json=False, raw=False, address=0, section_name=".sframe",
                          report=errors.append)
    assert status == 0, errors
    return out.getvalue()


@needs_fixtures
@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_dump_matches_objdump(entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # objdump was run inside the file's directory with the bare file name.
    path = FIXTURES / entry["path"]
    monkeypatch.chdir(path.parent)
    expected = (FIXTURES / entry["sframe_dump"]).read_text()
    got = _dump([path.name])
    if got != expected:
        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), got.splitlines(True),
                                                 "objdump", "sframe", n=1))[:40])
        pytest.fail(f"dump differs from objdump for {entry['path']}:\n{diff}")


@needs_fixtures
@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_section_round_trips_byte_exact(entry: dict[str, Any]) -> None:
    path = FIXTURES / entry["path"]
    _, sections = load_elf(str(path), ".sframe")
    assert len(sections) == entry["sframe_sections"]
    for loaded in sections:
        data = bytes(loaded.reader.buffer)
        section = decode(data, loaded.reader.address)
        assert section.version == entry["sframe_version"]
        assert len(section.fdes) == entry["num_fdes"]
        assert section.num_fres == entry["num_fres"]
        assert encode(section) == data


@needs_fixtures
def test_several_files_print_like_objdump(monkeypatch: pytest.MonkeyPatch) -> None:
    directory = FIXTURES / "2.46" / "x86_64" / "O2"
    monkeypatch.chdir(directory)
    names = ["cfi.o", "prog"]
    expected = "".join((directory / f"{name}.objdump.txt").read_text() for name in names)
    assert _dump(names) == expected


@needs_fixtures
def test_raw_section_dump_equals_elf_dump_from_contents_line(tmp_path: os.PathLike[str]) -> None:
    path = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"
    _, sections = load_elf(str(path), ".sframe")
    raw = os.path.join(tmp_path, "prog.sframe")
    with open(raw, "wb") as handle:
        handle.write(bytes(sections[0].reader.buffer))
    out = io.StringIO()
    with redirect_stdout(out):
        status = run_dump([raw], as_json=False, raw=True, address=sections[0].reader.address,
                          section_name=".sframe", report=lambda message: None)
    assert status == 0
    expected = (FIXTURES / "2.46" / "x86_64" / "O2" / "prog.objdump.txt").read_text()
    assert out.getvalue() == expected[expected.index("Contents of the SFrame section"):]

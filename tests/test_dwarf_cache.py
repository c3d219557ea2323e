"""The DWARF memo: answers are remembered by build id, the DWARF is opened only for new
questions, and a damaged memo is ignored."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pysframe.elf import ElfImage
from pysframe.symbolize.dwarf import DwarfNames
from pysframe.symbolize.dwarf_cache import CachedDwarfNames

SOURCE = "static int __attribute__((noinline)) twice(int x) { return 2 * x; }\n" \
         "int main(int argc, char **argv) { (void)argv; return twice(argc); }\n"


@pytest.fixture()
def program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, bytes, int]:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "p.c").write_text(SOURCE)
    binary = tmp_path / "p"
    subprocess.run(["gcc", "-O2", "-g", "-Wl,--build-id", "-o", str(binary),
                    str(tmp_path / "p.c")], check=True, timeout=120)
    image = ElfImage(str(binary))
    build_id = image.build_id()
    assert build_id is not None
    symtab = image.section_by_name(".symtab")
    twice = next(s["st_value"] for s in symtab.iter_symbols() if s.name.startswith("twice"))
    return str(binary), build_id, int(twice)


def test_answers_come_back_from_the_memo(program: tuple[str, bytes, int]) -> None:
    path, build_id, twice = program
    first = CachedDwarfNames(path, build_id)
    expected = DwarfNames.open(path, build_id)
    assert expected is not None
    names = first.frames_at(twice)
    assert names == expected.frames_at(twice) == ["twice"]
    assert first.frames_at(twice + 0x100000) is None  # outside: remembered as "none" too
    first.save()
    second = CachedDwarfNames(path, build_id)
    assert second.frames_at(twice) == ["twice"]
    assert second.frames_at(twice + 0x100000) is None
    assert not second.dwarf_opened  # answered without reading any DWARF


def test_a_damaged_memo_is_ignored(program: tuple[str, bytes, int]) -> None:
    path, build_id, twice = program
    first = CachedDwarfNames(path, build_id)
    first.frames_at(twice)
    first.save()
    memo = first.memo_path
    assert memo is not None
    Path(memo).write_bytes(b"\x00garbage")
    again = CachedDwarfNames(path, build_id)
    assert again.frames_at(twice) == ["twice"] and again.dwarf_opened

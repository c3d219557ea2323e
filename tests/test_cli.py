"""End-to-end tests of the ``sframe`` command: output, exit codes and one-line errors."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, needs_fixtures

PROG = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"


def sframe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def sframe_section_offset(data: bytes) -> int:
    """File offset of the .sframe section (little-endian ELF64), found via the section headers."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    str_offset = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)[0]
    for index in range(shnum):
        header = shoff + index * shentsize
        name = struct.unpack_from("<I", data, header)[0]
        if data[str_offset + name:str_offset + name + 8] == b".sframe\0":
            return int(struct.unpack_from("<Q", data, header + 0x18)[0])
    raise AssertionError("no .sframe")


def test_demo_section_prints_the_builtin_section() -> None:
    result = sframe("demo", "--section")
    assert result.returncode == 0, result.stderr
    assert "Contents of the SFrame section .sframe:" in result.stdout
    assert 'attr = "F"' in result.stdout and "RA undefined" in result.stdout


def test_demo_prints_a_child_process_stack_and_ends_it(tmp_path: Path) -> None:
    import os
    import platform

    result = subprocess.run([sys.executable, "-m", "pysframe", "demo"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "XDG_CACHE_HOME":
                                                         str(tmp_path)})
    assert result.returncode == 0, result.stderr
    if platform.machine() != "x86_64" or "showing the built-in section" in result.stdout:
        assert "Contents of the SFrame section .sframe:" in result.stdout
        pytest.skip("no traceable child here: " + result.stdout.splitlines()[0])
    pid = int(result.stdout.split("PID ", 1)[1].split(":", 1)[0])
    assert not os.path.exists(f"/proc/{pid}")  # the child was ended and reaped
    frames = [line.split()[2] for line in result.stdout.splitlines() if line.startswith("#")]
    names = [frame.split("+0x")[0] for frame in frames]
    chain = ["wait_for_parent", "inner", "middle", "outer", "main"]
    start = names.index("wait_for_parent")
    assert names[start:start + 5] == chain
    assert names[-1] == "_start" and "__libc_start_call_main" in names
    assert "read" in names[0]
    assert "its own .sframe section" in result.stdout
    assert "generated from its .eh_frame" in result.stdout


def test_not_elf_is_invalid_data(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    assert_one_line_error(sframe("dump", str(path)), 1, str(path))


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    assert_one_line_error(sframe("dump", str(tmp_path / "absent")), 2, "absent")


def test_usage_error_exit_2() -> None:
    result = sframe("dump", "--address", "0x10", "x")
    assert result.returncode == 2


@needs_fixtures
def test_truncated_elf(tmp_path: Path) -> None:
    path = tmp_path / "cut"
    path.write_bytes(PROG.read_bytes()[:3000])
    assert_one_line_error(sframe("dump", str(path)), 1, str(path))


@needs_fixtures
def test_garbage_counts_name_the_file_offset(tmp_path: Path) -> None:
    data = bytearray(PROG.read_bytes())
    at = sframe_section_offset(bytes(data))
    struct.pack_into("<I", data, at + 8, 0xFFFFFFFF)  # num_fdes
    path = tmp_path / "hostile"
    path.write_bytes(bytes(data))
    result = sframe("dump", str(path))
    assert_one_line_error(result, 1, str(path), f"{at + 8:#x}")
    assert result.stdout == ""


@needs_fixtures
def test_elf_without_sframe(tmp_path: Path) -> None:
    data = PROG.read_bytes()
    path = tmp_path / "plain"
    path.write_bytes(data.replace(b".sframe\0", b".sfram_\0"))
    result = sframe("dump", path.name, cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout == "\nplain:     file format elf64-x86-64\n\nNo .sframe section present\n\n"


@needs_fixtures
def test_json_dump_has_the_same_information() -> None:
    result = sframe("dump", "--json", str(PROG))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    section = document["sections"][0]
    assert section["header"]["num_fdes"] == len(section["functions"]) == 2054
    first = section["functions"][0]
    assert first["pc"] == 0xD020 and first["rows"][1]["pc"] == 0xD026
    assert first["rows"][0]["text"] == "sp+16     u         f"
    assert first["rows"][0]["cfa"] == {"kind": "register", "regnum": 7, "offset": 16,
                                       "deref": False}


def test_raw_bad_bytes(tmp_path: Path) -> None:
    path = tmp_path / "junk.sframe"
    path.write_bytes(b"\xe2\xde\x03\x05" + b"\x03\x00\xf8\x00" + struct.pack("<5I", 5, 5, 9, 0, 80))
    assert_one_line_error(sframe("dump", "--raw", str(path), "--address", "0x1000"), 1,
                          str(path), "offset")


@pytest.mark.parametrize("args", [["--help"], ["dump", "--help"]])
def test_help(args: list[str]) -> None:
    assert sframe(*args).returncode == 0


@needs_fixtures
def test_validate_clean_file_exit_0() -> None:
    result = sframe("validate", str(PROG))
    assert result.returncode == 0 and result.stdout == "", result.stdout


@needs_fixtures
def test_validate_reports_one_line_per_problem(tmp_path: Path) -> None:
    data = bytearray(PROG.read_bytes())
    at = sframe_section_offset(bytes(data))
    # FDE 5's size grows over its neighbour: overlap (and the text check still holds).
    struct.pack_into("<I", data, at + 28 + 16 * 5 + 8, 0x1000)
    path = tmp_path / "overlap"
    path.write_bytes(bytes(data))
    result = sframe("validate", str(path))
    assert result.returncode == 1
    assert any("FDE 6" in line and "[overlap]" in line for line in result.stdout.splitlines())
    quiet = sframe("validate", "--quiet", str(path))
    assert quiet.returncode == 1 and quiet.stdout == "" and quiet.stderr == ""
    as_json = json.loads(sframe("validate", "--json", str(path)).stdout)
    assert as_json[0]["valid"] is False
    assert {"check", "fde", "fre", "file_offset", "message"} <= set(as_json[0]["findings"][0])


def test_validate_unreadable_exit_2(tmp_path: Path) -> None:
    assert_one_line_error(sframe("validate", str(tmp_path / "nothing")), 2, "nothing")

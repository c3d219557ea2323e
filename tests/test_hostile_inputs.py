"""Hostile inputs beyond the SFrame bytes (issue 11): special files named as inputs, corrupt
binaries in a recording, decompression bombs in debug sections, output paths that must not
be replaced, and the ends of output (a closed pipe, a full disk).

Each test reproduces one finding of the attack on the earlier code: there it hung, read
without bound, ended the whole run with an internal error, or replaced a file it should
not have.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.hostile import (
    patched,
    python,
    section_header_at,
    sframe,
    with_zstd_bomb,
)

from conftest import FIXTURES, needs_fixtures
from pysframe.elf import ElfImage
from pysframe.format import SFrameLookup, SFrameReader
from pysframe.format.constants import V3_ATTR_SIZE

LUA_DIR = FIXTURES / "real" / "lua-2.46-x86_64"
RECORDING = LUA_DIR / "perf.data"
PROG = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"
DEMO_CHILD = Path(__file__).resolve().parents[1] / "src" / "pysframe" / "data" / "demo-child"


def isolated(tmp_path: Path) -> dict[str, str]:
    """An environment whose cache and ~/.debug are empty (nothing found there by accident)."""
    (tmp_path / "home").mkdir(exist_ok=True)
    return {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache")}


# --- special files named as inputs --------------------------------------------------


@pytest.mark.parametrize("command", [["dump"], ["dump", "--raw"], ["validate"],
                                     ["validate", "--against-eh-frame"],
                                     ["generate", "-o", "OUT"], ["inject", "-o", "OUT"],
                                     ["script"], ["report", "-o", "OUT"]])
def test_a_fifo_as_input_is_refused_without_hanging(tmp_path: Path, command: list[str]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    arguments = [str(tmp_path / "out") if word == "OUT" else word for word in command]
    run = sframe(*arguments, str(fifo), timeout=60)
    assert run.returncode == 2
    assert run.stderr == f"sframe: {fifo}: not a regular file (a FIFO)\n"


def test_a_procfs_file_is_refused_without_reading_it() -> None:
    """/proc/kmsg blocks every reader: refused as an empty file before any read."""
    if not os.path.exists("/proc/kmsg"):
        pytest.skip("no /proc/kmsg here")
    run = sframe("dump", "/proc/kmsg", timeout=60)
    assert run.returncode == 2 and "/proc/kmsg" in run.stderr
    with pytest.raises(Exception) as info:
        ElfImage("/proc/kmsg")
    assert "/proc/kmsg" in str(info.value)


def test_a_huge_file_is_mapped_not_read(tmp_path: Path) -> None:
    """A 3 GB (sparse) file named as a binary costs what is read of it, not its size."""
    huge = tmp_path / "huge"
    with open(huge, "wb") as handle:
        handle.truncate(3 << 30)
        handle.seek(0)
        handle.write(DEMO_CHILD.read_bytes()[:64])  # an ELF header; shipped with the package
    run = python("-m", "pysframe", "dump", str(huge), timeout=60)
    peak = run.peak_mib  # the child's own (tests/support/hostile.py says why that needs care)
    assert run.returncode == 0 and "No .sframe section present" in run.stdout
    assert peak < 300, f"peak {peak:.0f} MiB for a 3 GiB input"


# --- corrupt binaries in a recording ------------------------------------------------


def _hottest_lua_fde() -> int:
    """The FDE of the Lua function perf saw most often in the recording."""
    hot: collections.Counter[int] = collections.Counter()
    for line in (LUA_DIR / "perf-script.no-inline.txt").read_text().splitlines():
        found = re.match(r"\s+([0-9a-f]+) \S+ \(/srv/fixtures/lua-2.46-x86_64/lua\)", line)
        if found:
            hot[int(found[1], 16)] += 1
    image = ElfImage(str(LUA_DIR / "lua"))
    section = image.sframe_sections()[0]
    lookup = SFrameLookup(SFrameReader(section.raw, section.address))
    fdes: collections.Counter[int] = collections.Counter()
    for pc, count in hot.items():
        row = lookup.find_fre(pc)
        if row is not None:
            fdes[row.fde_index] += count
    return fdes.most_common(1)[0][0]


def _bad_fre_type(target: Path) -> tuple[Path, int]:
    """The Lua binary with an invalid FRE type in its hottest function's SFrame FDE."""
    lua = LUA_DIR / "lua"
    image = ElfImage(str(lua))
    section = image.sframe_sections()[0]
    entry = SFrameReader(section.raw, section.address).fde(_hottest_lua_fde())
    info_at = section.file_offset + entry.fres_offset - V3_ATTR_SIZE + 2
    info = lua.read_bytes()[info_at]
    return patched(lua, target, [(info_at, bytes([info | 0x0F]))]), info_at


def _bad_plt_symbol(target: Path) -> Path:
    lua = LUA_DIR / "lua"
    relocations = ElfImage(str(lua)).section_header(".rela.plt")
    assert relocations is not None
    return patched(lua, target, [(relocations.offset + 8,
                                  struct.pack("<Q", (0xFFFFFF << 32) | 7))])


def _zero_entsize(target: Path, name: str) -> Path:
    lua = LUA_DIR / "lua"
    return patched(lua, target, [(section_header_at(ElfImage(str(lua)), name) + 56,
                                  bytes(8))])


def _bad_cie_pointer(target: Path) -> Path:
    """The second .eh_frame entry (an FDE) pointing to a CIE far before the section."""
    lua = LUA_DIR / "lua"
    eh_frame = ElfImage(str(lua)).section_header(".eh_frame")
    assert eh_frame is not None
    data = lua.read_bytes()
    first_length = struct.unpack_from("<I", data, eh_frame.offset)[0]
    fde = eh_frame.offset + 4 + first_length
    return patched(lua, target, [(fde + 4, struct.pack("<i", -0x7FFFFFF0))])


def _script(tmp_path: Path, directory: Path) -> subprocess.CompletedProcess[str]:
    run = sframe("script", str(RECORDING), "--binaries", str(directory),
                 env=isolated(tmp_path), timeout=300)
    return subprocess.CompletedProcess([], run.returncode, run.stdout, run.stderr)


@needs_fixtures
def test_a_corrupt_sframe_table_costs_no_frames(tmp_path: Path) -> None:
    """The binary's own table faults: it is not used, its frames come from the table
    generated from its .eh_frame (one line says so, exit 1)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    _, info_at = _bad_fre_type(directory / "lua")
    result = _script(tmp_path, directory)
    assert "internal error" not in result.stderr
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and str(directory / "lua") in lines[0]
    assert f"file offset {info_at:#x}" in lines[0] and ".sframe damaged" in lines[0]
    # Every sample is still printed, with all its frames.
    samples = result.stdout.count("cpu-clock:")
    assert samples == (LUA_DIR / "perf-script.no-inline.txt").read_text().count("cpu-clock:")
    assert result.stdout == _script(tmp_path, LUA_DIR).stdout


@needs_fixtures
def test_a_bad_plt_relocation_costs_only_the_plt_names(tmp_path: Path) -> None:
    directory = tmp_path / "bin"
    directory.mkdir()
    _bad_plt_symbol(directory / "lua")
    result = _script(tmp_path, directory)
    assert "internal error" not in result.stderr and result.returncode == 1
    assert len(result.stderr.splitlines()) == 1 and ".rela.plt entry 0" in result.stderr
    good = _script(tmp_path, LUA_DIR)
    assert good.returncode == 0
    # The same frames as the intact binary's; only the names of PLT stubs differ.
    ours, theirs = result.stdout.splitlines(), good.stdout.splitlines()
    assert len(ours) == len(theirs)
    for mine, intact in zip(ours, theirs, strict=True):
        if mine != intact:
            assert "@plt" in intact and mine.split()[0] == intact.split()[0], (mine, intact)
            assert mine.split()[-1] == intact.split()[-1]


@needs_fixtures
@pytest.mark.parametrize("damage", ["dynsym_entsize", "symtab_entsize", "cie_pointer",
                                    "phnum"])
def test_other_damage_never_ends_the_run(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "bin"
    directory.mkdir()
    target = directory / "lua"
    if damage == "dynsym_entsize":
        _zero_entsize(target, ".dynsym")
    elif damage == "symtab_entsize":
        _zero_entsize(target, ".symtab")
    elif damage == "cie_pointer":
        _bad_cie_pointer(target)
    else:
        patched(LUA_DIR / "lua", target, [(0x38, struct.pack("<H", 0xFFFF))])  # e_phnum
    result = _script(tmp_path, directory)
    assert "internal error" not in result.stderr and result.returncode in (0, 1)
    assert result.stdout.count("cpu-clock:") == 3171
    for command in (["generate", str(target), "-o", str(tmp_path / "out")],
                    ["validate", "--against-eh-frame", str(target)],
                    ["validate", str(target)], ["dump", str(target)]):
        run = sframe(*command, env=isolated(tmp_path))
        assert "internal error" not in run.stderr and run.returncode in (0, 1, 2), command
        assert all(line.startswith("sframe: ") or str(target) in line
                   for line in run.stderr.splitlines()), run.stderr


# --- decompression bombs in debug sections ------------------------------------------


BOMB_C = "int twice(int x) { return 2 * x; }\nint main(void) { return twice(0); }\n"


def test_compressed_debug_sections_are_inflated_within_bounds(tmp_path: Path) -> None:
    """Sections declaring (and really holding) 512 MiB of zeros in a few KB: refused
    before inflating; the file's names come from its symbols."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    source = tmp_path / "bomb.c"
    source.write_text(BOMB_C)
    program = tmp_path / "plain"
    subprocess.run(["gcc", "-g", "-O1", "-o", str(program), str(source)], check=True)
    bomb = with_zstd_bomb(program, tmp_path / "bomb",
                          (".debug_info", ".debug_abbrev", ".debug_str"), 512 << 20)
    probe = ("from pysframe.symbolize.dwarf import DwarfNames; "
             f"names = DwarfNames.open({str(bomb)!r}, None); "
             "print(names.frames_at(0x1139) if names else None)")
    run = python("-c", probe, timeout=120)
    peak = run.peak_mib
    assert run.returncode == 0 and run.stdout.strip() == "None", run.stderr
    assert peak < 200, f"peak {peak:.0f} MiB"


# --- outputs ------------------------------------------------------------------------


@needs_fixtures
def test_output_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.sframe"
    real.write_bytes(b"old")
    link = tmp_path / "link.sframe"
    link.symlink_to(real)
    run = sframe("generate", str(PROG), "-o", str(link), env=isolated(tmp_path))
    assert run.returncode == 0, run.stderr
    assert link.is_symlink() and real.read_bytes()[:2] == b"\xe2\xde"


@needs_fixtures
def test_output_to_a_device_is_written_through(tmp_path: Path) -> None:
    """A device node (a private null device, so that a regression cannot replace the
    system's /dev/null) is written through and stays a device."""
    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root")
    before = os.stat(device)
    run = sframe("generate", str(PROG), "-o", str(device), env=isolated(tmp_path))
    assert run.returncode == 0, run.stderr
    after = os.stat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


@needs_fixtures
@pytest.mark.parametrize("command", ["generate", "inject"])
def test_output_that_is_the_input_is_refused(tmp_path: Path, command: str) -> None:
    copy = tmp_path / "prog"
    shutil.copy(PROG, copy)
    alias = tmp_path / "alias"
    alias.symlink_to(copy)
    for output in (copy, alias):
        run = sframe(command, str(copy), "-o", str(output), env=isolated(tmp_path))
        assert run.returncode == 2 and "refusing to overwrite an input" in run.stderr
        assert copy.read_bytes() == PROG.read_bytes()


@needs_fixtures
def test_a_closed_pipe_ends_quietly() -> None:
    dump = subprocess.Popen([sys.executable, "-m", "pysframe", "dump", str(PROG)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert dump.stdout is not None and dump.stderr is not None
    dump.stdout.readline()
    dump.stdout.close()  # as `| head -1` does
    stderr = dump.stderr.read()
    dump.wait(timeout=60)
    assert dump.returncode == -13 and stderr == b""  # killed by SIGPIPE, as C tools are


@needs_fixtures
@pytest.mark.parametrize("buffering", ["block-buffered", "unbuffered"])
@pytest.mark.parametrize("command", [["dump"], ["dump", "--json"], ["script"]],
                         ids=["dump", "dump-json", "script"])
def test_a_full_disk_is_one_line(tmp_path: Path, command: list[str], buffering: str) -> None:
    """Both ways Python's stdout can be: block-buffered (the default when it is not a
    terminal) and unbuffered (PYTHONUNBUFFERED, set in some shells and not in others).
    Block-buffered, a failed write leaves its bytes in the buffer, which the interpreter
    flushes again at exit: once a second line ("Exception ignored ... OSError") and exit
    status 120, depending only on whether the environment the tests ran in set
    PYTHONUNBUFFERED."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    env.update(isolated(tmp_path))
    if buffering == "unbuffered":
        env["PYTHONUNBUFFERED"] = "1"
    target = RECORDING if command == ["script"] else PROG
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "pysframe", *command, str(target)],
                                stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                                env=env)
    assert result.stderr == "sframe: standard output: No space left on device\n"
    assert result.returncode == 2


# --- a corrupt table under sframe stack ---------------------------------------------


def test_a_corrupt_table_in_a_live_stack_is_reported_after_the_release(tmp_path: Path) -> None:
    """The demo child with an invalid FRE type in ``middle``'s FDE: the stack is printed
    (frames past it fall back), the problem is one line naming the file and the offset,
    the exit status is 1, and the child runs on."""
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 only")
    from importlib import resources

    child_path = tmp_path / "demo-child"
    with resources.as_file(resources.files("pysframe").joinpath("data", "demo-child")) as src:
        image = ElfImage(str(src))
        section = image.sframe_sections()[0]
        reader = SFrameReader(section.raw, section.address)
        middle = next(reader.fde(k) for k in range(reader.num_fdes)
                      if reader.fde(k).start == _symbol(image, "middle"))
        info_at = section.file_offset + middle.fres_offset - V3_ATTR_SIZE + 2
        patched(Path(src), child_path, [(info_at, bytes([src.read_bytes()[info_at] | 0x0F]))])
    child = subprocess.Popen([str(child_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        run = sframe("stack", "--no-debuginfo", str(child.pid), env=isolated(tmp_path))
        if run.returncode == 2 and "not permitted" in run.stderr:
            pytest.skip("ptrace is not permitted here")
        assert run.returncode == 1, run.stderr
        assert run.stderr.count("\n") == 1 and str(child_path) in run.stderr
        assert f"file offset {info_at:#x}" in run.stderr and "internal error" not in run.stderr
        assert " inner+" in run.stdout  # frames before the damage are there
        with open(f"/proc/{child.pid}/stat") as handle:
            assert handle.read().rsplit(")", 1)[1].split()[0] in "SR"  # released
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=10)


def _symbol(image: ElfImage, name: str) -> int:
    from pysframe.symbolize.symbols import function_addresses

    global_names, local_names = function_addresses(image)
    return global_names.get(name, local_names.get(name, -1))

"""The cache of derived data as hostile input (issue 11, finding 4), and ``sframe generate``
on a function whose CFI rows run past its end (finding 5).

The cache directory is private (symbolic links not followed, other owners and group/other
write permission refused), an entry is read only when it is a regular file of plausible
size, and only when it says it was derived from the very bytes at hand: an entry for
another file with the same build id is regenerated, so the output always equals the
uncached one.
"""

from __future__ import annotations

import marshal
import os
import shutil
import struct
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

from conftest import FIXTURES
from pysframe import cachedir
from pysframe.elf import ElfImage
from pysframe.generate.cache import cache_path, sframe_for
from pysframe.symbolize import symbols as symbols_module
from pysframe.symbolize import table_bytes
from pysframe.symbolize.dwarf_cache import CachedDwarfNames
from pysframe.symbolize.symbols import load_symbols

LUA = FIXTURES / "real" / "lua-2.46-x86_64" / "lua"
PROG = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"

pytestmark = pytest.mark.skipif(not LUA.exists() or not PROG.exists(),
                                reason="../shared/fixtures is not present")


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    return root


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if not p.is_dir()) if root.exists() else []


def _build_id(path: Path) -> bytes:
    build_id = ElfImage(str(path)).build_id()
    assert build_id is not None
    return build_id


def _patched(source: Path, target: Path, section: str | None = None,
             replace: tuple[bytes, bytes] | None = None, zero: bool = False) -> Path:
    """A copy of ``source`` (same build id) with ``section``'s bytes zeroed or one string
    in them replaced throughout."""
    data = bytearray(source.read_bytes())
    if section is not None:
        header = ElfImage(str(source)).section_header(section)
        assert header is not None
        begin, end = header.offset, header.offset + header.size
        if zero:
            data[begin:end] = bytes(end - begin)
        if replace is not None:
            old, new = replace
            assert len(old) == len(new)
            data[begin:end] = bytes(data[begin:end]).replace(old, new)
    target.write_bytes(bytes(data))
    target.chmod(0o755)
    return target


def _without_sframe(source: Path, target: Path) -> Path:
    """A copy whose .sframe section is renamed (the copy has only its CFI)."""
    return _patched(source, target, ".shstrtab", replace=(b".sframe\0", b".sfram_\0"))


# --- the directories -------------------------------------------------------------------------

def test_a_symlinked_sub_directory_is_not_followed(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache / "pysframe").mkdir(parents=True, mode=0o700)
    for kind in ("sframe", "symbols"):
        (cache / "pysframe" / kind).symlink_to(elsewhere)
    image = ElfImage(str(LUA))
    assert sframe_for(image) == sframe_for(image, use_cache=False)
    load_symbols(image)
    assert list(elsewhere.iterdir()) == []


def test_kept_directories_are_checked_once_and_closed(cache: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside KeptDirectories (a run's saves at its end) entries are kept and read as
    outside it, each directory opened once, every descriptor closed after; a symlinked
    directory is refused there too."""
    source = cachedir.describe(3, [b"abc"])
    ids = [bytes([k, 7]) * 10 for k in range(4)]
    opened: list[str] = []
    real_open = cachedir._open_directory

    def counted(parent: int, name: str, path: str, create: bool) -> int | None:
        opened.append(path)
        return real_open(parent, name, path, create)

    monkeypatch.setattr(cachedir, "_open_directory", counted)
    descriptors = len(os.listdir("/proc/self/fd"))
    with cachedir.KeptDirectories():
        for build_id in ids * 3:
            cachedir.store("sframe/test.v1", build_id, b"payload " + build_id, source)
            assert cachedir.load("sframe/test.v1", build_id, source) == b"payload " + build_id
        with cachedir.KeptDirectories():  # (nested: the outer one keeps and closes)
            assert cachedir.load("sframe/test.v1", ids[0], source) == b"payload " + ids[0]
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert len(opened) == len(set(opened)) == 2 + len({build_id[:1] for build_id in ids})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (cache / "pysframe" / "symbols").symlink_to(elsewhere)
    with cachedir.KeptDirectories():
        cachedir.store("symbols/test.v1", ids[0], b"payload", source)
        assert cachedir.load("symbols/test.v1", ids[0], source) is None
    assert list(elsewhere.iterdir()) == []
    for build_id in ids:  # (what was kept inside is read outside)
        assert cachedir.load("sframe/test.v1", build_id, source) == b"payload " + build_id


def test_a_symlinked_cache_root_is_not_followed(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache.mkdir()
    (cache / "pysframe").symlink_to(elsewhere)
    sframe_for(ElfImage(str(LUA)))
    assert list(elsewhere.iterdir()) == []


def _poisoned_entry(cache: Path) -> tuple[ElfImage, bytes]:
    """Lua's merged table cached, then replaced by a well-formed entry with no FDEs (as
    someone who can write the directory could make it); (image, good table)."""
    from pysframe.format.constants import ABI
    from pysframe.format.encode import encode
    from pysframe.format.model import Section
    from pysframe.generate.cache import entry_kind, table_source

    image = ElfImage(str(LUA))
    good = sframe_for(image)
    empty = encode(Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE))
    build_id = _build_id(LUA)
    cachedir.store(entry_kind(3, "merged"), build_id, empty, table_source(image))
    assert sframe_for(image)[0] == empty  # the planted entry is what a private cache holds
    return image, good[0]


def test_a_directory_writable_by_others_is_not_used(cache: Path, tmp_path: Path) -> None:
    elsewhere = cache / "pysframe"
    elsewhere.mkdir(parents=True, mode=0o700)
    elsewhere.chmod(0o777)
    image = ElfImage(str(LUA))
    assert sframe_for(image) == sframe_for(image, use_cache=False)
    load_symbols(image)
    assert _files_under(cache) == []
    shutil.rmtree(elsewhere)
    image, good = _poisoned_entry(cache)
    for directory in (cache / "pysframe", cache / "pysframe" / "sframe"):
        directory.chmod(0o770)
        assert sframe_for(image)[0] == good
        directory.chmod(0o700)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_a_directory_of_another_user_is_not_used(cache: Path) -> None:
    directory = cache / "pysframe"
    directory.mkdir(parents=True, mode=0o700)
    os.chown(directory, 65534, 65534)
    image = ElfImage(str(LUA))
    assert sframe_for(image) == sframe_for(image, use_cache=False)
    assert _files_under(cache) == []


def test_a_directory_of_another_owner_is_not_read(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    image, good = _poisoned_entry(cache)
    monkeypatch.setattr(cachedir, "_expected_owner", lambda: os.geteuid() + 1)
    monkeypatch.setattr(cachedir, "_warned", set())
    assert sframe_for(image)[0] == good
    assert sframe_for(image)[0] == good
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1 and "not using the cache directory" in warnings[0]


# --- the entries -----------------------------------------------------------------------------

CHILD = (
    "import resource, sys\n"
    "resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))\n"
    "from pysframe.elf import ElfImage\n"
    "from pysframe.generate.cache import sframe_for\n"
    "print(sframe_for(ElfImage(sys.argv[1]))[0].hex())\n")


@pytest.mark.parametrize("what", ["fifo", "dev-zero", "huge"])
def test_a_strange_entry_is_not_waited_on_or_read(what: str, cache: Path) -> None:
    """A FIFO (opening or reading it would wait for a writer), a link to /dev/zero and a
    2 GiB file (read whole they exhaust memory) are treated as absent."""
    image = ElfImage(str(LUA))
    entry = cache_path(_build_id(LUA), 3, "merged")
    entry.parent.mkdir(parents=True, mode=0o700)
    for directory in (entry.parent, entry.parent.parent, entry.parent.parent.parent):
        directory.chmod(0o700)
    if what == "fifo":
        os.mkfifo(entry, 0o600)
    elif what == "dev-zero":
        entry.symlink_to("/dev/zero")
    else:
        with open(entry, "wb") as handle:
            handle.truncate(2 << 30)
    environment = {**os.environ, "XDG_CACHE_HOME": str(cache),
                   "PYTHONPATH": os.pathsep.join([str(Path(cachedir.__file__).parents[1]),
                                                  os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", CHILD, str(LUA)], capture_output=True,
                            text=True, timeout=60, env=environment)
    assert result.returncode == 0, result.stderr[-2000:]
    assert bytes.fromhex(result.stdout.strip()) == sframe_for(image, use_cache=False)[0]


def test_a_directory_entry_is_absent(cache: Path) -> None:
    image = ElfImage(str(LUA))
    entry = cache_path(_build_id(LUA), 3, "merged")
    entry.mkdir(parents=True, mode=0o700)
    for directory in (entry.parent, entry.parent.parent, entry.parent.parent.parent):
        directory.chmod(0o700)
    assert sframe_for(image) == sframe_for(image, use_cache=False)


# --- entries for the wrong file --------------------------------------------------------------

def test_another_binarys_table_is_ignored(cache: Path, tmp_path: Path) -> None:
    lua, prog = ElfImage(str(LUA)), ElfImage(str(PROG))
    sframe_for(lua)
    sframe_for(prog)
    lua_entry = cache_path(_build_id(LUA), 3, "merged")
    shutil.copyfile(cache_path(_build_id(PROG), 3, "merged"), lua_entry)
    assert sframe_for(lua) == sframe_for(lua, use_cache=False)


def test_a_planted_table_without_fdes_is_ignored(cache: Path) -> None:
    from pysframe.format.constants import ABI
    from pysframe.format.encode import encode
    from pysframe.format.model import Section

    lua = ElfImage(str(LUA))
    sframe_for(lua)
    entry = cache_path(_build_id(LUA), 3, "merged")
    entry.write_bytes(encode(Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE)))
    assert sframe_for(lua) == sframe_for(lua, use_cache=False)


def test_a_table_from_a_corrupt_copy_does_not_break_the_good_binary(cache: Path,
                                                                    tmp_path: Path) -> None:
    """A copy with the same build id whose CFI is gone generates a table with no function
    of its own; the good binary must get its own table, not that one."""
    good = _without_sframe(LUA, tmp_path / "lua-cfi-only")
    bad = _patched(good, tmp_path / "lua-corrupt", ".eh_frame", zero=True)
    assert _build_id(good) == _build_id(bad) == _build_id(LUA)
    from pysframe.format.decode import SFrameReader

    broken, _ = sframe_for(ElfImage(str(bad)))
    expected, _ = sframe_for(ElfImage(str(good)), use_cache=False)
    assert SFrameReader(broken, 0).num_fdes < SFrameReader(expected, 0).num_fdes
    assert sframe_for(ElfImage(str(good)))[0] == expected
    assert sframe_for(ElfImage(str(bad)))[0] == broken  # each keeps its own


def _symbols(table: symbols_module.SymbolTable) -> tuple[list[int], list[int], list[str]]:
    return list(table.starts), list(table.ends), list(table.names)


def test_another_binarys_symbols_are_ignored(cache: Path) -> None:
    lua, prog = ElfImage(str(LUA)), ElfImage(str(PROG))
    load_symbols(lua)
    load_symbols(prog)
    shutil.copyfile(symbols_module._cache_path(_build_id(PROG)),
                    symbols_module._cache_path(_build_id(LUA)))
    assert _symbols(load_symbols(lua)) == _symbols(load_symbols(lua, use_cache=False))


def test_symbols_of_a_corrupt_copy_do_not_rename_the_good_binarys(cache: Path,
                                                                  tmp_path: Path) -> None:
    bad = _patched(LUA, tmp_path / "lua-renamed", ".strtab", replace=(b"lua", b"LUA"))
    renamed = load_symbols(ElfImage(str(bad)))
    assert any(name.startswith("LUA") for name in renamed.names)
    lua = ElfImage(str(LUA))
    assert _symbols(load_symbols(lua)) == _symbols(load_symbols(lua, use_cache=False))


def _table_entry(starts: list[int], ends: list[int], names: list[str]) -> bytes:
    return table_bytes.entry(array("Q", starts), array("Q", ends),
                             [name.encode() for name in names])


def test_planted_renamed_or_unsorted_symbols_are_ignored(cache: Path) -> None:
    lua = ElfImage(str(LUA))
    expected = _symbols(load_symbols(lua, use_cache=False))
    starts, ends, names = expected
    entry = Path(symbols_module._cache_path(_build_id(LUA)))
    entry.parent.mkdir(parents=True, exist_ok=True)
    for planted in ((starts, ends, ["evil"] * len(names)),
                    (starts[::-1], ends[::-1], names[::-1])):
        entry.write_bytes(_table_entry(*planted))  # without the cache's header
        assert _symbols(load_symbols(lua)) == expected


def test_symbols_of_the_wrong_shape_are_ignored(cache: Path) -> None:
    """Even an entry that verifies (a private cache, the right source) is used only when
    its payload has the shape of a table: sorted starts, ends not below them, names."""
    lua = ElfImage(str(LUA))
    expected = _symbols(load_symbols(lua, use_cache=False))
    starts, ends, names = expected
    separate = symbols_module.symbols_file(lua, None)
    kind, source = symbols_module._cache_kind(separate), symbols_module._cache_source(lua, separate)
    whole = _table_entry(starts, ends, names)
    for planted in (_table_entry(starts[::-1], ends[::-1], names[::-1]),
                    _table_entry(starts, [s - 1 for s in starts], names),
                    _table_entry(starts[:1] * 2 + starts[2:], ends, names),  # a start twice
                    whole[:-1], whole + b"x", whole[:10], b"",
                    whole[:8] + struct.pack("=Q", len(starts) + 1) + whole[16:]):  # the count
        cachedir.store(kind, _build_id(LUA), planted, source)
        assert _symbols(load_symbols(lua)) == expected
    cachedir.store(kind, _build_id(LUA), whole, source)
    assert _symbols(load_symbols(lua)) == expected


def test_a_planted_dwarf_memo_is_ignored(cache: Path) -> None:
    build_id = _build_id(LUA)
    symbols = ElfImage(str(LUA)).section_header(".symtab")
    assert symbols is not None
    address = ElfImage(str(LUA)).executable_ranges()[0][0] + 0x40
    expected = CachedDwarfNames(str(LUA), build_id, use_cache=False).frames_at(address)
    memo = CachedDwarfNames(str(LUA), build_id).memo_path
    assert memo is not None
    Path(memo).parent.mkdir(parents=True, exist_ok=True)
    Path(memo).write_bytes(marshal.dumps({("frames_at", address): ["evil"]}))
    assert CachedDwarfNames(str(LUA), build_id).frames_at(address) == expected


def test_a_dwarf_memo_of_the_wrong_shape_is_ignored(cache: Path) -> None:
    from pysframe.symbolize.dwarf_cache import dwarf_file, memo_kind, memo_source

    build_id = _build_id(LUA)
    address = ElfImage(str(LUA)).executable_ranges()[0][0] + 0x40
    expected = CachedDwarfNames(str(LUA), build_id, use_cache=False).frames_at(address)
    separate = dwarf_file(str(LUA), build_id)
    source = memo_source(str(LUA), separate)
    assert source is not None
    for memo in ({("frames_at", address): 7}, {("frames_at", address): [1]},
                 {("frames_at", str(address)): ["evil"]}, {("unknown", address): ["evil"]},
                 {("tail_frames", 1, "x", 2): [("evil", "pc")]}, [("frames_at", address)]):
        cachedir.store(memo_kind(separate), build_id, marshal.dumps(memo), source)
        assert CachedDwarfNames(str(LUA), build_id).frames_at(address) == expected


SOURCE = "static int __attribute__((noinline)) NAME(int x) { return 2 * x; }\n" \
         "int main(int argc, char **argv) { (void)argv; return NAME(argc); }\n"


def test_a_dwarf_memo_of_another_build_is_ignored(cache: Path, tmp_path: Path) -> None:
    """Two programs linked with the same build id, different only in a function's name:
    the memo of the first must not name the second's frames."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    programs = []
    for name in ("alpha", "bravo"):
        (tmp_path / f"{name}.c").write_text(SOURCE.replace("NAME", name))
        binary = tmp_path / name
        subprocess.run(["gcc", "-O2", "-g", "-Wl,--build-id=0x" + "ab" * 20, "-o", str(binary),
                        str(tmp_path / f"{name}.c")], check=True, timeout=120)
        programs.append(binary)
    build_id = _build_id(programs[0])
    assert build_id == _build_id(programs[1])
    for binary, name in zip(programs, ("alpha", "bravo"), strict=True):
        symtab = ElfImage(str(binary)).section_by_name(".symtab")
        address = next(s["st_value"] for s in symtab.iter_symbols() if s.name == name)
        names = CachedDwarfNames(str(binary), build_id)
        assert names.frames_at(address) == [name]
        names.save()


# --- caching still works ---------------------------------------------------------------------

def test_a_warm_cache_answers_without_generating(cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from pysframe.generate import section

    image = ElfImage(str(LUA))
    table = sframe_for(image)
    symbols = _symbols(load_symbols(image))

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("generated again")

    monkeypatch.setattr(section, "generate", refuse)
    monkeypatch.setattr(symbols_module, "_load_symbols", refuse)
    assert sframe_for(ElfImage(str(LUA))) == table
    assert _symbols(load_symbols(ElfImage(str(LUA)))) == symbols
    for path in _files_under(cache):
        assert path.stat().st_mode & 0o777 == 0o600
    for path in (cache / "pysframe").rglob("*"):
        if path.is_dir():
            assert path.stat().st_mode & 0o777 == 0o700


# --- sframe generate: rows past a function's end (finding 5) -------------------------------

def _short_fde_copy(target: Path) -> tuple[Path, int]:
    """A copy of Lua whose first FDE with several rows claims a range of 1 byte (its CFI
    rows now run past its end); (copy, that function's start)."""
    from pysframe.cfi.eh_frame import fde_instructions, parse_eh_frame
    from pysframe.cfi.instructions import DW_CFA_advance_loc
    from pysframe.generate.section import PLT_SECTIONS

    image = ElfImage(str(LUA))
    found = image.section(".eh_frame")
    assert found is not None
    data, address, offset = found
    fdes, _ = parse_eh_frame(data, address, big_endian=False, address_size=8)
    plt = image.section_ranges(*PLT_SECTIONS).values()
    for fde in fdes:
        if any(lo <= fde.pc_begin < hi for lo, hi in plt):
            continue  # the generator uses ld's PLT rules, not the PLT's CFI
        instructions = fde_instructions(data, fde, False, address)
        if fde.cie.fde_encoding == 0x1B and sum(
                i.op == DW_CFA_advance_loc for i in instructions) >= 2:
            break
    else:
        pytest.fail("no FDE with several rows")
    copy = bytearray(LUA.read_bytes())
    at = offset + fde.offset + 12  # length, CIE pointer, pc_begin (pcrel sdata4)
    assert int.from_bytes(copy[at:at + 4], "little") == fde.pc_range
    copy[at:at + 4] = (1).to_bytes(4, "little")
    target.write_bytes(bytes(copy))
    return target, fde.pc_begin


def test_generate_drops_rows_past_a_functions_end(tmp_path: Path) -> None:
    copy, start = _short_fde_copy(tmp_path / "lua-short-fde")
    out = tmp_path / "out.sframe"
    sframe = [sys.executable, "-m", "pysframe"]
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run([*sframe, "generate", "-v", "--at", "0", str(copy), "-o", str(out)],
                            capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0, result.stderr
    assert f"{start:#x}" in result.stderr and "past the function's end" in result.stderr
    check = subprocess.run([*sframe, "validate", "--raw", str(out)], capture_output=True,
                           text=True, timeout=120, env=environment)
    assert check.returncode == 0, check.stdout + check.stderr
    injected = tmp_path / "lua-injected"
    subprocess.run([*sframe, "inject", str(_without_sframe(copy, tmp_path / "lua-bare")), "-o",
                    str(injected)], check=True, timeout=120, env=environment)
    check = subprocess.run([*sframe, "validate", str(injected)], capture_output=True, text=True,
                           timeout=120, env=environment)
    assert check.returncode == 0, check.stdout + check.stderr


# --- files checked by stamp ------------------------------------------------------------------

def test_a_warm_memo_needs_no_hashing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo's files are hashed when it is made; later runs on the same files,
    unchanged, check their stamp (device, inode, size, times) instead."""
    from pysframe.generate import cache as generate_cache

    build_id = _build_id(LUA)
    address = ElfImage(str(LUA)).executable_ranges()[0][0] + 0x40
    first = CachedDwarfNames(str(LUA), build_id)
    first.frames_at(address)
    first.save()

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("hashed again")

    monkeypatch.setattr(generate_cache, "image_parts", refuse)
    again = CachedDwarfNames(str(LUA), build_id)
    again.frames_at(address)
    assert not again.dwarf_opened  # answered from the memo


def test_a_file_changed_in_place_is_hashed_again(cache: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Same path, same inode, other bytes: the stamp differs (the change time moved), the
    bytes are hashed, and the memo made from the old bytes is not used."""
    import time

    monkeypatch.setattr(cachedir, "_RACY_NS", 0)  # trust stamps of fresh files here
    copy = tmp_path / "lua"
    shutil.copyfile(LUA, copy)
    build_id = _build_id(copy)
    address = ElfImage(str(copy)).executable_ranges()[0][0] + 0x40
    memo = CachedDwarfNames(str(copy), build_id)
    memo.remember(("frames_at", address), lambda: ["from the old bytes"])
    memo.save()
    assert CachedDwarfNames(str(copy), build_id).frames_at(address) == ["from the old bytes"]
    time.sleep(0.05)  # past a tick of the file system's clock
    strtab = ElfImage(str(copy)).section_header(".strtab")
    assert strtab is not None
    with open(copy, "r+b") as handle:
        handle.seek(strtab.offset + 1)
        handle.write(b"X")
    assert CachedDwarfNames(str(copy), build_id).frames_at(address) != ["from the old bytes"]


def test_damaged_cfi_gives_no_invalid_fde() -> None:
    """What only damaged CFI has: rows past the end (dropped, said so), a location
    going back, registers no ABI has, offsets beyond 32 bits (the function skipped)."""
    from pysframe.cfi.instructions import (
        DW_CFA_advance_loc,
        DW_CFA_def_cfa,
        DW_CFA_def_cfa_register,
        DW_CFA_offset,
        DW_CFA_set_loc,
        Instruction,
    )
    from pysframe.format.constants import ABI
    from pysframe.generate.gas import Skip, translate

    amd64 = ABI.AMD64_ENDIAN_LITTLE
    cie = [Instruction(DW_CFA_def_cfa, 7, 8), Instruction(DW_CFA_offset, 16, -8)]
    push = [Instruction(DW_CFA_advance_loc, 1), Instruction(DW_CFA_def_cfa, 7, 16),
            Instruction(DW_CFA_advance_loc, 8), Instruction(DW_CFA_def_cfa, 7, 8)]
    notes: list[str] = []
    fde = translate(cie + push, 0x1000, 4, amd64, notes=notes)
    assert [fre.start for fre in fde.fres] == [0, 1]
    assert notes == ["1 CFI row at or past the function's end dropped"]
    assert [f.start for f in translate(cie + push, 0x1000, 16, amd64).fres] == [0, 1, 9]
    back = [Instruction(DW_CFA_set_loc, 0x1008), Instruction(DW_CFA_def_cfa, 7, 16),
            Instruction(DW_CFA_set_loc, 0x1004), Instruction(DW_CFA_def_cfa, 7, 8)]
    with pytest.raises(Skip, match="backwards"):
        translate(cie + back, 0x1000, 16, amd64)
    with pytest.raises(Skip, match="no ABI has"):
        translate([*cie, Instruction(DW_CFA_advance_loc, 1),
                   Instruction(DW_CFA_def_cfa_register, 8437)], 0x1000, 16, amd64)
    with pytest.raises(Skip, match="32 bits"):
        translate([*cie, Instruction(DW_CFA_advance_loc, 1),
                   Instruction(DW_CFA_offset, 6, -(1 << 40))], 0x1000, 16, amd64)


def test_a_binary_unchanged_since_its_entry_is_not_hashed_again(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry records the identity of the file it was made from (device, inode, size,
    times): the same file unchanged is trusted without hashing its sections (a warm
    `stack` hashed ~750 KB of libc's at every run); the file rewritten is hashed, and its
    entry kept only if the bytes are the same; another build under the same build id gets
    its own table."""
    from pysframe.generate import cache as generate_cache

    monkeypatch.setattr(cachedir, "_RACY_NS", 0)  # a file made just now is trusted by stamp
    binary = tmp_path / "lua"
    shutil.copyfile(LUA, binary)
    expected = _symbols(load_symbols(ElfImage(str(binary)), use_cache=False))
    hashed: list[int] = []
    parts = generate_cache.image_parts
    monkeypatch.setattr(generate_cache, "image_parts",
                        lambda *args, **kwargs: hashed.append(1) or parts(*args, **kwargs))
    assert _symbols(load_symbols(ElfImage(str(binary)))) == expected  # made and stored
    made = len(hashed)
    assert made >= 1
    assert _symbols(load_symbols(ElfImage(str(binary)))) == expected
    assert len(hashed) == made, "an unchanged binary's sections were hashed again"
    image = ElfImage(str(binary))  # a table's entry is named by the build id, unhashed
    assert generate_cache.cache_key(image, generate_cache.table_source(image)) == \
        image.build_id()
    assert len(hashed) == made, "the binary was hashed to name its table's entry"
    shutil.copyfile(LUA, binary)  # the same bytes written again: another stamp
    assert _symbols(load_symbols(ElfImage(str(binary)))) == expected
    assert len(hashed) > made
    renamed = _patched(LUA, tmp_path / "renamed", ".strtab", replace=(b"lua", b"LUA"))
    os.replace(renamed, binary)
    assert any(name.startswith("LUA") for name in load_symbols(ElfImage(str(binary))).names)


def test_blake2b_digest_is_hashlibs_without_loading_openssl() -> None:
    """The flat tables' function digests (cache keys) are BLAKE2b as hashlib computes them;
    a batch run's start no longer imports hashlib for them (~2 ms: OpenSSL)."""
    import hashlib
    import subprocess
    import sys

    from pysframe.cachedir import blake2b_digest

    for data in (b"", b"x" * 3, bytes(range(256)) * 300):
        for size in (16, 32):
            assert blake2b_digest(data, size) == hashlib.blake2b(data, digest_size=size).digest()
            assert blake2b_digest(memoryview(data), size) == blake2b_digest(data, size)
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, pysframe.unwind.flat_cache as f; "
         "print('hashlib' in sys.modules)"], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"

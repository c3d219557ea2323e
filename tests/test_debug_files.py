"""Stripped programs named from their debug files, found where perf and gdb find them
(issue 27, item 3): a twin with the same build id among ``--binaries``, a debug directory
by build id (``PYSFRAME_DEBUG_FILE_DIRECTORY`` stands in for /usr/lib/debug), perf's
``~/.debug``, ``.gnu_debuglink`` (CRC checked) and dwz's ``.gnu_debugaltlink``.

The oracles: ``perf script`` on the same recording with the unstripped programs in its
build-id cache (``sframe script`` and ``report`` must name every frame as perf does), and
gdb's ``bt`` of the same process (``sframe stack``: DWARF names, inlined calls included).
The debuginfod server is tests/test_debuginfod.py's.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.debug_programs import (
    Built,
    assert_named_as_perf,
    assert_unnamed,
    build,
    build_id,
    by_build_id,
    environment,
    gdb_names,
    record_all,
    require_toolchain,
    sframe,
    stack_names,
    start_waiting,
    stop,
)
from tests.support.oracles import missing, need_gdb, unavailable
from tests.support.parity import recording_directory

from pysframe.elf import ElfImage
from pysframe.elf.debuginfo import DebugFiles, debug_file

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 programs")


@pytest.fixture(autouse=True)
def _toolchain() -> None:
    require_toolchain()

ALL = ["prog", "cxx", "nog"]
WITH_DWARF = ["prog", "cxx"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("debug-files"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, built: Built) -> tuple[Path, str]:
    """(the recording of the stripped programs, perf script's text of it)."""
    from tests.support.debug_programs import perf_names

    perf, directory = recording_directory(tmp_path_factory, "debug-files-perf")
    data = record_all(perf, built, directory / "perf.data")
    return data, perf_names(perf, data, built, directory)


def script(data: Path, env: dict[str, str], *options: str) -> str:
    result = sframe("script", str(data), *options, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_stripped_frames_are_unknown_without_debug_files(recorded: tuple[Path, str],
                                                         built: Built, tmp_path: Path) -> None:
    """The issue's starting point: perf names them all, we named none."""
    data, _ = recorded
    assert_unnamed(script(data, environment(tmp_path)), built, ALL)


def test_named_from_a_twin_among_binaries(recorded: tuple[Path, str], built: Built,
                                          tmp_path: Path) -> None:
    """The unstripped files, under other names in a subdirectory: found by build id."""
    data, theirs = recorded
    twins = tmp_path / "twins" / "deep"
    twins.mkdir(parents=True)
    for name in ALL:
        shutil.copy(built.full(name), twins / f"{name}.unstripped")
    ours = script(data, environment(tmp_path / "cache"), "--binaries", str(tmp_path / "twins"))
    assert_named_as_perf(ours, theirs, built, ALL)


def test_report_names_from_a_twin_among_binaries(recorded: tuple[Path, str], built: Built,
                                                 tmp_path: Path) -> None:
    data, _ = recorded
    twins = tmp_path / "twins"
    twins.mkdir()
    shutil.copy(built.full("cxx"), twins / "anything")
    env = environment(tmp_path / "cache")
    result = sframe("report", str(data), "-o", "-", "--binaries", str(twins), env=env)
    assert result.returncode == 0, result.stderr
    assert "shapes::Spinner::spin" in result.stdout
    plain = sframe("report", str(data), "-o", "-", env=environment(tmp_path / "other"))
    assert "shapes::Spinner::spin" not in plain.stdout


def test_named_from_a_debug_directory_by_build_id(recorded: tuple[Path, str], built: Built,
                                                  tmp_path: Path) -> None:
    """``<dir>/.build-id/xx/yyyy.debug``, as Debian's -dbgsym packages install them."""
    data, theirs = recorded
    root = tmp_path / "root"
    for name in WITH_DWARF:
        by_build_id(root, built.debug(name), built.build_ids[name])
    ours = script(data, environment(tmp_path / "cache", PYSFRAME_DEBUG_FILE_DIRECTORY=str(root)))
    assert_named_as_perf(ours, theirs, built, WITH_DWARF)
    assert_unnamed(ours, built, ["nog"])


def test_named_from_perfs_build_id_cache(recorded: tuple[Path, str], built: Built,
                                         tmp_path: Path) -> None:
    """``~/.debug/.build-id/xx/yyyy/debug``: where ``perf buildid-cache`` keeps a debug file."""
    data, theirs = recorded
    env = environment(tmp_path / "cache")
    text = built.build_ids["prog"].hex()
    place = Path(env["HOME"]) / ".debug" / ".build-id" / text[:2] / text[2:]
    place.mkdir(parents=True)
    shutil.copy(built.debug("prog"), place / "debug")
    assert_named_as_perf(script(data, env), theirs, built, ["prog"])


@pytest.fixture
def linked(built: Built) -> Iterator[Path]:
    """prog's debug file where its debug link says, in ``bin/.debug``; removed after."""
    place = built.stripped("prog").parent / ".debug"
    place.mkdir()
    try:
        yield place / "prog.debug"
    finally:
        shutil.rmtree(place)


def test_named_through_the_debug_link(recorded: tuple[Path, str], built: Built,
                                      tmp_path: Path, linked: Path) -> None:
    """The link's name in the binary's ``.debug`` directory; a file there whose CRC32 is
    not the link's (same build id, one byte more) is not used, as gdb refuses it."""
    data, theirs = recorded
    shutil.copy(built.debug("prog"), linked)
    assert_named_as_perf(script(data, environment(tmp_path / "a")), theirs, built, ["prog"])
    with open(linked, "ab") as handle:
        handle.write(b"\0")
    assert ElfImage(str(linked)).build_id() == built.build_ids["prog"]
    assert_unnamed(script(data, environment(tmp_path / "b")), built, ["prog"])


def test_the_search_order(built: Built, tmp_path: Path) -> None:
    """The file itself first, then a twin, perf's cache, the debug directories, the
    debug link; a candidate of another build is skipped, whatever its name."""
    stripped = str(built.stripped("prog"))
    identity = built.build_ids["prog"]
    root, home, twins = tmp_path / "root", tmp_path / "home", tmp_path / "twins"
    twins.mkdir()
    search = DebugFiles([str(twins)], roots=[str(root)], home=str(home))
    assert search.find(str(built.full("prog")), None, "symbols") == str(built.full("prog"))
    assert search.find(stripped, None, "symbols") is None
    in_root = by_build_id(root, built.debug("prog"), identity)
    shutil.copy(built.full("cxx"), twins / "prog")  # the name, not the build
    shutil.copy(built.full("prog"), twins / "other-name")
    text = identity.hex()
    cached = home / ".debug" / ".build-id" / text[:2] / text[2:]
    cached.mkdir(parents=True)
    shutil.copy(built.debug("prog"), cached / "debug")
    expected = [twins / "other-name", cached / "debug", in_root]
    for place in expected:
        fresh = DebugFiles([str(twins)], roots=[str(root)], home=str(home))
        assert [fresh.find(stripped, None, want) for want in ("symbols", "dwarf")] \
            == [str(place)] * 2
        place.unlink()
    fresh = DebugFiles([str(twins)], roots=[str(root)], home=str(home))
    assert fresh.find(stripped, None, "symbols") is None
    in_root = by_build_id(root, built.debug("prog"), identity)
    assert debug_file(identity, str(root)) == str(in_root)


@pytest.fixture(scope="module")
def gdb_with_libc() -> str:
    """gdb, and libc's debug file, so that whole stacks compare name for name."""
    gdb = need_gdb()
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    image = ElfImage(libc) if Path(libc).exists() else None
    if image is None or debug_file(image.build_id(), "/usr/lib/debug") is None:
        unavailable("gdb names libc's frames from libc6-dbg, which is not installed")
    return gdb


@pytest.mark.parametrize("name", WITH_DWARF)
def test_stack_names_from_a_debug_directory_as_gdb(built: Built, tmp_path: Path, name: str,
                                                   gdb_with_libc: str) -> None:
    root = tmp_path / "root"
    by_build_id(root, built.debug(name), built.build_ids[name])
    env = environment(tmp_path / "cache", PYSFRAME_DEBUG_FILE_DIRECTORY=f"{root}:/usr/lib/debug")
    child = start_waiting(built.stripped(name))
    try:
        ours = stack_names(child.pid, env)
        theirs = gdb_names(child.pid, str(built.full(name)))
        as_gdb_finds_it = gdb_names(child.pid, "-iex",
                                    f"set debug-file-directory {root}:/usr/lib/debug")
    finally:
        stop(child)
    assert ours == theirs == as_gdb_finds_it
    assert "block_here" in ours or "shapes::block_here" in ours


def test_stack_names_through_the_debug_link_as_gdb(built: Built, tmp_path: Path,
                                                   linked: Path, gdb_with_libc: str) -> None:
    shutil.copy(built.debug("prog"), linked)
    child = start_waiting(built.stripped("prog"))
    try:
        ours = stack_names(child.pid, environment(tmp_path))
        theirs = gdb_names(child.pid)  # gdb follows the link itself
    finally:
        stop(child)
    assert ours == theirs
    assert ours[1:4] == ["block_here", "waiter", "main"]


def test_stack_names_from_a_dwz_supplementary_file_as_gdb(built: Built, tmp_path: Path,
                                                          gdb_with_libc: str) -> None:
    """prog's debug file after ``dwz -m``: the DWARF it shares with a second build moved
    to a supplementary file, which is not where its relative ``.gnu_debugaltlink`` name
    says but in the debug directory by its build id (where gdb looks too)."""
    if shutil.which("dwz") is None:
        missing("dwz", "apt-get install dwz")
    work = tmp_path / "dwz"
    work.mkdir()
    shutil.copy(built.debug("prog"), work / "prog.debug")
    source = built.root / "src" / "prog.c"
    subprocess.run(["gcc", "-O2", "-g", "-DVARIANT=1", "-Wl,--build-id", "-o",
                    str(work / "second"), str(source)], check=True, timeout=120)
    result = subprocess.run(["dwz", "-m", "common.debug", "prog.debug", "second"], cwd=work,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and (work / "common.debug").exists(), result.stderr
    assert ElfImage(str(work / "prog.debug")).section_header(".gnu_debugaltlink") is not None
    root = tmp_path / "root"
    by_build_id(root, work / "prog.debug", built.build_ids["prog"])
    by_build_id(root, work / "common.debug", build_id(work / "common.debug"))
    env = environment(tmp_path / "cache", PYSFRAME_DEBUG_FILE_DIRECTORY=f"{root}:/usr/lib/debug")
    child = start_waiting(built.stripped("prog"))
    try:
        ours = stack_names(child.pid, env)
        theirs = gdb_names(child.pid, "-iex", f"set debug-file-directory {root}:/usr/lib/debug")
    finally:
        stop(child)
    assert ours == theirs
    assert ours[1:4] == ["block_here", "waiter", "main"]

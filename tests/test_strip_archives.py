"""``sframe strip``: the result keeps the file's permissions and owner (a stripped program
still runs), in place or with ``-o`` as objcopy; static archives are stripped member by
member with the symbol index rewritten for the new offsets.

The oracles are GNU binutils 2.47.50 (``ar t``, ``nm -s``, ``objdump --sframe``) and the
system's gcc linking a program through the stripped archive's index (a missing one skips,
and fails under CI=true)."""

from __future__ import annotations

import os
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import missing, need_binutils

from conftest import FIXTURES
from pysframe.elf import ElfImage
from pysframe.elf.archive import ar_entries, archive_files

pytestmark = pytest.mark.skipif(not (FIXTURES / "2.47.50").exists(),
                                reason="no fixture objects (../shared/fixtures) here")
OBJECTS = FIXTURES / "2.47.50" / "x86_64" / "O2"
#: The fixture program's objects but main.o, which links against them.
LIBRARY = ["cfi", "control", "deep", "edge", "extras", "many", "realign", "recurse",
           "signals", "stackuse"]


def sframe(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "pysframe", *arguments], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env)


def need_gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        missing("gcc", "apt-get install gcc")
    return gcc


def run(program: Path) -> tuple[int, bytes]:
    done = subprocess.run([str(program)], capture_output=True, timeout=60)
    return done.returncode, done.stdout


def test_a_stripped_program_keeps_its_mode_and_runs(tmp_path: Path) -> None:
    program = tmp_path / "prog"
    shutil.copy(OBJECTS / "prog", program)
    program.chmod(0o751)
    expected = run(program)
    out = tmp_path / "out"
    assert sframe("strip", str(program), "-o", str(out)).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o751
    assert run(out) == expected
    inode = program.stat().st_ino
    done = sframe("strip", str(program))
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"sframe strip: {program}: 1 section dropped, written to {program}\n"
    assert program.stat().st_ino != inode  # a new file renamed over it
    assert stat.S_IMODE(program.stat().st_mode) == 0o751
    assert ElfImage(str(program)).sframe_sections() == []
    assert run(program) == expected
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".sframe-tmp-")]
    again = sframe("strip", str(program))  # nothing left to strip: untouched
    assert again.returncode == 1 and program.stat().st_ino != inode


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root")
def test_owner_and_set_id_bits_are_kept(tmp_path: Path) -> None:
    program = tmp_path / "prog"
    shutil.copy(OBJECTS / "prog", program)
    os.chown(program, 1234, 2345)
    program.chmod(0o6750)
    assert sframe("strip", str(program)).returncode == 0
    status = program.stat()
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (1234, 2345, 0o6750)
    shutil.copy(OBJECTS / "prog", tmp_path / "again")
    os.chown(tmp_path / "again", 1234, 2345)
    (tmp_path / "again").chmod(0o4755)
    assert sframe("strip", str(tmp_path / "again"), "-o", str(tmp_path / "out")).returncode == 0
    status = (tmp_path / "out").stat()
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (1234, 2345, 0o4755)


def test_a_symbolic_link_is_not_replaced(tmp_path: Path) -> None:
    shutil.copy(OBJECTS / "cfi.o", tmp_path / "cfi.o")
    (tmp_path / "link.o").symlink_to("cfi.o")
    done = sframe("strip", str(tmp_path / "link.o"))
    assert done.returncode == 2 and (tmp_path / "link.o").is_symlink()
    assert done.stderr == (f"sframe: {tmp_path}/link.o: is a symbolic link: name the file "
                           "itself, or write elsewhere with -o\n")


@pytest.fixture()
def library(tmp_path: Path) -> Path:
    """libfix.a: the fixture program's objects (one under a long name) but main.o, one
    assembled without SFrame, and a file that is not ELF; made by ar 2.47.50."""
    names = []
    for name in LIBRARY:
        target = f"{name}-with-a-long-member-name.o" if name == "deep" else f"{name}.o"
        shutil.copy(OBJECTS / f"{name}.o", tmp_path / target)
        names.append(target)
    (tmp_path / "plain.s").write_text(".text\n.globl plain\nplain:\n\tret\n")
    subprocess.run([need_binutils("as", "2.47.50"), "-o", str(tmp_path / "plain.o"),
                    str(tmp_path / "plain.s")], check=True, timeout=60)
    (tmp_path / "notes.txt").write_text("odd length\n!")
    names[2:2] = ["plain.o", "notes.txt"]
    subprocess.run([need_binutils("ar", "2.47.50"), "rcs", "libfix.a", *names], cwd=tmp_path,
                   check=True, timeout=60)
    shutil.copy(OBJECTS / "main.o", tmp_path / "main.o")
    return tmp_path / "libfix.a"


def index_of(path: Path) -> list[tuple[str, str]]:
    """(symbol, member) of the archive's index as ``nm -s`` prints it."""
    text = subprocess.run([need_binutils("nm", "2.47.50"), "-s", str(path)],
                          capture_output=True, text=True, check=True).stdout
    index = text.split("Archive index:\n")[1].split("\n\n")[0]
    return [tuple(line.split(" in ")) for line in index.splitlines()]  # type: ignore[misc]


def offsets_point_at_members(path: Path) -> None:
    """Every offset of the ``/`` index is where a member's header starts."""
    data = path.read_bytes()
    entries = list(ar_entries(data))
    index = next(e.contents for e in entries if e.raw_name == "/")
    count = struct.unpack_from(">I", index)[0]
    starts = {e.offset for e in entries if e.raw_name not in ("/", "//")}
    assert count and all(struct.unpack_from(">I", index, 4 * (1 + i))[0] in starts
                         for i in range(count))


def test_an_archive_is_stripped_member_by_member_and_links(library: Path) -> None:
    directory = library.parent
    gcc = need_gcc()
    reference = directory / "reference"
    subprocess.run([gcc, "-o", str(reference), "main.o", "libfix.a"], cwd=directory,
                   check=True, timeout=120, capture_output=True)
    out = directory / "stripped.a"
    done = sframe("strip", str(library), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"sframe strip: {library}: {len(LIBRARY)} members stripped, "
                           f"written to {out}\n")
    ar = need_binutils("ar", "2.47.50")
    listing = [subprocess.run([ar, "t", str(p)], capture_output=True, text=True,
                              check=True).stdout for p in (library, out)]
    assert listing[0] == listing[1]
    assert index_of(out) == index_of(library) and index_of(out)
    offsets_point_at_members(out)
    before = {m.name: m.contents for m in archive_files(library.read_bytes())}
    after = {m.name: m.contents for m in archive_files(out.read_bytes())}
    assert after["notes.txt"] == before["notes.txt"] and after["plain.o"] == before["plain.o"]
    dump = subprocess.run([need_binutils("objdump", "2.47.50"), "--sframe", "stripped.a"],
                          capture_output=True, text=True, cwd=directory).stdout
    assert "SFrame section" not in dump
    assert dump.count("No .sframe section present") == len(LIBRARY) + 1
    program = directory / "linked"
    linked = subprocess.run([gcc, "-o", str(program), "main.o", "stripped.a"], cwd=directory,
                            capture_output=True, text=True, timeout=120)
    assert linked.returncode == 0, linked.stderr
    assert "stripped.a(" not in linked.stderr, linked.stderr  # no member's .sframe read
    assert run(program) == run(reference)


def test_an_archive_is_stripped_in_place_keeping_its_mode(library: Path) -> None:
    library.chmod(0o640)
    index = index_of(library)
    assert sframe("strip", str(library)).returncode == 0
    assert stat.S_IMODE(library.stat().st_mode) == 0o640
    assert index_of(library) == index
    offsets_point_at_members(library)
    again = sframe("strip", str(library))
    assert again.returncode == 1
    assert again.stderr == f"sframe strip: {library}: no SFrame section, nothing to strip\n"


def test_thin_and_damaged_archives_are_refused_in_one_line(library: Path) -> None:
    directory = library.parent
    subprocess.run([need_binutils("ar", "2.47.50"), "rcsT", "thin.a", "cfi.o", "main.o"],
                   cwd=directory, check=True, timeout=60)
    thin = directory / "thin.a"
    before = thin.read_bytes()
    done = sframe("strip", str(thin))
    assert done.returncode == 2 and thin.read_bytes() == before
    assert done.stderr == (f"sframe: {thin}: a thin archive: its members are files of their "
                           "own; rewrite them and run `ar` again\n")
    data = bytearray(library.read_bytes())
    index = next(e for e in ar_entries(bytes(data)) if e.raw_name == "/")
    at = index.offset + 60
    for damage, message in (
            (struct.pack(">I", 0x10000000), "names 268435456 symbols, more than its"),
            (struct.pack(">II", 1, 0x9999), "names offset 0x9999, where no member starts")):
        broken = directory / "broken.a"
        broken.write_bytes(bytes(data[:at]) + damage + bytes(data[at + len(damage):]))
        done = sframe("strip", str(broken), "-o", str(directory / "out.a"))
        assert done.returncode == 2 and not (directory / "out.a").exists()
        assert done.stderr.startswith(f"sframe: {broken}: archive ")
        assert message in done.stderr and len(done.stderr.splitlines()) == 1
    bad = bytearray(OBJECTS.joinpath("cfi.o").read_bytes())
    bad[0x3C:0x3E] = b"\xff\xff"  # e_shnum past the file
    (directory / "cfi.o").write_bytes(bytes(bad))
    subprocess.run([need_binutils("ar", "2.47.50"), "r", "libfix.a", "cfi.o"], cwd=directory,
                   check=True, timeout=60)
    done = sframe("strip", str(library), "-o", str(directory / "out.a"))
    assert done.returncode == 2 and done.stderr.startswith(f"sframe: {library}(cfi.o): ")
    assert len(done.stderr.splitlines()) == 1


def test_set_id_bits_go_with_an_owner_that_cannot_be_given(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Not root: the file stays ours, and a set-user-ID (set-group-ID) bit is not kept on
    a file of another owner (group) than the one it was given for."""
    from pysframe import cachedir
    from pysframe.cli.files import write_output

    def refused(fd: int, uid: int, gid: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(cachedir.os, "fchown", refused)
    target = tmp_path / "out"
    write_output(str(target), b"data", mode=0o6755, owner=(os.geteuid() + 1, 4321))
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    write_output(str(target), b"data", mode=0o6755, owner=(os.geteuid(), 4321))
    assert stat.S_IMODE(target.stat().st_mode) == 0o4755

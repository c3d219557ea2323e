"""``sframe dump``, ``validate`` and ``audit`` on static archives, as objdump reads them.

The oracle is ``objdump --sframe`` of the binutils that made the members (tools/install-
oracles.sh installs them; a missing one skips, and fails under CI=true): an archive's dump
(``In archive lib.a:``, then each member's block under its own name, a member without
SFrame as ``No .sframe section present``, a member that is not ELF an error on stderr and
exit status 1) must be byte for byte objdump's, for plain archives of V1 (2.40), V2
(2.44) and V3 (2.46, 2.47.50) objects with long member names, and for thin archives
(``ar T``: the members are files of their own, shown by their path from the archive's
directory)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_binutils

from conftest import FIXTURES
from pysframe.elf import ElfImage

pytestmark = pytest.mark.skipif(not (FIXTURES / "2.47.50").exists(),
                                reason="no fixture objects (../shared/fixtures) here")

VERSIONS = ["2.40", "2.44", "2.46", "2.47.50"]
#: Fixture objects with SFrame, one copied under a name longer than ar's 15 characters.
WITH_SFRAME = ["cfi.o", "main.o", "deep.o"]
NO_SFRAME_SOURCE = ".text\n.globl plain\nplain:\n\tret\n"


def sframe(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "pysframe", *arguments], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env)


def objdump(version: str, *arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([need_binutils("objdump", version), "--sframe", *arguments],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def make_members(version: str, directory: Path) -> list[str]:
    """Members for an archive of ``version``'s objects: SFrame ones (one with a long
    name), one assembled without SFrame, one that is not ELF. Their file names. (For 2.40
    the one without SFrame comes last and none is not ELF: objdump 2.40 stops after a
    member without SFrame, "plain.o: file format not recognized", exit status 1; 2.44
    and later go on.)"""
    directory.mkdir(parents=True, exist_ok=True)
    source = FIXTURES / version / "x86_64" / "O2"
    names = []
    for name in WITH_SFRAME:
        target = "a-member-with-a-long-name.o" if name == "deep.o" else name
        shutil.copy(source / name, directory / target)
        names.append(target)
    (directory / "plain.s").write_text(NO_SFRAME_SOURCE)
    subprocess.run([need_binutils("as", version), "-o", str(directory / "plain.o"),
                    str(directory / "plain.s")], check=True, timeout=60)
    (directory / "notes.txt").write_text("not an object\n")
    if version == "2.40":
        return [*names, "plain.o"]
    return [*names[:1], "plain.o", "notes.txt", *names[1:]]


def make_archive(version: str, directory: Path, thin: bool = False,
                 name: str = "lib.a") -> Path:
    members = make_members(version, directory)
    archive = directory / name
    flags = "rcsT" if thin else "rcs"
    subprocess.run([need_binutils("ar", version), flags, name, *members], cwd=directory,
                   check=True, timeout=60)
    return archive


@pytest.mark.parametrize("version", VERSIONS)
def test_archive_dump_is_objdumps(version: str, tmp_path: Path) -> None:
    make_archive(version, tmp_path)
    theirs = objdump(version, "lib.a", cwd=tmp_path)
    ours = sframe("dump", "lib.a", cwd=tmp_path)
    assert "In archive lib.a:" in theirs.stdout and "No .sframe section" in theirs.stdout
    assert ours.stdout == theirs.stdout
    if version == "2.40":
        assert (ours.returncode, ours.stderr) == (0, "")
        return
    assert ours.returncode == 1  # objdump's is 1 too, from 2.46 on (2.44: 0)
    assert ours.stderr.splitlines() == ["sframe: lib.a(notes.txt): file format not recognized "
                                        "(not an ELF file) at offset 0x0"]


def test_archive_among_files_and_from_another_directory(tmp_path: Path) -> None:
    make_archive("2.47.50", tmp_path / "sub")
    shutil.copy(FIXTURES / "2.47.50" / "x86_64" / "O2" / "cfi.o", tmp_path / "cfi.o")
    arguments = ["cfi.o", "sub/lib.a", "cfi.o"]
    theirs = objdump("2.47.50", *arguments, cwd=tmp_path)
    ours = sframe("dump", *arguments, cwd=tmp_path)
    assert ours.stdout == theirs.stdout


def test_thin_archive_dump_is_objdumps(tmp_path: Path) -> None:
    make_members("2.47.50", tmp_path / "objects")
    (tmp_path / "sub").mkdir()
    members = ["../objects/cfi.o", "../objects/plain.o", "../objects/main.o"]
    subprocess.run([need_binutils("ar", "2.47.50"), "rcsT", "thin.a", *members],
                   cwd=tmp_path / "sub", check=True, timeout=60)
    for cwd, path in ((tmp_path, "sub/thin.a"), (tmp_path / "sub", "thin.a")):
        theirs = objdump("2.47.50", path, cwd=cwd)
        assert "objects/cfi.o:     file format" in theirs.stdout
        ours = sframe("dump", path, cwd=cwd)
        assert (ours.stdout, ours.returncode) == (theirs.stdout, 0), ours.stderr
    (tmp_path / "objects" / "plain.o").unlink()
    gone = sframe("dump", "sub/thin.a", cwd=tmp_path)
    assert gone.returncode != 0
    assert gone.stderr.splitlines() == [
        "sframe: sub/thin.a(../objects/plain.o): cannot read: No such file or directory"]
    assert "objects/main.o:     file format" in gone.stdout  # the other members still


def test_empty_and_damaged_archives(tmp_path: Path) -> None:
    (tmp_path / "empty.a").write_bytes(b"!<arch>\n")
    theirs = objdump("2.47.50", "empty.a", cwd=tmp_path)
    ours = sframe("dump", "empty.a", cwd=tmp_path)
    assert (ours.stdout, ours.returncode) == (theirs.stdout, theirs.returncode)
    archive = make_archive("2.47.50", tmp_path / "d")
    data = bytearray(archive.read_bytes())
    last = data.rfind(b"`\n")
    data[last:last + 2] = b"XX"  # the last member's header terminator
    (tmp_path / "damaged.a").write_bytes(bytes(data))
    damaged = sframe("dump", "damaged.a", cwd=tmp_path)
    assert damaged.returncode != 0
    assert damaged.stderr.splitlines()[-1] == (
        f"sframe: damaged.a: damaged archive member header at offset {last - 58:#x}")
    assert "cfi.o:     file format" in damaged.stdout


def test_archive_json_names_each_member(tmp_path: Path) -> None:
    make_archive("2.47.50", tmp_path)
    run = sframe("dump", "--json", "lib.a", cwd=tmp_path)
    documents = json.loads(run.stdout)
    assert [(d["file"], d["member"], len(d["sections"])) for d in documents] == [
        ("lib.a(cfi.o)", "cfi.o", 1), ("lib.a(plain.o)", "plain.o", 0),
        ("lib.a(main.o)", "main.o", 1),
        ("lib.a(a-member-with-a-long-name.o)", "a-member-with-a-long-name.o", 1)]


def _corrupt_sframe(path: Path) -> None:
    """The object's SFrame version byte set to an unknown version."""
    image = ElfImage(str(path))
    offset = image.sframe_sections()[0].file_offset
    data = bytearray(path.read_bytes())
    data[offset + 2] = 0x7F
    path.write_bytes(bytes(data))


def test_validate_names_members_and_fails_for_any(tmp_path: Path) -> None:
    make_archive("2.47.50", tmp_path)
    run = sframe("validate", "lib.a", cwd=tmp_path)
    assert run.stdout.splitlines() == ["lib.a(plain.o): no SFrame section, nothing to validate"]
    assert run.stderr.splitlines() == ["sframe: lib.a(notes.txt): file format not recognized "
                                       "(not an ELF file) at offset 0x0"]
    assert run.returncode != 0
    subprocess.run([need_binutils("ar", "2.47.50"), "d", "lib.a", "notes.txt"], cwd=tmp_path,
                   check=True, timeout=60)
    assert sframe("validate", "lib.a", cwd=tmp_path).returncode == 0
    required = sframe("validate", "--require", "lib.a", cwd=tmp_path)
    assert required.returncode == 1
    assert "lib.a(plain.o): no SFrame section" in required.stderr
    _corrupt_sframe(tmp_path / "main.o")
    subprocess.run([need_binutils("ar", "2.47.50"), "r", "lib.a", "main.o"], cwd=tmp_path,
                   check=True, timeout=60)
    bad = sframe("validate", "--json", "lib.a", cwd=tmp_path)
    assert bad.returncode == 1
    documents = {d["file"]: d for d in json.loads(bad.stdout)}
    assert "error" in documents["lib.a(main.o)"] or not documents["lib.a(main.o)"]["valid"]
    assert documents["lib.a(cfi.o)"]["valid"]


def test_audit_reads_thin_archives_as_plain_ones(tmp_path: Path) -> None:
    make_archive("2.47.50", tmp_path, name="lib.a")
    subprocess.run([need_binutils("ar", "2.47.50"), "rcsT", "thin.a", "cfi.o", "plain.o",
                    "notes.txt", "main.o", "a-member-with-a-long-name.o"], cwd=tmp_path,
                   check=True, timeout=60)
    report = tmp_path / "audit.json"
    run = subprocess.run([sys.executable, "-m", "pysframe", "audit", "--no-cache", "-j", "1",
                          "--json", str(report), "lib.a", "thin.a"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 0, run.stderr
    files = json.loads(report.read_text())["files"]
    plain = [(f["path"].removeprefix("lib.a"), f["kind"], f["sframe"]) for f in files
             if f["path"].startswith("lib.a")]
    thin = [(f["path"].removeprefix("thin.a"), f["kind"], f["sframe"]) for f in files
            if f["path"].startswith("thin.a")]
    assert [name for name, _, _ in plain] == [
        "(cfi.o)", "(plain.o)", "(main.o)", "(a-member-with-a-long-name.o)"]
    assert thin == plain

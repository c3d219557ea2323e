"""``sframe audit`` against hostile trees and files (issue 25): a tree deeper than Python's
recursion limit, paths that are not UTF-8, damaged ELF files and truncated archives, and
package bombs. Each case is one finding (or one counted file); the audit goes on and ends
with its documented exit status, never a traceback."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.hostile import sframe as sframe_run

from conftest import FIXTURES

PROGRAM = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"
pytestmark = pytest.mark.skipif(not PROGRAM.exists(), reason="../shared/fixtures is not present")


def audit(*arguments: str, cache: Path, timeout: float = 300
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", "audit", *arguments],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, XDG_CACHE_HOME=str(cache)))


def test_a_tree_deeper_than_the_recursion_limit_is_audited(tmp_path: Path) -> None:
    top = tmp_path / "deep"
    top.mkdir()
    level = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1200):  # by descriptor: no path of the test's own grows long
        os.mkdir("d", dir_fd=level)
        deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=level)
        os.close(level)
        level = deeper
    target = os.open("prog", os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=level)
    os.write(target, PROGRAM.read_bytes())
    os.close(target)
    os.close(level)
    report = tmp_path / "deep.json"
    run = audit(str(top), "--json", str(report), cache=tmp_path / "cache")
    assert run.returncode in (0, 1) and "Traceback" not in run.stderr, run.stderr[-500:]
    assert "recursion" not in run.stderr
    facts = json.loads(report.read_text())
    assert [item["path"].split("/").count("d") for item in facts["files"]] == [1200]
    assert facts["summary"]["elf_files"] == 1


@pytest.fixture(autouse=True)
def _no_deep_tree_left(tmp_path: Path) -> Iterator[None]:
    """The deep tree is removed here: pytest's own clean-up (shutil.rmtree, recursive in
    Python 3.11) would fail on it in a later run."""
    yield
    deep = tmp_path / "deep"
    if deep.exists():
        subprocess.run(["rm", "-rf", str(deep)], check=True, timeout=120)


def test_a_path_that_is_not_utf8_is_shown_and_kept(tmp_path: Path) -> None:
    """Paths are bytes: a directory name that is not UTF-8 is shown with U+FFFD (and
    escaped) on the page and in the table, and kept as it is in the JSON."""
    top = tmp_path / "odd"
    name = b"lib-\xff\xfe<&>"
    directory = os.path.join(bytes(top), name)
    os.makedirs(directory)
    shutil.copy(PROGRAM, os.path.join(directory, b"prog"))
    ar = shutil.which("ar")
    if ar is not None:  # an archive mixing V2 and V3: its path is printed in the table
        subprocess.run([ar, "rcs", os.path.join(directory, b"libmixed.a"),
                        str(FIXTURES / "2.44" / "x86_64" / "O2" / "deep.o"),
                        str(FIXTURES / "2.46" / "x86_64" / "O2" / "cfi.o")], check=True)
    report, page = tmp_path / "odd.json", tmp_path / "odd.html"
    run = subprocess.run([sys.executable, "-m", "pysframe", "audit", str(top), "--json",
                          str(report), "--html", str(page)], capture_output=True, timeout=300,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    stderr = run.stderr.decode(errors="replace")
    assert run.returncode in (0, 1) and "Traceback" not in stderr, stderr[-500:]
    text = page.read_text(encoding="utf-8")  # written, and valid UTF-8
    assert "lib-\ufffd\ufffd&lt;&amp;&gt;" in text and "lib-\ufffd\ufffd<&>" not in text
    if ar is not None:
        assert "lib-\ufffd\ufffd<&>/libmixed.a" in run.stdout.decode("utf-8")
    facts = json.loads(report.read_text())
    assert {os.fsencode(item["path"]) for item in facts["files"]} >= {
        os.path.join(directory, b"prog")}


def _with_symtab(tmp_path: Path, size: int | None = None, offset: int | None = None) -> Path:
    """A copy of the program whose .symtab header has another size or offset."""
    data = bytearray(PROGRAM.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    names_at = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)[0]
    for index in range(shnum):
        header = shoff + index * shentsize
        name_offset, _ = struct.unpack_from("<II", data, header)
        end = data.index(b"\0", names_at + name_offset)
        if data[names_at + name_offset:end] == b".symtab":
            if size is not None:
                struct.pack_into("<Q", data, header + 0x20, size)
            if offset is not None:
                struct.pack_into("<Q", data, header + 0x18, offset)
    path = tmp_path / f"prog-{size}-{offset}"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("damage", ["size", "offset"])
def test_a_damaged_symbol_table_is_one_finding(tmp_path: Path, damage: str) -> None:
    top = tmp_path / "bin"
    top.mkdir()
    broken = (_with_symtab(top, size=1 << 40) if damage == "size"
              else _with_symtab(top, offset=(1 << 64) - 1))
    shutil.copy(PROGRAM, top / "good")
    report = tmp_path / "r.json"
    run = audit(str(top), "--json", str(report), cache=tmp_path / "cache")
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 1, (run.returncode, run.stderr)
    files = {Path(item["path"]).name: item for item in json.loads(report.read_text())["files"]}
    assert files["good"]["kind"] == "ELF"
    assert files[broken.name]["kind"] == "damaged ELF"
    assert ".symtab" in files[broken.name]["error"]


def test_a_truncated_archive_is_damage_not_a_text_file(tmp_path: Path) -> None:
    if shutil.which("ar") is None:
        pytest.skip("needs ar")
    top = tmp_path / "lib"
    top.mkdir()
    archive = top / "libt.a"
    subprocess.run(["ar", "rcs", str(archive), str(FIXTURES / "2.46" / "x86_64" / "O2" /
                                                    "cfi.o"),
                    str(FIXTURES / "2.46" / "x86_64" / "O2" / "deep.o")], check=True)
    data = archive.read_bytes()
    archive.write_bytes(data[:len(data) - 100])  # the last member cut short
    report = tmp_path / "r.json"
    run = audit(str(top), "--json", str(report), cache=tmp_path / "cache")
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    facts = json.loads(report.read_text())
    assert facts["summary"]["not_elf"] == 0
    assert facts["summary"]["damaged"] >= 1
    assert any("runs past the end" in item.get("error", "") for item in facts["files"])


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "c")))


def test_a_file_that_shrinks_while_judged_is_not_a_crash(tmp_path: Path) -> None:
    """A large file truncated between being opened and being read (a log rotated with
    copytruncate, a package being upgraded): a mapping of it would die of SIGBUS at the
    next access; the audit judges a private copy."""
    big = tmp_path / "big.so"
    big.write_bytes(PROGRAM.read_bytes() + bytes(4 << 20))  # over the read-whole limit
    code = f"""
import os
from pysframe.audit import run
judge = run.audit_bytes
def shrinking(name, data):
    os.truncate({str(big)!r}, 0)  # after load(), before the bytes are used
    return judge(name, data)
run.audit_bytes = shrinking
[facts] = run.audit_path({str(big)!r}, use_cache=False)
print(facts.kind.value)
"""
    result = _python(code, tmp_path)
    assert result.returncode == 0, (result.returncode, result.stderr[-300:])
    assert result.stdout.strip() == "ELF"


def test_a_dead_worker_costs_its_file_not_the_run(tmp_path: Path) -> None:
    files = []
    for index in range(12):
        path = tmp_path / f"prog{index:02d}"
        shutil.copy(PROGRAM, path)
        files.append(str(path))
    code = f"""
import os, signal
from pysframe.audit import run
judge = run.audit_path
def dying(path, use_cache=True):
    if path.endswith("prog05"):
        os.kill(os.getpid(), signal.SIGBUS)
    return judge(path, use_cache)
run.audit_path = dying
for path, found in run.on_pool({files!r}, 2, use_cache=False):
    print(os.path.basename(path), [facts.kind.value for facts in found])
"""
    result = _python(code, tmp_path)
    assert result.returncode == 0, (result.returncode, result.stderr[-500:])
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [Path(path).name for path in files]
    assert [line for line in lines if "unreadable" in line] == ["prog05 ['unreadable']"]
    assert sum("'ELF'" in line for line in lines) == 11


def test_a_bug_of_ours_is_not_called_damage(tmp_path: Path) -> None:
    """An exception that is not an input error is ours: the file is reported as an
    internal error (not 'damaged ELF'), the others are judged, and the run ends with 2."""
    top = tmp_path / "bin"
    top.mkdir()
    shutil.copy(PROGRAM, top / "a")
    shutil.copy(PROGRAM, top / "b")
    report = tmp_path / "r.json"
    code = f"""
import sys
from pysframe.audit import facts
from pysframe.cli.entry import main
real = facts._coverage
def buggy(image, found):
    if image.path.endswith("/a"):
        raise KeyError("a bug of ours")
    return real(image, found)
facts._coverage = buggy
sys.argv = ["sframe", "audit", {str(top)!r}, "--no-cache", "-j", "1", "--json", {str(report)!r}]
main()
"""
    result = _python(code, tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr[-300:])
    files = {Path(item["path"]).name: item for item in json.loads(report.read_text())["files"]}
    assert files["a"]["kind"] == "internal error" and "KeyError" in files["a"]["error"]
    assert files["b"]["kind"] == "ELF"
    assert "1 hit an internal error" in result.stdout


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, read as a file (the bomb's member, never held)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def _ar(path: Path, entries: list[tuple[str, bytes]]) -> None:
    out = bytearray(b"!<arch>\n")
    for name, data in entries:
        out += (name.ljust(16) + "0".ljust(12) + "0".ljust(6) + "0".ljust(6) + "100644".ljust(8)
                + str(len(data)).ljust(10) + "`\n").encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    path.write_bytes(bytes(out))


def _package(path: Path, fill: Callable[[tarfile.TarFile], None]) -> int:
    """A .deb whose data.tar.zst is what ``fill`` writes (streamed through zstd)."""
    import zstandard

    compressed = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(compressed, closefd=False) as sink, \
            tarfile.open(fileobj=sink, mode="w|") as archive:
        fill(archive)
    control = io.BytesIO()
    with tarfile.open(fileobj=control, mode="w:xz"):
        pass
    _ar(path, [("debian-binary", b"2.0\n"), ("control.tar.xz", control.getvalue()),
               ("data.tar.zst", compressed.getvalue())])
    return path.stat().st_size


def test_a_package_bomb_costs_bounded_memory(tmp_path: Path) -> None:
    """A .deb of a few KB whose data.tar.zst unpacks to 1.5 GiB: read through as a stream
    within the unpacked bound (one finding), never held."""
    def bomb(archive: tarfile.TarFile) -> None:
        member = tarfile.TarInfo("./usr/lib/zeros")
        member.size = 3 << 29
        archive.addfile(member, _Zeros(member.size))
        shutil.copy(PROGRAM, tmp_path / "prog")
        archive.add(str(tmp_path / "prog"), "./usr/bin/prog")  # past the bound: left out

    size = _package(tmp_path / "bomb.deb", bomb)
    assert size < 200_000
    report = tmp_path / "r.json"
    run = sframe_run("audit", str(tmp_path / "bomb.deb"), "--no-cache", "--json", str(report),
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=300)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-300:]
    assert run.peak_mib < 400, f"peak {run.peak_mib:.0f} MiB"
    [facts] = json.loads(report.read_text())["files"]
    assert facts["kind"] == "damaged ELF" and "unpacks to more than" in facts["error"]


def test_a_package_of_too_many_members_is_cut_off(tmp_path: Path) -> None:
    def many(archive: tarfile.TarFile) -> None:
        for index in range(120_000):
            archive.addfile(tarfile.TarInfo(f"./e/{index}"), io.BytesIO())

    _package(tmp_path / "many.deb", many)
    report = tmp_path / "r.json"
    run = sframe_run("audit", str(tmp_path / "many.deb"), "--no-cache", "--json", str(report),
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=300)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-300:]
    assert run.peak_mib < 400, f"peak {run.peak_mib:.0f} MiB"
    [facts] = json.loads(report.read_text())["files"]
    assert "more than 100,000 members" in facts["error"]


def test_outputs_follow_the_umask_and_no_link(tmp_path: Path) -> None:
    """``audit --json`` follows the umask like every other output (it was 0600); ``inject``
    gives its output the input's permissions on the new file, never through a symbolic
    link at the output (``os.chmod`` followed it to its target); ``strip`` keeps the
    execute bit (a stripped program still runs)."""
    previous = os.umask(0o022)
    try:
        report = tmp_path / "r.json"
        run = audit(str(PROGRAM), "--json", str(report), cache=tmp_path / "cache")
        assert run.returncode in (0, 1), run.stderr
        assert report.stat().st_mode & 0o777 == 0o644
        unpacked = tmp_path / "plain"
        made = subprocess.run([sys.executable, "-m", "pysframe", "strip", str(PROGRAM), "-o",
                               str(unpacked)], capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        assert unpacked.stat().st_mode & 0o777 == PROGRAM.stat().st_mode & 0o777
        os.chmod(unpacked, 0o755)
        target = tmp_path / "target"
        target.write_bytes(b"")
        os.chmod(target, 0o600)
        link = tmp_path / "out"
        link.symlink_to(target)
        injected = subprocess.run([sys.executable, "-m", "pysframe", "inject", str(unpacked),
                                   "-o", str(link)], capture_output=True, text=True,
                                  timeout=300, env=dict(os.environ,
                                                        XDG_CACHE_HOME=str(tmp_path / "c")))
        assert injected.returncode == 0, injected.stderr
        assert target.stat().st_mode & 0o777 == 0o600  # written through, mode untouched
        assert link.is_symlink()
        fresh = tmp_path / "fresh"
        again = subprocess.run([sys.executable, "-m", "pysframe", "inject", str(unpacked),
                                "-o", str(fresh)], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "c")))
        assert again.returncode == 0, again.stderr
        assert fresh.stat().st_mode & 0o777 == 0o755
    finally:
        os.umask(previous)


def test_the_result_cache_is_bounded_oldest_out(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from pysframe import cachedir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = cachedir.describe(1, [b"x"])
    for index in range(20):
        cachedir.store("audit/facts.v99", bytes([index, 1, 2, 3]), bytes(1000), source)
        path = cachedir.entry_path("audit/facts.v99", bytes([index, 1, 2, 3]))
        assert path is not None
        os.utime(path, (1_000_000 + index, 1_000_000 + index))  # entry i written at time i
    size = os.path.getsize(str(cachedir.entry_path("audit/facts.v99", bytes([0, 1, 2, 3]))))
    freed = cachedir.prune("audit/facts.v99", 5 * size)
    assert freed == 15 * size
    left = sorted(path.name for path in (tmp_path / "cache" / "pysframe" / "audit").rglob("*.v99"))
    assert left == sorted(Path(str(cachedir.entry_path("audit/facts.v99", bytes([i, 1, 2, 3])))
                               ).name for i in range(15, 20))
    # the command prunes at the end of a run
    run = audit(str(PROGRAM), cache=tmp_path / "cache2", timeout=120)
    assert run.returncode in (0, 1)
    assert list((tmp_path / "cache2" / "pysframe" / "audit").rglob("*.facts.*"))
    zero = subprocess.run([sys.executable, "-m", "pysframe", "audit", str(PROGRAM)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache2"),
                                   PYSFRAME_AUDIT_CACHE_MB="0"))
    assert zero.returncode in (0, 1)
    assert list((tmp_path / "cache2" / "pysframe" / "audit").rglob("*.facts.*")) == []

"""``sframe script -o FILE``: the text written into a temporary file beside FILE, the -j
workers writing their own part to it as they do to standard output
(cli.files.Output), then renamed over FILE once the run has succeeded; a link, a device
or a FIFO is written through, a directory refused, an input never overwritten; a failed
run leaves FILE as it was and no temporary file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.hostile import sframe
from tests.support.perf_text import held_to_perfs_text

from conftest import FIXTURES
from pysframe.cli.script import ENGINE_VARIABLE, run_script

LUA = FIXTURES / "real" / "lua-2.46-x86_64"


def _scalar_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setenv(ENGINE_VARIABLE, "scalar")
    reference = tmp_path / "reference.txt"
    assert run_script(str(LUA / "perf.data"), binaries=[str(LUA)], output=str(reference),
                      show_stops=False, report=lambda message: None, jobs=1) == 0
    return reference.read_bytes()


def _leftovers(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith(".sframe-tmp-")]


@pytest.mark.parametrize("engine", ["vector", "scalar"])
def test_workers_write_the_file_in_order(engine: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """-j 3 into a file that is there already: the same bytes as one process makes, the
    file replaced (a new inode) with the mode a new file gets, nothing else left."""
    from pysframe.session import vector as vector_session

    expected = _scalar_text(tmp_path, monkeypatch)
    monkeypatch.setattr(vector_session, "CHUNK", 512)  # (many ranges, claimed by turns)
    monkeypatch.setenv(ENGINE_VARIABLE, engine)
    target = tmp_path / "out" / "script.txt"
    target.parent.mkdir()
    target.write_text("old\n")
    old_inode = target.stat().st_ino
    assert run_script(str(LUA / "perf.data"), binaries=[str(LUA)], output=str(target),
                      show_stops=False, report=lambda message: None, jobs=3) == 0
    assert target.read_bytes() == expected
    held_to_perfs_text(LUA / "perf.data", target.read_bytes())  # (the oracle: perf's text)
    assert target.stat().st_ino != old_inode
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert _leftovers(target.parent) == []


def test_a_failed_run_keeps_the_old_file_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pysframe.report import perf_script_chunks

    real = perf_script_chunks.chunk_text
    made: list[int] = []

    def failing(*args: object, **kwargs: object) -> str:
        made.append(1)
        if len(made) == 2:
            raise RuntimeError("the second chunk fails")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(perf_script_chunks, "chunk_text", failing)
    from pysframe.session import vector as vector_session

    monkeypatch.setattr(vector_session, "CHUNK", 512)
    monkeypatch.setenv(ENGINE_VARIABLE, "vector")
    target = tmp_path / "script.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        run_script(str(LUA / "perf.data"), binaries=[str(LUA)], output=str(target),
                   show_stops=False, report=lambda message: None, jobs=1)
    assert target.read_text() == "old\n"
    assert _leftovers(tmp_path) == []


def test_a_link_is_written_through_a_directory_refused_an_input_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _scalar_text(tmp_path, monkeypatch)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    real_file = tmp_path / "real.txt"
    real_file.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real_file)
    run = sframe("script", str(LUA / "perf.data"), "--binaries", str(LUA), "-o", str(link),
                 env=env)
    assert run.returncode == 0, run.stderr
    assert link.is_symlink() and real_file.read_bytes() == expected
    run = sframe("script", str(LUA / "perf.data"), "--binaries", str(LUA), "-o",
                 str(tmp_path), env=env)
    assert run.returncode == 2 and "is a directory" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    copy = tmp_path / "perf.data"
    copy.write_bytes((LUA / "perf.data").read_bytes())
    before = copy.read_bytes()
    run = sframe("script", str(copy), "--binaries", str(LUA), "-o", str(copy), env=env)
    assert run.returncode == 2 and "refusing to overwrite an input" in run.stderr
    assert copy.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_a_fifo_is_written_through(tmp_path: Path) -> None:
    """The reader of a FIFO named by -o gets the text as it is made (no file replaces it)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = subprocess.Popen([sys.executable, "-m", "pysframe", "script",
                                str(LUA / "perf.data"), "--binaries", str(LUA), "-o",
                                str(fifo)], env=env, stderr=subprocess.PIPE)
    with open(fifo, "rb") as reader:
        text = reader.read()
    assert command.wait(timeout=120) == 0
    assert text.startswith(b"lua ") and text.endswith(b"\n\n")
    assert fifo.exists() and not fifo.is_file()


def test_a_failed_write_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """-o onto a full device: one line naming it, exit 2 (as write_output said it), on the
    batch pipeline and on the sample-by-sample path."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for engine in ("vector", "scalar"):
        run = sframe("script", str(LUA / "perf.data"), "--binaries", str(LUA), "-o",
                     "/dev/full", env={**env, ENGINE_VARIABLE: engine})
        assert run.returncode == 2
        assert run.stderr.strip().splitlines() == [
            "sframe: /dev/full: cannot write: No space left on device"], run.stderr

"""`sframe stack` through JIT frames: the example JIT (``python -m pysframe.jit.example``)
registers its code through the GDB JIT interface; gdb and we name the same frames, live and
on a gcore, and our text shows the JIT frames' file as ``[jit]``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_stack_gdb import gdb_stacks, pytestmark, sframe_stacks  # noqa: F401 (the marks)

JIT_NAMES = ["jit_call_native", "jit_apply", "jit_evaluate", "jit_interpret"]


@pytest.fixture(scope="module")
def jit_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("needs a C compiler (the GDB JIT interface's library is built with it)")
    cache = tmp_path_factory.mktemp("jit-cache")
    child = subprocess.Popen([sys.executable, "-m", "pysframe.jit.example"],
                             stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, XDG_CACHE_HOME=str(cache)))
    try:
        assert child.stdout is not None and child.stdout.readline().startswith("ready ")
        yield child
    finally:
        child.kill()
        child.wait()


def same_as_gdb(ours: dict[int, list[str]], theirs: dict[int, list[str]]) -> None:
    """Frame for frame; a frame neither can name is ``??`` to gdb, ``[unknown]`` to us."""
    assert sorted(ours) == sorted(theirs)
    for tid, names in theirs.items():
        assert [name if name != "??" else "[unknown]" for name in names] == ours[tid]


def test_jit_frames_are_unwound_and_named_as_gdb_names_them(
        jit_process: subprocess.Popen[str], tmp_path: Path) -> None:
    pid = str(jit_process.pid)
    ours = sframe_stacks(pid, cache=tmp_path)
    (names,) = ours.values()
    assert names[1:5] == JIT_NAMES  # under pause(), above libffi
    assert len(names) > 10 and names[-1] == "_start"  # through them, to the entry
    same_as_gdb(ours, gdb_stacks("-p", pid))
    text = subprocess.run([sys.executable, "-m", "pysframe", "stack", pid],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "jit_apply+0x13 ([jit])" in text.stdout
    if shutil.which("gcore") is None:
        pytest.skip("needs gcore (shipped with gdb) for the core half")
    prefix = tmp_path / "core"
    subprocess.run(["gcore", "-o", str(prefix), pid], capture_output=True, timeout=120,
                   check=True)
    core = f"{prefix}.{pid}"
    from_core = sframe_stacks("--core", core, cache=tmp_path)
    assert list(from_core.values()) == list(ours.values())
    same_as_gdb(from_core, gdb_stacks(os.readlink(f"/proc/{pid}/exe"), core))


def test_demo_jit_prints_the_jit_frames_and_ends_its_child(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "pysframe", "demo", "--jit"],
                         capture_output=True, text=True, timeout=180,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path)))
    assert run.returncode == 0, run.stderr
    pid = int(run.stdout.split("PID ", 1)[1].split(":", 1)[0])
    for name in JIT_NAMES:
        assert f"{name}+0x13 ([jit])" in run.stdout
    assert not os.path.exists(f"/proc/{pid}")  # ended (and reaped)

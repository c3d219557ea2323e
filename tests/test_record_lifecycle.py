"""``sframe record`` of a command whose process forks, the child execs another program
that dlopens a library with SFrame and exits during the recording (root and BPF, as
tests/test_record.py): the child's samples in the library are walked to ``_start``, and
the file holds the fork, the exec's COMM and the exit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.test_record_bpf import REASON, objects, settled

from pysframe.elf import ElfImage
from pysframe.sources.perf_data import open_perf_data
from pysframe.sources.perf_records import Comm, Task

pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

LIBRARY = r"""
__attribute__((noinline)) long lib_inner(long n) { volatile long s = 0;
  for (long i = 0; i < n; i++) s += i ^ (i >> 3); return s; }
__attribute__((noinline)) long lib_outer(long n) { return lib_inner(n) + 1; }
long lib_work(long rounds) { long t = 0; for (long r = 0; r < rounds; r++) t += lib_outer(1000000);
  return t; }
"""
#: The worker waits a moment after dlopen: the library's table is loaded when the side band
#: reports its mapping (a few ms, and generating its merged table the first time), and the
#: samples taken before that have no rows for it; the test is about what follows.
WORKER = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
  void *library = dlopen(argv[1], RTLD_NOW);
  if (!library) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  usleep(500000);
  long (*work)(long) = (long (*)(long))dlsym(library, "lib_work");
  return work(250) == 42; }
"""
PARENT = r"""
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) long parent_spin(long n) { volatile long s = 0;
  for (long i = 0; i < n; i++) s += i; return s; }
int main(int argc, char **argv) {
  pid_t child = fork();
  if (child == 0) { execl(argv[1], "worker", argv[2], (char *)0); _exit(127); }
  long t = 0; for (int r = 0; r < 150; r++) t += parent_spin(1000000);
  int status; waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? (int)(t == 42) : 3; }
"""


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    directory = tmp_path_factory.mktemp("lifecycle")
    built = {}
    for name, source, options in (("plain.so", LIBRARY, ["-shared", "-fPIC"]),
                                  ("worker", WORKER, ["-ldl"]), ("parent", PARENT, [])):
        (directory / f"{name}.c").write_text(source)
        subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(directory / name),
                        str(directory / f"{name}.c"), *options], check=True)
        built[name] = directory / name
    # The library with SFrame of its own (a V3 section, as the kernel takes it).
    built["libwork.so"] = directory / "libwork.so"
    run = subprocess.run([sys.executable, "-m", "pysframe", "inject", str(built["plain.so"]),
                          "-o", str(built["libwork.so"])], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert ElfImage(str(built["libwork.so"])).sframe_sections()
    return built


def test_fork_exec_dlopen_and_exit_during_the_recording(programs: dict[str, Path],
                                                       tmp_path: Path) -> None:
    before = objects()
    output = tmp_path / "lifecycle.perf.data"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-m", "pysframe", "record", "-o", str(output), "--",
                          str(programs["parent"]), str(programs["worker"]),
                          str(programs["libwork.so"])], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "refuse" not in run.stderr  # the library's own V3 table was loaded
    assert settled(before) == before
    text = subprocess.run([sys.executable, "-m", "pysframe", "script", str(output)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert text.returncode == 0, text.stderr
    blocks = [block for block in text.stdout.split("\n\n") if block.strip()]
    in_library = [block for block in blocks if block.startswith("worker ")
                  and " lib_inner+" in block]
    assert len(in_library) > 50  # the exec'd child, in the dlopen'ed library
    whole = [block for block in in_library
             if " lib_outer+" in block and " main+" in block and " _start+" in block]
    assert len(whole) >= 0.95 * len(in_library), in_library[:1]
    assert any(block.startswith("parent ") and " parent_spin+" in block for block in blocks)
    with open_perf_data(str(output)) as data:
        records = list(data.records())
    forks = [r for r in records if isinstance(r, Task) and not r.exit and r.pid != r.ppid]
    exits = [r for r in records if isinstance(r, Task) and r.exit]
    child = next(r.pid for r in forks)
    assert any(isinstance(r, Comm) and r.pid == child and r.comm == "worker" for r in records)
    assert any(r.pid == child for r in exits)

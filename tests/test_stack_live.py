"""`sframe stack PID` on a live process: the same return addresses as gdb, and the target
keeps running afterwards."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import stack_json

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 only")


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def test_stack_of_a_sleeping_process_matches_gdb(tmp_path: object) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.3)
        document = stack_json(str(sleeper.pid), cache=tmp_path)
        ours = [frame["pc"] for frame in document["threads"][0]["frames"]]
        assert "clock_nanosleep" in document["threads"][0]["frames"][0]["function"]
        assert state(sleeper.pid) in ("S", "R")  # detached: not left in tracing stop
        if shutil.which("gdb"):
            text = subprocess.run(["gdb", "-batch", "-ex", "bt", "-p", str(sleeper.pid)],
                                  capture_output=True, text=True, timeout=120).stdout
            theirs = [int(m[1], 16) for m in re.finditer(r"^#\d+\s+(0x[0-9a-f]+) in ", text,
                                                         re.MULTILINE)]
            assert theirs and ours[1:len(theirs) + 1] == theirs
    finally:
        sleeper.kill()
        sleeper.wait()


def test_stack_of_a_missing_process() -> None:
    result = subprocess.run([sys.executable, "-m", "pysframe", "stack", "999999999"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1


SIGNAL_PROGRAM = r"""
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
static void handler(int sig, siginfo_t *info, void *context) {
    (void)sig; (void)info; (void)context;
    fputs("in handler\n", stdout); fflush(stdout);
    for (;;) pause();
}
__attribute__((noinline)) static void interrupted(void) {
    struct sigaction action = {0};
    action.sa_sigaction = handler;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &action, 0);
    raise(SIGUSR1);
}
int main(void) { interrupted(); return 0; }
"""


def test_stack_through_a_signal_frame(tmp_path: object) -> None:
    """The chain crosses the sigreturn trampoline into the interrupted code, like gdb."""
    import os as _os

    if shutil.which("gcc") is None or shutil.which("gdb") is None:
        pytest.skip("needs gcc and gdb")
    source = _os.path.join(str(tmp_path), "sig.c")
    program = _os.path.join(str(tmp_path), "sig")
    with open(source, "w") as handle:
        handle.write(SIGNAL_PROGRAM)
    subprocess.run(["gcc", "-O1", "-o", program, source], check=True, timeout=120)
    child = subprocess.Popen([program], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "in handler\n"
        time.sleep(0.2)
        frames = stack_json(str(child.pid), cache=tmp_path)["threads"][0]["frames"]
        methods = [frame["method"] for frame in frames]
        assert "sigreturn" in methods and "signal" in methods
        names = [frame["function"].split("+")[0] for frame in frames]
        assert "interrupted" in " ".join(names) or any("raise" in name for name in names)
        text = subprocess.run(["gdb", "-batch", "-ex", "bt", "-p", str(child.pid)],
                              capture_output=True, text=True, timeout=120).stdout
        # The program's own frames on both sides of the signal frame, with gdb's addresses
        # (gdb adds inlined libc frames from DWARF and shows the trampoline without one).
        theirs = {m[2]: int(m[1], 16) for m in re.finditer(
            r"^#\d+\s+(0x[0-9a-f]+) in (handler|interrupted|main) ", text, re.MULTILINE)}
        ours = {frame["function"].split("+")[0]: frame["pc"] for frame in frames}
        assert set(theirs) == {"handler", "interrupted", "main"}
        assert all(ours.get(name) == address for name, address in theirs.items())
        assert names.index("handler") < methods.index("sigreturn") < names.index("interrupted")
    finally:
        child.kill()
        child.wait()


def test_core_dump_gives_the_same_stack(tmp_path: object) -> None:
    """`sframe stack --core` on a gcore of the blocked program: the same frames as live."""
    import os as _os

    if shutil.which("gcc") is None or shutil.which("gcore") is None:
        pytest.skip("needs gcc and gcore")
    source = _os.path.join(str(tmp_path), "sig.c")
    program = _os.path.join(str(tmp_path), "sig")
    with open(source, "w") as handle:
        handle.write(SIGNAL_PROGRAM)
    subprocess.run(["gcc", "-O1", "-o", program, source], check=True, timeout=120)
    child = subprocess.Popen([program], stdout=subprocess.PIPE, text=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    try:
        assert child.stdout is not None and child.stdout.readline() == "in handler\n"
        time.sleep(0.2)
        live = subprocess.run([sys.executable, "-m", "pysframe", "stack", "--json",
                               str(child.pid)], capture_output=True, text=True, timeout=120,
                              env=env)
        if live.returncode == 2 and "Operation not permitted" in live.stderr:
            pytest.skip("ptrace is not permitted here")
        core_prefix = _os.path.join(str(tmp_path), "core")
        subprocess.run(["gcore", "-o", core_prefix, str(child.pid)], capture_output=True,
                       timeout=120, check=True)
    finally:
        child.kill()
        child.wait()
    from_core = subprocess.run([sys.executable, "-m", "pysframe", "stack", "--json", "--core",
                                f"{core_prefix}.{child.pid}"], capture_output=True, text=True,
                               timeout=120, env=env)
    assert from_core.returncode == 0, from_core.stderr
    frames_live = json.loads(live.stdout)["threads"][0]["frames"]
    frames_core = json.loads(from_core.stdout)["threads"][0]["frames"]
    assert [(f["pc"], f["function"]) for f in frames_core] == [
        (f["pc"], f["function"]) for f in frames_live]


def test_stack_of_a_program_deleted_while_it_runs(tmp_path: object) -> None:
    """A binary removed (or upgraded) under a running process: read through map_files."""
    import os as _os

    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    source = _os.path.join(str(tmp_path), "gone.c")
    program = _os.path.join(str(tmp_path), "gone")
    with open(source, "w") as handle:
        handle.write("#include <unistd.h>\n#include <stdio.h>\n"
                     "__attribute__((noinline)) static void nap(void) { puts(\"ready\");"
                     " fflush(stdout); for (;;) pause(); }\n"
                     "int main(void) { nap(); return 0; }\n")
    subprocess.run(["gcc", "-O1", "-o", program, source], check=True, timeout=120)
    child = subprocess.Popen([program], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        _os.unlink(program)
        frames = stack_json(str(child.pid), cache=tmp_path)["threads"][0]["frames"]
        names = [name for frame in frames for name in frame["names"]]
        assert "nap" in names and "main" in names and names[-1] == "_start"
        assert any(frame["path"] == f"{program} (deleted)" for frame in frames)
    finally:
        child.kill()
        child.wait()

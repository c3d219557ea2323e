"""`sframe stack` against gdb: the names of every thread's frames, frame for frame, past
`main` and thread entry, on live processes and on their cores, for the fixture programs
(blocked at a known point) and a multi-threaded program of our own. Also: the target is
never left stopped when the tool is interrupted or times out mid-walk."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FIXTURES, stack_json


def _libc_has_debug_info() -> bool:
    """gdb names libc's frames from libc6-dbg's DWARF when it is installed (as on our CI
    machines); without it gdb falls back to its own choice among ELF aliases, which
    these name-for-name comparisons do not model."""
    from pysframe.elf import ElfImage
    from pysframe.elf.debuginfo import debug_file

    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    return os.path.exists(libc) and debug_file(ElfImage(libc).build_id()) is not None


pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 only"),
    pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb"),
    pytest.mark.skipif(platform.machine() == "x86_64" and not _libc_has_debug_info(),
                       reason="needs libc's debug info (libc6-dbg) to compare names with gdb"),
]

THREADS_SOURCE = Path(__file__).parent / "data" / "threads.c"
GDB_THREAD = re.compile(r"^Thread \d+ \(.*?LWP (\d+)\)")
GDB_FRAME = re.compile(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(.+?) \(")


def gdb_stacks(*target: str) -> dict[int, list[str]]:
    """Thread id -> frame names from `gdb -batch ... thread apply all bt` (past main)."""
    text = subprocess.run(
        ["gdb", "-nx", "-batch", "-ex", "set backtrace past-main on",
         "-ex", "set backtrace past-entry on", "-ex", "thread apply all bt", *target],
        capture_output=True, text=True, timeout=120).stdout
    stacks: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        thread = GDB_THREAD.match(line)
        if thread:
            current = stacks.setdefault(int(thread[1]), [])
            continue
        frame = GDB_FRAME.match(line)
        if frame and current is not None:
            assert int(frame[1]) == len(current), line
            current.append(frame[2])
    if not stacks and "\n#0 " in "\n" + text:  # a single-threaded core: no thread header
        stacks[0] = [m[2] for m in map(GDB_FRAME.match, text.splitlines()) if m]
    return stacks


def sframe_stacks(*arguments: str, cache: Path) -> dict[int, list[str]]:
    return {thread["tid"]: [name for frame in thread["frames"] for name in frame["names"]]
            for thread in stack_json(*arguments, cache=cache)["threads"]}


def assert_same_names(ours: dict[int, list[str]], theirs: dict[int, list[str]]) -> None:
    if list(theirs) == [0] and len(ours) == 1:  # gdb named no thread id
        theirs = {next(iter(ours)): theirs[0]}
    assert sorted(ours) == sorted(theirs)
    for tid, names in theirs.items():
        assert ours[tid] == names, f"thread {tid}"
        assert len(names) >= 3


def compare_live(pid: int, tmp_path: Path) -> dict[int, list[str]]:
    """Our names against gdb's on the live process (left running). Returns our stacks."""
    ours = sframe_stacks(str(pid), cache=tmp_path)
    assert all_running(pid)
    assert_same_names(ours, gdb_stacks("-p", str(pid)))
    return ours


def compare_core(pid: int, program: Path, tmp_path: Path, ours: dict[int, list[str]]) -> str:
    """The core half: on a gcore of the process, our names must equal ours from the live
    process (``ours``) and gdb's from the core. Returns the core's path. Called after the
    live half's checks, so that a missing gcore skips only what needs it."""
    if shutil.which("gcore") is None:
        pytest.skip("needs gcore (shipped with gdb) to compare names on a core dump")
    prefix = tmp_path / "core"
    subprocess.run(["gcore", "-o", str(prefix), str(pid)], capture_output=True, timeout=120,
                   check=True)
    core = f"{prefix}.{pid}"
    from_core = sframe_stacks("--core", core, cache=tmp_path)
    assert from_core == ours
    assert_same_names(from_core, gdb_stacks(str(program), core))
    return core


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def tracer(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        return int(next(line for line in handle if line.startswith("TracerPid:")).split()[1])


def all_running(pid: int) -> bool:
    """No thread of ``pid`` is traced or in a tracing stop."""
    tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    return all(tracer(tid) == 0 and state(tid) != "t" for tid in tids)


@pytest.fixture(scope="module")
def threads_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    program = tmp_path_factory.mktemp("threads") / "threads"
    subprocess.run(["gcc", "-O2", "-g", "-pthread", "-o", str(program), str(THREADS_SOURCE)],
                   check=True, timeout=120)
    return program


def start_threads(program: Path, *arguments: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([str(program), *arguments], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


@pytest.fixture()
def blocked_threads(threads_program: Path) -> Iterator[subprocess.Popen[str]]:
    child = start_threads(threads_program)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_multithreaded_program_matches_gdb_live_and_core(
        blocked_threads: subprocess.Popen[str], threads_program: Path, tmp_path: Path) -> None:
    pid = blocked_threads.pid
    ours = compare_live(pid, tmp_path)
    assert len(ours) == 5
    assert any(stack[-3:] == ["main", "__libc_start_call_main", "__libc_start_main_impl"]
               or stack[-4:-1] == ["main", "__libc_start_call_main", "__libc_start_main_impl"]
               for stack in ours.values())
    assert sum(stack[-2:] == ["start_thread", "clone3"] for stack in ours.values()) == 4
    core = compare_core(pid, threads_program, tmp_path, ours)
    # --exe: the program read from where it is now, not from the path in the core.
    moved = tmp_path / "moved-threads"
    shutil.copy(threads_program, moved)
    result = subprocess.run([sys.executable, "-m", "pysframe", "stack", "--json", "--core", core,
                             "--exe", str(moved)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    threads = json.loads(result.stdout)["threads"]
    paths = {frame["path"] for thread in threads for frame in thread["frames"]}
    assert str(moved) in paths and str(threads_program) not in paths
    assert {t["tid"]: [n for f in t["frames"] for n in f["names"]] for t in threads} == ours


def blocked_in_write(program: Path) -> subprocess.Popen[bytes]:
    """``program`` started on a terminal whose output is suspended (^S): its first line of
    output blocks in write(2) below printf, a known point with main on the stack."""
    master, terminal = os.openpty()
    termios.tcflow(terminal, termios.TCOOFF)
    child = subprocess.Popen([str(program)], stdin=subprocess.DEVNULL, stdout=terminal,
                             stderr=subprocess.DEVNULL, cwd=program.parent)
    os.close(terminal)
    child._pysframe_master = master  # type: ignore[attr-defined]  # closed by the caller
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/wchan") as handle:
            if state(child.pid) == "S" and handle.read() not in ("", "0"):
                break
        time.sleep(0.02)
    time.sleep(0.1)
    return child


FIXTURE_PROGRAMS = sorted(
    str(path.relative_to(FIXTURES)) for label in ("2.44", "2.46", "2.47.50")
    for path in (FIXTURES / label / "x86_64").glob("*/prog*")
    if path.name in ("prog", "prog-nopie"))


@pytest.mark.parametrize("relative", FIXTURE_PROGRAMS)
def test_fixture_program_matches_gdb(relative: str, tmp_path: Path) -> None:
    program = FIXTURES / relative
    child = blocked_in_write(program)
    try:
        ours = compare_live(child.pid, tmp_path)
        stack = next(iter(ours.values()))
        assert "main" in stack and stack[-1] == "_start"
        compare_core(child.pid, program, tmp_path, ours)
    finally:
        child.kill()
        child.wait()
        os.close(child._pysframe_master)  # type: ignore[attr-defined]


@pytest.mark.parametrize("label", ["2.44", "2.46"])
def test_lua_fixture_matches_gdb(label: str, tmp_path: Path) -> None:
    """The real Lua fixture blocked in io.read() inside nested Lua calls."""
    lua = FIXTURES / "real" / f"lua-{label}-x86_64" / "lua"
    if not lua.exists():
        pytest.skip("../shared/fixtures is not present")
    script = ("local function a() return io.read() end local function b() return a() .. '' "
              "end io.write('ready\\n') io.flush() print(b())")
    child = subprocess.Popen([str(lua), "-e", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(0.1)
        ours = compare_live(child.pid, tmp_path)
        stack = next(iter(ours.values()))
        assert "luaV_execute" in stack and "main" in stack
        compare_core(child.pid, lua, tmp_path, ours)
    finally:
        child.kill()
        child.wait()


def wait_until_traced(pid: int, tool: subprocess.Popen[str], timeout: float = 60.0) -> bool:
    """True once the tool has attached to ``pid``; False if the tool ended first (on a
    loaded machine the whole walk can pass between two polls)."""
    deadline = time.monotonic() + timeout
    while tracer(pid) == 0:
        if tool.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the tool never attached"
        time.sleep(0.001)
    return True


def interrupt_mid_walk(pid: int, tmp_path: Path) -> tuple[int, str] | None:
    """Runs ``sframe stack PID`` and sends it SIGINT while it holds the threads: its exit
    status and stderr, or None when the walk ended before the signal could land."""
    # SIGINT as a terminal's Ctrl-C finds it: a CI job started in the background (or a
    # shell's `trap '' INT`) has it ignored, and an ignored signal stays ignored across exec.
    tool = subprocess.Popen([sys.executable, "-m", "pysframe", "stack", "--max-depth",
                             "100000", str(pid)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    attached = wait_until_traced(pid, tool)
    if attached:
        tool.send_signal(signal.SIGINT)
    _, stderr = tool.communicate(timeout=120)
    if "not permitted" in stderr:
        pytest.skip("ptrace is not permitted here")
    if not attached or tool.returncode == 0:
        assert tool.returncode == 0, stderr  # finished first: it must have finished well
        return None
    return tool.returncode, stderr


def test_interrupted_mid_walk_leaves_the_process_running(threads_program: Path,
                                                         tmp_path: Path) -> None:
    """Ctrl-C while the threads are stopped: every thread is detached and runs on.

    On a loaded machine the walk (~1 s) can end before the signal lands; then the run is
    repeated with more threads, and every run is checked to leave the process running."""
    for threads in ("128", "256", "512"):  # 2000 calls deep each
        child = start_threads(threads_program, threads)
        try:
            outcome = interrupt_mid_walk(child.pid, tmp_path)
            assert all_running(child.pid)
        finally:
            child.kill()
            child.wait()
        if outcome is not None:
            status, stderr = outcome
            assert status == 130, stderr
            assert stderr.strip() == "sframe: interrupted"
            return
    pytest.fail("the walk always ended before SIGINT could be delivered")


def test_timeout_mid_walk_releases_the_process(threads_program: Path, tmp_path: Path) -> None:
    child = start_threads(threads_program, "128")
    try:
        tool = subprocess.run([sys.executable, "-m", "pysframe", "stack", "--max-depth",
                               "100000", "--timeout", "0.05", str(child.pid)],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
        if "not permitted" in tool.stderr:
            pytest.skip("ptrace is not permitted here")
        assert tool.returncode == 2
        assert "gave up after 0.05 s (--timeout); the process was released" in tool.stderr
        assert len(tool.stderr.splitlines()) == 1 and tool.stdout == ""
        assert all_running(child.pid)
    finally:
        child.kill()
        child.wait()

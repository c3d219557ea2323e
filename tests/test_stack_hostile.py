"""`sframe stack` on hostile targets (issue 11): a process that signals itself all the
time (no signal may be lost), threads that appear and vanish, a process that exits under
the tool, a dead main thread, a stopped process, a process in another mount namespace;
cores that are not regular files, empty, or whose program was rebuilt since; and
`--timeout` values that are not a duration."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 only")

DATA = Path(__file__).parent / "data"
PTRACE_SEIZE = 0x4206


def build(tmp_path: Path, name: str, source: str | Path, *flags: str) -> Path:
    """``source`` (C text, or a file) built with gcc into ``tmp_path/name``."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    if isinstance(source, Path):
        source_path = source
    else:
        source_path = tmp_path / f"{name}.c"
        source_path.write_text(source)
    program = tmp_path / name
    subprocess.run(["gcc", "-O2", "-g", "-pthread", *flags, "-o", str(program),
                    str(source_path)], check=True, timeout=120)
    return program


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache directory for the module: SFrame generated for libc once, not per test."""
    return tmp_path_factory.mktemp("cache")


def sframe(*arguments: str, cache: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", "stack", *arguments],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache)})


def state(pid: int, tid: int | None = None) -> str:
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def tracer(pid: int, tid: int) -> int:
    with open(f"/proc/{pid}/task/{tid}/status") as handle:
        return int(next(line for line in handle if line.startswith("TracerPid:")).split()[1])


def left_alone(pid: int, stopped_state: str = "") -> bool:
    """No thread of ``pid`` is traced or in a tracing stop (nor in a group stop, unless
    ``stopped_state`` says it should be: "T")."""
    for name in os.listdir(f"/proc/{pid}/task"):
        try:
            tid = int(name)
            if tracer(pid, tid) != 0:
                return False
            letter = state(pid, tid)
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue  # the thread ended meanwhile
        if letter == "t" or (letter == "T") != (stopped_state == "T"):
            return False
    return True


def wait_for(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def ptrace_permitted() -> None:
    """Skip when this process may not trace its children."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.restype = ctypes.c_long
        libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
        if libc.ptrace(PTRACE_SEIZE, child.pid, None, None) == -1:
            pytest.skip(f"ptrace is not permitted here ({os.strerror(ctypes.get_errno())})")
    finally:
        child.kill()
        child.wait()


@pytest.fixture()
def traceable() -> None:
    ptrace_permitted()


def started(program: Path, *arguments: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([str(program), *arguments], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def finish(child: subprocess.Popen[str]) -> str:
    """Close the program's stdin (its signal to end) and return what it printed."""
    try:
        output, _ = child.communicate("", timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return output


def attach_cycles(pid: int, count: int) -> list[str]:
    """Stop, read and release ``pid`` ``count`` times in this process; the errors seen."""
    from pysframe.sources.live import Attached, LiveError

    errors = []
    for _ in range(count):
        try:
            with Attached(pid) as attached:
                threads = attached.threads()
                assert threads and all(thread.registers["rsp"] for thread in threads)
        except LiveError as error:
            errors.append(str(error))
    return errors


# -- signals ------------------------------------------------------------------------------


def test_no_signal_is_lost_while_stopped(tmp_path: Path, cache: Path, traceable: None) -> None:
    """Two threads signal themselves as fast as they can and check, after every kill,
    that their handler ran. A signal that arrives while the tool attaches is reported as
    a signal-delivery stop; detaching without it would drop it (before the fix: about
    one attach in six lost one)."""
    program = build(tmp_path, "pingpong", DATA / "pingpong.c")
    child = started(program, "2")
    try:
        errors = attach_cycles(child.pid, 300)
        for _ in range(3):  # and end to end (slower: the target keeps both CPUs busy)
            result = sframe("--no-debuginfo", str(child.pid), cache=cache)
            assert result.returncode == 0, result.stderr
            assert result.stdout.count("Thread ") == 3
        assert left_alone(child.pid)
    finally:
        output = finish(child)
    assert errors == []
    assert output.startswith("sent ") and output.split()[-1] == "0", output
    assert child.returncode == 0


def test_a_stopped_process_stays_stopped(tmp_path: Path, cache: Path, traceable: None) -> None:
    """A process in a group stop (SIGSTOP) is read and left stopped; SIGCONT resumes it
    and none of its signals is lost."""
    program = build(tmp_path, "pingpong", DATA / "pingpong.c")
    child = started(program, "2")
    try:
        os.kill(child.pid, signal.SIGSTOP)
        wait_for(lambda: left_alone(child.pid, "T"))
        result = sframe("--no-debuginfo", str(child.pid), cache=cache)
        assert result.returncode == 0, result.stderr
        assert attach_cycles(child.pid, 20) == []
        # A detached thread is woken to enter the group stop again (R for a moment, in
        # the kernel): it goes back to T without running.
        wait_for(lambda: left_alone(child.pid, "T"))
        os.kill(child.pid, signal.SIGCONT)
        time.sleep(0.05)
        assert left_alone(child.pid)
    finally:
        output = finish(child)
    assert output.split()[-1] == "0", output


# -- threads that come and go ----------------------------------------------------------------


def test_thread_churn(tmp_path: Path, cache: Path, traceable: None) -> None:
    """Threads created and joined all the time: every run succeeds (before the fix about
    one in eight failed, with ESRCH or EPERM on a thread that had just ended) and no
    thread is left stopped or traced."""
    program = build(tmp_path, "churn", DATA / "churn.c")
    child = started(program, "3")
    try:
        errors = attach_cycles(child.pid, 300)
        failed = []
        for _ in range(8):
            result = sframe("--no-debuginfo", str(child.pid), cache=cache)
            if result.returncode != 0:
                failed.append(result.stderr)
        assert left_alone(child.pid)
    finally:
        output = finish(child)
    assert errors == [] and failed == []
    assert output.startswith("created ") and child.returncode == 0


def test_a_process_exiting_under_the_tool(tmp_path: Path, cache: Path,
                                          traceable: None) -> None:
    """Runs that race the target's exit() either print its stacks or say "no such
    process" in one line, exit status 2: never a permission error (before the fix: "...
    Operation not permitted (ptrace not permitted: see .../ptrace_scope)"), never a
    traceback, never a hang."""
    from pysframe.sources.live import Attached, LiveError

    program = build(tmp_path, "churn", DATA / "churn.c")
    outcomes: dict[str, int] = {}
    for lifetime in range(5, 45, 4):  # in-process: attach again and again until it is gone
        child = started(program, "3", str(lifetime))
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, outcomes
            try:
                with Attached(child.pid) as attached:
                    attached.threads()
                outcomes["read"] = outcomes.get("read", 0) + 1
            except LiveError as error:
                assert error.errno == errno.ESRCH, str(error)
                assert str(error) == f"process {child.pid}: no such process"
                break
        child.wait(timeout=20)
    assert outcomes.get("read", 0) > 0
    for delay in (0.0, 0.05, 0.1, 0.15, 0.2, 0.25):  # the command line, started before exit
        child = started(program, "3", "200")
        time.sleep(delay)
        result = sframe("--no-debuginfo", str(child.pid), cache=cache)
        child.wait(timeout=20)
        assert result.returncode in (0, 2), result.stderr
        if result.returncode == 2:
            assert result.stderr == f"sframe: process {child.pid}: no such process\n"


MAIN_EXITS = r"""
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) static void wait_here(void) { for (;;) pause(); }
__attribute__((noinline)) static void *worker(void *arg) { (void)arg; wait_here(); return NULL; }
int main(void) {
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, worker, NULL);
    usleep(50000);
    printf("ready\n");
    fflush(stdout);
    pthread_exit(NULL); /* the process lives on in its two workers */
}
"""


def test_a_process_whose_main_thread_exited(tmp_path: Path, cache: Path,
                                            traceable: None) -> None:
    """The main thread called pthread_exit (a zombie, with no maps or memory of its own):
    the other threads' stacks print (before the fix: always "Operation not permitted")."""
    program = build(tmp_path, "mainexits", MAIN_EXITS)
    child = started(program)
    try:
        wait_for(lambda: state(child.pid) == "Z")
        result = sframe("--json", str(child.pid), cache=cache)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        threads = json.loads(result.stdout)["threads"]
        assert len(threads) == 2 and child.pid not in [thread["tid"] for thread in threads]
        for thread in threads:
            names = [name for frame in thread["frames"] for name in frame["names"]]
            assert "wait_here" in names and "worker" in names, names
        assert attach_cycles(child.pid, 20) == []
        assert left_alone(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_missing_process_says_so(cache: Path) -> None:
    result = sframe("999999999", cache=cache)
    assert result.returncode == 2
    assert result.stderr == "sframe: process 999999999: no such process\n"


def test_a_process_traced_by_another_tool(cache: Path, traceable: None) -> None:
    """The target is being debugged: one line that says by whom; no ptrace_scope text
    when this system has no Yama."""
    sleeper = subprocess.Popen(["sleep", "60"])
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import ctypes, sys, time\n"
         "libc = ctypes.CDLL(None)\n"
         "libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, "
         "ctypes.c_void_p)\n"
         f"assert libc.ptrace({PTRACE_SEIZE}, {sleeper.pid}, None, None) == 0\n"
         "print('ready', flush=True)\n"
         "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        result = sframe(str(sleeper.pid), cache=cache)
        assert result.returncode == 2
        assert result.stderr == (f"sframe: process {sleeper.pid}: thread {sleeper.pid} is "
                                 f"already traced by process {holder.pid}\n")
    finally:
        holder.kill()
        holder.wait()
        sleeper.kill()
        sleeper.wait()


# -- mount namespaces -----------------------------------------------------------------------

NAP = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) static void FUNCTION(void) { puts("ready"); fflush(stdout); for (;;) pause(); }
int main(void) { FUNCTION(); return 0; }
"""


@pytest.mark.parametrize("privileges", ["root", "no map_files"])
def test_a_process_in_another_mount_namespace(privileges: str, tmp_path: Path, cache: Path,
                                              traceable: None) -> None:
    """Its program is another file than the one at the same path here: the frames are
    read from the process's own file (before the fix: from ours, with wrong names and
    exit status 0): through /proc/PID/map_files, or, without the privilege that needs,
    through /proc/PID/root."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to make a mount namespace")
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --mount is not permitted here")
    prefix = [] if privileges == "root" else without_map_files()
    here = build(tmp_path, "nap", NAP.replace("FUNCTION", "host_side_function"))
    build(tmp_path, "other", NAP.replace("FUNCTION", "namespace_side_function"))
    child = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount --bind "$0/other" "$0/nap" && exec "$0/nap"', str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        result = subprocess.run([*prefix, sys.executable, "-m", "pysframe", "stack", "--json",
                                 str(child.pid)], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "XDG_CACHE_HOME": str(cache)})
        assert result.returncode == 0 and result.stderr == "", result.stderr
        frames = json.loads(result.stdout)["threads"][0]["frames"]
        names = [name for frame in frames for name in frame["names"]]
        assert "namespace_side_function" in names and "main" in names, names
        assert "host_side_function" not in names
        assert any(frame["path"] == str(here) for frame in frames)
    finally:
        child.kill()
        child.wait()


def test_a_program_whose_name_is_not_utf8(tmp_path: Path, cache: Path,
                                          traceable: None) -> None:
    """A path in the maps that is not UTF-8 still opens the file, and prints with the
    bytes escaped (before the fix: an internal error, UnicodeDecodeError)."""
    program = build(tmp_path, "nap", NAP.replace("FUNCTION", "odd_name"))
    odd = tmp_path / os.fsdecode(b"nap-\xff\xfe")
    os.rename(program, odd)
    child = started(odd)
    try:
        shown = f"{tmp_path}/nap-\\xff\\xfe"  # the bytes escaped
        text = sframe(str(child.pid), cache=cache)
        assert text.returncode == 0 and text.stderr == "", text.stderr
        assert "odd_name" in text.stdout and f"({shown}+0x" in text.stdout
        document = sframe("--json", str(child.pid), cache=cache)
        assert document.returncode == 0 and document.stderr == "", document.stderr
        frames = json.loads(document.stdout)["threads"][0]["frames"]
        assert "odd_name" in frame_names(document.stdout)
        assert shown in [frame["path"] for frame in frames]
    finally:
        child.kill()
        child.wait()


def without_map_files() -> list[str]:
    """A command prefix that drops the privilege /proc/PID/map_files needs."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to drop CAP_SYS_ADMIN")
    return ["setpriv", "--bounding-set", "-sys_admin,-checkpoint_restore"]


@pytest.mark.parametrize("same_build", [True, False])
def test_a_program_replaced_while_it_runs(same_build: bool, tmp_path: Path, cache: Path,
                                          traceable: None) -> None:
    """Its file was replaced (a new inode at the path) and map_files is out of reach: the
    file now at the path is used only if it has the build id the process has in memory;
    else a warning, and exit status 1 (before the fix: frames from the wrong file, exit
    status 0)."""
    prefix = without_map_files()
    program = build(tmp_path, "nap", NAP.replace("FUNCTION", "first_function"))
    child = started(program)
    try:
        if same_build:
            shutil.copy(program, tmp_path / "copy")
        else:
            build(tmp_path, "copy", NAP.replace("FUNCTION", "second_function"))
        os.rename(tmp_path / "copy", program)  # a new inode; the old one is "(deleted)"
        result = subprocess.run([*prefix, sys.executable, "-m", "pysframe", "stack", "--json",
                                 str(child.pid)], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "XDG_CACHE_HOME": str(cache)})
        names = frame_names(result.stdout)
        if same_build:
            assert result.returncode == 0 and result.stderr == "", result.stderr
            assert "first_function" in names and "main" in names, names
        else:
            assert result.returncode == 1
            assert result.stderr == (f"sframe: warning: {program} (deleted): not the file "
                                     f"process {child.pid} mapped (another mount namespace, "
                                     "or replaced since), and its own cannot be opened; its "
                                     "frames are not unwound\n")
            assert "second_function" not in names and "main" not in names, names
    finally:
        child.kill()
        child.wait()


# -- cores ------------------------------------------------------------------------------------


def test_cores_that_are_not_regular_files(tmp_path: Path, cache: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    expected = {"/dev/zero": "not a regular file (a character device)",
                str(fifo): "not a regular file (a FIFO)", str(empty): "empty file"}
    for path, message in expected.items():
        result = sframe("--core", path, cache=cache, timeout=30)
        assert result.returncode == 2, (path, result.stderr)
        assert result.stderr == f"sframe: {path}: {message}\n"


NAP_TWO = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) static void inner_wait(void) { puts("ready"); fflush(stdout); for (;;) pause(); }
__attribute__((noinline)) static void outer_call(void) { inner_wait(); __asm__ volatile(""); }
int main(void) { outer_call(); return 0; }
"""


@pytest.fixture()
def program_core(tmp_path: Path, traceable: None) -> Iterator[tuple[Path, Path]]:
    """A program blocked in inner_wait <- outer_call <- main, and its gcore."""
    if shutil.which("gcore") is None:
        pytest.skip("needs gcore")
    program = build(tmp_path, "napper", NAP_TWO)
    child = started(program)
    try:
        prefix = tmp_path / "core"
        subprocess.run(["gcore", "-o", str(prefix), str(child.pid)], capture_output=True,
                       timeout=120, check=True)
    finally:
        child.kill()
        child.wait()
    yield program, Path(f"{prefix}.{child.pid}")


def frame_names(stdout: str) -> list[str]:
    return [name for thread in json.loads(stdout)["threads"] for frame in thread["frames"]
            for name in frame["names"]]


def test_a_core_whose_program_was_rebuilt(tmp_path: Path, cache: Path,
                                          program_core: tuple[Path, Path]) -> None:
    """The program on disk is not the one that dumped the core (another build id): a
    warning naming it, its frames not unwound with the wrong file, exit status 1 (before
    the fix: wrong frames, exit 0); --exe with the right binary gives the right frames."""
    program, core = program_core
    right = tmp_path / "napper.orig"
    shutil.copy(program, right)
    good = sframe("--json", "--core", str(core), cache=cache)
    assert good.returncode == 0, good.stderr
    expected = frame_names(good.stdout)
    assert expected[:3] == ["inner_wait", "outer_call", "main"] or \
        expected[1:4] == ["inner_wait", "outer_call", "main"], expected
    build(tmp_path, "napper", NAP_TWO.replace("inner_wait", "changed_wait") +
          "void padding(void) { puts(\"some other code\"); }\n", "-O0")
    result = sframe("--json", "--core", str(core), cache=cache)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sframe: warning: {program}: build id ")
    assert "does not match the core" in lines[0] and "--exe" in lines[0]
    names = frame_names(result.stdout)
    assert "changed_wait" not in names and "main" not in names
    fixed = sframe("--json", "--core", str(core), "--exe", str(right), cache=cache)
    assert fixed.returncode == 0 and fixed.stderr == ""
    assert frame_names(fixed.stdout) == expected


def test_a_core_naming_files_that_must_not_be_read(tmp_path: Path, cache: Path,
                                                   program_core: tuple[Path, Path]) -> None:
    """The core's NT_FILE note names a FIFO, or /proc/kmsg (whose read blocks), where the
    program was: no hang; a warning that the program cannot be read, exit status 1."""
    program, core = program_core
    data = core.read_bytes()
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    for target in (str(fifo), "/proc/kmsg"):
        head, tail = target.rsplit("/", 1)
        padded = head + "/" * (len(str(program)) - len(target) + 1) + tail
        assert len(padded) == len(str(program))
        patched = tmp_path / "patched-core"
        patched.write_bytes(data.replace(str(program).encode() + b"\0",
                                         padded.encode() + b"\0"))
        result = sframe("--core", str(patched), cache=cache, timeout=60)
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith(f"sframe: warning: {padded}: ")
        assert len(result.stderr.splitlines()) == 1


# -- options ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300", "-1", "lots"])
def test_timeout_must_be_a_duration(value: str, cache: Path) -> None:
    result = sframe("--timeout", value, "1", cache=cache)
    assert result.returncode == 2
    assert "--timeout" in result.stderr and "internal error" not in result.stderr
    assert "Traceback" not in result.stderr

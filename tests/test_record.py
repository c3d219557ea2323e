"""``sframe record`` end to end (root and a kernel with BPF ring buffers, bpf_loop and BTF;
skipped with the reason elsewhere): a command and a running multi-threaded process recorded,
the file read back by ``sframe script`` (and perf when installed), Ctrl-C leaving nothing."""

from __future__ import annotations

import difflib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from tests.support.oracles import need_perf, perf7
from tests.test_record_bpf import REASON, objects, settled

from pysframe.sources.perf_data import open_perf_data

pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SFRAME = [sys.executable, "-m", "pysframe"]

BUSY = r"""
#include <pthread.h>
#include <stdlib.h>
__attribute__((noinline)) long leaf(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long middle(long n) { return leaf(n) + 1; }
__attribute__((noinline)) void *worker(void *arg) { long rounds = (long)arg; long t = 0;
  for (long r = 0; r != rounds; r++) t += middle(1000000); return (void *)t; }
int main(int argc, char **argv) { long rounds = argc > 1 ? atol(argv[1]) : 400;
  pthread_t threads[3];
  for (int i = 0; i < 3; i++) pthread_create(&threads[i], 0, worker, (void *)rounds);
  worker((void *)rounds);
  for (int i = 0; i < 3; i++) pthread_join(threads[i], 0);
  return 0; }
"""


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("record")
    source = directory / "busy.c"
    source.write_text(BUSY)
    binary = directory / "busy"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-pthread", "-o", str(binary),
                    str(source)], check=True)
    return binary


#: One private cache for the module's runs (tables are generated once, not per test).
CACHE: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    CACHE["home"] = str(tmp_path_factory.mktemp("record-cache"))


def sframe(*arguments: str, tmp: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CACHE_HOME=CACHE.get("home", str(tmp / "cache")))
    return subprocess.run([*SFRAME, *arguments], capture_output=True, text=True, env=env,
                          timeout=timeout)


def chains(text: str) -> list[list[str]]:
    """Each sample's frame symbols (without offsets), innermost first."""
    out = []
    for block in text.split("\n\n"):
        lines = block.splitlines()[1:]
        out.append([line.split()[1].split("+")[0] for line in lines if line.strip()])
    return [chain for chain in out if chain or True]


def assert_same_text(perf: str, ours: str) -> None:
    """perf script's text and ours, line for line up to white space; the first lines that
    differ are shown when they do not."""
    theirs_lines = [" ".join(line.split()) for line in perf.splitlines()]
    our_lines = [" ".join(line.split()) for line in ours.splitlines()]
    if theirs_lines == our_lines:
        return
    diff = list(difflib.unified_diff(theirs_lines, our_lines, "perf script", "sframe script",
                                     n=6, lineterm=""))
    raise AssertionError("perf script and sframe script differ:\n" + "\n".join(diff[:60]))


def test_a_command_is_recorded_with_whole_user_stacks(tmp_path: Path, busy: Path) -> None:
    before = objects()
    output = tmp_path / "busy.perf.data"
    run = sframe("record", "-o", str(output), "--", str(busy), "150", tmp=tmp_path)
    assert run.returncode == 0, run.stderr
    assert settled(before) == before  # nothing left in the kernel
    assert "walked to the outermost frame" in run.stderr
    text = sframe("script", str(output), tmp=tmp_path)
    assert text.returncode == 0, text.stderr
    found = [chain for chain in chains(text.stdout) if chain]
    assert len(found) > 100
    user = [chain for chain in found if "leaf" in chain or "middle" in chain]
    whole = [chain for chain in user if chain[-1] in ("_start", "clone3", "clone")]
    assert len(whole) >= 0.95 * len(user), found[:3]
    assert any("worker" in chain and "start_thread" in chain for chain in user)
    # perf (6.1, the reference for `perf script` text) reads the file too, and prints the
    # same text.
    theirs = subprocess.run([need_perf(), "script", "-i", str(output)], capture_output=True,
                            text=True, timeout=120)
    assert theirs.returncode == 0, theirs.stderr[-300:]
    assert theirs.stdout.count("cpu-clock") == text.stdout.count("cpu-clock")
    assert_same_text(theirs.stdout, text.stdout)


def test_a_running_process_is_recorded_for_a_while(tmp_path: Path, busy: Path) -> None:
    target = subprocess.Popen([str(busy), "-1"])  # runs until killed
    try:
        time.sleep(0.3)
        output = tmp_path / "pid.perf.data"
        run = sframe("record", "-p", str(target.pid), "--duration", "1", "-o", str(output),
                     tmp=tmp_path)
        assert run.returncode == 0, run.stderr
        assert target.poll() is None  # the target runs on
    finally:
        target.kill()
        target.wait()
    text = sframe("script", str(output), tmp=tmp_path).stdout
    threads = {block.split()[1] for block in text.split("\n\n") if block.strip()}
    assert len(threads) == 4  # main and its three workers
    found = [chain for chain in chains(text) if "leaf" in chain]
    assert len(found) > 100
    assert sum(1 for chain in found if chain[-1] in ("_start", "clone3", "clone")) >= (
        0.95 * len(found))


@pytest.mark.parametrize("mode", [[], ["--defer"]], ids=["walk", "defer"])
def test_ctrl_c_stops_cleanly_and_leaves_nothing(tmp_path: Path, busy: Path,
                                                 mode: list[str]) -> None:
    """(With --defer, the tracepoint programs and their maps are released too.)"""
    before = objects()
    output = tmp_path / "interrupted.perf.data"
    env = dict(os.environ, XDG_CACHE_HOME=CACHE.get("home", str(tmp_path / "cache")))
    recorder = subprocess.Popen([*SFRAME, "record", *mode, "-o", str(output), "--", str(busy),
                                 "-1"], env=env, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    time.sleep(2)
    os.killpg(recorder.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    _, errors = recorder.communicate(timeout=60)
    assert recorder.returncode == -signal.SIGINT, errors  # as perf: the file written, then
    # it dies of the signal (a shell shows 130)
    assert "Traceback" not in errors
    assert settled(before) == before
    assert output.stat().st_size > 1000


def test_wrong_usage_is_one_line(tmp_path: Path) -> None:
    run = sframe("record", "-o", str(tmp_path / "x.data"), tmp=tmp_path)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1


def test_events_and_refusals(tmp_path: Path, busy: Path) -> None:
    output = tmp_path / "task.perf.data"
    run = sframe("record", "-e", "task-clock", "-o", str(output), "--", str(busy), "30",
                 tmp=tmp_path)
    assert run.returncode == 0, run.stderr
    ours = sframe("script", str(output), tmp=tmp_path).stdout
    assert " task-clock: " in ours
    # named in EVENT_DESC, as perf record names it: perf 6.1 and 7.2 print that name (from
    # the attribute alone they print "task-clock:" and "task-clock:H:")
    with open_perf_data(str(output)) as data:
        assert data.attrs[0].name == "task-clock"
    for perf in ([need_perf()], perf7()):
        if perf is not None:
            theirs = subprocess.run([*perf, "script", "-i", str(output)], capture_output=True,
                                    text=True, timeout=120).stdout
            assert theirs.count(" task-clock: ") == ours.count(" task-clock: ")
    # An event the machine lacks (no hardware counters in most VMs) is one line, and the
    # command it was to record is not left to run unrecorded.
    marker = tmp_path / "ran"
    attempt = sframe("record", "-e", "cycles", "-o", str(tmp_path / "c.data"), "--", "sh",
                     "-c", f"touch {marker}", tmp=tmp_path)
    if attempt.returncode != 0:
        assert attempt.returncode == 2 and len(attempt.stderr.strip().splitlines()) == 1
        assert not marker.exists()


def test_a_table_the_kernel_refuses_is_not_loaded(tmp_path: Path) -> None:
    lua = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real" / "lua-2.44-x86_64"
    if not (lua / "lua").exists():
        pytest.skip("fixtures not present")
    output = tmp_path / "lua.perf.data"
    script = tmp_path / "loop.lua"
    script.write_text("local s = 0 for i = 1, 3e7 do s = s + i % 7 end print(s)\n")
    run = sframe("record", "-o", str(output), "--", str(lua / "lua"), str(script), tmp=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "kernel's rules refuse it (the kernel registers only SFrame version 3" in run.stderr
    # binutils 2.44 wrote version 2: the walker has no rows for lua, its frames fall back to
    # frame pointers (which it was built without), so its chains stop in lua; only a
    # register that happens to hold a stack address can carry one further (seen: 1 of
    # ~2,000 samples), where a loaded table takes 99% to _start.
    text = sframe("script", str(output), tmp=tmp_path).stdout
    lua_frames = [block for block in text.split("\n\n")
                  if "(" + os.path.realpath(lua / "lua") + ")" in block]
    assert lua_frames
    assert sum(" _start+" in block for block in lua_frames) <= 0.05 * len(lua_frames)


def test_system_wide(tmp_path: Path, busy: Path) -> None:
    """-a: every CPU, every process (tables loaded for all at start); the samples of this
    test's own busy program (its threads, by thread id) are walked whole.

    Only what the test controls is judged: whatever else runs on the machine (another
    program named ``busy``, started after the recording and so without tables, compilers,
    other tests) is recorded too but not counted."""
    target = subprocess.Popen([str(busy), "-1"])
    try:
        time.sleep(0.3)
        threads = set(os.listdir(f"/proc/{target.pid}/task"))  # main and three workers
        assert len(threads) == 4, threads
        output = tmp_path / "all.perf.data"
        run = sframe("record", "-a", "--duration", "1", "-o", str(output), tmp=tmp_path,
                     timeout=600)
        assert run.returncode == 0, run.stderr
        assert set(os.listdir(f"/proc/{target.pid}/task")) == threads  # no thread id reused
    finally:
        target.kill()
        target.wait()
    script = sframe("script", str(output), tmp=tmp_path)
    assert script.returncode == 0, script.stderr
    blocks = [block for block in script.stdout.split("\n\n") if block.strip()]
    mine = [block for block in blocks if _thread_of(block) in threads]
    assert len(mine) > 100
    assert all(block.startswith("busy ") for block in mine)
    whole = [block for block in mine if " _start+" in block or " clone3+" in block]
    assert len(whole) >= 0.95 * len(mine), [b for b in mine if b not in whole][:3]
    assert {_thread_of(block) for block in whole} == threads  # the workers too


WAKES_LATER = r"""
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
__attribute__((noinline)) long leaf(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long middle(long n) { return leaf(n) + 1; }
int main(int argc, char **argv) { sleep(atoi(argv[1])); long t = 0;
  time_t end = time(0) + atoi(argv[2]); while (time(0) < end) t += middle(100000);
  return t == 42; }
"""


def test_system_wide_loads_an_idle_process_tables_at_its_first_sample(tmp_path: Path) -> None:
    """-a prepares the tables of the processes sampled in its first second only; one idle
    then (sleeping) gets its tables at its first sample, and its chains are whole: the
    samples before its tables were loaded are finished from their stack copies."""
    source, binary = tmp_path / "wakes.c", tmp_path / "wakes"
    source.write_text(WAKES_LATER)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(binary), str(source)],
                   check=True)
    target = subprocess.Popen([str(binary), "3", "2"])
    try:
        time.sleep(0.3)  # running (asleep) before the recording starts
        output = tmp_path / "all.perf.data"
        run = sframe("record", "-a", "--duration", "6", "-o", str(output), tmp=tmp_path,
                     timeout=600)
        assert run.returncode == 0, run.stderr
    finally:
        target.kill()
        target.wait()
    assert re.search(r"\d+ of the processes running at the start had no sample and got no "
                     r"tables", run.stderr), run.stderr
    # read by perf (6.1): its own symbols and text for the chains we recorded
    script = subprocess.run([need_perf(), "script", "-i", str(output)], capture_output=True,
                            text=True, timeout=300)
    assert script.returncode == 0, script.stderr[-300:]
    mine = [block for block in script.stdout.split("\n\n")
            if _thread_of(block) == str(target.pid)]
    woke = [block for block in mine if " middle+" in block or " leaf+" in block]
    assert len(woke) > 200, len(woke)
    # (perf 6.1 prints our chains up to main, not past it)
    whole = [block for block in woke if " main+" in block]
    assert len(whole) >= 0.97 * len(woke), [b for b in woke if b not in whole][:3]


def _thread_of(block: str) -> str | None:
    """The thread id of a sample's header, "COMM TID [CPU] TIME: PERIOD EVENT:" (a name
    may hold spaces)."""
    found = re.match(r".*?\s(\d+)\s+\[\d+\]\s+\d+\.\d+:", block)
    return found[1] if found else None


#: Nearly all its time in reads of /dev/zero (16 MiB each).
KERNEL_READS = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
static char buffer[1 << 24];
__attribute__((noinline)) void reader(int fd, int n) {
  for (int i = 0; i < n; i++) if (read(fd, buffer, sizeof buffer) < 0) exit(1); }
int main(int argc, char **argv) {
  reader(open("/dev/zero", O_RDONLY), argc > 1 ? atoi(argv[1]) : 300); return 0; }
"""


def _kernel_and_user(text: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each sample's (kernel frames, user frames) as symbols without offsets, innermost
    first, from perf script's text or ours (a frame line ends with its file in
    parentheses)."""
    found = []
    for block in text.strip().split("\n\n"):
        frames = [line.split() for line in block.splitlines()[1:] if line.strip()]
        names = [(parts[1].split("+")[0], parts[-1] == "([kernel.kallsyms])")
                 for parts in frames if len(parts) >= 3]
        found.append((tuple(name for name, kernel in names if kernel),
                      tuple(name for name, kernel in names if not kernel)))
    return found


def test_samples_in_the_kernel_have_the_kernel_chains_perf_records(tmp_path: Path) -> None:
    """The sampling event asks the kernel for its own chain only, not for a user chain by
    frame pointers (the walker makes that one): samples taken in reads of /dev/zero have
    the kernel chains perf -g records of the same program (the most common the same, each
    of ours in at least 5% of the samples one of perf's), their user frames after them
    reaching _start."""
    perf = need_perf()
    (tmp_path / "reads.c").write_text(KERNEL_READS)
    program = tmp_path / "reads"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(program),
                    str(tmp_path / "reads.c")], check=True)
    ours = tmp_path / "ours.data"
    run = sframe("record", "-o", str(ours), "--", str(program), tmp=tmp_path)
    assert run.returncode == 0, run.stderr
    text = sframe("script", str(ours), tmp=tmp_path)
    assert text.returncode == 0, text.stderr
    theirs = tmp_path / "perf.data"
    subprocess.run([perf, "record", "-q", "-g", "-o", str(theirs), "--", str(program)],
                   check=True, capture_output=True, timeout=120)
    their_text = subprocess.run([perf, "script", "-i", str(theirs)], check=True,
                                capture_output=True, text=True, timeout=120).stdout
    reads = [(kernel, user) for kernel, user in _kernel_and_user(text.stdout)
             if "read_zero" in kernel]
    their_reads = [kernel for kernel, _ in _kernel_and_user(their_text) if "read_zero" in kernel]
    assert len(reads) > 30 and len(their_reads) > 30, (len(reads), len(their_reads))
    mine = Counter(kernel for kernel, _ in reads)
    assert mine.most_common(1)[0][0] == Counter(their_reads).most_common(1)[0][0]
    assert {chain for chain, count in mine.items()
            if count >= 0.05 * len(reads)} <= set(their_reads), (mine, Counter(their_reads))
    assert all(user[0].startswith(("read", "__libc_read", "__GI___libc_read"))
               and "reader" in user and user[-1] == "_start" for _, user in reads), reads[:3]

"""``sframe record`` with perf record's manners (issue 26, item 5): the options perf users
type, refusals in one line before anything runs, ``perf.data.old``, the signals that end
a recording (the file written, the command it started ended, the exit status perf
gives), a held command that never runs if the recorder goes away before releasing it.

The refusals need neither root nor BPF; the rest records (skipped with the reason where
BPF cannot be used)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.oracles import need_perf
from tests.test_record_bpf import REASON

from pysframe.sources.perf_data import Sample, open_perf_data

SFRAME = [sys.executable, "-m", "pysframe"]
needs_bpf = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def sframe(*arguments: str, cwd: Path, timeout: float = 120
           ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(cwd / "cache"))
    return subprocess.run([*SFRAME, *arguments], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


@pytest.mark.parametrize(("arguments", "status", "says"), [
    (["-x", "ls"], 2, "No such option '-x'"),
    (["--call-graph", "dwarf", "ls"], 2, "perf record --call-graph dwarf"),
    (["--call-graph=lbr", "--", "ls"], 2, "--call-graph lbr"),
    (["-p", "999999"], 2, "-p 999999: no such process"),
    (["-t", "999999"], 2, "-t 999999: no such thread"),
    (["-p", "1,x"], 2, "not a list of ids"),
    (["--", "/nonexistent/cmd"], 127, "/nonexistent/cmd: command not found"),
    (["no-such-command-here"], 127, "no-such-command-here: command not found"),
    (["-F", "99", "-c", "1000", "ls"], 2, "not both"),
    (["-C", "0-99999"], 2, "this machine has CPUs"),
    (["--stack-copy", "1001", "ls"], 2, "a multiple of 8 bytes"),
    (["--stack-copy", "100", "ls"], 2, "--stack-copy"),
    (["--max-stack", "1", "ls"], 2, "--max-stack"),  # was an internal error
    (["-p", "1", "-a"], 2, "give one of"),
    ([], 2, "give one of"),
])
def test_refusals_are_one_line_before_anything_runs(tmp_path: Path, arguments: list[str],
                                                    status: int, says: str) -> None:
    (tmp_path / "perf.data").write_bytes(b"an older recording")
    run = sframe("record", *arguments, cwd=tmp_path)
    assert run.returncode == status, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and says in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert (tmp_path / "perf.data").read_bytes() == b"an older recording"  # untouched
    assert not (tmp_path / "perf.data.old").exists()


def test_a_file_that_is_not_executable_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\ntouch ran\n")
    run = sframe("record", "--", str(script), cwd=tmp_path)
    assert run.returncode == 126 and len(run.stderr.strip().splitlines()) == 1
    assert "permission denied" in run.stderr and not (tmp_path / "ran").exists()
    assert not (tmp_path / "perf.data").exists()


def test_a_held_command_never_runs_if_the_recorder_goes_away(tmp_path: Path) -> None:
    """The recorder forks the command held on a pipe; if it dies before the release (a
    kill -9 while preparing tables), the pipe's end makes the child exit, not exec."""
    marker = tmp_path / "ran"
    program = (
        "import os, sys\n"
        "from pysframe.record.command import held_child\n"
        f"pid, release = held_child(['touch', {str(marker)!r}])\n"
        "print(pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n")
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == -signal.SIGKILL
    child = int(run.stdout.split()[0])
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}") or "Z" in Path(f"/proc/{child}/stat").read_text()
    assert not marker.exists()


def test_a_released_command_runs_and_a_failed_exec_is_reported() -> None:
    from pysframe.record.command import CommandFailed, held_child

    pid, release = held_child(["true"])
    release()
    assert os.waitpid(pid, 0)[1] == 0
    pid, release = held_child(["/nonexistent/cmd"])
    with pytest.raises(CommandFailed, match="No such file"):
        release()


@needs_bpf
def test_g_is_accepted_and_an_older_file_kept_as_old(tmp_path: Path) -> None:
    (tmp_path / "perf.data").write_bytes(b"an older recording")
    run = sframe("record", "-g", "-q", "--", "sh", "-c", "exit 3", cwd=tmp_path)
    assert run.returncode == 3, run.stderr  # the command's status, as perf gives it
    assert run.stderr == ""  # -q: no summary
    assert (tmp_path / "perf.data.old").read_bytes() == b"an older recording"
    with open_perf_data(str(tmp_path / "perf.data")) as data:
        assert data.attrs and not data.skipped


@needs_bpf
def test_a_period_instead_of_a_frequency(tmp_path: Path) -> None:
    run = sframe("record", "-c", "250000", "-o", "p.data", "--", "sh", "-c",
                 "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    with open_perf_data(str(tmp_path / "p.data")) as data:
        attr = data.attrs[0]
        assert not attr.flags & (1 << 10)  # freq off: sample_period is a period
        periods = {record.period for record in data.records() if isinstance(record, Sample)}
    assert periods == {250000}
    perf = need_perf()
    shown = subprocess.run([perf, "script", "-i", str(tmp_path / "p.data"), "-F", "period"],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "HOME": str(tmp_path)})
    assert shown.returncode == 0 and set(shown.stdout.split()) == {"250000"}


@needs_bpf
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_writes_the_file_and_ends_the_command(tmp_path: Path, number: int) -> None:
    """As perf: the file is written, the command it started is sent SIGTERM, and the
    recorder then dies of the signal it got (a shell sees 128 + N)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    recorder = subprocess.Popen([*SFRAME, "record", "-o", "s.data", "--", "sleep", "600"],
                                cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    sleeper = None
    while sleeper is None and time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(recorder.pid), "-x", "sleep"],
                               capture_output=True, text=True)
        sleeper = int(found.stdout.split()[0]) if found.stdout.split() else None
        time.sleep(0.1)
    assert sleeper is not None
    time.sleep(0.5)
    recorder.send_signal(number)  # to the recorder only, not the command's group
    _, errors = recorder.communicate(timeout=60)
    assert recorder.returncode == -number, errors
    assert "Traceback" not in errors
    assert (tmp_path / "s.data").stat().st_size > 500
    assert not os.path.exists(f"/proc/{sleeper}")  # ended, and reaped


@needs_bpf
def test_idle_samples_are_not_counted_against_walked(tmp_path: Path) -> None:
    run = sframe("record", "-a", "--duration", "1.5", "-o", "a.data", cwd=tmp_path,
                 timeout=300)
    assert run.returncode == 0, run.stderr
    summary = next(line for line in run.stderr.splitlines()
                   if line.startswith("sframe record:") and " samples (" in line)
    assert "of user stacks walked" in summary
    with open_perf_data(str(tmp_path / "a.data")) as data:
        idle = sum(1 for record in data.records()
                   if isinstance(record, Sample) and record.pid == 0)
    if idle:
        assert "without a user stack (idle, kernel threads) not counted" in summary


@needs_bpf
def test_system_wide_sampling_starts_within_a_second_on_a_first_run(tmp_path: Path) -> None:
    """-a with an empty cache (every table to generate): sampling starts once the running
    processes' names and mappings are written, the tables follow (their samples are
    finished from stack copies). The file is read by perf."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        started = time.monotonic_ns()  # the samples' clock (CLOCK_MONOTONIC)
        run = subprocess.run([*SFRAME, "record", "-a", "--duration", "2", "-o", "a.data"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    finally:
        spinner.kill()
        spinner.wait()
    assert run.returncode == 0, run.stderr
    shown = subprocess.run([need_perf(), "script", "-F", "pid,time", "-i", "a.data"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "HOME": str(tmp_path)})
    assert shown.returncode == 0, shown.stderr[-300:]
    samples = [(int(pid), float(stamp.rstrip(":"))) for pid, stamp in
               (line.split() for line in shown.stdout.splitlines() if line.strip())]
    first = min(stamp for _, stamp in samples)
    spun = sum(1 for pid, _ in samples if pid == spinner.pid)
    assert first - started / 1e9 < 1.0
    assert spun >= 500  # about every sample of one CPU for 2 s


@needs_bpf
def test_a_perf_record_run_alongside_is_not_disturbed(tmp_path: Path) -> None:
    """``perf record -g`` (perf 6.1) while ``sframe record -a`` runs: perf records and
    reads its file as without us. While our side band asked the kernel for build ids in
    its MMAP2 records, every such perf run aborted (``util/build-id.c:1010``)."""
    perf = need_perf()
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    ours = subprocess.Popen([*SFRAME, "record", "-q", "-a", "--duration", "20", "-o",
                             str(tmp_path / "a.data")], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(4)  # sampling, its side band open
        assert ours.poll() is None, ours.stderr.read() if ours.stderr else ""
        for attempt in range(3):
            output = tmp_path / f"p{attempt}.data"
            run = subprocess.run([perf, "record", "-q", "-g", "-o", str(output), "--",
                                  sys.executable, "-c", "import json"], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, run.stderr
            script = subprocess.run([perf, "script", "-i", str(output)], capture_output=True,
                                    text=True, timeout=60)
            assert script.returncode == 0 and "python" in script.stdout, script.stderr
    finally:
        ours.send_signal(signal.SIGINT)
        _, errors = ours.communicate(timeout=120)
    assert ours.returncode in (0, -signal.SIGINT, 128 + signal.SIGINT), errors


@needs_bpf
def test_the_recorder_raises_its_priority_and_the_command_keeps_its_own(tmp_path: Path
                                                                        ) -> None:
    """Once sampling starts the recorder runs 10 nice levels above where it started (its
    table thread writes a process's entry just after its exec); the command it runs, and
    the helpers generating tables, keep the priority it started at."""
    from pysframe.record.procfs import PRIORITY_RAISE
    from pysframe.session.tables import BASE_NICE

    script = ("import os, time; ppid = os.getppid(); time.sleep(0.5); "
              "print(os.getpriority(os.PRIO_PROCESS, 0), "
              "open(f'/proc/{ppid}/stat').read().rsplit(')', 1)[1].split()[16])")
    run = sframe("record", "-q", "-o", "n.data", "--", sys.executable, "-c", script,
                 cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    mine, recorder = (int(field) for field in run.stdout.split())
    started = os.getpriority(os.PRIO_PROCESS, 0)
    assert mine == started
    assert recorder == max(started - PRIORITY_RAISE, -20)  # field 19 of stat: nice
    # A helper goes back to the priority named for it.
    child = subprocess.run([sys.executable, "-c",
                            "import os; from pysframe.session.tables import _base_priority; "
                            "_base_priority(); print(os.getpriority(os.PRIO_PROCESS, 0))"],
                           env={**os.environ, BASE_NICE: str(started + 3)}, capture_output=True,
                           text=True, timeout=60)
    assert int(child.stdout) == started + 3


@needs_bpf
@pytest.mark.parametrize("given", [None, "3"])
def test_the_command_gets_the_users_environment(tmp_path: Path, given: str | None) -> None:
    """The recorder keeps numpy's OpenBLAS to one thread for itself (pysframe.blas); the
    command it starts sees the environment the user gave, with or without the variable."""
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    done = subprocess.run([*SFRAME, "record", "-q", "-o", str(tmp_path / "env.data"), "--",
                           "env"], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines()
             if line.startswith("OPENBLAS_NUM_THREADS=")]
    assert lines == ([] if given is None else [f"OPENBLAS_NUM_THREADS={given}"])


def test_numpy_starts_no_blas_thread_in_the_command() -> None:
    """After the command's set-up, importing numpy leaves the process with one thread."""
    probe = ("import os; os.environ.pop('OPENBLAS_NUM_THREADS', None); "
             "from pysframe.blas import one_blas_thread, user_environment; one_blas_thread(); "
             "import numpy; print(len(os.listdir('/proc/self/task')), "
             "'OPENBLAS_NUM_THREADS' in user_environment())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == ["1", "False"]

"""``-j`` to a descriptor (cli.jobs_turns): each process writes the ranges it made itself,
in their turn, into the descriptor it shares with this process. The text is every range's
in order, each once, whichever process made it, held in memory or spilled; a failing
child ends the run with its status and nothing is left behind; a reader that goes away
ends the run as SIGPIPE ends C tools, whichever process was writing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.job_ranges import lines, producer
from tests.support.job_ranges import ranges as _ranges

from conftest import REPO
from pysframe.cli import jobs, jobs_turns
from pysframe.cli.errors import CommandError


def _to_file(path: Path, ranges: list[tuple[int, int]], produce: object, started: object,
             statuses: list[int], processes: int | None) -> list[tuple[int, int, int]]:
    """The ranges' text through in_order into the file ``path`` (this process writing what
    is yielded, as ``sframe script`` does), as (sample, process number, pid) lines."""
    with open(path, "w", encoding="utf-8") as stream:
        copy = jobs.copier(stream)
        assert isinstance(copy, jobs.Copier)
        for text in jobs.in_order(ranges, produce, lambda: False, statuses,  # type: ignore[arg-type]
                                  copy=copy, started=started,  # type: ignore[arg-type]
                                  processes=processes):
            stream.write(text)
    return lines(path.read_text())


@pytest.mark.parametrize("processes", [None, 2, 3, 4])
@pytest.mark.parametrize("in_memory", [jobs.IN_MEMORY, 0, 2000])
def test_every_range_once_in_order_written_by_its_maker(
        processes: int | None, in_memory: int, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """Held in memory, spilled from the start (0), or spilled midway (2,000 bytes of
    ~3,800 a process): the same text. Without ``processes`` (one range a process: the
    sample-by-sample path's shares) the children's text is copied here from memfds, as
    before the turns; the text is the same."""
    monkeypatch.setattr(jobs, "IN_MEMORY", in_memory)
    produce, started = producer()
    statuses: list[int] = []
    count = 12 if processes is not None else 3
    lines = _to_file(tmp_path / "out.txt", _ranges(count), produce, started, statuses,
                     processes)
    assert [sample for sample, _, _ in lines] == list(range(10 * count))
    assert statuses == [0] * ((processes or count) - 1)
    makers = {pid for _, _, pid in lines}
    assert len(makers) == len({number for _, number, _ in lines})
    if processes is None:  # one range a process: three makers
        assert len(makers) == 3


def test_a_slow_process_leaves_the_claims_to_the_others(tmp_path: Path) -> None:
    produce, started = producer(slow={0})
    lines = _to_file(tmp_path / "out.txt", _ranges(6), produce, started, [], 3)
    assert [sample for sample, _, _ in lines] == list(range(60))
    assert os.getpid() not in {pid for sample, _, pid in lines if sample >= 20}


def test_a_failing_child_ends_the_run_and_nothing_is_left(tmp_path: Path) -> None:
    descriptors = len(os.listdir("/proc/self/fd"))

    def produce(first: int, last: int) -> Iterator[str]:
        if first == 0:
            time.sleep(0.3)  # (the child claims the others meanwhile)
        if first == 60:
            raise CommandError("range 6 cannot be made", 4)
        yield f"{first}\n"

    statuses: list[int] = []
    with pytest.raises(CommandError) as failed:
        _to_file(tmp_path / "out.txt", _ranges(8), produce, None, statuses, 2)
    assert failed.value.exit_code == 4 and statuses == [4]
    # This process's share (one text: "0") is out; nothing of the failed child's: it
    # failed while this process made its share, before any of its ranges had a turn.
    assert (tmp_path / "out.txt").read_text().split() == ["0"]
    assert len(os.listdir("/proc/self/fd")) == descriptors
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


def test_a_childs_ranges_go_out_while_this_process_makes_its_own(tmp_path: Path) -> None:
    """Turns are given as ranges are made: the child's first two ranges (made while this
    process made its share) are in the file while this process is still making the range
    it claimed after its share, not once it has made every range."""
    out = tmp_path / "out.txt"
    seen: list[str] = []
    numbers: list[int] = []

    def started(number: int) -> None:
        numbers[:] = [number]

    def produce(first: int, last: int) -> Iterator[str]:
        if numbers[0] == 0 and first == 0:
            time.sleep(0.25)  # (this process's share: the child makes ranges 1 and 2)
        elif numbers[0] == 0:  # the range this process claimed after its share
            time.sleep(0.5)  # (the child is given its turns meanwhile)
            seen.append(out.read_text())
        else:
            time.sleep(0.1)
        for sample in range(first, last):
            yield f"sample {sample} by {numbers[0]} in {os.getpid()}\n"

    statuses: list[int] = []
    found = _to_file(out, _ranges(6), produce, started, statuses, 2)
    assert [sample for sample, _, _ in found] == list(range(60)) and statuses == [0]
    assert seen and "sample 10 " in seen[0] and "sample 20 " in seen[0]


#: Three processes: a child dies on range 1 (the first after this process's share) while the
#: other holds ranges 2-5 and waits for their turns.
_DEAD_CHILD = """
import os, sys, tempfile, time
from pysframe.cli import jobs
from pysframe.cli.errors import CommandError

def produce(first, last):
    if first == 0:
        time.sleep(0.3)  # (the children claim every other range meanwhile)
    if first == 10:
        raise CommandError("range 1 cannot be made", 4)
    yield f"{first}\\n"

with tempfile.TemporaryFile("w+") as stream:
    try:
        for text in jobs.in_order([(k * 10, k * 10 + 10) for k in range(6)], produce,
                                  lambda: False, [], copy=jobs.copier(stream), processes=3):
            stream.write(text)
    except CommandError as error:
        print(error.exit_code)
    stream.flush()
    stream.seek(0)
    print(stream.read().strip())
try:
    os.waitpid(-1, os.WNOHANG)
except ChildProcessError:
    print("no-child-left")
"""


def test_a_dead_child_stops_the_turns_while_another_waits_for_its_own() -> None:
    """A child that dies on the range after this process's share, while another holds
    the later ranges and waits for their turns: the run ends with the dead child's status
    (no wait for a range no one will make), the text only this process's share, and
    nothing is left running."""
    run = subprocess.run([sys.executable, "-c", _DEAD_CHILD], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["4", "0", "no-child-left"]


def test_kept_ranges_spill_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts are kept in pieces of about PIECE bytes (here 3: "abc", "defgh", "ij"): the
    first fits in memory (limit 5), the rest of the range goes to its file, after it."""
    monkeypatch.setattr(jobs_turns, "PIECE", 3)
    kept = jobs_turns.KeptRanges(limit=5)
    kept.make(3, iter(["abc", "de", "fgh", "ij"]))
    kept.make(1, iter(["x"]))
    assert kept.numbers() == [1, 3]
    assert kept.texts[3] == [b"abc"] and 3 in kept.files and kept.texts[1] == [b"x"]
    with open(tmp_path / "out", "wb") as out:
        kept.write(3, out.fileno())
        kept.write(1, out.fileno())
    assert (tmp_path / "out").read_bytes() == b"abcdefghijx"
    assert kept.files == {} and kept.held == 0


#: A run whose reader goes away after this process's first range, while the child holds
#: the next: the child, writing in its turn, is ended by SIGPIPE, and so is this process.
_CUT_SHORT = """
import signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (as the sframe command has it)
from pysframe.cli import jobs

def produce(first, last):
    yield "x" * 100
    if first == 0:
        sys.stdout.flush()
        time.sleep(0.5)  # (the reader reads the 100 bytes and goes away meanwhile)

for text in jobs.in_order([(0, 1), (1, 2)], produce, lambda: False, [],
                          copy=jobs.copier(sys.stdout), processes=2):
    sys.stdout.write(text)
sys.stdout.flush()
print("not ended", file=sys.stderr)
"""


def test_the_readers_end_ends_the_run_as_sigpipe_does() -> None:
    run = subprocess.Popen([sys.executable, "-c", _CUT_SHORT], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, cwd=REPO)
    assert run.stdout is not None and run.stderr is not None
    assert run.stdout.read(100) == b"x" * 100
    run.stdout.close()
    errors = run.stderr.read()
    assert run.wait(timeout=30) == -13
    assert errors == b""


def test_the_jobs_modules_import_no_enum() -> None:
    """``signal``'s enums cost ~3 ms of every -j run's start (the sample-by-sample path's
    whole run is ~100 ms): the turns take ``_signal``'s plain functions (c_signal). (What
    the interpreter loaded at its start, a site hook's enum among them, is not counted.)"""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; before = set(sys.modules); "
         "import pysframe.cli.jobs; "
         "print(sorted({'enum', 'signal'} & (set(sys.modules) - before)))"],
        capture_output=True, text=True, check=True, cwd=REPO)
    assert loaded.stdout.strip() == "[]"


def test_kept_text_past_held_goes_to_a_memfd_then_to_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past HELD bytes in memory (here 4), a range's text goes to a memfd while the
    process's spilled text is under its limit (here 6), then to an unnamed file; the
    ranges come out whole and in order."""
    monkeypatch.setattr(jobs_turns, "PIECE", 1)
    monkeypatch.setattr(jobs_turns, "HELD", 4)
    kept = jobs_turns.KeptRanges(limit=6)
    kept.make(0, iter(["ab", "cd", "ef"]))  # "ab", "cd" held; "ef" to a memfd
    kept.make(1, iter(["gh", "ij"]))  # spilled 2 < 6: a memfd
    kept.make(2, iter(["kl", "mn", "op"]))  # spilled 6: an unnamed file
    kinds = {number: os.readlink(f"/proc/self/fd/{fd}") for number, fd in kept.files.items()}
    assert kept.texts[0] == [b"ab", b"cd"] and kept.texts[1] == kept.texts[2] == []
    assert kinds[0].startswith("/memfd:") and kinds[1].startswith("/memfd:")
    assert not kinds[2].startswith("/memfd:")
    with open(tmp_path / "out", "wb") as out:
        for number in (0, 1, 2):
            kept.write(number, out.fileno())
    assert (tmp_path / "out").read_bytes() == b"abcdefghijklmnop"
    kept.close()


#: A run whose child's turn fails to write (/dev/full): this process's first range is
#: empty, so the child is the first to write.
_FULL = """
import sys, time
from pysframe.cli import jobs
from pysframe.cli.errors import guarded

def produce(first, last):
    if first == 0:
        time.sleep(0.3)  # (the child claims the other range meanwhile)
    yield "" if first == 0 else "x" * 100

def run():
    with open("/dev/full", "w") as stream:
        stream.output_name = "OUT"  # (as cli.files.Output names the -o file)
        for text in jobs.in_order([(0, 1), (1, 2)], produce, lambda: False, [],
                                  copy=jobs.copier(stream), processes=2):
            stream.write(text)
    return 0

sys.exit(guarded(run))
"""


def test_a_childs_failed_write_names_the_output_file() -> None:
    run = subprocess.run([sys.executable, "-c", _FULL], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert run.returncode == 2
    assert "OUT: cannot write: No space left on device" in run.stderr
    assert "a worker process failed (exit status 2)" in run.stderr


def test_the_turns_run_with_descriptors_past_1024(tmp_path: Path) -> None:
    """A run with more than 1,024 descriptors open (a large binary mapped holds one:
    hundreds of them are a system-wide recording's) gets its pipes numbered past what
    select() takes (it raised "filedescriptor out of range")."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        raised = hard if hard == resource.RLIM_INFINITY else max(hard, wanted)
        try:  # (root may raise the hard limit too)
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, raised))
        except (ValueError, OSError):
            pytest.skip(f"at most {hard} descriptors for this user (run as root)")
    held: list[int] = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        produce, started = producer()
        statuses: list[int] = []
        lines = _to_file(tmp_path / "out.txt", _ranges(12), produce, started, statuses, 3)
        assert [sample for sample, _, _ in lines] == list(range(120))
        assert statuses == [0, 0]
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

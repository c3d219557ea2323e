"""``-j``'s ranges claimed as the processes go (cli.jobs.in_order with processes): the text is the
ranges' in order, each made once, whichever process claimed it; a slow process leaves the
rest to the others; a failing child ends the run with its status, nothing left behind."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from tests.support.job_ranges import lines as _lines
from tests.support.job_ranges import producer
from tests.support.job_ranges import ranges as _ranges

from pysframe import helper_child
from pysframe.cli import jobs
from pysframe.cli.errors import CommandError


@pytest.mark.parametrize("processes", [1, 2, 3, 4])
@pytest.mark.parametrize("in_memory", [jobs.IN_MEMORY, 0, 200])
def test_the_ranges_come_in_order_each_made_once(processes: int, in_memory: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sample once, in order, whether each range's text is held in memory, in its
    file, or spilled midway; statuses of the children all 0."""
    monkeypatch.setattr(jobs, "IN_MEMORY", in_memory)
    produce, started = producer()
    statuses: list[int] = []
    text = "".join(jobs.in_order(_ranges(12), produce, lambda: False, statuses,  # type: ignore[arg-type]
                                 started=started, processes=processes))  # type: ignore[arg-type]
    lines = _lines(text)
    assert [sample for sample, _, _ in lines] == list(range(120))
    assert statuses == [0] * (processes - 1)
    assert {number for _, number, _ in lines} <= set(range(processes))
    # One process number per pid: each process was started once, with its own number.
    assert len({(number, pid) for _, number, pid in lines}) == len({pid for _, _, pid in lines})


def test_a_slow_process_leaves_the_other_ranges_to_the_others() -> None:
    """This process's share (the first 2 of 6 ranges, 3 processes) takes long: the
    children claim all the rest meanwhile; a slow claimed range leaves the rest to the
    other process, this one too once its share is made."""
    produce, started = producer(slow={0})
    text = "".join(jobs.in_order(_ranges(6), produce, lambda: False, [],  # type: ignore[arg-type]
                                 started=started, processes=3))  # type: ignore[arg-type]
    lines = _lines(text)
    assert [sample for sample, _, _ in lines] == list(range(60))
    assert {pid for sample, _, pid in lines if sample < 20} == {os.getpid()}
    assert os.getpid() not in {pid for sample, _, pid in lines if sample >= 20}
    produce, started = producer(slow={40})  # (the first range claimed)
    text = "".join(jobs.in_order(_ranges(8), produce, lambda: False, [],  # type: ignore[arg-type]
                                 started=started, processes=2))  # type: ignore[arg-type]
    lines = _lines(text)
    assert [sample for sample, _, _ in lines] == list(range(80))
    slow = lines[40][2]  # (whichever process claimed it: the other made the rest)
    assert slow not in {pid for sample, _, pid in lines if sample >= 50}


def test_a_failing_child_ends_the_run_and_nothing_is_left() -> None:
    """A child whose range raises: a CommandError with its status after the others are
    waited for; no child left running, no descriptor left open."""
    descriptors = len(os.listdir("/proc/self/fd"))

    def produce(first: int, last: int) -> Iterator[str]:
        if first == 0:
            time.sleep(0.3)  # (this process's share: the child claims the others)
        if first == 60:
            raise CommandError("range 6 cannot be made", 4)
        yield f"{first}\n"

    statuses: list[int] = []
    with pytest.raises(CommandError) as failed:
        "".join(jobs.in_order(_ranges(8), produce, lambda: False, statuses, processes=2))
    assert failed.value.exit_code == 4 and statuses == [4]
    assert len(os.listdir("/proc/self/fd")) == descriptors
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


def test_at_most_255_ranges_are_claimed() -> None:
    with pytest.raises(ValueError):
        "".join(jobs.in_order(_ranges(256), lambda first, last: iter(()), lambda: False, [],
                              processes=2))


def test_a_child_that_has_said_its_status_is_left_to_exit(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """When the process ends right after (``sframe script``), a child's status is the byte
    it writes as it ends, and the run goes on without waiting for the kernel to free its
    memory; the child exits with that very status, and is reaped at the end
    (``helper_child.reap_left``, as ``main`` does). No descriptor is left open."""
    monkeypatch.setattr(helper_child, "REAP_AT_END", True)
    descriptors = len(os.listdir("/proc/self/fd"))
    produce, started = producer()
    statuses: list[int] = []
    text = "".join(jobs.in_order(_ranges(6), produce, lambda: False, statuses,  # type: ignore[arg-type]
                                 started=started))  # type: ignore[arg-type]
    assert [sample for sample, _, _ in _lines(text)] == list(range(60))
    assert statuses == [0] * 5
    assert len(os.listdir("/proc/self/fd")) == descriptors
    left = list(helper_child._left)
    assert len(left) == 5
    exits = [os.waitpid(pid, 0)[1] for pid in left]
    assert [os.waitstatus_to_exitcode(status) for status in exits] == statuses
    helper_child._left.clear()
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)

    def failing(first: int, last: int) -> Iterator[str]:
        if first == 20:
            raise CommandError("range 2 cannot be made", 4)
        yield f"{first}\n"

    with pytest.raises(CommandError) as failed:
        "".join(jobs.in_order(_ranges(3), failing, lambda: False, statuses := []))
    assert failed.value.exit_code == 4 and statuses == [0, 4]
    helper_child.reap_left()  # the first (said 0); the failed one was ended at once
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)
    assert len(os.listdir("/proc/self/fd")) == descriptors


def test_a_child_killed_before_its_last_word_is_waited_for(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """A child that dies without saying its status (killed) is waited for, and its signal
    fails the run as before."""
    monkeypatch.setattr(helper_child, "REAP_AT_END", True)
    descriptors = len(os.listdir("/proc/self/fd"))

    def produce(first: int, last: int) -> Iterator[str]:
        if first == 10:
            os.kill(os.getpid(), 9)
        yield f"{first}\n"

    statuses: list[int] = []
    with pytest.raises(CommandError):
        "".join(jobs.in_order(_ranges(2), produce, lambda: False, statuses))
    assert statuses == [-9]
    assert len(os.listdir("/proc/self/fd")) == descriptors
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


def test_a_childs_text_is_written_in_pieces_and_kept_up_to_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's text goes to its file a piece at a time (not a write a sample), in
    order, past the in-memory limit to the last file; what it made before an error is
    still written."""
    writes: list[int] = []
    write_all = jobs.write_all

    def counted(fd: int, data: bytes) -> None:
        writes.append(len(data))
        write_all(fd, data)

    monkeypatch.setattr(jobs, "write_all", counted)
    monkeypatch.setattr(jobs, "PIECE", 1000)
    texts = [f"sample {k}\n" * 3 for k in range(400)]

    def produce(first: int, last: int) -> Iterator[str]:
        yield from texts[first:last]
        if last == 400:
            raise ValueError("bad record")

    files = [os.memfd_create("text"), os.memfd_create("spilled")]
    try:
        jobs._write_range(produce, (0, 200), files, 2000)
        assert len(writes) < 20 and sum(writes) == len("".join(texts[:200]))
        with pytest.raises(ValueError):
            jobs._write_range(produce, (200, 400), files[1:], 10**6)
        read = []
        for fd in files:
            os.lseek(fd, 0, os.SEEK_SET)
            read.append(os.read(fd, 1 << 20).decode())
        assert read[0] + read[1] == "".join(texts)
        assert 0 < len(read[0]) <= 2000 < len(read[1])  # (the rest spilled to the last)
    finally:
        for fd in files:
            os.close(fd)

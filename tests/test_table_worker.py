"""The recorder's table thread: ``-a`` prepares processes in rounds, those with the most
samples waiting for their tables first, and every process is prepared exactly once."""

from __future__ import annotations

import threading

from pysframe.record.table_worker import ROUND, TableWorker, next_round


def test_rounds_take_the_processes_with_most_samples_waiting_first() -> None:
    pids = list(range(100, 100 + 3 * ROUND))
    waiting = {130: 50, 105: 7, 140: 7, 101: 1}
    assert next_round(pids, waiting)[:4] == [130, 105, 140, 101]
    assert next_round(pids, {})[:3] == pids[:3]  # nothing waiting: the order given


def test_the_worker_prepares_every_process_once_in_that_order() -> None:
    pids = list(range(1, 2 * ROUND + 5))
    waiting = {pid: 0 for pid in pids}
    loaded: list[int] = []
    rounds: list[list[int]] = []

    def load(pid: int) -> None:
        loaded.append(pid)
        # Samples keep coming while tables are prepared: the last process gets many.
        waiting[pids[-1]] = 1000

    worker = TableWorker(load, lambda pid: None, lambda: None, rounds.append,
                         lambda: dict(waiting))
    worker.prepare(pids, progress=False)
    assert worker.prepared.wait(30)
    worker.close()
    assert sorted(loaded) == pids and len(loaded) == len(pids)
    assert rounds[0] == pids[:ROUND]  # nothing was waiting at the first round
    assert rounds[1][0] == pids[-1]  # then the one with samples waiting
    assert [pid for batch in rounds for pid in batch] == loaded


def test_with_a_sampled_test_only_the_sampled_processes_are_prepared() -> None:
    """-a: processes without a sample (idle daemons, a shell) are not prepared; a process
    sampled while the others are prepared is taken in the next round."""
    pids = list(range(1, 2 * ROUND + 5))
    sampled = {3, 7, 2 * ROUND + 4}
    loaded: list[int] = []

    def load(pid: int) -> None:
        loaded.append(pid)
        sampled.add(11)  # one more process had its first sample meanwhile

    worker = TableWorker(load, lambda pid: None, lambda: None, lambda batch: None,
                         dict, sampled=lambda pid: pid in sampled)
    worker.prepare(pids, progress=False)
    assert worker.prepared.wait(30)
    worker.close()
    assert loaded[:3] == [3, 7, 2 * ROUND + 4] and loaded[3:] == [11]
    assert worker.prepared_pids == {3, 7, 11, 2 * ROUND + 4}
    assert worker.left_pids == set(pids) - worker.prepared_pids


def test_finishing_is_queued_once_at_a_time() -> None:
    """The recorder asks every second for the waiting samples to be finished; while one
    such request waits behind a slow load, more are not queued."""
    import threading

    started, release, last = threading.Event(), threading.Event(), threading.Event()
    finished: list[int] = []

    def load(pid: int) -> None:
        started.set()
        release.wait(30)
        if pid == 3:
            last.set()

    worker = TableWorker(load, lambda pid: None, lambda: None, lambda batch: None,
                         finish=lambda: finished.append(1))
    worker.ask("load", 1)
    assert started.wait(30)
    for _ in range(5):
        worker.ask("finish")
    assert worker.load_queued(1) is False  # (started: no longer queued)
    worker.ask("load", 2)
    assert worker.load_queued(2)
    release.set()
    worker.ask("load", 3)  # after the finishing, in the queue's order
    assert last.wait(30)
    worker.close()
    assert finished == [1]


def test_a_queued_load_goes_before_finishing_the_loaded_processes_samples() -> None:
    """A process that just ran exec walks to stack copies until its entry is written:
    while loads are queued, the samples of the processes already loaded wait (finishing
    them unwinds in Python, ~ms each)."""
    events: list[str] = []
    first_load = threading.Event()
    go_on = threading.Event()

    def load(pid: int) -> None:
        events.append(f"load {pid}")
        if pid == 1:
            first_load.set()
            assert go_on.wait(30)  # 2 and 3 are asked for meanwhile

    worker = TableWorker(load, lambda pid: None, lambda: None, lambda batch: None,
                         loaded=lambda pid: events.append(f"finish {pid}"))
    worker.ask("load", 1)
    assert first_load.wait(30)
    worker.ask("load", 2)
    worker.ask("load", 3)
    go_on.set()
    worker.ask("drop", 9)  # the queue's last item: the finishing is done by then
    for _ in range(300):
        if len(events) == 6:
            break
        threading.Event().wait(0.1)
    worker.close()
    assert events == ["load 1", "load 2", "load 3", "finish 1", "finish 2", "finish 3"]

"""Ranges and their text for the ``-j`` tests (cli.jobs): each text line says which
sample it is, which process number made it and in which process."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

Produce = Callable[[int, int], Iterator[str]]
Started = Callable[[int], None]


def ranges(count: int, size: int = 10) -> list[tuple[int, int]]:
    return [(k * size, (k + 1) * size) for k in range(count)]


def producer(slow: set[int] | None = None) -> tuple[Produce, Started]:
    """(produce, started): ``produce`` yields a line per sample, naming the number
    ``started`` was given in this process; a range starting at a sample of ``slow``
    takes 0.3 s."""
    numbers: list[int] = []  # the process's number (started), set in each process

    def started(number: int) -> None:
        numbers[:] = [number]

    def produce(first: int, last: int) -> Iterator[str]:
        if slow and first in slow:
            time.sleep(0.3)
        for sample in range(first, last):
            yield f"sample {sample} by {numbers[0]} in {os.getpid()}\n"

    return produce, started


def lines(text: str) -> list[tuple[int, int, int]]:
    """(sample, process number, pid) of each line."""
    return [(int(words[1]), int(words[3]), int(words[5]))
            for words in (line.split() for line in text.splitlines())]

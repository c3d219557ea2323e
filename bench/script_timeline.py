"""Bench: where the time of one `sframe script -j N` run goes, process by process.

`PYSFRAME_PHASE_TIMES=1` sums phases in this process only; with `-j` the other processes'
work shows there as waiting. This runs the command in this interpreter with a timestamp
(ms since start, after the interpreter's own start-up) written to stderr at each step:
numpy and our modules imported, the record scan's start and end, each fork, each chunk
unwound (by which process), a child reaped, each child range handed on to stdout (or,
with the batch pipeline's turns, each range written by its maker in its turn), the
exit handlers, each process's end. The wrapped functions are the real ones, called
unchanged; only the marks are added. The text goes to --output (default /dev/null).

    env -u PYTHONDONTWRITEBYTECODE python3 bench/script_timeline.py RECORDING \\
        [--output FILE] [--cache DIR] [-- more sframe script arguments]
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import atexit  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402


def mark(what: str) -> None:
    os.write(2, f"{os.getpid():>7} {1e3 * (time.perf_counter() - START):8.1f} ms  {what}\n"
             .encode())


def wrapped(owner: Any, name: str, before: str | None, after: str | None) -> None:
    """``owner.name`` with a mark before and/or after each call."""
    inner: Callable[..., Any] = getattr(owner, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        if before:
            mark(before)
        result = inner(*args, **kwargs)
        if after:
            mark(after)
        return result

    setattr(owner, name, call)


def instrument() -> None:
    import numpy  # noqa: F401

    mark("numpy imported")
    from pysframe.cli import jobs
    from pysframe.session import vector
    from pysframe.sources import perf_arrays

    mark("pysframe's script modules imported")
    wrapped(perf_arrays, "sample_arrays", "record scan starts", "record scan ends")
    wrapped(jobs, "_reap", "waiting for a child", "child reaped")
    chunk = vector.VectorSession._chunk

    def timed_chunk(self: Any, start: int, end: int) -> Any:
        result = chunk(self, start, end)
        mark(f"unwound samples {start}-{end}")
        return result

    vector.VectorSession._chunk = timed_chunk  # type: ignore[method-assign]
    handed_on = jobs._handed_on

    def timed_handed_on(files: list[int], copy: Any) -> Iterator[str]:
        begin = time.perf_counter()
        yield from handed_on(files, copy)
        mark(f"a range handed on ({1e3 * (time.perf_counter() - begin):.1f} ms)")

    jobs._handed_on = timed_handed_on
    from pysframe.cli import jobs_turns

    write = jobs_turns.KeptRanges.write

    def timed_write(self: Any, number: int, target: int) -> None:
        begin = time.perf_counter()
        write(self, number, target)
        mark(f"range {number} written in its turn ({1e3 * (time.perf_counter() - begin):.1f} ms)")

    jobs_turns.KeptRanges.write = timed_write  # type: ignore[method-assign]
    fork = os.fork

    def timed_fork() -> int:
        pid = fork()
        mark(f"forked {pid}" if pid else "child starts")
        return pid

    os.fork = timed_fork
    end = os._exit

    def timed_exit(status: int) -> None:
        mark("ends")
        end(status)

    os._exit = timed_exit  # type: ignore[assignment]
    run_exit = atexit._run_exitfuncs

    def timed_exit_handlers() -> None:
        mark("exit handlers start")
        run_exit()
        mark("exit handlers end")

    atexit._run_exitfuncs = timed_exit_handlers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recording")
    parser.add_argument("--output", default=os.devnull)
    parser.add_argument("--cache", default=None, help="XDG_CACHE_HOME for the run")
    argv = sys.argv[1:]
    ours, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    args = parser.parse_args(ours)
    if args.cache:
        os.environ["XDG_CACHE_HOME"] = args.cache
    instrument()
    from pysframe.cli.entry import main as sframe

    sys.argv = ["sframe", "script", args.recording, *rest]
    out = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.close(out)
    sframe()


if __name__ == "__main__":
    main()

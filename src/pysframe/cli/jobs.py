"""``-j N``: a command's text made in ranges by forked processes, delivered in order.

The ranges are independent once each starts from the state before it (the caller's
``produce`` replays what it needs). The first range is made here and streamed at once;
every other one by a child forked before any of them starts (one range each, or ranges
claimed one at a time as the processes go: :func:`in_order`), into memory (a memfd) and,
past :data:`IN_MEMORY` bytes, an unnamed temporary file, read back in order when its turn
comes (or, when the text goes to a descriptor, kept by the process that made it and
written by it in its turn: :mod:`.jobs_turns`). Forking (not spawning) shares the opened
recording, the loaded tables and caches at no cost. A child's stderr goes to a file of its own, handed on here once it has ended
(see :func:`in_order`); a child that fails says why there, and the run then ends with
that child's status.
"""

from __future__ import annotations

import os
import sys

from ..claims import Claims
from ..cpus import place_forked
from ..fd_io import PIECE, copy_file, write_all
from ..helper_child import say_status, status_of
from ..made_exchange import unnamed_file
from .errors import EXIT_INVALID, CommandError, guarded
from .jobs_turns import KeptRanges, Turns, cut_short, end_cut_short, joined

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing imports re: ~5 ms of a small recording's run)
    from collections.abc import Callable, Iterator
    from typing import IO

#: The read end of each child's status pipe, by process id: the one byte it writes just
#: before it ends (:func:`_fork`, :func:`_reap`).
_SAID: dict[int, int] = {}

#: A child's text is kept in memory up to this many bytes, the rest in a temporary file
#: (which the kernel may write out under memory pressure). Written to a file on a
#: disk-backed /tmp, a child's 54 MB of a 66k-sample recording's text took ~110 ms
#: (ext4's block reservations, page by page) against ~35 ms into a memfd.
IN_MEMORY = 256 << 20
#: The most characters of this process's own share given to the output at once
#: (:func:`~.jobs_turns.joined`): a write a sample cost the Lua recording's parent ~1,760
#: text writes and ~330 system calls for its 2.6 MB.
JOINED = 1 << 16


def in_order(ranges: list[tuple[int, int]], produce: Callable[[int, int], Iterator[str]],
             failed: Callable[[], bool], statuses: list[int],
             finish: Callable[[], None] | None = None,
             copy: Callable[[int], None] | None = None,
             started: Callable[[int], None] | None = None,
             produced: Callable[[], None] | None = None,
             forward: Callable[[str], None] | None = None,
             processes: int | None = None) -> Iterator[str]:
    """The texts of ``ranges`` in order; ``statuses`` gets each child's exit status (1 when
    ``failed()`` says it reported a problem). Each child calls ``finish`` (if given) when its
    text is made (it ends without the exit functions: e.g. to keep what it cached). With
    ``copy`` (a :class:`Copier`: the text goes to a descriptor), only this process's first
    share is yielded: every later range is written to the descriptor by the process that
    made it, in its turn (:func:`_in_turns`). ``started(k)`` (if given) is
    called first in process k (this one: 0, once every child is forked); ``produced()``
    here once this process's ranges are made, before the children are waited for (what
    this process keeps at exit is kept while they work). What a child writes on stderr is
    kept in a file of its own and handed, line by line, to ``forward`` (default: written
    on stderr here) once it has ended, before its text: the caller leaves out the lines
    another process said already (a damaged binary that both met).

    Who makes which range: by default each range has a process of its own (this one
    makes the first). With ``processes``, the ranges (each starting where the one before
    it ends; at most 255) are shared out as the processes go past a first fixed share:
    parts of a recording cost differently (the first ones a process makes, where it
    makes functions and reads symbol tables; processes with more threads), and one of
    two fixed halves was done 100-200 ms before the other. This process makes the first
    ``len(ranges) // processes`` ranges in one go, streamed; the others are claimed one
    at a time, in order, by whichever process is free (this one too, once its share is
    made), and handed on in order once every child has ended. A process's ranges only go
    forward (the process model follows the records forward)."""
    count = len(ranges)
    claimed = processes is not None
    if claimed and not 0 < count <= 255:
        raise ValueError(f"{count} ranges to claim (1 to 255)")
    if processes is not None and isinstance(copy, Copier) and count > 1:
        yield from _in_turns(ranges, produce, failed, statuses, copy, finish, started,
                             produced, forward, processes)
        return
    share = max(1, count // processes) if processes is not None else min(1, count)
    tokens = Claims(count, share) if claimed else None
    outputs: list[list[int]] = [[] for _ in ranges[:share]] + [
        _text_files() for _ in ranges[share:]]
    limit = IN_MEMORY // max(1, count - share) if claimed else IN_MEMORY
    #: (pid, stderr file, the files of the range handed on once it has ended: by default)
    children: list[tuple[int, int, list[int]]] = []

    def worker(number: int) -> Callable[[], None]:
        def work() -> None:
            if started is not None:
                started(number)
            for each in tokens if tokens is not None else (number,):
                _write_range(produce, ranges[each], outputs[each], limit)

        return work

    try:
        for number in range(1, processes if processes is not None else count):
            children.append((*_fork(worker(number), failed, finish),
                             [] if claimed else outputs[number]))
        if started is not None:
            started(0)
        if ranges:
            yield from joined(produce(ranges[0][0], ranges[share - 1][1]), JOINED)
        for each in tokens if tokens is not None else ():
            _write_range(produce, ranges[each], outputs[each], limit)
        if produced is not None:
            produced()
        for pid, errors, files in children:
            _reap(pid, errors, statuses, forward)
            yield from _handed_on(files, copy)
            _close([errors])
            children = children[1:]
        for files in outputs[share:] if claimed else ():
            yield from _handed_on(files, copy)
    finally:
        _end(children)
        if tokens is not None:
            tokens.close()
        _close([fd for files in outputs for fd in files])


def _in_turns(ranges: list[tuple[int, int]], produce: Callable[[int, int], Iterator[str]],
              failed: Callable[[], bool], statuses: list[int], copy: Copier,
              finish: Callable[[], None] | None, started: Callable[[int], None] | None,
              produced: Callable[[], None] | None, forward: Callable[[str], None] | None,
              processes: int) -> Iterator[str]:
    """:func:`in_order` when ranges are claimed and the text goes to a descriptor
    (``copy``): the ranges after this process's first share are kept by the process that
    made each and written by it in their turn (:mod:`.jobs_turns`); only this process's
    first share is yielded. (One range a process, the sample-by-sample path's shares,
    stays with the memfds: there the child is done well before this process and its text
    is small, the Lua recording's 2.3 MB, and waiting for it to write and end cost ~3.5
    ms.)"""
    count = len(ranges)
    share = turns_share(count, processes)
    tokens = Claims(count, share)
    limit = IN_MEMORY // processes  # (each process's own text held in memory, at most)
    turns = Turns(processes - 1, share, count)
    children: list[tuple[int, int, list[int]]] = []

    def worker(number: int) -> Callable[[], None]:
        def work() -> None:
            turns.in_child(number)
            if started is not None:
                started(number)
            kept = KeptRanges(limit)
            for each in tokens:
                kept.make(each, produce(*ranges[each]))
                turns.made(each)
                turns.serve_ready(kept, copy.target, copy.label)
            _courtesy(finish)
            turns.serve(kept, copy.target, copy.label)

        return work

    mine = KeptRanges(limit)
    try:
        for number in range(1, processes):
            children.append((*_fork(worker(number), failed), []))
        turns.in_parent()
        if started is not None:
            started(0)
        yield from produce(ranges[0][0], ranges[share - 1][1])
        for each in tokens:
            turns.hand_on_ready(mine, copy.target, copy.flush)
            mine.make(each, produce(*ranges[each]))
        if produced is not None:
            produced()
        turns.hand_on(mine, copy.target, copy.flush)
        turns.close()  # (the children end)
        for pid, errors, _ in children:
            _reap(pid, errors, statuses, forward)
            _close([errors])
            children = children[1:]
    finally:
        _end(children)
        turns.close()
        mine.close()
        tokens.close()


def turns_share(count: int, processes: int) -> int:
    """The ranges this process makes first, streamed, when ranges are claimed in turns: a
    quarter of the ranges with two processes. The rest are claimed as the processes go,
    and the children's go out while this process makes its later ones (:class:`Turns`);
    with half of them first, this process's share ended when the child's claims did, and
    the child's text went out after both, the other CPU idle."""
    return max(1, count // (2 * processes))


def _courtesy(finish: Callable[[], None] | None) -> None:
    """``finish()`` if given, its failure ignored: keeping a cache is a courtesy, the
    text is made."""
    if finish is not None:
        try:
            finish()
        except Exception:
            pass


def _write_range(produce: Callable[[int, int], Iterator[str]], bounds: tuple[int, int],
                 files: list[int], limit: int) -> None:
    out = _Spilling(files, limit)
    try:
        for text in produce(*bounds):
            out.write(text)
    finally:  # (what was made is kept: a failing child's text up to its error)
        out.flush()


def _reap(pid: int, errors: int, statuses: list[int],
          forward: Callable[[str], None] | None) -> None:
    """Wait for a child's status; its stderr forwarded, its status noted (one that is
    neither 0 nor 1, problems reported with the text whole, is an error). The status is
    the byte the child wrote as it ended, or (none: it was killed) its exit status."""
    said = _SAID.pop(pid)
    try:
        status = status_of(pid, said)
    finally:
        os.close(said)
    statuses.append(status)
    _forward(errors, forward)
    if cut_short(status):  # it wrote its text in its turn, and the reader had gone
        end_cut_short()
        raise BrokenPipeError("the output's reader went away")
    if status not in (0, EXIT_INVALID):
        raise CommandError(f"a worker process failed (exit status {status})", status
                           if status > 0 else EXIT_INVALID)


def _handed_on(files: list[int], copy: Callable[[int], None] | None) -> Iterator[str]:
    """The text in ``files`` (in memory, then what did not fit), copied with ``copy`` or
    yielded."""
    for fd in files:
        os.lseek(fd, 0, os.SEEK_SET)
        if copy is not None:
            copy(fd)
        else:
            while piece := os.read(fd, PIECE):
                yield piece.decode("utf-8", "surrogateescape")


def _end(children: list[tuple[int, int, list[int]]]) -> None:
    """Children not waited for (stopped early: an error, a closed pipe): ended (their
    text files are closed with the others)."""
    for pid, errors, _ in children:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except OSError:
            pass
        _close([errors])
        said = _SAID.pop(pid, -1)
        if said >= 0:
            os.close(said)


def _forward(errors: int, forward: Callable[[str], None] | None) -> None:
    """The lines a child wrote on stderr, each handed to ``forward`` (None: written on
    stderr)."""
    os.lseek(errors, 0, os.SEEK_SET)
    pieces = []
    while piece := os.read(errors, PIECE):
        pieces.append(piece)
    for line in b"".join(pieces).decode("utf-8", "surrogateescape").splitlines(keepends=True):
        if forward is None:
            sys.stderr.write(line)
        else:
            forward(line)


def _close(files: list[int]) -> None:
    for fd in files:
        os.close(fd)


class Copier:
    """Hands text to a stream's descriptor ``target`` as bytes: a file's, copied by the
    kernel (``os.sendfile``), or a child's, written by the child in its turn
    (:mod:`.jobs_turns`), in both cases after what was written to the stream before is
    flushed: the children's half of a large recording's text (~50 MB) is then neither
    decoded nor encoded again here."""

    def __init__(self, stream: IO[str], target: int) -> None:
        self.stream, self.target = stream, target
        #: The output file's name (set by :class:`.files.Output`; None: standard output).
        self.label: str | None = getattr(stream, "output_name", None)

    def flush(self) -> None:
        self.stream.flush()

    def __call__(self, source: int) -> None:
        """The whole file ``source`` copied to the descriptor."""
        self.stream.flush()
        copy_file(source, self.target)


def copier(stream: IO[str]) -> Copier | None:
    """The :class:`Copier` of ``stream``; None for a stream without a descriptor of its own
    (a test's capture, a StringIO)."""
    try:
        return Copier(stream, stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None


def _fork(work: Callable[[], None], failed: Callable[[], bool],
          finish: Callable[[], None] | None = None) -> tuple[int, int]:
    """(pid, stderr file) of a child doing ``work`` (its text into its files), its stderr
    into a file of its own, calling ``finish`` once done."""
    errors = unnamed_file()
    said, say = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        _close([said, say, errors])
        raise
    if pid:
        os.close(say)
        _SAID[pid] = said
        place_forked(pid)
        return pid, errors
    os.close(said)
    for other in _SAID.values():  # (an earlier sibling's: not this child's to read)
        os.close(other)
    _SAID.clear()
    status = EXIT_INVALID
    try:
        os.dup2(errors, 2)

        def run() -> int:
            work()
            return 0

        status = guarded(run)
        _courtesy(finish)
        if status == 0 and failed():
            status = EXIT_INVALID
        sys.stderr.flush()
    finally:
        say_status(say, status)  # (nothing is left to do)
        os._exit(status)


def _text_files() -> list[int]:
    """A child's files, in the order its text fills them: a memfd (where the system has
    them), then an unnamed temporary file."""
    files = []
    try:
        files.append(os.memfd_create("sframe-text", os.MFD_CLOEXEC))
    except (AttributeError, OSError):  # (not Linux, or a kernel before 3.17)
        pass
    files.append(unnamed_file())
    return files


class _Spilling:
    """Writes a child's text to its first file up to ``limit`` bytes, the rest to the last
    one (the order the parent reads them in), :data:`PIECE` characters at a time (a write
    a sample cost the Lua recording's worker ~2.4 us each, 3.4 ms of its 52)."""

    def __init__(self, files: list[int], limit: int = IN_MEMORY) -> None:
        self.files, self.limit, self.held, self.at = files, limit, 0, 0
        self.pending: list[str] = []
        self.pending_size = 0

    def write(self, text: str) -> None:
        self.pending.append(text)
        self.pending_size += len(text)
        if self.pending_size >= PIECE:
            self.flush()

    def flush(self) -> None:
        """Write what is pending."""
        if not self.pending:
            return
        data = "".join(self.pending).encode("utf-8", "surrogateescape")
        self.pending.clear()
        self.pending_size = 0
        if self.held + len(data) > self.limit:
            self.at = len(self.files) - 1
        self.held += len(data)
        write_all(self.files[self.at], data)

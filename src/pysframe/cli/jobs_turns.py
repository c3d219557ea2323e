"""``-j`` to a descriptor: each process writes the ranges it made itself, in their turn.

When ranges are claimed as the processes go (the batch pipeline) and the text goes to a
descriptor of its own (standard output, or ``-o``'s file: a file, a pipe), a child keeps
the text of the ranges it makes (encoded, in memory up to :data:`HELD`; past it, in a
memfd, then in an unnamed file), says each range it has made, and writes each one to
the descriptor it shares with this process when this process gives it the turn (between
its ranges, or once all are made); this process writes its own in theirs. The output is the ranges' text in order, as when every child's
text went through a memfd that this process copied at the end: on the deep recording of
bench/perf_script.py that copy was ~28 MB written into memfds by the child (~20 ms of its
time) and then, once both processes were done, ~35 ms of ``sendfile`` and freeing here,
while the other CPU idled. A range's bytes are written by one process while the others
wait, so they follow one another whole in the shared file offset (or pipe).

The messages are bytes on two pipes per child: a report (two bytes a message: a range
made, a range written, its ranges done; see :class:`Turns`) and its turns (a range's
number: write it now). A child that dies before saying a range is written ends the
turns (end of file on its report); the caller then reaps it and reports its status.
"""

from __future__ import annotations

import os

from .. import c_signal as signal  # (the standard module's enums: ~3 ms of imports)
from ..fd_io import copy_file, write_all
from ..made_exchange import unnamed_file
from .errors import EXIT_UNREADABLE, CommandError

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing imports re: see records)
    from collections.abc import Callable, Iterator

#: A child's report, two bytes a message, a kind and a range (numbered 0 to 254): a range
#: it has made (kept until its turn), a range it wrote in its turn, or the end of its
#: ranges (range 0) while it still holds some (one that holds none ends: this process
#: may be gone, and a write would meet SIGPIPE; the end of its report says it is done).
MADE, WRITTEN, DONE = b"m", b"w", b"e"
#: Text kept (and written) in pieces of about this many bytes.
PIECE = 1 << 20


#: A process's kept text held in its own memory up to this many bytes (the deep
#: recording's child holds ~57 MB; the 743 MiB Lua recording's ~83 MB, which took the
#: run's peak RSS from 145 to 199 MB when held whole); past it, in a memfd while the
#: process's spilled text stays under its share of :data:`.jobs.IN_MEMORY`, then in an
#: unnamed file (which the kernel may write out under memory pressure).
HELD = 64 << 20


def joined(texts: Iterator[str], most: int) -> Iterator[str]:
    """``texts`` given on joined, in pieces of about ``most`` characters (the last when
    they end)."""
    pending: list[str] = []
    size = 0
    for text in texts:
        pending.append(text)
        size += len(text)
        if size >= most:
            yield "".join(pending)
            pending.clear()
            size = 0
    if pending:
        yield "".join(pending)


class KeptRanges:
    """The ranges one process made, kept until their turn: their encoded text in memory
    up to ``min(limit, HELD)`` bytes in all, the rest of a range that does not fit in a
    file of its own (written after the part in memory): a memfd while the spilled text of
    the process stays under ``limit``, else an unnamed file."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held, self.spilled = limit, 0, 0
        self.texts: dict[int, list[bytes]] = {}
        self.files: dict[int, int] = {}

    def make(self, number: int, texts: Iterator[str]) -> None:
        """Keep range ``number``'s text (``texts``, in order), in pieces of about
        :data:`PIECE` bytes (the sample-by-sample path gives one text a sample: kept one
        by one, the Lua recording's child made ~1,700 writes of ~1.5 KB in its turn)."""
        for piece in joined(texts, PIECE):
            self._keep(number, piece)
        self.texts.setdefault(number, [])

    def _keep(self, number: int, text: str) -> None:
        data = text.encode("utf-8", "surrogateescape")
        if number not in self.files and self.held + len(data) <= min(self.limit, HELD):
            self.texts.setdefault(number, []).append(data)
            self.held += len(data)
            return
        if number not in self.files:
            self.files[number] = self._spill_file()
        write_all(self.files[number], data)
        self.spilled += len(data)

    def _spill_file(self) -> int:
        if self.spilled < self.limit:
            try:
                return os.memfd_create("sframe-text", os.MFD_CLOEXEC)
            except (AttributeError, OSError):  # (not Linux, or a kernel before 3.17)
                pass
        return unnamed_file()

    def numbers(self) -> list[int]:
        return sorted(self.texts)

    def write(self, number: int, target: int) -> None:
        """Range ``number``'s text written to ``target``, and forgotten."""
        for data in self.texts.pop(number, []):
            self.held -= len(data)
            write_all(target, data)
        spilled = self.files.pop(number, None)
        if spilled is not None:
            try:
                copy_file(spilled, target)
            finally:
                os.close(spilled)

    def close(self) -> None:
        for spilled in self.files.values():
            os.close(spilled)
        self.files.clear()
        self.texts.clear()


class Turns:
    """The pipes of ``children`` children (numbered from 1), made before they are forked;
    ranges ``first`` to ``count`` (excluded) are handed on through them, in order.

    Turns are given as the ranges are made, not once every process is done: a child says
    each range it has made (:meth:`made`) and, between its ranges, writes those it was
    asked for meanwhile (:meth:`serve_ready`); this process, between its own ranges, writes
    its next one or asks the child holding it (:meth:`hand_on_ready`). Handed on only once
    both were done, the deep recording's child wrote its ~55 MB (8 ranges) to a file while
    this process waited, ~12 ms, and then took ~7 ms more to end (its address space freed),
    the other CPU idle all along. A child ends once every range it holds is written."""

    def __init__(self, children: int, first: int, count: int) -> None:
        #: Per child: (report's read end, report's write end, turns' read end, turns' write end).
        self.pipes: list[tuple[int, int, int, int]] = []
        #: The next range to write (those before it are out), and the end of the ranges.
        self.next, self.count = first, count
        self._held: dict[int, int] = {}  # a range a child made -> the child's place in pipes
        self._said: list[bytes] = []  # per child: the start of a message not read whole
        self._ended: set[int] = set()  # children whose report has ended (done, or dead)
        self._done: set[int] = set()  # children that make no more ranges (ended too)
        self._asked: tuple[int, int] | None = None  # (child, the last range asked of it)
        try:
            for _ in range(children):
                report, turns = os.pipe(), os.pipe()
                self.pipes.append((*report, *turns))
        except OSError:
            self.close()
            raise

    def in_child(self, number: int) -> None:
        """In child ``number``: every end but its own two closed (a child forked later holds
        the others' ends too, and would keep their pipes from ending)."""
        for k, (report_r, report_w, turns_r, turns_w) in enumerate(self.pipes, start=1):
            for fd in (report_r, turns_w) if k == number else (report_r, report_w,
                                                                turns_r, turns_w):
                os.close(fd)
        _, report_w, turns_r, _ = self.pipes[number - 1]
        self.pipes = [(-1, report_w, turns_r, -1)]
        os.set_blocking(turns_r, False)  # (turns taken between ranges: serve_ready)

    def in_parent(self) -> None:
        """Here, once every child is forked: the children's ends closed."""
        for _, report_w, turns_r, _ in self.pipes:
            os.close(report_w)
            os.close(turns_r)
        self.pipes = [(report_r, -1, -1, turns_w)
                      for report_r, _, _, turns_w in self.pipes]
        for report_r, *_ in self.pipes:
            os.set_blocking(report_r, False)
        self._said = [b""] * len(self.pipes)

    # --- in a child ------------------------------------------------------------------

    def made(self, number: int) -> None:
        """In a child: range ``number`` is made (kept, to be written when asked)."""
        write_all(self.pipes[0][1], MADE + bytes([number]))

    def serve_ready(self, kept: KeptRanges, target: int, label: str | None = None) -> None:
        """In a child, between its ranges: the ranges asked of it meanwhile written."""
        try:
            asked = os.read(self.pipes[0][2], 256)
        except BlockingIOError:
            return
        self._write(asked, kept, target, label)

    def serve(self, kept: KeptRanges, target: int, label: str | None = None) -> None:
        """In a child, its ranges made: write each range it still holds when asked, saying
        so, until none is left (or the turns end). ``label``: the output file's name, for
        the one line a failed write says (None: standard output, which the command's error
        handler names)."""
        _, report, turns, _ = self.pipes[0]
        if not kept.numbers():
            return
        write_all(report, DONE + b"\0")
        os.set_blocking(turns, True)
        while kept.numbers() and (asked := os.read(turns, 256)):
            self._write(asked, kept, target, label)

    def _write(self, asked: bytes, kept: KeptRanges, target: int, label: str | None) -> None:
        for number in asked:
            try:
                kept.write(number, target)
            except OSError as error:
                if label is None:
                    raise
                raise CommandError(f"{label}: cannot write: {error.strerror or error}",
                                   EXIT_UNREADABLE) from None
            write_all(self.pipes[0][1], WRITTEN + bytes([number]))

    # --- here ------------------------------------------------------------------------

    def hand_on_ready(self, mine: KeptRanges, target: int, flush: Callable[[], None]) -> None:
        """Here, between this process's ranges: the ranges that can go out now written (its
        own, ``mine``) or asked of the child that holds them; returns at once."""
        with _WritingTurns():
            self._hear(block=False)
            self._advance(mine, target, flush)

    def hand_on(self, mine: KeptRanges, target: int, flush: Callable[[], None]) -> None:
        """Here, every range of this process made: the rest written in order, this
        process's own by itself, the others by the child that holds each, in its turn
        (``flush``: what this process wrote before, out first). Stops at a range no one
        holds (its child failed: the caller reaps it and says why). A turn given to a
        child that has ended must not kill this process (SIGPIPE ignored meanwhile); the
        output's reader gone ends it as SIGPIPE would have (:func:`end_cut_short`)."""
        with _WritingTurns():
            self._advance(mine, target, flush)
            while self.next < self.count and self._may_go_on() and self._hear(block=True):
                self._advance(mine, target, flush)

    def _may_go_on(self) -> bool:
        """Whether a child may still say what the next range needs: the one asked to write
        is alive, or no one holds the next range and a child still makes ranges."""
        if self._asked is not None:
            return self._asked[0] not in self._ended
        return self.next not in self._held and len(self._done) < len(self.pipes)

    def _advance(self, mine: KeptRanges, target: int, flush: Callable[[], None]) -> None:
        """The next ranges out while nothing asked of a child is pending: this process's
        written, a child's run of ranges asked of it."""
        while self._asked is None and self.next < self.count:
            number = self.next
            if number in mine.texts:
                flush()
                mine.write(number, target)
                self.next += 1
                continue
            child = self._held.get(number)
            if child is None:
                return  # (not made yet)
            run = [number]
            while self._held.get(run[-1] + 1) == child:
                run.append(run[-1] + 1)
            flush()
            try:
                write_all(self.pipes[child][3], bytes(run))
            except BrokenPipeError:  # it has ended: no one will write these
                self._ended.add(child)
                self._done.add(child)
                self._held = {n: k for n, k in self._held.items() if k != child}
                return
            self._asked = (child, run[-1])

    def _hear(self, block: bool) -> bool:
        """What the children said, read (with ``block``, once one has said something);
        False when none is left to say anything."""
        alive = [k for k in range(len(self.pipes)) if k not in self._ended]
        if not alive:
            return False
        if block:
            import select  # (here: ~0.4 ms of every -j run's start, the scalar path's too)

            # (poll, not select: a process with more than 1,024 descriptors open, a
            # binary mapped for each large one, numbers its pipes past what select takes)
            listening = select.poll()
            for k in alive:
                listening.register(self.pipes[k][0], select.POLLIN)
            listening.poll()
        for k in alive:
            try:
                said = os.read(self.pipes[k][0], 512)
            except BlockingIOError:
                continue
            if not said:  # (its report ended: done, or dead)
                self._ended.add(k)
                self._done.add(k)
                continue
            self._heard(k, self._said[k] + said)
        return True

    def _heard(self, child: int, said: bytes) -> None:
        whole = len(said) // 2 * 2
        self._said[child] = said[whole:]
        for at in range(0, whole, 2):
            kind, number = said[at:at + 1], said[at + 1]
            if kind == MADE:
                self._held[number] = child
            elif kind == DONE:
                self._done.add(child)
            elif kind == WRITTEN and number == self.next:
                self.next += 1
                self._held.pop(number, None)
                if self._asked == (child, number):
                    self._asked = None

    def close(self) -> None:
        """Every end still open here closed (the children's turns end)."""
        for fds in self.pipes:
            for fd in fds:
                if fd >= 0:
                    os.close(fd)
        self.pipes = []


class _WritingTurns:
    """While this process writes turns: SIGPIPE ignored (a child that has ended must not
    kill it), and the output's reader gone ending it as SIGPIPE would have."""

    def __enter__(self) -> None:
        try:
            self.previous: object = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        except ValueError:  # (not the main thread: left as it is)
            self.previous = None

    def __exit__(self, kind: object, error: object, _: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGPIPE, self.previous)  # type: ignore[arg-type]
        if isinstance(error, BrokenPipeError):
            end_cut_short()


def cut_short(status: int) -> bool:
    """Whether a child's exit ``status`` is SIGPIPE's: the reader of the output went away
    while it wrote (``| head``)."""
    return status == -signal.SIGPIPE


def end_cut_short() -> None:
    """End this process as SIGPIPE ends it (the command's default: quietly, as C tools
    end), when the output's reader went away; returns if SIGPIPE is ignored here."""
    os.kill(os.getpid(), signal.SIGPIPE)

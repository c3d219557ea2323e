"""``-j`` to a descriptor: each process writes the ranges it made itself, in their turn.

When ranges are claimed as the processes go (the batch pipeline) and the text goes to a
descriptor of its own (standard output, or ``-o``'s file: a file, a pipe), a child keeps
the text of the ranges it makes (encoded, in memory up to :data:`HELD`; past it, in a
memfd, then in an unnamed file), says which ranges it holds once it has made them, and
writes each one to the descriptor it shares with this process when this process gives it
the turn; this process writes its own in theirs. The output is the ranges' text in order, as when every child's
text went through a memfd that this process copied at the end: on the deep recording of
bench/perf_script.py that copy was ~28 MB written into memfds by the child (~20 ms of its
time) and then, once both processes were done, ~35 ms of ``sendfile`` and freeing here,
while the other CPU idled. A range's bytes are written by one process while the others
wait, so they follow one another whole in the shared file offset (or pipe).

The messages are bytes on two pipes per child: a report (the ranges it holds, then
:data:`END`; then each range's number again once written) and its turns (a range's
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
    from collections.abc import Callable, Iterable, Iterator

#: Ends a child's list of the ranges it holds (ranges are numbered 0 to 254).
END = 255
#: Text kept (and written) in pieces of about this many bytes.
PIECE = 1 << 20


#: A process's kept text held in its own memory up to this many bytes (the deep
#: recording's child holds ~57 MB; the 743 MiB Lua recording's ~83 MB, which took the
#: run's peak RSS from 145 to 199 MB when held whole); past it, in a memfd while the
#: process's spilled text stays under its share of :data:`.jobs.IN_MEMORY`, then in an
#: unnamed file (which the kernel may write out under memory pressure).
HELD = 64 << 20


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
        pending: list[str] = []
        size = 0
        for text in texts:
            pending.append(text)
            size += len(text)
            if size >= PIECE:
                self._keep(number, "".join(pending))
                pending, size = [], 0
        if pending:
            self._keep(number, "".join(pending))
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
    """The pipes of ``children`` children (numbered from 1), made before they are forked."""

    def __init__(self, children: int) -> None:
        #: Per child: (report's read end, report's write end, turns' read end, turns' write end).
        self.pipes: list[tuple[int, int, int, int]] = []
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

    def in_parent(self) -> None:
        """Here, once every child is forked: the children's ends closed."""
        for _, report_w, turns_r, _ in self.pipes:
            os.close(report_w)
            os.close(turns_r)
        self.pipes = [(report_r, -1, -1, turns_w)
                      for report_r, _, _, turns_w in self.pipes]

    def serve(self, kept: KeptRanges, target: int, label: str | None = None) -> None:
        """In a child, its ranges made: say which it holds, then write each to ``target``
        when given its turn, saying so, until the turns end. ``label``: the output file's
        name, for the one line a failed write says (None: standard output, which the
        command's error handler names)."""
        _, report, turns, _ = self.pipes[0]
        write_all(report, bytes([*kept.numbers(), END]))
        while turn := os.read(turns, 1):
            try:
                kept.write(turn[0], target)
            except OSError as error:
                if label is None:
                    raise
                raise CommandError(f"{label}: cannot write: {error.strerror or error}",
                                   EXIT_UNREADABLE) from None
            write_all(report, turn)

    def hand_on(self, numbers: Iterable[int], mine: KeptRanges, target: int,
                flush: Callable[[], None]) -> None:
        """Here: ranges ``numbers`` written to ``target`` in order, this process's own
        (``mine``) by itself, the others by the child that holds each, in its turn
        (``flush``: what this process wrote before, out first). Stops at a range no one
        holds (its child failed: the caller reaps it and says why). A turn given to a
        child that has ended must not kill this process (SIGPIPE ignored meanwhile); the
        output's reader gone ends it as SIGPIPE would have (:func:`end_cut_short`)."""
        previous = _ignore_sigpipe()
        try:
            owners = self._owners()
            for number in numbers:
                flush()
                if number in mine.texts:
                    mine.write(number, target)
                elif number not in owners or not self._turn(owners[number], number):
                    return
        except BrokenPipeError:
            _restore_sigpipe(previous)
            end_cut_short()
            raise
        finally:
            _restore_sigpipe(previous)

    def _owners(self) -> dict[int, int]:
        """Each range a child holds, with its child's place in :attr:`pipes`."""
        owners: dict[int, int] = {}
        for k, (report, *_) in enumerate(self.pipes):
            said = b""
            while not said.endswith(bytes([END])) and (piece := os.read(report, 256)):
                said += piece
            if said.endswith(bytes([END])):
                owners.update(dict.fromkeys(said[:-1], k))
        return owners

    def _turn(self, child: int, number: int) -> bool:
        """Child ``child`` writes range ``number``; whether it said it did."""
        report, _, _, turns = self.pipes[child]
        try:
            write_all(turns, bytes([number]))
        except BrokenPipeError:  # it has ended
            return False
        return os.read(report, 1) == bytes([number])

    def close(self) -> None:
        """Every end still open here closed (the children's turns end)."""
        for fds in self.pipes:
            for fd in fds:
                if fd >= 0:
                    os.close(fd)
        self.pipes = []


def cut_short(status: int) -> bool:
    """Whether a child's exit ``status`` is SIGPIPE's: the reader of the output went away
    while it wrote (``| head``)."""
    return status == -signal.SIGPIPE


def end_cut_short() -> None:
    """End this process as SIGPIPE ends it (the command's default: quietly, as C tools
    end), when the output's reader went away; returns if SIGPIPE is ignored here."""
    os.kill(os.getpid(), signal.SIGPIPE)


def _ignore_sigpipe() -> object:
    """SIGPIPE ignored (writes to a pipe with no reader fail with EPIPE); what it was."""
    try:
        return signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    except ValueError:  # (not the main thread: left as it is)
        return None


def _restore_sigpipe(previous: object) -> None:
    if previous is not None:
        signal.signal(signal.SIGPIPE, previous)  # type: ignore[arg-type]

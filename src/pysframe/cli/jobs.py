"""``-j N``: a command's text made in ranges by forked processes, delivered in order.

The ranges are independent once each starts from the state before it (the caller's
``produce`` replays what it needs). The first range is made here and streamed at once;
every other one by a child forked before any of them starts, into memory (a memfd) and,
past :data:`IN_MEMORY` bytes, an unnamed temporary file, read back in order when its turn
comes. Forking (not spawning) shares the opened recording, the loaded tables and caches
at no cost. A child's stderr goes to a file of its own, handed on here once it has ended
(see :func:`in_order`); a child that fails says why there, and the run then ends with
that child's status.
"""

from __future__ import annotations

import errno
import os
import sys

from ..made_exchange import unnamed_file
from .errors import EXIT_INVALID, CommandError, guarded

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing imports re: ~5 ms of a small recording's run)
    from collections.abc import Callable, Iterator
    from typing import IO

#: Bytes read back from a child's file at a time.
_PIECE = 1 << 20
#: A child's text is kept in memory up to this many bytes, the rest in a temporary file
#: (which the kernel may write out under memory pressure). Written to a file on a
#: disk-backed /tmp, a child's 54 MB of a 66k-sample recording's text took ~110 ms
#: (ext4's block reservations, page by page) against ~35 ms into a memfd.
IN_MEMORY = 256 << 20


def in_order(ranges: list[tuple[int, int]], produce: Callable[[int, int], Iterator[str]],
             failed: Callable[[], bool], statuses: list[int],
             finish: Callable[[], None] | None = None,
             copy: Callable[[int], None] | None = None,
             started: Callable[[int], None] | None = None,
             produced: Callable[[], None] | None = None,
             forward: Callable[[str], None] | None = None) -> Iterator[str]:
    """The texts of ``ranges`` in order; ``statuses`` gets each child's exit status (1 when
    ``failed()`` says it reported a problem). Each child calls ``finish`` (if given) when its
    text is made (it ends without the exit functions: e.g. to keep what it cached). With
    ``copy``, a child's text is not yielded but handed over file by file (rewound), once
    everything before it was yielded (see :func:`copier`). ``started(k)`` (if given) is
    called first in the process making range k (this one: 0, once every child is forked);
    ``produced()`` here once range 0 is made, before the children are waited for (what
    this process keeps at exit is kept while they work). What a child writes on stderr is
    kept in a file of its own and handed, line by line, to ``forward`` (default: written
    on stderr here) once it has ended, before its text: the caller leaves out the lines
    another process said already (a damaged binary that both met)."""
    children: list[tuple[int, list[int], int]] = []
    try:
        for number, (start, end) in enumerate(ranges[1:], 1):
            children.append(_fork(start, end, produce, failed, finish,
                                  _numbered(started, number)))
        if started is not None:
            started(0)
        if ranges:
            yield from produce(*ranges[0])
        if produced is not None:
            produced()
        for pid, files, errors in children:
            status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            statuses.append(status)
            _forward(errors, forward)
            if status not in (0, EXIT_INVALID):  # 1: problems reported, the text is whole
                raise CommandError(f"a worker process failed (exit status {status})", status
                                   if status > 0 else EXIT_INVALID)
            for fd in files:  # in memory, then what did not fit
                os.lseek(fd, 0, os.SEEK_SET)
                if copy is not None:
                    copy(fd)
                else:
                    while piece := os.read(fd, _PIECE):
                        yield piece.decode("utf-8", "surrogateescape")
            _close([*files, errors])
            children = children[1:]
    finally:
        for pid, files, errors in children:  # stopped early (an error, a closed pipe): end them
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except OSError:
                pass
            _close([*files, errors])


def _forward(errors: int, forward: Callable[[str], None] | None) -> None:
    """The lines a child wrote on stderr, each handed to ``forward`` (None: written on
    stderr)."""
    os.lseek(errors, 0, os.SEEK_SET)
    pieces = []
    while piece := os.read(errors, _PIECE):
        pieces.append(piece)
    for line in b"".join(pieces).decode("utf-8", "surrogateescape").splitlines(keepends=True):
        if forward is None:
            sys.stderr.write(line)
        else:
            forward(line)


def _close(files: list[int]) -> None:
    for fd in files:
        os.close(fd)


def _numbered(started: Callable[[int], None] | None, number: int
              ) -> Callable[[], None] | None:
    if started is None:
        return None
    return lambda: started(number)


def copier(stream: IO[str]) -> Callable[[int], None] | None:
    """What hands a child's text to ``stream`` as bytes, the kernel copying its file to
    the stream's descriptor (``os.sendfile``) after the text written before it is flushed:
    the children's half of a large recording's text (~50 MB) is then neither decoded nor
    encoded again here. None for a stream without a descriptor of its own (a test's
    capture, a StringIO)."""
    try:
        target = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return None

    def copy(source: int) -> None:
        stream.flush()
        size, done = os.fstat(source).st_size, 0
        try:
            while done < size:
                sent = os.sendfile(target, source, done, size - done)
                if not sent:
                    break
                done += sent
        except OSError as error:
            if error.errno not in (errno.EINVAL, errno.ENOSYS):
                raise  # EPIPE and the like: as a write would fail
        os.lseek(source, done, os.SEEK_SET)  # what is left (sendfile refused it): written
        while piece := os.read(source, _PIECE):
            view = memoryview(piece)
            while view:
                view = view[os.write(target, view):]

    return copy


def _fork(start: int, end: int, produce: Callable[[int, int], Iterator[str]],
          failed: Callable[[], bool], finish: Callable[[], None] | None = None,
          started: Callable[[], None] | None = None) -> tuple[int, list[int], int]:
    """A child making samples ``start`` to ``end`` into its files (:func:`_text_files`),
    its stderr into a file of its own."""
    files = _text_files()
    errors = unnamed_file()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid, files, errors
    status = EXIT_INVALID
    try:
        os.dup2(errors, 2)
        def work() -> int:
            if started is not None:
                started()
            out = _Spilling(files)
            for text in produce(start, end):
                out.write(text)
            return 0

        status = guarded(work)
        if finish is not None:
            try:
                finish()
            except Exception:  # keeping a cache is a courtesy: the text is made
                pass
        if status == 0 and failed():
            status = EXIT_INVALID
        sys.stderr.flush()
    finally:
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
    """Writes a child's text to its first file up to :data:`IN_MEMORY` bytes, the rest to
    the last one (the order the parent reads them in)."""

    def __init__(self, files: list[int]) -> None:
        self.files, self.held, self.at = files, 0, 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "surrogateescape")
        if self.held + len(data) > IN_MEMORY:
            self.at = len(self.files) - 1
        self.held += len(data)
        view = memoryview(data)
        while view:
            view = view[os.write(self.files[self.at], view):]

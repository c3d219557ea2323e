"""Functions one worker process of a ``-j`` run made, taken by the others instead of made
again (:class:`MadeExchange`; :func:`share` sets this worker's, :func:`shared` gives it).

The workers of ``sframe script -j N`` are forked before any of them unwinds, each with
its own on-demand tables (:mod:`pysframe.generate.on_demand`). On a first run each made nearly every
function it met itself: with ``-j 2`` on a system-wide recording each made ~85% of the
functions a ``-j 1`` run makes (2,969 and 2,978 of 3,484), at ~150 us each. Here each
worker appends what it makes to a file of its own and, before making a function, reads
what the others appended since it last looked. The batch engine exchanges the flat rows
it makes of each function the same way (:mod:`pysframe.unwind.flat_cache`).

The files are unnamed temporary files opened before the fork (nobody else can open
them); a record is written with one ``write``, and a reader takes only whole records
(a writer may be half-way through one). A record that is not well formed (it cannot be,
short of a bug) ends the exchange for that reader: it makes its functions itself.
"""

from __future__ import annotations

import os
import struct

from .fd_io import write_all

#: key length, data length (NO_ROWS: the function has no rows), index position.
_RECORD = struct.Struct("<HIQ")
NO_ROWS = 0xFFFFFFFF
#: Bounds of a record's parts (a cache key is a few dozen bytes; a function's table
#: a few hundred, rarely kilobytes; a binary's index 24 bytes a function: ~1 MB for cc1).
_MOST_KEY = 1 << 10
_MOST_DATA = 1 << 24
#: Bytes read from a peer's file at a time.
_PIECE = 1 << 20


def unnamed_file() -> int:
    """A descriptor of a new file no one else can open: O_TMPFILE in $TMPDIR (or /tmp),
    else tempfile's. Made with ``os`` where it can: tempfile and shutil import ~4.5 ms of
    modules (bz2, lzma, random), a fifth of a small recording's start-up."""
    flags = getattr(os, "O_TMPFILE", 0)
    if flags:
        try:
            return os.open(os.environ.get("TMPDIR") or "/tmp",
                           flags | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:  # (a file system without O_TMPFILE; a TMPDIR that is not one)
            pass
    import tempfile

    handle = tempfile.TemporaryFile()
    try:
        return os.dup(handle.fileno())
    finally:
        handle.close()


class MadeExchange:
    """The functions made by the workers of one run: :meth:`give` what this worker made,
    :meth:`take` what another made. ``files``: one descriptor per worker (each worker's
    own at its index ``mine``)."""

    def __init__(self, files: list[int], mine: int) -> None:
        self.files, self.mine = files, mine
        self._read = [0] * len(files)  # bytes of each peer's file taken in
        self._known: dict[tuple[bytes, int], bytes | None] = {}
        self.taken = 0  # functions taken from the others (for tests and benches)
        self.broken = False

    @classmethod
    def for_workers(cls, count: int) -> list[int]:
        """``count`` new unnamed files, one per worker, to fork with."""
        return [unnamed_file() for _ in range(count)]

    def give(self, key: bytes, position: int, data: bytes | None) -> None:
        """Tell the others this worker made function ``position`` of the table ``key``."""
        if self.broken or len(key) > _MOST_KEY or (data is not None and len(data) >= NO_ROWS):
            return
        record = _RECORD.pack(len(key), NO_ROWS if data is None else len(data), position)
        try:
            write_all(self.files[self.mine], record + key + (data or b""))
        except OSError:
            self.broken = True  # (a full disk: the others make their own)

    def take(self, key: bytes, position: int) -> tuple[bool, bytes | None]:
        """(True, its table) if another worker made function ``position`` of ``key``
        (the table None: no rows), else (False, None)."""
        entry = (key, position)
        if entry not in self._known and not self.broken:
            self._read_peers()
        if entry not in self._known:
            return False, None
        self.taken += 1
        return True, self._known[entry]

    def given(self) -> dict[tuple[bytes, int], bytes | None]:
        """Everything the other workers gave so far, by (key, position): once they have
        ended, all they made (:func:`pysframe.session.tables.adopt_made`)."""
        if not self.broken:
            self._read_peers()
        return self._known

    def _read_peers(self) -> None:
        for index, descriptor in enumerate(self.files):
            if index == self.mine:
                continue
            try:
                size = os.fstat(descriptor).st_size
                while self._read[index] < size and not self.broken:
                    at = self._read[index]
                    piece = os.pread(descriptor, min(size - at, _PIECE), at)
                    used = self._records(piece)
                    if used == 0:  # a record longer than the piece (an index), or half-written
                        whole = self._length(piece)
                        if whole is None or whole > size - at:
                            break
                        used = self._records(os.pread(descriptor, whole, at))
                        if used == 0:
                            break
                    self._read[index] += used
            except OSError:
                self.broken = True

    def _length(self, piece: bytes) -> int | None:
        """The length of the record ``piece`` starts with (None: its head is not there)."""
        if len(piece) < _RECORD.size:
            return None
        key_size, data_size, _ = _RECORD.unpack_from(piece)
        return int(_RECORD.size + key_size + (0 if data_size == NO_ROWS else data_size))

    def _records(self, piece: bytes) -> int:
        """Take in the whole records at the start of ``piece``; the bytes they span."""
        at = 0
        while at + _RECORD.size <= len(piece):
            key_size, data_size, position = _RECORD.unpack_from(piece, at)
            size = 0 if data_size == NO_ROWS else data_size
            if key_size > _MOST_KEY or size > _MOST_DATA:
                self.broken = True
                return at
            end = at + _RECORD.size + key_size + size
            if end > len(piece):
                break  # the rest is still being written, or is in the next piece
            key = piece[at + _RECORD.size:at + _RECORD.size + key_size]
            data = None if data_size == NO_ROWS else piece[end - size:end]
            self._known.setdefault((key, position), data)
            at = end
        return at

    @staticmethod
    def close_files(files: list[int]) -> None:
        """Close the files :meth:`for_workers` made (in the process that made them, once
        every worker is done)."""
        for descriptor in files:
            try:
                os.close(descriptor)
            except OSError:
                pass


class _Current:
    exchange: MadeExchange | None = None


_CURRENT = _Current()


def share(exchange: MadeExchange | None) -> None:
    """From now on, take what other workers made from ``exchange``, and give it what is
    made here (None: this process works alone)."""
    _CURRENT.exchange = exchange


def shared() -> MadeExchange | None:
    """The exchange of this worker (None: it works alone)."""
    return _CURRENT.exchange


__all__ = ["MadeExchange", "share", "shared"]

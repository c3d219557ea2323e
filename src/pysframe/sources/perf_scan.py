"""The walk over a recording's record headers for :mod:`.perf_arrays`, in two processes when
the recording is large.

Most of the walk's time is not Python's but page faults on the mapped file: it touches
one header per record, and the 532 MiB deep recording of bench/perf_script.py (8 KB
samples) took ~80 ms of faults against ~30 ms for the same loop over pages already
mapped. Faults in two processes run in parallel, so with ``split`` a child walks the
second half while this process walks the first: the child from a candidate boundary a
little past the middle (:data:`PARENT_SHARE`), an offset from which a run of plausible
headers starts. A candidate is only that (the bytes of a stack copy can look like headers), so the halves are joined only
when this process's own walk lands on it exactly; from a true boundary the child's walk
is the one this process would have made. Otherwise, or when the child fails, this
process walks on alone. Either way the result is the serial walk's, gathered fields
included (the child gathers its samples' fields as the walk passes them, as this process
does, and hands them over with its offsets; it parses no record, this process parses the
child's side-band records from their offsets).

The child is a fork of this process, its result a pickle of plain values and arrays in
a memory file this process made: nothing from outside is unpickled.
"""

from __future__ import annotations

import os
import pickle
import struct
from array import array
from typing import Any

import numpy as np
import numpy.typing as npt

from ..cpus import place_forked, usable_cpus
from ..fd_io import write_all
from .perf_data import RELEASE_STEP, PerfData
from .perf_records import (
    COMPRESSED_KINDS,
    RECORD_FINISHED_ROUND,
    RECORD_HEADER,
    RECORD_SAMPLE,
    Record,
)

I64 = npt.NDArray[np.int64]
#: What the walk gives: the samples' file offsets; at each FINISHED_ROUND, the number of
#: samples before it; the other records (their round, file offset, and the record parsed,
#: None for a FINISHED_ROUND).
Scanned = tuple[I64, I64, list[tuple[int, int, "Record | None"]]]

#: Records of at least this many bytes are walked in two processes.
SPLIT_FROM = 64 * 2**20
#: The part of the records this process walks: the child hands its result over (pickled
#: into a memory file, read and unpickled here: ~5 ms for the deep recording's 33k
#: samples), so its part is the smaller. The deep recording, split at 50% / 55% / 60%:
#: the walk took 70-72 / 65-70 / 68-77 ms (three runs each, twice).
PARENT_SHARE = 0.55
#: A candidate boundary starts this many plausible headers in a row, and is looked for in
#: this many bytes after that point.
CHAIN = 32
PROBE = 2**18
PROBE_READS = 2**16
#: Record types a header may name (perf's own, and the user types from 64).
MAX_KIND = 0x7FFF


class _Walk:
    """One process's walk over records, from ``offset`` on; the fields of the samples it
    passes handed to ``blocks.gather`` (see :class:`.perf_arrays._Blocks`) while their
    pages are mapped. ``parse``: other records parsed (else kept as their type)."""

    def __init__(self, data: PerfData, blocks: Any, offset: int, parse: bool = True) -> None:
        self.data, self.blocks, self.offset, self.parse = data, blocks, offset, parse
        self.end = min(data.data_offset + data.data_size, len(data.buffer))
        self.samples = array("q")
        self.boundaries = array("q")
        self.others: list[tuple[int, int, Any]] = []
        self.gathered = 0

    def run(self, stop: int) -> bool:
        """Walk up to ``stop`` (a record's start or the end); False: a header is not a
        record's, a record is compressed, a record does not parse, or ``gather`` refused a
        sample (the arrays cannot be made: the record path reads the file)."""
        data, buffer, unpack = self.data, self.data.buffer, RECORD_HEADER.unpack_from
        parser, end, offset = data._parser, self.end, self.offset
        assert parser is not None
        samples, boundaries, others = self.samples, self.boundaries, self.others
        append = samples.append
        next_release = offset + RELEASE_STEP
        while offset < stop and offset + 8 <= end:
            if offset >= next_release:
                if not self._gather():
                    return False
                data.release_before(offset)
                next_release = offset + RELEASE_STEP
            kind, misc, size = unpack(buffer, offset)
            if size < 8 or size % 8 or offset + size > end:
                return False
            if kind == RECORD_SAMPLE:
                append(offset)
            elif kind == RECORD_FINISHED_ROUND:
                boundaries.append(len(samples))
                others.append((len(boundaries), offset, None))
            elif kind in COMPRESSED_KINDS:
                return False
            elif not self.parse:
                others.append((len(boundaries), offset, kind))
            else:
                try:
                    record = parser.parse(buffer, kind, misc, offset, size, 0)
                except (struct.error, IndexError, ValueError):
                    return False
                if record is not None:
                    others.append((len(boundaries), offset, record))
            offset += size
        self.offset = offset
        return self._gather()

    def _gather(self) -> bool:
        if len(self.samples) > self.gathered:
            if not self.blocks.gather(np.array(self.samples[self.gathered:], np.int64)):
                return False
            self.gathered = len(self.samples)
        return True

    def result(self) -> Scanned:
        return (np.frombuffer(self.samples, np.int64) if self.samples else np.zeros(0, np.int64),
                np.frombuffer(self.boundaries, np.int64) if self.boundaries
                else np.zeros(0, np.int64), self.others)


def scan(data: PerfData, blocks: Any, split: bool = False) -> Scanned | None:
    """The walk over every record (see :class:`_Walk`); with ``split``, in two processes
    when the records are large enough (see the module docstring). None: see
    :meth:`_Walk.run`, or a walk that does not end at the data's end."""
    data.release_before(0, from_start=True)  # an earlier pass may have released ahead
    walk = _Walk(data, blocks, data.data_offset)
    child = _split(data, blocks) if split else None
    if child is not None:
        boundary, pid, memory, ready = child
        if not walk.run(boundary):
            _end(pid, memory, ready)
            return None
        if walk.offset != boundary:  # the candidate was no boundary: walked on alone
            _end(pid, memory, ready)
        else:
            joined = _joined(walk, _child_result(pid, memory, ready))
            _reap(pid)  # (it has ended meanwhile: its exit overlapped the join)
            if joined:
                return walk.result()
    if not walk.run(walk.end) or walk.offset != walk.end:
        return None
    data.release_before(walk.end)
    return walk.result()


def _split(data: PerfData, blocks: Any) -> tuple[int, int, int, int] | None:
    """(candidate boundary, pid, memory file, the read end of a pipe on which it says its
    result is written) of a child walking from the boundary to the end, or None when
    there is no child: small records, one CPU this process may use (two walks on one CPU
    only add the fork), no candidate, no memory file or pipe, no fork."""
    start, size = data.data_offset, min(data.data_size, len(data.buffer) - data.data_offset)
    if size < SPLIT_FROM or usable_cpus() < 2 or not hasattr(os, "memfd_create"):
        return None
    boundary = candidate(data.buffer, start + int(size * PARENT_SHARE) // 8 * 8, start + size)
    if boundary is None:
        return None
    try:
        memory = os.memfd_create("sframe-scan", os.MFD_CLOEXEC)
    except OSError:
        return None
    try:
        ready, written = os.pipe()
    except OSError:
        os.close(memory)
        return None
    try:
        pid = os.fork()
    except OSError:
        for fd in (memory, ready, written):
            os.close(fd)
        return None
    if pid == 0:
        os.close(ready)
        _child(data, blocks, boundary, memory, written)
    os.close(written)
    place_forked(pid)
    return boundary, pid, memory, ready


def candidate(buffer: Any, start: int, end: int) -> int | None:
    """The first 8-aligned offset from ``start`` (within :data:`PROBE` bytes) where
    :data:`CHAIN` plausible headers follow one another (or reach ``end`` exactly), or
    None; None too after :data:`PROBE_READS` headers read (bytes made to look like
    headers everywhere would otherwise cost PROBE / 8 * CHAIN reads, ~0.5 s)."""
    unpack = RECORD_HEADER.unpack_from
    reads = PROBE_READS
    for first in range(start, min(start + PROBE, end - 8), 8):
        offset = first
        for _ in range(CHAIN):
            reads -= 1
            if reads < 0:
                return None
            kind, _misc, size = unpack(buffer, offset)
            if not 0 < kind <= MAX_KIND or size < 8 or size % 8 or offset + size > end:
                break
            offset += size
            if offset + 8 > end:
                break
        else:
            return first
        if offset == end:
            return first
    return None


def _child(data: PerfData, blocks: Any, boundary: int, memory: int, written: int) -> None:
    """The child's walk from ``boundary`` to the end, its result pickled into ``memory``,
    then a byte on ``written`` (the parent reads the result then, not once this process
    has ended: its exit, ~5-7 ms of freeing here, overlaps the parent's join); it ends
    here, without exit functions (what this process holds is the parent's)."""
    status = 1
    try:
        data.release_before(boundary, from_start=True)  # (its pages of the first half: none)
        walk = _Walk(data, blocks, boundary, parse=False)
        done = walk.run(walk.end) and walk.offset == walk.end
        attr = blocks.attr
        found = {
            "done": done, "samples": bytes(walk.samples), "boundaries": bytes(walk.boundaries),
            "others": walk.others,
            "attr": data.attrs.index(attr) if done and attr is not None else -1,
            "parts": {name: np.concatenate(values) if values else None
                      for name, values in blocks.parts.items()} if done else {}}
        write_all(memory, pickle.dumps(found, protocol=5))
        os.write(written, b"\1")
        status = 0
    finally:
        os._exit(status)


def _child_result(pid: int, memory: int, ready: int) -> dict[str, Any] | None:
    """What the child found, once it says it is written (None: it failed, or ended
    without saying so)."""
    try:
        if os.read(ready, 1) != b"\1":
            return None
        size = os.fstat(memory).st_size
        found: dict[str, Any] = pickle.loads(os.pread(memory, size, 0))
        return found
    except (OSError, pickle.UnpicklingError, EOFError, ValueError):
        return None
    finally:
        os.close(memory)
        os.close(ready)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except OSError:
        pass


def _end(pid: int, memory: int, ready: int) -> None:
    """The child, no longer needed, ended and waited for."""
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _reap(pid)
    os.close(memory)
    os.close(ready)


def _joined(walk: _Walk, found: dict[str, Any] | None) -> bool:
    """The child's walk appended to ``walk`` (False, ``walk`` unchanged: the child failed,
    or its samples name another event than this walk's, which the serial walk would have
    refused). A child whose walk failed from the true boundary means the serial walk fails
    too: ``walk`` is then left short of the end, and ``scan`` walks on to the same failure."""
    if found is None or not found["done"]:
        return False
    data, blocks = walk.data, walk.blocks
    attr = data.attrs[found["attr"]] if found["attr"] >= 0 else None
    if attr is not None and blocks.attr is not None and attr is not blocks.attr:
        return False
    others = _parsed(data, found["others"], len(walk.boundaries))
    if others is None:
        return False
    samples_before = len(walk.samples)
    walk.samples.frombytes(found["samples"])
    walk.boundaries.extend(count + samples_before
                           for count in array("q", found["boundaries"]))
    walk.others.extend(others)
    if attr is not None and blocks.attr is None:
        blocks.attr = attr
    for name, values in found["parts"].items():
        if values is not None:
            blocks.parts[name].append(values)
    walk.gathered = len(walk.samples)
    walk.offset = walk.end
    walk.data.release_before(walk.end)
    return True


def _parsed(data: PerfData, others: list[tuple[int, int, Any]], rounds_before: int
            ) -> list[tuple[int, int, Record | None]] | None:
    """The child's other records parsed here (None: one does not parse, as the serial
    walk would have stopped there), their rounds counted from the start."""
    parser, buffer = data._parser, data.buffer
    assert parser is not None
    parsed: list[tuple[int, int, Record | None]] = []
    for round_number, offset, kind in others:
        if kind is None:  # a FINISHED_ROUND
            parsed.append((round_number + rounds_before, offset, None))
            continue
        _kind, misc, size = RECORD_HEADER.unpack_from(buffer, offset)
        try:
            record = parser.parse(buffer, kind, misc, offset, size, 0)
        except (struct.error, IndexError, ValueError):
            return None
        if record is not None:
            parsed.append((round_number + rounds_before, offset, record))
    return parsed

"""The note ``sframe record`` attaches to each sample: how its user chain was walked.

A recording of ``sframe record`` holds callchains only, and a callchain does not say
whether the eBPF walker found every frame, met code whose table was not loaded yet and
had the chain finished in user space from a stack copy, or left the walk to the return to
user space (``--defer``). The sample's PERF_SAMPLE_RAW field carries that, 12 bytes after
its u32 size (16 in all, as perf keeps raw data 8-byte aligned): perf prints raw data
only for tracepoints, so perf script and perf report show such files as before, and
``sframe script --show-stops`` prints the note.

Layout (little-endian): magic ``sfw1``; u8 way (:class:`Way`); u8 why the chain ended
(1 + the index of the :class:`Stop` in :data:`NOTE_STOPS`, 0: not known when the sample
was written, as for a ``--defer`` request); u16 the first frame the walker found no
loaded table for (:data:`NONE` if none); u16 the user frames in the chain; u16 zero.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

from ..unwind.step import Stop

MAGIC = b"sfw1"
NOTE = struct.Struct("<4sBBHHH")
#: PERF_SAMPLE_RAW's bytes for a note: u32 size, then the note.
RAW_SIZE = 4 + NOTE.size
#: No frame was met without a loaded table.
NONE = 0xFFFF
#: The reasons a note names, in a fixed order (new ones are appended, never inserted).
NOTE_STOPS: tuple[Stop, ...] = (
    Stop.OUTERMOST, Stop.NO_MODULE, Stop.NO_RULE, Stop.MEMORY, Stop.NO_ADVANCE,
    Stop.BACKWARDS, Stop.ZERO_PC, Stop.DEPTH, Stop.COPY_ENDED, Stop.REGISTER, Stop.BAD_RA,
    Stop.RECORDED, Stop.NO_CALLCHAIN, Stop.NO_STACK, Stop.SFRAME_ERROR, Stop.FP_BELOW_SP,
    Stop.UNALIGNED, Stop.BAD_RULE, Stop.NOT_USER, Stop.UNSUPPORTED, Stop.PLT, Stop.SIGNAL)
_STOP_NUMBER = {stop: number + 1 for number, stop in enumerate(NOTE_STOPS)}


class Way(Enum):
    """How a sample's user chain was found."""

    KERNEL = 1  #: by the eBPF walker, at the sample
    FINISHED = 2  #: by the walker up to uncovered code, then in user space from the copy
    DEFERRED = 3  #: at the return to user space (the chain is in a CALLCHAIN_DEFERRED record)


@dataclass(slots=True, frozen=True)
class WalkNote:
    way: Way
    stop: Stop | None
    uncovered: int | None
    frames: int

    def describe(self) -> str:
        """The words ``--show-stops`` prints for the note."""
        if self.way is Way.DEFERRED:
            return "walked at the return to user space (deferred)"
        if self.way is Way.FINISHED:
            return (f"walked in the kernel to frame {self.uncovered}, then in user space "
                    "from the stack copy (the table was not loaded yet)")
        if self.uncovered is not None:
            return (f"walked in the kernel, by frame pointers from frame {self.uncovered} "
                    "(no loaded table; not finished from a stack copy)")
        return "walked in the kernel"


def pack(way: Way, stop: Stop | None, uncovered: int | None, frames: int) -> bytes:
    """The PERF_SAMPLE_RAW field (size and note) of one sample."""
    note = NOTE.pack(MAGIC, way.value, _STOP_NUMBER.get(stop, 0) if stop else 0,
                     NONE if uncovered is None else min(uncovered, NONE - 1),
                     min(frames, 0xFFFF), 0)
    return struct.pack("<I", NOTE.size) + note


def parse(raw: bytes | memoryview | None) -> WalkNote | None:
    """The note in a sample's raw data (None: none, or not ours)."""
    if raw is None or len(raw) != NOTE.size:
        return None
    magic, way, stop, uncovered, frames, _ = NOTE.unpack_from(raw)
    if magic != MAGIC or way not in (1, 2, 3) or stop > len(NOTE_STOPS):
        return None
    return WalkNote(Way(way), NOTE_STOPS[stop - 1] if stop else None,
                    None if uncovered == NONE else uncovered, frames)

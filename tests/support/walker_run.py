"""``sframe record``'s SFrame walker run through the test interpreter
(:mod:`tests.support.bpf_interp`): maps filled as :mod:`pysframe.record.tables` fills
them, a perf sample's context, user memory, and the record read back.

:class:`WalkerRig` loads the tables of an address space's mappings once and walks any
number of (registers, memory) cases over them; ``build`` makes the program (a test may
pass a mutated walker's).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from unittest.mock import patch

import numpy as np

from pysframe.record.asm import Asm
from pysframe.record.sampler import (
    COPY_HEADER,
    FLAG_STACK_COPY,
    PT_BP,
    PT_CS,
    PT_IP,
    PT_SP,
    frames_end,
    user_at,
)
from pysframe.record.tables import module_rows, procs_value, rows_items, table_rows
from pysframe.record.walker import MAPPING, MAPPINGS, PROCS_VALUE, ROW, scratch_map, walker
from pysframe.records import replace
from pysframe.unwind.address_space import AddressSpace, Mapping, Module

from .bpf_interp import Machine, Map, Program, Task, array, hash_map, ringbuf

RINGBUF_FD, SCRATCH_FD, PROCS_FD, ROWS_FD = 10, 11, 12, 13
#: struct bpf_perf_event_data: the user's pt_regs (168 bytes), sample_period, addr.
CONTEXT_SIZE = 184
USER_CS = 0x33
TGID = 4242
KERNEL_PC, KERNEL_SP = 0xFFFF_FFFF_8100_0000, 0xFFFF_C900_0000_0000
Builder = Callable[[int, int, int, int], tuple[bytes, bytes, bytes]]
#: The most frames the walker keeps here: the recorder's default (1,024) is the same code
#: with another constant, and fixture stacks are not that deep; 127 lets cases reach the
#: limit (the tracer is given the same).
RIG_FRAMES = 127


def rig_walker(ringbuf_fd: int, scratch_fd: int, procs_fd: int, rows_fd: int
               ) -> tuple[bytes, bytes, bytes]:
    """The walker as the rig runs it: :data:`RIG_FRAMES` frames."""
    return walker(ringbuf_fd, scratch_fd, procs_fd, rows_fd, frames=RIG_FRAMES)


@dataclass
class Walk:
    """The walker's record: the user frames and the stop code; ``executed``: the
    instructions it took."""

    pcs: list[int]
    stop: int
    executed: int
    #: With a stack copy (code no table covered): (frame index, pc, sp, fp, the bytes).
    copy: tuple[int, int, int, int, bytes] | None = None


class CopyAndCode:
    """User memory: a stack copy at ``base``, and the code of the mapped binaries (the
    walker reads the instruction at a pc to recognise the sigreturn trampoline). The
    scalar tracer reads words of the same memory (:meth:`read`): a junk CFA that points
    into code reads the same junk in both."""

    def __init__(self, base: int, stack: bytes, space: AddressSpace) -> None:
        self.base, self.stack, self.end, self.space = base, bytes(stack), base + len(stack), space

    def read_bytes(self, address: int, size: int) -> bytes | None:
        if self.base <= address and address + size <= self.end:
            return self.stack[address - self.base:address - self.base + size]
        mapping = self.space.find(address)
        if mapping is None or address + size > mapping.end:
            return None
        return mapping.code(address, size)

    def read(self, address: int) -> int | None:
        data = self.read_bytes(address, 8)
        return None if data is None else int.from_bytes(data, "little")


def walker_space(space: AddressSpace, kernel_rules: bool = True
                 ) -> tuple[AddressSpace, list[tuple[Mapping, np.ndarray, np.ndarray]]]:
    """The tables the recorder would load for ``space``'s mappings (``TableLoader``: files
    only, by the kernel's rules unless ``kernel_rules`` is False), and the same space with
    every other mapping's table taken away: the scalar tracer's input made the walker's
    (a mapping without rows is walked by frame pointer in both)."""
    loaded: list[tuple[Mapping, np.ndarray, np.ndarray]] = []
    aligned = AddressSpace()
    tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for mapping in space.mappings:
        module = mapping.module
        starts = words = np.zeros(0, np.uint64)
        if module is not None and module.lookup is not None and mapping.filename.startswith("/"):
            key = id(module.lookup)
            if key not in tables:
                found = module_rows(module, module.build_id, kernel_rules)
                tables[key] = (found[0], found[1])
            starts, words = tables[key]
        if len(starts) and len(loaded) < MAPPINGS:
            loaded.append((mapping, starts, words))
            aligned.add(mapping)
        else:
            bare = replace(module, lookup=None) if isinstance(module, Module) else None
            aligned.add(replace(mapping, module=bare))
    return aligned, loaded


class WalkerRig:
    """The walker program and its maps for one address space."""

    def __init__(self, loaded: list[tuple[Mapping, np.ndarray, np.ndarray]],
                 build: Builder | None = None) -> None:
        capacity = max(1, sum(len(table_rows(starts, words)[0]) for _, starts, words in loaded))
        self.rows = array(ROW.size, capacity)
        self.procs = hash_map(4, PROCS_VALUE, 64)
        self.scratch = array(scratch_map(RIG_FRAMES)[1], 4)  # a record and cache per CPU
        self.ring = ringbuf()
        self.load(loaded)
        code, _, _ = (build or rig_walker)(RINGBUF_FD, SCRATCH_FD, PROCS_FD, ROWS_FD)
        self.program = Program.decode(code)
        #: The walker's instructions executed so far (see :func:`walker_labels`).
        self.coverage: set[int] = set()
        self.maps: dict[int, Map] = {RINGBUF_FD: self.ring, SCRATCH_FD: self.scratch,
                                     PROCS_FD: self.procs, ROWS_FD: self.rows}

    def load(self, loaded: list[tuple[Mapping, np.ndarray, np.ndarray]],
             generation: int = 0) -> None:
        """Write the tables and the process's entry (its ``generation``), as the
        recorder's TableLoader does (the rows must fit the array made at first)."""
        entries = []
        first = 0
        for mapping, starts, words in loaded:
            rows, field = table_rows(starts, words)
            keys, values = rows_items(first, rows)
            for index in range(len(rows)):
                self.rows.update(keys[4 * index:4 * index + 4],
                                 values[ROW.size * index:ROW.size * (index + 1)])
            assert mapping.module is not None
            entries.append(MAPPING.pack(mapping.start, mapping.end, mapping.module.bias, first,
                                        field))
            first += len(rows)
        self.procs.update(TGID.to_bytes(4, "little"), procs_value(entries, generation))

    def walk(self, pc: int, sp: int, fp: int, memory: CopyAndCode, in_kernel: bool = False,
             exiting: bool = False) -> Walk:
        """One sample with these user registers: taken in user mode (the context's), or
        ``in_kernel`` (the task's saved user registers, ``bpf_task_pt_regs``, and a
        kernel stack); ``exiting``: in the kernel, its memory gone (no ``mm``)."""
        user = _registers(pc, sp, fp, USER_CS)
        context = _registers(KERNEL_PC, KERNEL_SP, 0, 0x10) if in_kernel else user
        task = Task(TGID, TGID, 0, [KERNEL_PC, KERNEL_PC + 0x40], bytes(user[:168]),
                    has_mm=not exiting)
        self.ring.records.clear()
        machine = Machine(self.program, self.maps, memory, task, coverage=self.coverage)
        machine.run(bytes(context))
        assert len(self.ring.records) == 1, "one record per sample"
        record = self.ring.records[0]
        count, stop = struct.unpack_from("<II", record, 32)
        pcs = list(struct.unpack_from(f"<{count}Q", record, user_at(record)))
        copy = None
        if not struct.unpack_from("<I", record, 4)[0] & FLAG_STACK_COPY:
            # Sent up to its last user frame, which follows the kernel's.
            assert len(record) == user_at(record) + 8 * min(count, RIG_FRAMES)
        else:
            at = frames_end(record, RIG_FRAMES)  # right after the frames
            index, length, pc, sp, fp = COPY_HEADER.unpack_from(record, at)
            start = at + COPY_HEADER.size
            copy = (index, pc, sp, fp, bytes(record[start:start + length]))
            assert len(record) == start + length  # sent up to the copy's end
        return Walk(pcs, stop, machine.executed, copy)


def _registers(pc: int, sp: int, fp: int, cs: int) -> bytearray:
    """A ``struct bpf_perf_event_data`` with these registers (sample period 1)."""
    context = bytearray(CONTEXT_SIZE)
    for offset, value in ((PT_IP, pc), (PT_SP, sp), (PT_BP, fp), (PT_CS, cs), (168, 1)):
        struct.pack_into("<Q", context, offset, value)
    return context


def walker_labels() -> dict[str, int]:
    """The walker program's labels and the instruction each names (the assembler's own
    table, caught as :func:`~pysframe.record.walker.walker` assembles)."""
    caught: dict[str, int] = {}
    assemble = Asm.assemble

    def catching(self: Asm) -> bytes:
        caught.update(self._labels)
        return assemble(self)

    with patch.object(Asm, "assemble", catching):
        walker(RINGBUF_FD, SCRATCH_FD, PROCS_FD, ROWS_FD)
    return caught


def uncovered(labels: dict[str, int], coverage: set[int]) -> set[str]:
    """The labels whose instruction never ran."""
    return {name for name, index in labels.items() if index not in coverage}

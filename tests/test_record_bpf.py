"""The eBPF pieces of ``sframe record``: the syscall layer, the assembler, the ring buffer and
the sampling program, run for real (root and a kernel with BPF ring buffers; skipped with
the reason elsewhere)."""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
from pathlib import Path

import pytest

from pysframe.record import bpf_sys
from pysframe.record.asm import JEQ, R0, R1, Asm, AsmError
from pysframe.record.ringbuf import RingBuffer
from pysframe.record.sampler import RECORD, sampler, user_at

PROGRAM = r"""
#include <stdlib.h>
__attribute__((noinline)) long leaf(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i * i; return s; }
__attribute__((noinline)) long middle(long n) { return leaf(n) + 1; }
int main(int argc, char **argv) { long total = 0; long rounds = argc > 1 ? atol(argv[1]) : 300;
  for (long r = 0; r < rounds; r++) total += middle(1000000); return total == 42; }
"""


def bpf_usable() -> str | None:
    """Why BPF cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root (or CAP_BPF and CAP_PERFMON)"
    try:
        bpf_sys.map_create(bpf_sys.MAP_RINGBUF, 0, 0, 1 << 16, "probe").close()
    except bpf_sys.BpfError as error:
        return f"no BPF ring buffer here: {error}"
    return None


REASON = bpf_usable()
needs_bpf = pytest.mark.skipif(REASON is not None, reason=REASON or "")


#: bpf(2) commands: an fd for an id, and an object's info through its fd.
PROG_GET_FD_BY_ID, MAP_GET_FD_BY_ID, OBJ_GET_INFO_BY_FD = 13, 14, 15
#: Where the name is in struct bpf_prog_info and struct bpf_map_info (16 bytes each).
PROG_NAME_AT, MAP_NAME_AT = 64, 24
#: The names our programs and maps are loaded with (sframe record's and these tests').
OUR_NAMES = ("sframe_", "sf_", "t_", "test_", "probe", "bad")


def _name(get_fd: int, object_id: int, name_at: int) -> str | None:
    """The name a loaded program or map was given, or None (freed meanwhile)."""
    try:
        fd = bpf_sys.bpf(get_fd, struct.pack("<I", object_id), "get fd by id")
    except bpf_sys.BpfError:
        return None
    try:
        info = ctypes.create_string_buffer(256)
        attr = struct.pack("<IIQ", fd, len(info), ctypes.addressof(info))
        bpf_sys.bpf(OBJ_GET_INFO_BY_FD, attr, "object info")
        return info.raw[name_at:name_at + 16].split(b"\0")[0].decode(errors="replace")
    except bpf_sys.BpfError:
        return None
    finally:
        os.close(fd)


def objects() -> tuple[set[int], set[int]]:
    """The ids of the loaded programs and maps named as ours: what other work on the
    machine loads and frees meanwhile does not count."""
    def ours(list_command: int, get_fd: int, name_at: int) -> set[int]:
        found = set()
        for object_id in bpf_sys.object_ids(list_command):
            name = _name(get_fd, object_id, name_at)
            if name is not None and name.startswith(OUR_NAMES):
                found.add(object_id)
        return found

    return (ours(bpf_sys.PROG_GET_NEXT_ID, PROG_GET_FD_BY_ID, PROG_NAME_AT),
            ours(bpf_sys.MAP_GET_NEXT_ID, MAP_GET_FD_BY_ID, MAP_NAME_AT))


def settled(before: tuple[set[int], set[int]], seconds: float = 5.0) -> tuple[set[int], set[int]]:
    """The loaded objects once the kernel has freed what was closed (it frees programs and
    maps after an RCU grace period, not at close)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        now = objects()
        if now == before or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def sampled(owned: bpf_sys.Resources, program: bpf_sys.Fd, ring_fd: bpf_sys.Fd,
            child: subprocess.Popen[bytes], limit: int | None = None) -> list[bytes]:
    """The ring buffer's records while ``program`` samples ``child`` (cpu-clock at 999 Hz,
    inherited by its threads), until it ends or ``limit`` records came."""
    attr = bytearray(128)
    struct.pack_into("<IIQQQQQ", attr, 0, 1, 128, 0, 999, 0, 0, (1 << 10) | (1 << 1))
    event = owned.own(bpf_sys.perf_event_open(bytes(attr), child.pid, -1))
    bpf_sys.ioctl(event, bpf_sys.PERF_EVENT_IOC_SET_BPF, int(program))
    bpf_sys.ioctl(event, bpf_sys.PERF_EVENT_IOC_ENABLE)
    records: list[bytes] = []
    ring = RingBuffer(ring_fd, 1 << 20)
    try:
        while child.poll() is None and (limit is None or len(records) < limit):
            ring.wait(50)
            records += [bytes(record) for record in ring.records()]
        records += [bytes(record) for record in ring.records()]
    finally:
        ring.close()
    return records


def test_assembler_labels_and_wide_constants() -> None:
    code = Asm().mov(R0, 0).jump(JEQ, R1, 0, "end").ld_imm64(R0, 0xFFFFFFFF00000001) \
        .label("end").exit().assemble()
    assert len(code) == 5 * 8
    opcode, regs, offset, _ = struct.unpack_from("<BBhi", code, 8)
    assert (opcode, regs & 15, offset) == (0x15, R1, 2)  # over the two-slot constant
    assert struct.unpack_from("<i", code, 20)[0] == 1 and struct.unpack_from("<i", code, 28)[0] == -1
    with pytest.raises(AsmError):
        Asm().goto("nowhere").assemble()


@needs_bpf
def test_a_refused_program_says_why() -> None:
    bad = Asm().exit().assemble()  # R0 never set
    with pytest.raises(bpf_sys.BpfError) as raised:
        bpf_sys.prog_load(bpf_sys.PROG_PERF_EVENT, bad, "bad")
    assert "R0" in str(raised.value) and "EACCES" in str(raised.value)


@needs_bpf
def test_the_sampler_walks_frame_pointers_and_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "spin.c"
    source.write_text(PROGRAM)
    binary = tmp_path / "spin"
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", str(binary), str(source)],
                   check=True)
    before = objects()
    with bpf_sys.Resources() as owned:
        ring_fd = owned.own(bpf_sys.map_create(bpf_sys.MAP_RINGBUF, 0, 0, 1 << 20, "test_rb"))
        program = owned.own(bpf_sys.prog_load(bpf_sys.PROG_PERF_EVENT,
                                              sampler(int(ring_fd), None), "test_sampler"))
        child = subprocess.Popen([str(binary), "200"])
        try:
            samples = sampled(owned, program, ring_fd, child)
        finally:
            child.wait()
    assert settled(before) == before  # every program and map released
    assert len(samples) > 20
    fields = [RECORD.unpack_from(record) for record in samples]
    assert all(field[2] == child.pid for field in fields)
    # Frame pointers: leaf -> middle -> main from the ring buffer.
    deep = [field for field in fields if field[7] >= 3]
    assert len(deep) > 0.5 * len(fields)
    first = samples[fields.index(deep[0])]
    chain = struct.unpack_from(f"<{deep[0][7]}Q", first, user_at(first))
    assert chain[0] == deep[0][9]  # frame 0 is the sampled ip


def mapped(pid: int, name: str, seconds: float = 10.0) -> None:
    """Wait until process ``pid`` maps a file whose path holds ``name``."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/maps") as maps:
            if name in maps.read():
                return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} never mapped {name}")


@needs_bpf
def test_the_sframe_walker_reaches_the_outermost_frame(tmp_path: Path) -> None:
    """No frame pointers anywhere: every frame comes from the SFrame rows in the maps (the
    program's table generated from its CFI, libc's too), as the user-space tracer uses."""
    from pysframe.record.tables import TableLoader
    from pysframe.record.walker import (
        PROCS_VALUE,
        ROW,
        STOP_NAMES,
        STOP_OUTERMOST,
        scratch_map,
        walker,
    )

    source = tmp_path / "spin.c"
    source.write_text(PROGRAM.replace("int main(", "__attribute__((noinline)) int run(")
                      .replace("return total == 42; }", "return total == 42; }\n"
                               "int main(int argc, char **argv) { return run(argc, argv); }"))
    binary = tmp_path / "spin"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(binary), str(source)],
                   check=True)
    before = objects()
    with bpf_sys.Resources() as owned:
        ring_fd = owned.own(bpf_sys.map_create(bpf_sys.MAP_RINGBUF, 0, 0, 1 << 20, "t_rb"))
        scratch = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, *scratch_map(),
                                               "t_scratch"))
        procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 64, "t_procs"))
        rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 1 << 17, "t_rows"))
        code, blob, infos = walker(int(ring_fd), int(scratch), int(procs), int(rows))
        btf = owned.own(bpf_sys.btf_load(blob))
        program = owned.own(bpf_sys.prog_load(bpf_sys.PROG_PERF_EVENT, code, "t_walker",
                                              btf=btf, func_info=infos))
        child = subprocess.Popen([str(binary), "100000"])  # runs until killed
        try:
            mapped(child.pid, "libc.so")  # exec'd, and libc loaded
            loader = TableLoader(rows, procs, 1 << 17)
            assert loader.load_process(child.pid) >= 2  # the program and libc at least
            records = sampled(owned, program, ring_fd, child, limit=300)
        finally:
            child.kill()
            child.wait()
    assert settled(before) == before
    fields = [RECORD.unpack_from(record) for record in records]
    assert len(fields) > 20
    outermost = [field for field in fields if field[8] == STOP_OUTERMOST]
    stops = {STOP_NAMES.get(field[8]) for field in fields}
    assert len(outermost) >= 0.95 * len(fields), stops
    # leaf or middle, run, main, __libc_start_call_main, __libc_start_main, _start
    assert min(field[7] for field in outermost) >= 5

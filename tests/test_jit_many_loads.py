"""A jitdump of many code loads without unwinding information (as a JVM agent writes):
`sframe script` maps every load, names each sampled frame by its load, and takes a later
load at an address over the earlier one (code freed and reused). Old main: 43 s for
30,000 loads (a pass over every mapping per load); the object of each load is now made
only when a frame in it is named."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from pysframe.jit.jitdump import EM_X86_64, HEADER, JIT_CODE_LOAD, MAGIC, RECORD, VERSION
from pysframe.report import perf_data_out as out

PID, BASE = 4242, 0x7F00_0000_0000
SAMPLE_TYPE = (out.SAMPLE_IP | out.SAMPLE_TID | out.SAMPLE_TIME | out.SAMPLE_CALLCHAIN
               | out.SAMPLE_CPU | out.SAMPLE_PERIOD)


def jit_recording(directory: Path, loads: int, reused: int) -> Path:
    """``jit-PID.dump`` with ``loads`` code loads 64 bytes apart in a shuffled order, then
    ``reused`` more over the first addresses ("again_K"); perf.data mapping the dump and
    sampling one load in 97 with a caller 64 bytes below."""
    dump = directory / f"jit-{PID}.dump"
    code = b"\x55\x48\x89\xe5\x90\x5d\xc3" + b"\x90" * 25
    order = [(k * 7919) % loads for k in range(loads)]  # a permutation (7919 is prime)
    names = [*(f"jit_{k}" for k in order), *(f"again_{k}" for k in range(reused))]
    addresses = [*order, *range(reused)]
    with dump.open("wb") as file:
        file.write(HEADER.pack(MAGIC, VERSION, HEADER.size, EM_X86_64, 0, PID, 1, 0))
        for index, (slot, name) in enumerate(zip(addresses, names, strict=True)):
            address = BASE + 64 * slot
            body = (struct.pack("<IIQQQQ", PID, PID, address, address, len(code), index)
                    + name.encode() + b"\0" + code)
            file.write(RECORD.pack(JIT_CODE_LOAD, RECORD.size + len(body), 2 + index) + body)
    trailer = out.sample_id_trailer(SAMPLE_TYPE, PID, PID, 5, 0)
    records = [out.comm(PID, PID, "java", trailer),
               out.mmap2(out.MISC_USER, PID, PID, 0x10000, 0x1000, 0, major=0, minor=0,
                         inode=1, prot=5, flags=2, filename=str(dump), trailer=trailer)]
    for slot in range(1, loads, 97):
        ip = BASE + 64 * slot + 4
        records.append(out.sample(SAMPLE_TYPE, out.MISC_USER, ip=ip, pid=PID, tid=PID,
                                  time=10 + slot, cpu=0, period=1,
                                  chain=[out.PERF_CONTEXT_USER, ip, ip - 64 + 1]))
    attr = out.event_attr(1, 0, 99, SAMPLE_TYPE, (1 << 10) | (1 << 18))
    path = directory / "perf.data"
    path.write_bytes(out.perf_data([attr], b"".join(records), {}))
    return path


def test_a_jitdump_of_many_loads_is_mapped_and_named(tmp_path: Path) -> None:
    loads, reused = 60_000, 500
    path = jit_recording(tmp_path, loads, reused)
    run = subprocess.run([sys.executable, "-m", "pysframe", "script", str(path)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert run.returncode == 0, run.stderr[-2000:]
    chains = [block.splitlines()[1:] for block in run.stdout.strip().split("\n\n")]
    expected = []
    for slot in range(1, loads, 97):
        callee = f"again_{slot}" if slot < reused else f"jit_{slot}"
        caller = f"again_{slot - 1}" if slot - 1 < reused else f"jit_{slot - 1}"
        expected.append([f"{callee}+0x4", f"{caller}+0x5"])
    assert [[line.split()[1] for line in chain] for chain in chains] == expected

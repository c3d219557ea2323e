"""A task whose memory is being torn down (``exit_mmap`` at its exit) has no user stack:
the walker gives it none, as perf gives it no user chain (``perf_callchain_user`` needs
the task's mm). The task's ``mm`` is found from the running kernel's BTF."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_perf
from tests.test_record_bpf import REASON

from pysframe.record.btf import MAGIC, member_offset

SFRAME = [sys.executable, "-m", "pysframe"]


def _btf(struct_name: str, members: list[tuple[str, int]], kind_flag: bool = False) -> bytes:
    """A BTF blob: an INT, then a STRUCT of ``members`` (name, bit offset) of that INT."""
    strings = bytearray(b"\0")

    def name(text: str) -> int:
        strings.extend(text.encode() + b"\0")
        return len(strings) - len(text) - 1

    types = struct.pack("<IIII", name("long"), 1 << 24, 8, 64)  # INT, 64 bits
    info = (4 << 24) | len(members) | ((1 << 31) if kind_flag else 0)
    types += struct.pack("<III", name(struct_name), info, 8 * len(members))
    for member, bits in members:
        types += struct.pack("<III", name(member), 1, bits)
    header = struct.pack("<HBBIIIII", MAGIC, 1, 0, 24, 0, len(types), len(types), len(strings))
    return header + types + bytes(strings)


def test_a_member_offset_is_read_from_btf() -> None:
    blob = _btf("task_struct", [("state", 0), ("stack", 64), ("mm", 9088)])
    assert member_offset(blob, "task_struct", "mm") == 1136
    assert member_offset(blob, "task_struct", "pid") is None
    assert member_offset(blob, "mm_struct", "mm") is None
    # kind_flag: the offset's low 24 bits, the bitfield size above them
    assert member_offset(_btf("t", [("mm", (8 << 24) | 64)], True), "t", "mm") == 8
    for cut in (0, 10, 30, len(blob) - 3):  # a short blob: nothing, never an error
        assert member_offset(blob[:cut], "task_struct", "mm") is None


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_an_exiting_process_has_no_user_stack(tmp_path: Path) -> None:
    """Processes that free 256 MiB at their exit, recorded with -a (a task event stops
    sampling before its memory goes): the samples taken while their
    memory is torn down (``exit_mmap`` in their kernel chain) have no user frames; the
    others are walked to ``_start``."""
    source, binary = tmp_path / "big.c", tmp_path / "big"
    source.write_text("#include <stdlib.h>\n#include <string.h>\nint main(void) {\n"
                      "  for (int i = 0; i < 64; i++) memset(malloc(4 << 20), 1, 4 << 20);\n"
                      "  return 0; }\n")
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(source)], check=True)
    output = tmp_path / "exit.data"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    run = subprocess.run([*SFRAME, "record", "-a", "-F", "4000", "-o", str(output), "--", "sh",
                          "-c", f"for i in $(seq 40); do {binary}; done"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    # read by perf (6.1): the kernel chains named from its own kallsyms, and the user
    # frames of each sample as our file has them
    script = subprocess.run([need_perf(), "script", "-i", str(output)], capture_output=True,
                            text=True, env=env, timeout=300)
    assert script.returncode == 0, script.stderr
    exiting = [block for block in script.stdout.split("\n\n")
               if block.startswith("big ") and "exit_mmap" in block]
    assert len(exiting) >= 5, "no sample while the memory was torn down"
    with_user = [block for block in exiting if f"({binary})" in block or "libc.so" in block]
    assert not with_user, with_user[:2]
    # the other samples of those processes are walked through libc to main (perf 6.1
    # prints our chains to main, not past it)
    working = [block for block in script.stdout.split("\n\n")
               if block.startswith("big ") and "libc.so" in block]
    whole = [block for block in working if " main+" in block]
    assert len(working) >= 20 and len(whole) >= 0.95 * len(working), working[:2]

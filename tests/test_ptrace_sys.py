"""ptrace through ctypes' C module (:mod:`pysframe.sources.ptrace_sys`, what ``sframe stack``
uses) against ptrace through ctypes itself, and against the kernel's own account of a
stopped thread (``/proc/PID/syscall``: its stack pointer and program counter)."""

from __future__ import annotations

import errno
import os
import platform
import subprocess
import time

import pytest

from pysframe.sources.ptrace_sys import PtraceCalls

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 registers")

PTRACE_GETREGS, PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 12, 17, 0x4206, 0x4207
RSP, RIP = 19, 16  # in struct user_regs_struct
REGISTERS = 27


def _registers(calls: PtraceCalls, tid: int) -> list[int]:
    assert calls.call(PTRACE_SEIZE, tid) == (0, 0)
    assert calls.call(PTRACE_INTERRUPT, tid) == (0, 0)
    os.waitpid(tid, os.__dict__.get("WALL", 0x40000000))
    buffer = calls.words()
    try:
        assert calls.call(PTRACE_GETREGS, tid, 0, calls.pointer(buffer)) == (0, 0)
        with open(f"/proc/{tid}/syscall") as handle:
            fields = handle.read().split()
    finally:
        assert calls.call(PTRACE_DETACH, tid, 0, 0) == (0, 0)
    words = list(buffer)
    # The kernel's own reading of the stopped thread: "<nr> <args...> <sp> <pc>".
    assert int(fields[-2], 16) == words[RSP]
    assert int(fields[-1], 16) == words[RIP]
    return words


def test_both_ways_read_the_same_registers_as_the_kernel_reports() -> None:
    fast, plain = PtraceCalls(REGISTERS), PtraceCalls(REGISTERS, plain=True)
    assert fast.from_c_module and not plain.from_c_module  # CPython: the fast path is used
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.2)
        first = _registers(fast, sleeper.pid)
        second = _registers(plain, sleeper.pid)
        assert len(first) == REGISTERS and first[RIP] and first[RSP]
        # Blocked in the same sleep: the same place, the same stack.
        assert (first[RIP], first[RSP]) == (second[RIP], second[RSP])
        assert sleeper.poll() is None  # detached, still running (not left stopped)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_both_ways_give_the_errno_of_a_failed_call() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    for calls in (PtraceCalls(REGISTERS), PtraceCalls(REGISTERS, plain=True)):
        assert calls.call(PTRACE_INTERRUPT, gone.pid) == (-1, errno.ESRCH)
        assert calls.call(PTRACE_GETREGS, 0x7FFFFFFF, 0, None) == (-1, errno.ESRCH)

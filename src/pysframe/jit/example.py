"""A small x86-64 JIT, as an example of code that exists only at run time.

It compiles a tiny call language (``name: callee`` per line; the callee ``block`` is the C
library's ``pause``) into machine code in an executable anonymous mapping, each function a
classic frame (``push rbp; mov rbp, rsp; sub rsp, 16; call; leave; ret``), describes every
function by CFI (the same instructions become its ``.eh_frame`` and its ``.sframe`` rows),
registers each one with debuggers through the GDB JIT interface (:mod:`.runtime`) and, with
``--jitdump DIR``, writes perf's ``jit-PID.dump`` (:mod:`.jitdump`), then calls the first
function: the process blocks in ``pause`` under the JIT frames until it gets a signal.

    python -m pysframe.jit.example [--jitdump DIR] [--spin] [--lifetime S]

``--spin`` loops in the innermost JIT function instead of blocking (for profilers).
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import signal
import struct
import sys

from ..cfi.instructions import (
    DW_CFA_advance_loc,
    DW_CFA_def_cfa,
    DW_CFA_def_cfa_offset,
    DW_CFA_def_cfa_register,
    DW_CFA_offset,
    DW_CFA_restore,
    Instruction,
)
from .symfile import JitCode, symfile, unwind_tables

PROGRAM = """\
interpret: evaluate
evaluate: apply
apply: call_native
call_native: block
"""
SLOT = 32
#: The rows of every compiled function: after push rbp (1 byte), after mov rbp, rsp (4),
#: and after leave (at the ret).
FRAME_CFI = (Instruction(DW_CFA_advance_loc, 1), Instruction(DW_CFA_def_cfa_offset, 16),
             Instruction(DW_CFA_offset, 6, -16), Instruction(DW_CFA_advance_loc, 3),
             Instruction(DW_CFA_def_cfa_register, 6))


def parse(program: str) -> list[tuple[str, str]]:
    """(function, callee) pairs, in order; the first is the entry."""
    pairs = []
    for number, line in enumerate(program.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, colon, callee = line.partition(":")
        if not colon or not name.strip().isidentifier() or not callee.strip().isidentifier():
            raise ValueError(f"line {number}: expected 'name: callee', got {line!r}")
        pairs.append((name.strip(), callee.strip()))
    return pairs


def frame_function(target: int) -> tuple[bytes, tuple[Instruction, ...]]:
    """Machine code calling ``target`` inside a frame, and its CFI."""
    code = (b"\x55" b"\x48\x89\xe5" b"\x48\x83\xec\x10"  # push rbp; mov rbp,rsp; sub rsp,16
            + b"\x48\xb8" + struct.pack("<Q", target)   # movabs rax, target
            + b"\xff\xd0" b"\xc9" b"\xc3")              # call rax; leave; ret
    ret_at = len(code) - 1
    cfi = (*FRAME_CFI, Instruction(DW_CFA_advance_loc, ret_at - 4),
           Instruction(DW_CFA_def_cfa, 7, 8), Instruction(DW_CFA_restore, 6))
    return code, cfi


def spin_function() -> tuple[bytes, tuple[Instruction, ...]]:
    """A frame that loops for ever (``--spin``)."""
    code = b"\x55" b"\x48\x89\xe5" b"\x48\xff\xc0" b"\xeb\xfb"  # push; mov; 1: inc rax; jmp 1b
    return code, FRAME_CFI


def compile_program(pairs: list[tuple[str, str]], memory: mmap.mmap, base: int,
                    native: dict[str, int], spin: bool) -> list[JitCode]:
    """Each function's code written into ``memory`` (at ``base``), callees first."""
    addresses = {name: base + SLOT * index for index, (name, _) in enumerate(pairs)}
    compiled = []
    for index, (name, callee) in enumerate(pairs):
        if callee in addresses:
            target = addresses[callee]
        elif callee in native:
            target = native[callee]
        else:
            raise ValueError(f"{name} calls {callee}, which is neither compiled nor native")
        code, cfi = (spin_function() if spin and callee not in addresses
                     else frame_function(target))
        if len(code) > SLOT:
            raise ValueError(f"{name}: {len(code)} bytes do not fit a {SLOT}-byte slot")
        memory[SLOT * index:SLOT * (index + 1)] = code.ljust(SLOT, b"\xcc")
        compiled.append(JitCode(f"jit_{name}", addresses[name], code, cfi))
    return compiled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jitdump", metavar="DIR", help="also write perf's jit-PID.dump")
    parser.add_argument("--spin", action="store_true", help="loop instead of blocking")
    parser.add_argument("--lifetime", type=int, default=0, metavar="S",
                        help="end after S seconds (SIGALRM; default: run until a signal)")
    args = parser.parse_args(argv)
    if args.lifetime > 0:
        signal.alarm(args.lifetime)  # the default action ends the process, even in pause()
    from .runtime import JitRegistry

    pairs = parse(PROGRAM)
    libc = ctypes.CDLL(None)
    native = {"block": ctypes.cast(libc.pause, ctypes.c_void_p).value or 0}
    size = mmap.PAGESIZE * (1 + SLOT * len(pairs) // mmap.PAGESIZE)
    memory = mmap.mmap(-1, size, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    compiled = compile_program(pairs, memory, base, native, args.spin)
    # The unwind tables live in memory of their own, as a JIT keeps them (a debugger maps
    # each object's sections at their addresses).
    tables_memory = mmap.mmap(-1, 1 << 16)
    tables_base = ctypes.addressof(ctypes.c_char.from_buffer(tables_memory))
    registry = JitRegistry()
    at = tables_base
    for function in compiled:  # one object per function, as LLVM's JITs register them
        tables = unwind_tables([function], at)
        for address, data in ((tables.eh_frame_address, tables.eh_frame),
                              (tables.sframe_address, tables.sframe)):
            tables_memory[address - tables_base:address - tables_base + len(data)] = data
        at = tables.end
        registry.register(symfile([function], tables))
    dump = None
    if args.jitdump:
        from .jitdump import JitDump

        dump = JitDump(args.jitdump)
        for function in compiled:
            dump.code_load(function)
    print(f"ready {compiled[0].address:#x}", flush=True)
    entry = ctypes.CFUNCTYPE(None)(compiled[0].address)
    entry()
    del dump
    return 0


if __name__ == "__main__":
    sys.exit(main())

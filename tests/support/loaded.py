"""What a started process holds at an ELF file's ``PT_GNU_SFRAME`` address: the bytes the
kernel's unwinder and glibc's ``_dl_find_object`` would read, read from ``/proc/PID/mem``.

A program is stopped at its exec (``PTRACE_TRACEME`` in the child, so the segments the
kernel mapped are read before any of its code runs, by the tracer, as ``/proc/PID/mem``
requires) and its load bias taken from ``AT_PHDR`` in ``/proc/PID/auxv`` minus
``PT_PHDR``'s address, as ld.so computes it (or the table's place in its ``PT_LOAD``): the table found there must be the file's.
A shared library is preloaded into ``sleep`` (by its soname, from a directory holding
only it, so that the libraries needing it get it too) and found in ``/proc/PID/maps``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from pysframe.elf import ElfImage
from pysframe.elf.headers import PT_GNU_SFRAME

PT_PHDR = 6
AT_PHDR = 3
PTRACE_TRACEME = 0


class InMemory(NamedTuple):
    """What the process held: the ``PT_GNU_SFRAME`` bytes, at their run-time address, and
    the program header table found at ``AT_PHDR`` (programs only)."""

    address: int
    sframe: bytes
    phdrs: bytes | None


def _segment(image: ElfImage, kind: int) -> tuple[int, int]:
    for segment in image.program_headers():
        if segment.type == kind:
            return segment.vaddr, segment.memsz
    raise AssertionError(f"{image.path}: no program header of type {kind:#x}")


def _table_address(image: ElfImage) -> tuple[int, int]:
    """The program header table's link-time address (``PT_PHDR``'s, else where the
    ``PT_LOAD`` holding ``e_phoff`` puts it, as the kernel computes ``AT_PHDR``) and size."""
    header = image.header
    size = header.phnum * header.phentsize
    for segment in image.program_headers():
        if segment.type == PT_PHDR:
            return segment.vaddr, segment.memsz
    for segment in image.program_headers():
        if segment.type == 1 and segment.offset <= header.phoff < segment.offset + \
                segment.filesz:
            return segment.vaddr + header.phoff - segment.offset, size
    raise AssertionError(f"{image.path}: the program header table is not loaded")


def _read(pid: int, address: int, size: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        memory.seek(address)
        return memory.read(size)


def _traceme() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(PTRACE_TRACEME, 0, None, None) != 0:
        os._exit(127)


def program_memory(path: str | Path, *args: str) -> InMemory:
    """Start ``path``, stopped at its exec, and read its SFrame and program headers."""
    image = ElfImage(str(path))
    vaddr, size = _segment(image, PT_GNU_SFRAME)
    phdr_vaddr, phdr_size = _table_address(image)
    child = subprocess.Popen([str(path), *args], preexec_fn=_traceme,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        _, status = os.waitpid(child.pid, 0)
        assert os.WIFSTOPPED(status), f"{path}: not stopped at exec ({status:#x})"
        auxv = Path(f"/proc/{child.pid}/auxv").read_bytes()
        entries = dict(struct.iter_unpack("<QQ", auxv[:len(auxv) // 16 * 16]))
        bias = entries[AT_PHDR] - phdr_vaddr
        return InMemory(bias + vaddr, _read(child.pid, bias + vaddr, size),
                        _read(child.pid, entries[AT_PHDR], phdr_size))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def library_memory(path: str | Path, soname: str, directory: Path,
                   host: str = "sleep") -> InMemory:
    """Preload the library ``path`` (linked into ``directory`` as ``soname``) into
    ``host 30`` and read its SFrame once ld.so has mapped it."""
    image = ElfImage(str(path))
    vaddr, size = _segment(image, PT_GNU_SFRAME)
    first = min(s.vaddr - s.offset for s in image.program_headers() if s.type == 1)
    link = directory / soname
    link.unlink(missing_ok=True)
    link.symlink_to(Path(path).resolve())
    real = str(Path(path).resolve())
    env = {**os.environ, "LD_LIBRARY_PATH": str(directory), "LD_PRELOAD": soname}
    child = subprocess.Popen([host, "30"], env=env, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for line in Path(f"/proc/{child.pid}/maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5] == real and int(fields[2], 16) == 0:
                    bias = int(fields[0].split("-")[0], 16) - first
                    return InMemory(bias + vaddr, _read(child.pid, bias + vaddr, size), None)
            assert child.poll() is None, f"{host} with {soname} preloaded exited {child.returncode}"
            time.sleep(0.02)
        raise AssertionError(f"{path} was never mapped into {host}")
    finally:
        child.kill()
        child.wait()

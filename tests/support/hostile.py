"""Hostile files for tests: corrupted copies of real binaries, a zstd decompression bomb,
and running the ``sframe`` command with a time limit and its peak memory."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pysframe.elf import ElfImage


@dataclass(slots=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    #: Peak resident memory of the command, in MiB.
    peak_mib: float


def sframe(*arguments: str, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
    """``sframe ARGUMENTS`` in a child process (a hang fails the test through ``timeout``),
    with the child's own peak RSS (``wait4``)."""
    return python("-m", "pysframe", *arguments, env=env, timeout=timeout)


#: Runs the command (argv[2:]) as its child and writes that child's peak RSS in KiB to the
#: descriptor argv[1]. Linux keeps in ``ru_maxrss`` the highest RSS of the memory a process
#: had *before* exec, and a child spawned by subprocess (vfork) starts in the test
#: process's memory: a direct child of pytest reports pytest's own size (216 MiB late in a
#: full run, failing a 200 MiB bound). A fork of this small launcher carries a few MiB.
_LAUNCHER = (
    "import os, signal, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.argv[2], sys.argv[2:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "os.write(int(sys.argv[1]), b'%d' % usage.ru_maxrss)\n"
    "if os.WIFSIGNALED(status):\n"  # die of the same signal: the caller sees -SIGNAL
    "    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)\n"
    "    os.kill(os.getpid(), os.WTERMSIG(status))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n")


def python(*arguments: str, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
    """This interpreter with ``arguments`` in a child process, as :func:`sframe`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        peak_read, peak_write = os.pipe()
        child = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(peak_write), sys.executable, *arguments],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, pass_fds=(peak_write,),
            start_new_session=True, env={**os.environ, **(env or {})})
        os.close(peak_write)
        try:
            child.wait(timeout=timeout)  # a hang detector, not a speed check
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, 9)
            child.wait()
            os.close(peak_read)
            raise AssertionError(
                f"{' '.join(arguments)} hung (killed after {timeout} s)") from None
        with os.fdopen(peak_read, "rb") as reader:
            reported = reader.read()
        out.seek(0)
        err.seek(0)
        return Run(child.returncode, out.read().decode(errors="replace"),
                   err.read().decode(errors="replace"), int(reported or 0) / 1024)


def patched(source: Path, target: Path, edits: list[tuple[int, bytes]]) -> Path:
    """A copy of ``source`` with ``bytes`` written at each file offset."""
    data = bytearray(source.read_bytes())
    for offset, value in edits:
        data[offset:offset + len(value)] = value
    target.write_bytes(bytes(data))
    target.chmod(0o755)
    return target


def section_header_at(image: ElfImage, name: str) -> int:
    """File offset of the section header of ``name`` (ELF64)."""
    header = image.section_header(name)
    assert header is not None, name
    return image.header.shoff + header.number * image.header.shentsize


def zstd_zeros(size: int) -> bytes:
    """A zstd frame that inflates to ``size`` zero bytes, built from RLE blocks by hand
    (a few bytes per 128 KiB), declaring its content size."""
    block = 1 << 17
    frame = bytearray(struct.pack("<I", 0xFD2FB528))
    frame.append(0xC0)          # 8-byte content size, not a single segment, no checksum
    frame.append(7 << 3)        # window 2**(10 + 7) = 128 KiB
    frame += struct.pack("<Q", size)
    left = size
    while left:
        length = min(block, left)
        left -= length
        last = 1 if left == 0 else 0
        frame += (last | (1 << 1) | (length << 3)).to_bytes(3, "little")  # RLE block
        frame.append(0)
    return bytes(frame)


def with_zstd_bomb(program: Path, target: Path, names: tuple[str, ...], size: int) -> Path:
    """``program`` with each named section replaced by an SHF_COMPRESSED zstd section that
    declares (and really inflates to) ``size`` bytes; the new contents are appended."""
    image = ElfImage(str(program))
    data = bytearray(program.read_bytes())
    payload = zstd_zeros(size)
    for name in names:
        header_at = section_header_at(image, name)
        offset = len(data)
        data += struct.pack("<IIQQ", 2, 0, size, 1) + payload   # Elf64_Chdr: ZSTD
        flags = struct.unpack_from("<Q", data, header_at + 8)[0]
        struct.pack_into("<Q", data, header_at + 8, flags | 0x800)        # SHF_COMPRESSED
        struct.pack_into("<QQ", data, header_at + 24, offset, len(data) - offset)
    target.write_bytes(bytes(data))
    target.chmod(0o755)
    return target

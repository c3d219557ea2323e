"""Recording programs with perf and comparing `sframe script` with `perf script --no-inline`
on them (the tests in tests/test_perf_parity.py and bench/parity.py).

The comparison is the issue's: every sample perf prints is printed, in order, with an
identical header line; each user-space chain equals perf's or extends it only with frames
that are return sites (the instruction before is a call: perf's libunwind often stops
early); perf's truncation marker where perf prints one; and the symbol text of the frames
both print is counted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

MARKER = "ffffffffffffffff [unknown] ([unknown])"
KERNEL = "([kernel.kallsyms])"


def perf_can_record(directory: Path) -> str | None:
    """Why perf cannot record here, or None."""
    if shutil.which("perf") is None:
        return "perf is not installed"
    probe = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o",
                            str(directory / "probe.data"), "--", "true"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return "perf cannot record here: " + (probe.stderr.strip().splitlines() or ["?"])[-1]
    return None


def record(output: Path, command: list[str], *options: str, timeout: float = 120) -> Path:
    """``perf record -e cpu-clock OPTIONS -o OUTPUT -- COMMAND``."""
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", *options, "-o", str(output),
                    "--", *command], check=True, capture_output=True, timeout=timeout)
    return output


def perf_script(recording: Path) -> str:
    return subprocess.run(["perf", "script", "--no-inline", "-i", str(recording)],
                          capture_output=True, text=True, check=True, timeout=300).stdout


def sframe_script(recording: Path, cache_home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", "script", str(recording)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache_home)})


@dataclass(slots=True)
class Block:
    header: str
    kernel: list[str]
    user: list[tuple[int, str, str]]  # (address, symbol text, dso)
    marker: bool


def blocks(text: str) -> list[Block]:
    """perf script text as sample blocks (a sample printed on one line has no frames)."""
    found = []
    for chunk in text.split("\n\n"):
        lines = [line for line in chunk.splitlines() if line]
        if not lines:
            continue
        block = Block(lines[0], [], [], False)
        for line in lines[1:]:
            body = line.strip()
            if body == MARKER:
                block.marker = True
            elif body.endswith(KERNEL):
                block.kernel.append(body)
            else:
                address, rest = body.split(" ", 1)
                symbol, _, dso = rest.rpartition(" (")
                block.user.append((int(address, 16), symbol, dso.rstrip(")")))
        found.append(block)
    return found


_CALL_LENGTHS = (2, 3, 4, 5, 6, 7)


@cache
def _file_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def is_return_site(dso: str, shown: int) -> bool:
    """Whether the frame printed at file offset ``shown`` (a return address - 1) follows a
    call instruction in ``dso`` (x86-64: call rel32, or call r/m64 in its 2-7 byte forms)."""
    data = _file_bytes(dso)
    ra = shown + 1
    if data is None or ra > len(data) or ra < 8:
        return False
    if data[ra - 5] == 0xE8:
        return True
    for length in _CALL_LENGTHS:
        opcode = ra - length
        if data[opcode] == 0xFF and (data[opcode + 1] >> 3) & 7 == 2:
            return True
    return False


@dataclass(slots=True)
class Parity:
    """How `sframe script` compares with perf on one recording."""

    samples: int = 0
    ours: int = 0
    headers_identical: int = 0
    equal: int = 0
    extended: int = 0
    extended_by_non_return_site: int = 0
    perf_skipped: int = 0
    shorter_or_different: int = 0
    frames_compared: int = 0
    symbols_identical: int = 0
    markers: int = 0
    markers_matched: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def symbol_share(self) -> float:
        return self.symbols_identical / self.frames_compared if self.frames_compared else 1.0

    def line(self, name: str) -> str:
        return (f"{name}: {self.samples} samples (ours {self.ours}), headers identical "
                f"{self.headers_identical}; chains equal {self.equal}, extended {self.extended} "
                f"(by a non-return-site {self.extended_by_non_return_site}), with frames perf skipped "
                f"{self.perf_skipped}, shorter or "
                f"different {self.shorter_or_different}; symbol text {self.symbols_identical}/"
                f"{self.frames_compared} ({100 * self.symbol_share:.2f}%); markers "
                f"{self.markers_matched}/{self.markers}")


def compare(ours_text: str, perf_text: str) -> Parity:
    ours, theirs = blocks(ours_text), blocks(perf_text)
    parity = Parity(samples=len(theirs), ours=len(ours))
    for mine, perfs in zip(ours, theirs, strict=False):
        parity.headers_identical += mine.header == perfs.header
        if mine.header != perfs.header and len(parity.problems) < 5:
            parity.problems.append(f"header: {mine.header!r} != {perfs.header!r}")
        _compare_chain(parity, mine, perfs)
    return parity


def _perf_skipped_frames(mine: Block, perfs: Block) -> bool:
    """perf's chain is ours with frames left out, and each frame only we print is a return
    site (libunwind misreads a frame and lands on an outer one, e.g. in ld.so's memmove)."""
    theirs = iter(perfs.user)
    wanted = next(theirs, None)
    for frame in mine.user:
        if wanted is not None and frame[0] == wanted[0]:
            wanted = next(theirs, None)
        elif not (frame[2].startswith("/") and is_return_site(frame[2], frame[0])):
            return False
    return wanted is None


def _compare_chain(parity: Parity, mine: Block, perfs: Block) -> None:
    common = min(len(mine.user), len(perfs.user))
    if [frame[0] for frame in mine.user[:common]] != [frame[0] for frame in perfs.user[:common]] \
            and _perf_skipped_frames(mine, perfs):
        parity.perf_skipped += 1
    elif [frame[0] for frame in mine.user[:common]] != [frame[0] for frame in perfs.user[:common]] \
            or len(mine.user) < len(perfs.user):
        parity.shorter_or_different += 1
        if len(parity.problems) < 5:
            parity.problems.append(f"chain of {perfs.header!r}: ours {mine.user[:8]} perf "
                                   f"{perfs.user[:8]}")
    elif len(mine.user) == len(perfs.user):
        parity.equal += 1
    else:
        parity.extended += 1
        if not all(dso.startswith("/") and is_return_site(dso, address)
                   for address, _, dso in mine.user[common:]):
            parity.extended_by_non_return_site += 1
    for (_, symbol, dso), (_, their_symbol, their_dso) in zip(mine.user[:common],
                                                              perfs.user[:common], strict=True):
        parity.frames_compared += 1
        parity.symbols_identical += (symbol, dso) == (their_symbol, their_dso)
    if perfs.marker:
        parity.markers += 1
        # perf's stack reader takes the copy's last word for outside it (addr + 8 >= end),
        # so where the last return address sits there perf prints the marker one frame
        # early; we print that frame (checked above to be a return site), then the marker.
        parity.markers_matched += mine.marker and len(mine.user) >= len(perfs.user)

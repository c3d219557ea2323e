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
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

MARKER = "ffffffffffffffff [unknown] ([unknown])"
KERNEL = "([kernel.kallsyms])"
#: A PLT stub's name in a frame line. perf 6.1 names libc's stubs by relocation index, which
#: is not their order (its IRELATIVE slots): `@plt` or another function's; perf 7 and we
#: name each after the slot it jumps through (an IRELATIVE one after its resolver).
_PLT_STUB = re.compile(r"\S*@plt\+")


#: A name in the PLT that perf 6.1 does not give (it prints ``[unknown]``): the lazy-binding
#: header's (``.plt``) and a ``.plt.got`` stub's; perf 6.3 and later give both, as we do.
_PLT_NAME = re.compile(r"\S*@plt\+0x[0-9a-f]+|\.plt\+0x[0-9a-f]+")


def plt_unnamed(line: str) -> str:
    """``line`` with PLT stub names left out (``@plt+0x..``), for comparing with perf 7
    (which names an IRELATIVE stub after its own alias of the resolver)."""
    return _PLT_STUB.sub("@plt+", line)


def as_perf61(ours: list[str], theirs: list[str]) -> list[str]:
    """Our lines, each one that differs from perf 6.1's only in a PLT name replaced by perf's
    (a stub perf names by relocation index, or a PLT address it leaves ``[unknown]``): the
    caller asserts the result equals ``theirs``, so any other difference still shows."""
    if len(ours) != len(theirs):
        return ours
    return [t if o == t or plt_unnamed(o) == plt_unnamed(t) or _PLT_NAME.sub("[unknown]", o) == t
            else o for o, t in zip(ours, theirs, strict=True)]


def perf_can_record(directory: Path) -> str | None:
    """Why perf cannot record here, or None."""
    if shutil.which("perf") is None:
        return "perf is not installed"
    probe = subprocess.run(["perf", "record", "-q", "--no-bpf-event", "-e", "cpu-clock", "-o",
                            str(directory / "probe.data"), "--", "true"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return "perf cannot record here: " + (probe.stderr.strip().splitlines() or ["?"])[-1]
    return None


def recording_directory(factory: Any, name: str) -> tuple[str, Path]:
    """(perf, a fresh directory where it can record) for a module's recordings; the test
    is unavailable (a failure under CI=true) where perf is missing or cannot record."""
    from tests.support.oracles import need_perf, unavailable

    perf = need_perf()
    directory: Path = factory.mktemp(name)
    reason = perf_can_record(directory)
    if reason is not None:
        unavailable(reason)
    return perf, directory


def record(output: Path, command: list[str], *options: str, timeout: float = 120) -> Path:
    """``perf record -N -e cpu-clock OPTIONS -o OUTPUT -- COMMAND`` (-N: the test writes
    nothing into ~/.debug, perf's build-id cache)."""
    subprocess.run(["perf", "record", "-q", "-N", "--no-bpf-event", "-e", "cpu-clock", *options, "-o", str(output),
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
                symbol, dso = split_dso(rest)
                block.user.append((int(address, 16), symbol, dso))
        found.append(block)
    return found


def split_dso(rest: str) -> tuple[str, str]:
    """(symbol text, file) of a frame line's ``SYMBOL (FILE)``: the file is the last
    parenthesized group, its own parentheses balanced (``/memfd:x (deleted)``)."""
    depth = 0
    for at in range(len(rest) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(rest[at], 0)
        if depth == 0:
            return rest[:at].rstrip(" "), rest[at + 1:-1]
    return rest, ""


_CALL_LENGTHS = (2, 3, 4, 5, 6, 7)


@cache
def _file_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def is_return_site(dso: str, shown: int) -> bool | None:
    """Whether the frame printed at file offset ``shown`` (a return address - 1) follows a
    call instruction in ``dso`` (x86-64: call rel32, or call r/m64 in its 2-7 byte forms);
    None when the file cannot be read (a binary deleted since the recording)."""
    data = _file_bytes(dso)
    ra = shown + 1
    if data is None:
        return None
    if ra > len(data) or ra < 8:
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
    perf_junk: int = 0
    unverifiable: int = 0
    shorter_or_different: int = 0
    frames_compared: int = 0
    symbols_identical: int = 0
    markers: int = 0
    markers_matched: int = 0
    problems: list[str] = field(default_factory=list)
    #: The chains that are neither equal nor longer and correct (the first
    #: :data:`DIFFERING_KEPT`), ours beside perf's, for a failing test to print.
    differing: list[str] = field(default_factory=list)

    @property
    def symbol_share(self) -> float:
        return self.symbols_identical / self.frames_compared if self.frames_compared else 1.0

    @property
    def correct(self) -> int:
        """Chains equal to perf's or longer and correct: extended by return sites only (in
        files that could be read: an extension into a file gone since is not counted), or
        where perf skipped frames or went on with junk."""
        return (self.equal + self.extended - self.extended_by_non_return_site
                - self.unverifiable + self.perf_skipped + self.perf_junk)

    @property
    def correct_share(self) -> float:
        return self.correct / self.samples if self.samples else 1.0

    def line(self, name: str) -> str:
        return (f"{name}: {self.samples} samples (ours {self.ours}), headers identical "
                f"{self.headers_identical}; chains equal {self.equal}, extended {self.extended} "
                f"(by a non-return-site {self.extended_by_non_return_site}, binary gone "
                f"{self.unverifiable}), with frames perf skipped "
                f"{self.perf_skipped}, where perf's next frame is junk {self.perf_junk}, "
                f"shorter or "
                f"different {self.shorter_or_different}; symbol text {self.symbols_identical}/"
                f"{self.frames_compared} ({100 * self.symbol_share:.2f}%); markers "
                f"{self.markers_matched}/{self.markers}; equal or longer and correct "
                f"{self.correct}/{self.samples} ({100 * self.correct_share:.2f}%)")


DIFFERING_KEPT = 40


def side_by_side(mine: Block, perfs: Block, why: str) -> str:
    """One differing chain: perf's header, then each frame ours | perf's, `*` where they
    differ."""
    lines = [f"{why}: {perfs.header}"]
    for index in range(max(len(mine.user), len(perfs.user))):
        cells = []
        for chain in (mine.user, perfs.user):
            if index < len(chain):
                address, symbol, dso = chain[index]
                cells.append(f"{address:x} {symbol} ({dso.rsplit('/', 1)[-1]})")
            else:
                cells.append("-")
        same = index < min(len(mine.user), len(perfs.user)) and _same_frame(
            mine.user[index], perfs.user[index])
        lines.append(f"  {' ' if same else '*'} {cells[0]:<60} | {cells[1]}")
    return "\n".join(lines)


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
    """perf's chain is ours with frames left out (and perhaps junk at its end), and each
    frame only we print is a return site (libunwind misreads a frame and lands on an outer
    one, e.g. in ld.so's memmove)."""
    theirs = iter(perfs.user)
    wanted = next(theirs, None)
    for frame in mine.user:
        if wanted is not None and _same_frame(frame, wanted):
            wanted = next(theirs, None)
        elif _returns_to_code(frame) is False:
            return False
    # What perf has beyond our chain may only be junk (not after a call).
    rest = [] if wanted is None else [wanted, *theirs]
    return all(_returns_to_code(frame) is False for frame in rest)


def _same_frame(mine: tuple[int, str, str], perfs: tuple[int, str, str]) -> bool:
    """The same frame; perf prints the signal trampoline a handler returns to as its
    address - 1 (a return address, which it is not: `[unknown]` before __restore_rt); we
    print it exact, as gdb does."""
    return mine[0] == perfs[0] or (mine[0] == perfs[0] + 1 and mine[2] == perfs[2]
                                   and _trampoline(mine))


#: x86-64 rt_sigreturn: mov $15,%rax; syscall (glibc's __restore_rt, Go's
#: runtime.sigreturn).
SIGRETURN = bytes.fromhex("48c7c00f0000000f05")


def _file_of(frame: tuple[int, str, str]) -> bytes | None:
    """The bytes of the frame's file; None for anonymous memory, the heap and unmapped
    addresses (`//anon`, `[heap]`, `[unknown]`) and for a file that cannot be read."""
    dso = frame[2]
    if not dso.startswith("/") or dso.startswith("//"):
        return None
    return _file_bytes(dso)


def _trampoline(frame: tuple[int, str, str]) -> bool:
    """Whether the frame, printed exact, is at the signal trampoline (by its code)."""
    data = _file_of(frame)
    return data is not None and data[frame[0]:frame[0] + len(SIGRETURN)] == SIGRETURN


def _in_sigreturn(frame: tuple[int, str, str]) -> bool:
    """Whether the frame's pc is just after the trampoline's ``syscall``: a sample taken
    during its rt_sigreturn, which never returns there (only a sample's own pc can be
    there); the frame after it is the one the signal interrupted, an exact pc read from
    the signal frame (one go CI run: runtime.sigreturn+0x9, then runtime.osyield+0x7, the
    pc after sched_yield's syscall)."""
    data = _file_of(frame)
    start = frame[0] - len(SIGRETURN)
    return data is not None and start >= 0 and data[start:frame[0]] == SIGRETURN


def _returns_to_code(frame: tuple[int, str, str]) -> bool | None:
    """Whether the frame is a return site; anonymous memory, the heap and unmapped
    addresses (`//anon`, `[heap]`, `[unknown]`) hold none here. Two more places are
    returned to though no call is before them, both checked in the file's bytes: the
    signal trampoline a handler returns to (printed exact, its code rt_sigreturn's), and
    Go's goroutine entry, whose return address the runtime makes runtime.goexit+1 (goexit
    is `NOP; CALL goexit1`: the frame printed at the NOP, as Go's own traceback shows it
    and gdb does)."""
    dso = frame[2]
    if not dso.startswith("/") or dso.startswith("//"):
        return False
    if _trampoline(frame):
        return True
    if frame[1].startswith("runtime.goexit"):
        data = _file_of(frame)
        if data is not None and data[frame[0]:frame[0] + 2] == b"\x90\xe8":
            return True
    return is_return_site(dso, frame[0])


def _async_preempt(frame: tuple[int, str, str]) -> bool:
    """Whether the frame is in Go's ``runtime.asyncPreempt``: the runtime's signal handler
    pushes the interrupted pc as its return address and jumps to it (``pushCall``), so
    the frame after it is that exact pc, where asyncPreempt's RET resumes (one go CI
    run: strconv.formatBits+0x232, no call before it)."""
    return frame[1].startswith("runtime.asyncPreempt")


def _real_callers(frames: list[tuple[int, str, str]], before: tuple[int, str, str] | None
                  ) -> bool | None:
    """Whether every frame is a return site (the frame a signal interrupted, after the
    trampoline, a sample in its rt_sigreturn or Go's asyncPreempt, is an exact pc
    instead); None if some binary cannot be read."""
    verdict: bool | None = True
    for frame in frames:
        if before is not None and (_trampoline(before) or _async_preempt(before)
                                   or _in_sigreturn(before)):
            answer: bool | None = True
        else:
            answer = _returns_to_code(frame)
        if answer is False:
            return False
        if answer is None:
            verdict = None
        before = frame
    return verdict


def _compare_chain(parity: Parity, mine: Block, perfs: Block) -> None:
    common = 0
    while (common < min(len(mine.user), len(perfs.user))
           and _same_frame(mine.user[common], perfs.user[common])):
        common += 1
    ours_rest, perf_rest = mine.user[common:], perfs.user[common:]
    if not ours_rest and not perf_rest:
        parity.equal += 1
    elif not perf_rest:
        parity.extended += 1
        verdict = _real_callers(ours_rest, mine.user[common - 1] if common else None)
        if verdict is None:
            parity.unverifiable += 1
            _keep(parity, mine, perfs, "longer, a file unreadable")
        elif not verdict:
            parity.extended_by_non_return_site += 1
            _keep(parity, mine, perfs, "longer by a frame that is no return site")
    elif _returns_to_code(perf_rest[0]) is False and _real_callers(
            ours_rest, mine.user[common - 1] if common else None) is not False:
        # perf's next frame is junk (not after a call: libunwind followed a bad rule or
        # a register that is no frame pointer) and ours stop or go on through real
        # return sites.
        parity.perf_junk += 1
    elif _perf_skipped_frames(mine, perfs):
        parity.perf_skipped += 1
    else:
        parity.shorter_or_different += 1
        _keep(parity, mine, perfs, "shorter or different")
        if len(parity.problems) < 5:
            parity.problems.append(f"chain of {perfs.header!r}: ours {mine.user[:8]} perf "
                                   f"{perfs.user[:8]}")
    for (address, symbol, dso), (their_address, their_symbol, their_dso) in zip(
            mine.user[:common], perfs.user[:common], strict=True):
        if address != their_address:
            continue  # the signal trampoline, printed differently on purpose (above)
        parity.frames_compared += 1
        parity.symbols_identical += (symbol, dso) == (their_symbol, their_dso)
    if perfs.marker:
        parity.markers += 1
        # perf's stack reader takes the copy's last word for outside it (addr + 8 >= end),
        # so where the last return address sits there perf prints the marker one frame
        # early; we print that frame (checked above to be a return site), then the marker.
        # Where perf's libunwind failed early for another reason, our longer chain (its
        # frames checked above) is no truncation.
        parity.markers_matched += (mine.marker and len(mine.user) == len(perfs.user)) \
            or len(mine.user) > len(perfs.user)


def _keep(parity: Parity, mine: Block, perfs: Block, why: str) -> None:
    if len(parity.differing) < DIFFERING_KEPT:
        parity.differing.append(side_by_side(mine, perfs, why))

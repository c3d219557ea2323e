"""``sframe record``'s in-kernel walker checked frame by frame against oracles we did not
write (root and a kernel with BPF; skipped with the reason elsewhere).

C workloads are built at test time (gcc -O2 -fomit-frame-pointer, so frame pointers cannot
help): a recursion 100 deep with a frame at every level, distinct call paths into a hot
leaf (one through a function whose CFA is kept in %rbp, one that saves callee-saved
registers), a call through libc (``qsort`` with a comparator that spins, so libc frames sit
in the middle of the stack) and a signal handler. One recursion is built with gas
``--gsframe`` (the binary's own ``.sframe``), the other two without (their tables and
libc's generated from ``.eh_frame``, as ``sframe record`` does).

The recording is read by ``perf script`` (perf 6.1; not our reader), which prints for a
``-g`` style chain the sample's ip, then every caller's raw return address, each as an
offset in its file (the DSO-relative address, even for a non-PIE executable) with
``symbol+offset``; offsets are mapped to virtual addresses with the ELF program headers
(``readelf -l``). For every frame after the first of every sample, ``objdump -d`` of the
binary must show a ``call`` instruction ending exactly at the return address, and where the
call is direct its target must be the function of the next-inner frame (as perf names it:
its ``symbol+offset`` gives the function's start), directly, through a PLT slot (the
target's dynamic symbol in the inner frame's file), or through one direct jump at the
target (a tail call: libc's ``qsort`` jumps to ``qsort_r``). Indirect calls (``call
*%rax``: ``__libc_start_call_main`` into ``main``, ``msort_with_tmp`` into the comparator)
are checked for the call only. Every chain's shape is checked by function names, and the
frames are compared with perf's own DWARF unwinding (``perf record --call-graph dwarf``) of
the same program. Calls and tail jumps through the PLT slot of an IFUNC (libc's
internal memcpy: ``*ABS*+0x...@plt``) are indirect: their target is chosen at run time.

One precise exclusion: a signal handler's return address is the ``sa_restorer``
trampoline (``mov $0xf,%rax; syscall``: rt_sigreturn), pushed by the kernel, not by a call.
It is checked to be that code, and the walker ends the chain there (stop "signal frame":
it does not restore the interrupted context; before it stopped, its frame-pointer guess
there skipped the interrupted frames or read junk), where perf's DWARF unwinding continues
into the interrupted frames: perf's chain is compared up to the trampoline.

The workloads sleep 0.3 s before they compute: a mapping's table is loaded when the
recorder reads its MMAP2 record, so a sample taken in the first milliseconds after exec or
after ld.so maps libc can lack rows (seen: 1 sample in ~15 runs, a chain cut at
``__libc_start_call_main`` or not walked at all). That window is not what this test is
about; the chains are.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.support.oracles import missing, need_binutils, need_perf
from tests.test_record_bpf import REASON, objects

pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SFRAME = [sys.executable, "-m", "pysframe"]
DEPTH = 100  # rec(DEPTH) .. rec(0): DEPTH + 1 frames of rec

RECURSION = r"""
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) long leaf(long n) { volatile long s = 0;
  for (long i = 0; i < n; i++) s += i * i; return s; }
__attribute__((noinline)) long rec(long depth, long n) {
  volatile long keep = depth;                          /* a frame at every level */
  for (long i = 0; i < n / 64; i++) keep += i;         /* samples in rec itself too */
  long r = depth == 0 ? leaf(n) : rec(depth - 1, n);   /* neither is a tail call */
  return r * 3 + keep;
}
int main(int argc, char **argv) { long rounds = argc > 1 ? atol(argv[1]) : 300; long t = 0;
  usleep(300000);  /* STARTUP */
  for (long r = 0; r < rounds; r++) t += rec(DEPTH, 200000); return t == 42; }
"""

MIX = r"""
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
volatile long sink;
__attribute__((noinline)) long hot(long n) { volatile long s = 0;
  for (long i = 0; i < n; i++) s += i ^ (i >> 3); return s; }
__attribute__((noinline)) long path_c(long n) { long r = hot(n); return r + 1; }
__attribute__((noinline)) long path_a(long n) { long r = path_c(n); return r * 2; }
__attribute__((noinline)) long path_b(long n) { long r = hot(n / 2); r += path_c(n / 2);
  return r - 1; }
/* a variable-length array: the CFA is kept in %rbp even without frame pointers */
__attribute__((noinline)) long path_vla(long n, long k) { char buf[k]; memset(buf, 1, k);
  long r = hot(n); return r + buf[k / 2]; }
/* callee-saved registers pushed: the CFA offset changes through the body */
__attribute__((noinline)) long path_saves(long n, long *v) { long a = v[0], b = v[1],
  c = v[2]; long r = path_c(n); sink = a + b + c; return r + a * b + c; }
static int compare(const void *x, const void *y) { hot(20000);
  return *(const int *)x - *(const int *)y; }
/* longer than the 1 ms sampling period: a shorter handler, started just after the
 * timer tick that delivers SIGPROF, could fall between samples all run long */
static void handler(int sig) { (void)sig; sink += hot(1200000); }
int main(int argc, char **argv) { long rounds = argc > 1 ? atol(argv[1]) : 100;
  long v[3] = {1, 2, 3}; int values[64];
  usleep(300000);  /* STARTUP */
  struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = handler;
  sigaction(SIGPROF, &sa, 0);  /* CPU time: as often on a loaded machine */
  struct itimerval it = {{0, 10000}, {0, 10000}}; setitimer(ITIMER_PROF, &it, 0);
  for (long r = 0; r < rounds; r++) {
    sink += path_a(400000); sink += path_b(400000); sink += path_vla(400000, 40 + r % 64);
    sink += path_saves(400000, v);
    for (int i = 0; i < 64; i++) values[i] = (i * 37) % 64;
    qsort(values, 64, sizeof values[0], compare);
  }
  return 0; }
"""

#: The outermost frames of every chain of the main thread, outermost last.
TAIL = ("main", "__libc_start_call_main", "__libc_start_main", "_start")
#: Where the mixed workload enters its leaf, innermost first, up to (not with) main;
#: "libc" stands for one or more frames in libc.
MIX_PATHS = (("hot", "path_c", "path_a"), ("hot", "path_b"), ("hot", "path_c", "path_b"),
             ("hot", "path_vla"), ("libc", "path_vla"), ("hot", "path_c", "path_saves"),
             ("hot", "compare", "libc"))
TRAMPOLINE = "<sigreturn trampoline>"


# --- perf script's text ----------------------------------------------------------------

@dataclass(frozen=True)
class Frame:
    address: int  # as perf prints it: the offset in the file
    name: str  # the symbol, without its version ("[unknown]" when perf has none)
    offset: int | None  # from the symbol's start
    dso: str


FRAME_LINE = re.compile(r"^\s+([0-9a-f]+) (.*) \((.*)\)$")


def parse_script(text: str) -> list[list[Frame]]:
    """Each sample's user frames, innermost first (kernel frames dropped)."""
    samples = []
    for block in text.split("\n\n"):
        frames = []
        for line in block.splitlines()[1:]:
            found = FRAME_LINE.match(line)
            if found is None:
                continue
            address, symbol, dso = found.groups()
            named = re.match(r"^(.*)\+0x([0-9a-f]+)$", symbol)
            name, offset = (named.group(1), int(named.group(2), 16)) if named else (symbol, None)
            frames.append(Frame(int(address, 16), name.split("@")[0], offset, dso))
        user = [frame for frame in frames if not frame.dso.startswith("[kernel")]
        if user:
            samples.append(user)
    return samples


def perf_script(perf: str, data: Path) -> list[list[Frame]]:
    run = subprocess.run([perf, "script", "--no-inline", "-i", str(data)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-500:]
    return parse_script(run.stdout)


# --- a binary as binutils sees it --------------------------------------------------------

INSN = re.compile(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} ?)+)\s*(?:\t(.*))?$")
#: A PLT slot of an IFUNC (``*ABS*+0xRESOLVER@plt``): its target is chosen at run time.
IFUNC_PLT = re.compile(r"^\*ABS\*\+0x[0-9a-f]+@plt$")
IFUNC = -1
#: ``jmp *%reg`` (or through memory, not a PLT slot): a tail call to a target known only at
#: run time (ld.so's _dl_call_libc_early_init ends ``jmp *%rdx`` into libc).
INDIRECT = -2
INDIRECT_JUMP = re.compile(r"^(?:(?:bnd|notrack) )?jmp\s+\*")
PREFIXES = {"notrack", "bnd", "data16", "addr32", "cs", "ds", "rex", "rex.W"}
LABEL = re.compile(r"^([0-9a-f]{16}) <(.+)>:$")
DIRECT = re.compile(r"^(?:\w+ )*?(call|j\w+)\s+([0-9a-f]+) <([^>]+)>")


@dataclass
class Binary:
    path: str
    segments: list[tuple[int, int, int]] = field(default_factory=list)  # offset, vaddr, size
    ends: dict[int, tuple[int, str]] = field(default_factory=dict)  # end -> (start, text)
    starts: list[int] = field(default_factory=list)
    text: dict[int, str] = field(default_factory=dict)
    labels: set[int] = field(default_factory=set)
    symbols: dict[str, set[int]] = field(default_factory=dict)  # name -> values
    #: IFUNC symbols (memset in libc): a call through their PLT slot lands in whichever
    #: implementation the resolver chose (__memset_avx512_unaligned_erms here).
    ifuncs: set[str] = field(default_factory=set)

    def vaddr(self, offset: int) -> int | None:
        for start, vaddr, size in self.segments:
            if start <= offset < start + size:
                return offset - start + vaddr
        return None

    def jumps_from(self, function: int, limit: int = 4096) -> set[int]:
        """Direct jump targets in the function starting at ``function`` (up to the next
        label objdump prints, at most ``limit`` instructions)."""
        targets: set[int] = set()
        index = bisect.bisect_left(self.starts, function)
        for address in self.starts[index:index + limit]:
            if address != function and address in self.labels:
                break
            found = DIRECT.match(self.text[address])
            if found and found.group(1).startswith("j"):
                targets.add(IFUNC if IFUNC_PLT.match(found.group(3))
                            else int(found.group(2), 16))
            elif INDIRECT_JUMP.match(self.text[address]):
                targets.add(INDIRECT)
        return targets


def load_binary(path: str, objdump: str, readelf: str) -> Binary:
    binary = Binary(path)
    headers = subprocess.run([readelf, "-lW", path], capture_output=True, text=True,
                             check=True).stdout
    for line in headers.splitlines():
        fields = line.split()
        if fields and fields[0] == "LOAD" and "E" in fields[6:-1]:
            binary.segments.append((int(fields[1], 16), int(fields[2], 16), int(fields[4], 16)))
    listing = subprocess.run([objdump, "-d", "--insn-width=16", path], capture_output=True,
                             text=True, check=True).stdout
    for line in listing.splitlines():
        found = INSN.match(line)
        if found is None:
            label = LABEL.match(line)
            if label:
                binary.labels.add(int(label.group(1), 16))
            continue
        start, size = int(found.group(1), 16), len(found.group(2).split())
        text = (found.group(3) or "").strip()
        binary.ends[start + size] = (start, text)
        binary.starts.append(start)
        binary.text[start] = text
    binary.starts.sort()
    symbols = subprocess.run([readelf, "-sW", "--dyn-syms", path], capture_output=True,
                             text=True, check=True).stdout
    for line in symbols.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[3] == "FUNC" and fields[6] != "UND":
            binary.symbols.setdefault(fields[7].split("@")[0], set()).add(int(fields[1], 16))
        elif len(fields) >= 8 and fields[3] == "IFUNC" and fields[6] != "UND":
            binary.ifuncs.add(fields[7].split("@")[0])
    return binary


# --- the frame-by-frame check -------------------------------------------------------------

@dataclass
class Tally:
    samples: int = 0
    frames: int = 0
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.kinds.items()))
        return (f"{self.samples} samples, {self.frames} frames after the first checked "
                f"({kinds}), {len(self.failures)} failing")


class Checker:
    def __init__(self, objdump: str, readelf: str) -> None:
        self.objdump, self.readelf = objdump, readelf
        self.binaries: dict[str, Binary] = {}

    def binary(self, path: str) -> Binary:
        if path not in self.binaries:
            self.binaries[path] = load_binary(path, self.objdump, self.readelf)
        return self.binaries[path]

    def start_of(self, frame: Frame, returned: bool) -> int | None:
        """The virtual address of the start of the function of ``frame``: from perf's
        ``symbol+offset``; where perf names none for a return address (``returned``; a
        noreturn call ending a function returns past its end, where perf, which looks the
        return address up unadjusted, finds no symbol), the label objdump prints at or
        before the return address less one."""
        if not frame.dso.startswith("/"):
            return None
        binary = self.binary(frame.dso)
        vaddr = binary.vaddr(frame.address)
        if vaddr is None:
            return None
        if frame.offset is not None:
            return vaddr - frame.offset
        if not returned:
            return None
        labels = sorted(binary.labels)
        index = bisect.bisect_right(labels, vaddr - 1) - 1
        return labels[index] if index >= 0 else None

    def is_trampoline(self, frame: Frame) -> bool:
        """The signal return trampoline (rt_sigreturn), at its first instruction."""
        if not frame.dso.startswith("/"):
            return False
        binary = self.binary(frame.dso)
        vaddr = binary.vaddr(frame.address)
        if vaddr is None or vaddr not in binary.text:
            return False
        index = bisect.bisect_left(binary.starts, vaddr)
        following = binary.text[binary.starts[index + 1]] if index + 1 < len(binary.starts) else ""
        return (re.fullmatch(r"mov\s+\$0xf,%rax", binary.text[vaddr]) is not None
                and following == "syscall")

    def check_frame(self, inner: Frame, frame: Frame, last: bool, inner_returned: bool) -> str:
        """The kind of call that left ``frame``'s return address ("direct", "plt", "tail",
        "indirect", "trampoline"), or a string starting with "FAIL"."""
        if not frame.dso.startswith("/"):
            return f"FAIL: return address {frame.address:#x} in no file ({frame.dso})"
        binary = self.binary(frame.dso)
        vaddr = binary.vaddr(frame.address)
        if vaddr is None:
            return f"FAIL: {frame.address:#x} is in no executable segment of {frame.dso}"
        if frame.offset is not None and frame.name in binary.symbols and not any(
                value + frame.offset == vaddr for value in binary.symbols[frame.name]):
            return f"FAIL: {frame.name}+{frame.offset:#x} is not at {vaddr:#x}"
        if self.is_trampoline(frame):
            # pushed by the kernel for a signal handler: no call; the walk must end here
            if last and inner.name == "handler":
                return "trampoline"
            return f"FAIL: the sigreturn trampoline is not the handler's last frame ({inner})"
        call = binary.ends.get(vaddr)
        if call is None:
            return f"FAIL: no instruction ends at {vaddr:#x} in {frame.dso}"
        mnemonic = [word for word in call[1].split() if word not in PREFIXES][:1]
        if not mnemonic or not mnemonic[0].startswith("call"):
            return f"FAIL: {call[1]!r} at {call[0]:#x} before {vaddr:#x} is not a call"
        direct = DIRECT.match(call[1])
        if direct is None:
            return "indirect"
        target, label = int(direct.group(2), 16), direct.group(3)
        if IFUNC_PLT.match(label):
            return "indirect"  # memcpy and the like in libc: chosen at run time
        start = self.start_of(inner, inner_returned)
        if start is None:
            return f"FAIL: the inner frame {inner} has no function to match {call[1]!r}"
        if label.endswith("@plt"):
            name = label.split("@")[0]
            if not inner.dso.startswith("/"):
                return f"FAIL: {call[1]!r} into {inner}"
            callee = self.binary(inner.dso)
            if name in callee.ifuncs:
                return "indirect"  # the implementation the resolver chose
            entries = callee.symbols.get(name, set())
            if start in entries:
                return "plt"
            if any(start in callee.jumps_from(entry) for entry in entries):
                return "tail"
            return f"FAIL: {call[1]!r} at {call[0]:#x}, but the inner frame is {inner}"
        jumps = binary.jumps_from(target)
        if inner.dso != frame.dso:
            # Only another file's code can be reached so (an indirect jump within the same
            # file is not taken as a tail call: in a stripped file the scan for jumps may
            # run past the callee's end).
            if INDIRECT in jumps:
                return "tail-indirect"
            return f"FAIL: {call[1]!r} at {call[0]:#x} stays in {frame.dso}, inner is {inner}"
        if start == target:
            return "direct"
        if start in jumps:
            return "tail"
        if IFUNC in jumps:  # msort_with_tmp's last memcpy: jmp *ABS*+0x9be70@plt
            return "tail-ifunc"
        return (f"FAIL: {call[1]!r} at {call[0]:#x} calls {target:#x}, but the inner frame "
                f"{inner.name} starts at {start:#x}")

    def check(self, samples: list[list[Frame]], tally: Tally) -> None:
        for frames in samples:
            tally.samples += 1
            for index in range(1, len(frames)):
                tally.frames += 1
                kind = self.check_frame(frames[index - 1], frames[index],
                                        index == len(frames) - 1, index > 1)
                if kind.startswith("FAIL"):
                    tally.failures.append(f"{kind} (frame {index} of {compact(names(frames, self))})")
                else:
                    tally.kinds[kind] += 1


# --- chain shapes --------------------------------------------------------------------------

def names(frames: list[Frame], checker: Checker) -> tuple[str, ...]:
    """Function names, innermost first: runs of libc frames (other than the start-up
    frames of TAIL) as one "libc", the signal trampoline as TRAMPOLINE."""
    out: list[str] = []
    for index, frame in enumerate(frames):
        name = "__libc_start_main" if frame.name == "__libc_start_main_impl" else frame.name
        if index and checker.is_trampoline(frame):
            name = TRAMPOLINE
        elif "/libc.so" in frame.dso and name not in TAIL:
            name = "libc"
            if out and out[-1] == "libc":
                continue
        out.append(name)
    return tuple(out)


def folded(chain: tuple[str, ...]) -> tuple[str, ...]:
    """Runs of one function (a recursion) as one."""
    return tuple(name for name, _ in itertools.groupby(chain))


def compact(chain: tuple[str, ...]) -> str:
    return ", ".join(f"{name} x{len(run)}" if len(run) > 1 else name
                     for name, run in ((name, list(group)) for name, group in
                                       itertools.groupby(chain)))


def recursion_shape(chain: tuple[str, ...]) -> str | None:
    """Why a chain of the recursion is wrong, or None: leaf, rec x (DEPTH + 1), TAIL; or
    rec x N, TAIL with N <= DEPTH + 1 (the sample in rec at some depth); or TAIL (in
    main). Chains starting elsewhere (start-up, exit) are checked frame by frame only."""
    if not chain or chain[0] not in ("leaf", "rec", "main"):
        return None
    recs = chain.count("rec")
    if recs > DEPTH + 1:
        return f"{recs} frames of rec, more than the {DEPTH + 1} there are"
    expected = ("rec",) * recs + TAIL
    if chain[0] == "leaf":  # the leaf is called at the deepest level only
        expected = ("leaf",) + ("rec",) * (DEPTH + 1) + TAIL
    if chain == expected:
        return None
    return f"expected {len(expected)} frames ({compact(expected)}), got {compact(chain)}"


def mix_shape(chain: tuple[str, ...]) -> str | None:
    """Why a chain of the mixed workload is wrong, or None: a path of MIX_PATHS (or its
    outer part, where the sample hit a caller) and TAIL; hot, handler, the trampoline."""
    if "handler" in chain:
        at = chain.index("handler")
        if chain[:at] in ((), ("hot",)) and chain[at + 1:] == (TRAMPOLINE,):
            return None
        return f"a signal handler's chain: {compact(chain)}"
    if chain[-len(TAIL):] != TAIL:
        mine = set(itertools.chain(*MIX_PATHS)) - {"libc"}
        if "main" in chain or set(chain) & mine:
            return f"{compact(chain)} does not end in {compact(TAIL)}"
        return None  # start-up or exit
    body = _after_lazy_binding(chain[:-len(TAIL)])
    if not body or any(path[-len(body):] == body for path in MIX_PATHS):
        return None
    return f"{compact(chain)} is no path of the program"


def _after_lazy_binding(body: tuple[str, ...]) -> tuple[str, ...]:
    """``body`` without the dynamic linker's frames of a first call through the PLT (the
    no-PIE build binds lazily: ``_dl_runtime_resolve_*`` and the lookup it calls, once
    per symbol at start-up; perf's DWARF chain was sampled there in one CI run)."""
    for at, name in enumerate(body):
        if name.startswith("_dl_runtime_resolve"):
            return body[at + 1:]
    return body


# --- the workloads, recorded ---------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    source: str
    flags: tuple[str, ...]
    rounds: str
    shape: object


WORKLOADS = {
    "recursion": Workload(RECURSION, (f"-DDEPTH={DEPTH}",), "5000", recursion_shape),
    "recursion-gsframe": Workload(RECURSION, (f"-DDEPTH={DEPTH}",), "5000", recursion_shape),
    "mix-no-pie": Workload(MIX, ("-no-pie",), "300", mix_shape),
}


@pytest.fixture(scope="module")
def checker() -> Checker:
    return Checker(need_binutils("objdump", "2.47.50"), need_binutils("readelf", "2.47.50"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("frames-cache")


def build(name: str, workload: Workload, directory: Path) -> Path:
    source = directory / f"{name}.c"
    source.write_text(workload.source)
    binary = directory / name
    flags = list(workload.flags)
    if name.endswith("gsframe"):  # its own .sframe, from gas 2.47.50
        gas = Path(need_binutils("as", "2.47.50"))
        driver = gas.parent.parent / "gcc-B" / "2.47.50" / "x86_64"
        if not (driver / "as").exists():
            missing(f"gcc's -B directory for binutils 2.47.50 ({driver})",
                    "tools/install-oracles.sh")
        flags += [f"-B{driver}/", "-Wa,--gsframe"]
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", *flags, "-o", str(binary),
                    str(source)], check=True)
    return binary


def ends_at_start(frames: list[Frame]) -> bool:
    return bool(frames) and frames[-1].name == "_start"


#: Each workload's binary and our chains, recorded once for both tests.
RECORDED: dict[str, tuple[Path, list[list[Frame]]]] = {}


def recorded(name: str, directory: Path, checker: Checker, cache: Path
             ) -> tuple[Path, list[list[Frame]]]:
    if name not in RECORDED:
        perf = need_perf()
        binary = build(name, WORKLOADS[name], directory)
        if name.endswith("gsframe"):
            headers = subprocess.run([checker.readelf, "-lW", str(binary)],
                                     capture_output=True, text=True, check=True).stdout
            assert "GNU_SFRAME" in headers  # the walker uses the binary's own table
        data = directory / "walked.data"
        env = dict(os.environ, XDG_CACHE_HOME=str(cache))
        run = subprocess.run([*SFRAME, "record", "-o", str(data), "--", str(binary),
                              WORKLOADS[name].rounds], capture_output=True, text=True,
                             env=env, timeout=300)
        assert run.returncode == 0, run.stderr
        RECORDED[name] = binary, perf_script(perf, data)
    return RECORDED[name]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_frame_the_walker_records_follows_a_call(
        tmp_path: Path, name: str, checker: Checker, cache: Path) -> None:
    _, ours = recorded(name, tmp_path, checker, cache)
    tally = Tally()
    checker.check(ours, tally)
    shape = WORKLOADS[name].shape
    assert callable(shape)
    shapes = [(problem, frames) for frames in ours
              if (problem := shape(names(frames, checker))) is not None]
    deep = sum(1 for frames in ours if len(frames) >= DEPTH + 6)
    print(f"\n{name}: {tally}; {len(shapes)} chains of a wrong shape; {deep} chains of "
          f"{DEPTH + 6} frames")
    assert not tally.failures, "\n".join(tally.failures[:20])
    assert not shapes, "\n".join(problem for problem, _ in shapes[:20])
    assert tally.samples > 300
    if name.startswith("recursion"):
        # Samples in leaf are 106 frames deep: leaf's 200,000 iterations against rec's 101
        # x 3,125 make ~39% of the samples (35-40% alone, 27% once in a full CI run: the
        # same number of samples, none failing, fewer in leaf; this VM's timing varies).
        # A walker that dropped or cut the deep chains would leave far fewer.
        assert deep > 0.2 * tally.samples
    else:
        assert tally.kinds["plt"] + tally.kinds["tail"] > 10  # main -> qsort -> qsort_r
        assert tally.kinds["trampoline"] >= 1  # the signal handler was sampled


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_the_walked_chains_agree_with_perfs_dwarf_unwinding(
        tmp_path: Path, name: str, checker: Checker, cache: Path) -> None:
    """A second oracle: perf's own DWARF unwinding of the same program (another run)."""
    perf = need_perf()
    binary, ours = recorded(name, tmp_path, checker, cache)
    theirs: list[list[Frame]] = []
    # Two runs of perf: a chain a few percent of the samples hold was missing from one run
    # of perf's now and then (seen in CI and here; ours and perf's next run had it).
    for attempt in range(2):
        dwarf_data = tmp_path / f"dwarf{attempt}.data"
        run = subprocess.run([perf, "record", "-q", "--call-graph", "dwarf", "-F", "999", "-o",
                              str(dwarf_data), "--", str(binary),
                              str(int(WORKLOADS[name].rounds) // 2)],
                             capture_output=True, text=True, timeout=300)
        if run.returncode == -6 and "build-id.c" in run.stderr and objects()[0]:
            # perf 6.1 aborts (BUG_ON at util/build-id.c:1010, then "stack smashing") while
            # any process has one of our BPF programs loaded: another recording runs at once.
            pytest.skip("perf 6.1 aborts while another process has a BPF program loaded")
        assert run.returncode == 0, run.stderr[-500:]
        theirs += [normalized(frames, checker) for frames in perf_script(perf, dwarf_data)]
    compare_with_dwarf(ours, theirs, checker, WORKLOADS[name].shape, name)


def normalized(frames: list[Frame], checker: Checker) -> list[Frame]:
    """perf's DWARF chain as ours are printed: callers at their return address (perf prints
    the return address less one), cut after the signal trampoline (where it goes on into
    the interrupted frames, which our walker does not)."""
    out = frames[:1]
    for frame in frames[1:]:
        frame = Frame(frame.address + 1, frame.name,
                      None if frame.offset is None else frame.offset + 1, frame.dso)
        if frame.name == "[unknown]" and checker.is_trampoline(frame):
            frame = Frame(frame.address, "__restore_rt", 0, frame.dso)
        out.append(frame)
        if checker.is_trampoline(frame):
            break
    return out


def _expected_in_ours(start: tuple[str, ...], theirs_chains: collections.Counter[
        tuple[str, ...]], scale: float) -> float:
    """How many of our samples should begin with ``start`` (a chain perf stopped early
    in), from how many of perf's begin with it: a start perf met once in ~1,000 samples
    (CI's mix-no-pie once had one sample whose chain was a libc leaf alone) may be in
    none of ours by chance, as with the commonness rules below."""
    return scale * sum(count for chain, count in theirs_chains.items()
                       if chain[:len(start)] == start)


def compare_with_dwarf(ours: list[list[Frame]], theirs: list[list[Frame]], checker: Checker,
                       shape: object, name: str) -> None:
    assert callable(shape)
    tally = Tally()
    wrong: set[int] = set()  # perf's chains with a frame of its own error (bounded below)
    for position, frames in enumerate(theirs):  # the checks hold for perf's frames too
        failures = len(tally.failures)
        checker.check([frames], tally)
        if len(tally.failures) > failures:
            wrong.add(position)
    ours_chains = collections.Counter(folded(names(frames, checker)) for frames in ours)
    theirs_chains = collections.Counter(folded(names(frames, checker)) for frames in theirs)
    ours_total, theirs_total = max(len(ours), 1), max(len(theirs), 1)
    short = [frames for frames in theirs if not ends_at_start(frames)
             and not checker.is_trampoline(frames[-1])]
    problems = []
    for position, frames in enumerate(theirs):
        if position in wrong:
            # Its error, not a chain to walk: CI's mix-no-pie once had perf's chain "libc,
            # [unknown]", a libc leaf under a return address that follows no call.
            continue
        chain = names(frames, checker)
        if ends_at_start(frames) or checker.is_trampoline(frames[-1]):
            problem = shape(chain)
            if problem is not None:
                problems.append(f"perf's DWARF chain: {problem}")
        elif (_expected_in_ours(folded(chain), theirs_chains, ours_total / theirs_total) >= 5
              and not any(mine[:len(folded(chain))] == folded(chain) for mine in ours_chains)):
            problems.append(f"perf's DWARF chain {compact(chain)} stopped early, and is no "
                            "prefix of any chain of ours")
    # A chain common in one recording (seen 10 times in ours, 5 in perf's, of about 1,000
    # and 500 samples) is in the other one too, or a prefix of one (recursions folded:
    # each chain's depth is checked by its shape).
    # Judged only where the other recording should hold it several times, by its size
    # (a loaded machine gives one tool fewer samples than the other).
    for mine, count in ours_chains.items():
        expected = count * theirs_total / ours_total
        if TRAMPOLINE in mine:
            # A signal handler's chain: perf's DWARF unwinding there is not the oracle (it
            # was missing from both of perf's runs in CI); the walker's trampoline frames
            # are checked against the code by test_every_frame_the_walker_records_follows_a_call.
            continue
        if count >= 10 and expected >= 5 and mine not in theirs_chains and not any(
                chain == mine[:len(chain)] for chain in theirs_chains):
            problems.append(f"{compact(mine)} ({count} of ours, ~{expected:.0f} expected in "
                            "perf's) never unwound by perf")
    for chain, count in theirs_chains.items():
        expected = count * ours_total / theirs_total
        if count >= 5 and expected >= 5 and chain not in ours_chains and not any(
                mine[:len(chain)] == chain for mine in ours_chains):
            problems.append(f"{compact(chain)} ({count} of perf's) never walked by us")
    print(f"{name}, perf --call-graph dwarf: {tally}; {len(short)} chains stopped early; "
          f"{len(theirs_chains)} distinct chains, {len(ours_chains)} of ours")
    # perf's DWARF unwinding is the reference, not the truth: once in 905 samples (CI) its
    # chain for a libc leaf under hot() gave a return address in hot() that follows no
    # call (0x4013ed). Such frames are its own errors, allowed in at most 1% of its chains.
    assert len(tally.failures) <= len(theirs) // 100, "\n".join(tally.failures[:20])
    assert not problems, "\n".join(problems[:20])

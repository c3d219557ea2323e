"""DwarfNames against gdb: the names ``bt`` prints, inline frames included, frame for frame.

Small C (and C++) programs are compiled at test time, run until they block in a system
call, and gdb attaches and prints the backtrace and every frame's pc. For each real frame
(the frames gdb prints with the same pc: inline frames, then their function) our
``frames_at`` of that pc (pc - 1 for callers), made link-time with the mapping's load bias,
must give gdb's names in gdb's order.
"""

from __future__ import annotations

import itertools
import os
import platform
import random
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection

from pysframe.symbolize.dwarf import DwarfNames

GCC = shutil.which("gcc")
GXX = shutil.which("g++")
GDB = shutil.which("gdb")
X86_64 = platform.machine() == "x86_64"

needs_tools = pytest.mark.skipif(GCC is None or GDB is None or not X86_64,
                                 reason="needs gcc and gdb on x86-64 Linux")

SYS_WRITE = 1
SYS_PAUSE = 34

INLINE_C = r"""
#include <unistd.h>
volatile int sink;
__attribute__((noinline, noipa)) void block_here(int x) { sink = x; for (;;) pause(); }
int renamed_fn(int x) __asm__("renamed_impl");
__attribute__((noinline, noipa)) int renamed_fn(int x) { block_here(x); sink++; return sink; }
static inline __attribute__((always_inline)) int level3(int x)
{ int r = renamed_fn(x + 1); sink += r; return r; }
static inline __attribute__((always_inline)) int level2(int x)
{ int r = level3(x * 2); sink += r; return r; }
static inline __attribute__((always_inline)) int level1(int x)
{ int r = level2(x + 3); sink += r; return r; }
static __attribute__((noinline)) int with_nested(int x) {
    __attribute__((noinline)) int nested(int y) { int r = level1(y + x); sink += r; return r; }
    int r = nested(x); sink += r; return r;
}
static __attribute__((noinline)) int outer(int x) { int r = with_nested(x); sink += r; return r; }
int main(int argc, char **argv) { (void)argv; int r = outer(argc); sink += r; return r; }
"""

# Frame 0 exactly at the start of two nested inlined blocks (a one-instruction loop):
# attached, gdb shows both inline frames (it hides inline frames at their entry only
# when it stops at a breakpoint or a step).
SPIN_C = r"""
volatile int sink;
static inline __attribute__((always_inline)) void spin(void) { for (;;) __asm__ volatile(""); }
static inline __attribute__((always_inline)) void spin2(int x) { sink = x; spin(); }
__attribute__((noinline)) void spinner(int x) { spin2(x); }
int main(int argc, char **argv) { (void)argv; spinner(argc); return 0; }
"""

WRITE_C = r"""
#include <stdio.h>
int main(void) { for (;;) printf("%s %d\n", "filling a pipe nobody reads", 12345); }
"""

INLINE_CXX = r"""
#include <unistd.h>
volatile int sink;
namespace outer_ns {
namespace {
__attribute__((noinline)) void block_here(int x) { sink = x; for (;;) pause(); }
}
struct Widget {
    int value;
    __attribute__((noinline)) int run(int x) const;
    template <typename T> inline __attribute__((always_inline)) int twice(T x) const
    { block_here(int(x) * 2); sink += 1; return value; }
    __attribute__((noinline)) int operator+(int x) const
    { int r = twice<long>(x); sink += r; return r; }
};
template <typename F> struct Holder {
    const Widget *widget;
    // gdb cannot parse "Holder<int (int)>::apply(int) const": it prints it whole.
    __attribute__((noinline)) int apply(int x) const { int r = *widget + x; sink += r; return r; }
};
int Widget::run(int x) const {
    auto call = [this](int y) __attribute__((noinline)) {
        Holder<int (int)> holder{this}; int r = holder.apply(y); sink += r; return r; };
    int r = call(x + value); sink += r; return r;
}
}
int main(int argc, char **) { outer_ns::Widget w{argc}; int r = w.run(argc); sink += r; return r; }
"""


# Tail calls (each thread blocks under its own chain; main blocks in pthread_join):
# * a() tail-calls b(): gdb shows a tail-call frame for a.
# * e -> f -> (g1 | g2) -> h -> b2, all tail calls: two paths; gdb keeps what they share,
#   h (innermost) and e, and drops f, g1, g2. Called from f: only h.
# * even/odd tail-call each other and b3: paths of every length, nothing common, no frame.
# * c() tail-calls b4() from an inlined wrap(): the tail-call frame is named wrap.
# * s() tail-calls b6() but is split hot/cold: main's call site has two target addresses
#   and gdb's search fails on the cold one: no frame.
# * t() tail-calls k(), which m1() inlines: t's call site names k's abstract instance,
#   which has no address for gdb: no frame (not even for k, which tail-calls b8).
# * pthread_cond_wait and pthread_join: libc's tail calls (with libc6-dbg), reached through
#   a call site naming a declaration (a minimal-symbol lookup across files for main's).
TAIL_C = r"""
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
volatile int sink;
volatile int stop;
#define NI __attribute__((noinline, noclone))
NI void b(int x) { sink = x; while (!stop) pause(); }
NI void a(int x) { sink = x + 1; b(x * 2); }
NI void b2(int x) { sink = x; while (!stop) pause(); }
NI void h(int x) { sink = x + 3; b2(x - 1); }
NI void g1(int x) { sink = x + 4; h(x * 3); }
NI void g2(int x) { sink = x + 5; h(x * 5); }
NI void f(int x) { sink = x; if (x & 1) g1(x + 7); else g2(x + 9); }
NI void e(int x) { sink = x * 7; f(x + 11); }
NI void b3(int x) { sink = x; while (!stop) pause(); }
NI void odd(int x);
NI void even(int x) { sink = x; if (x > 0) odd(x - 1); else b3(x); }
NI void odd(int x) { sink = x + 1; if (x > 0) even(x - 1); else b3(x + 2); }
NI void b4(int x) { sink = x; while (!stop) pause(); }
static inline __attribute__((always_inline)) void wrap(int x) { sink = x + 2; b4(x * 3); }
NI void c(int x) { sink = x; wrap(x + 1); }
NI void b6(int x) { sink = x; while (!stop) pause(); }
NI void s(int x) { sink = x; if (__builtin_expect(x == 12345, 0)) { sink = 3; abort(); } b6(x + 1); }
NI void b8(int x) { sink = x; while (!stop) pause(); }
void k(int x) {
    for (int i = 0; i < 40; i++) { sink += i * x; if (sink == 77) sink = i; sink ^= 3 * x; }
    b8(x * 2);
}
NI void t(int x) { sink = x; k(x + 3); }
__attribute__((flatten)) NI void m1(int x) { sink = x; k(x); sink++; }
NI void b5(int x) { sink = x; }
void (*volatile pointer)(int) = b5;
NI void indirect(int x) { pointer(x); sink++; }
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static void *waiter(void *arg) {
    (void)arg; pthread_mutex_lock(&lock);
    while (!stop) pthread_cond_wait(&never, &lock);
    return NULL;
}
static void *run_a(void *arg) { a((int)(long)arg); return NULL; }
static void *run_e(void *arg) { e((int)(long)arg); return NULL; }
static void *run_f(void *arg) { f((int)(long)arg); return NULL; }
static void *run_even(void *arg) { even((int)(long)arg); return NULL; }
static void *run_c(void *arg) { c((int)(long)arg); return NULL; }
static void *run_s(void *arg) { s((int)(long)arg); return NULL; }
static void *run_t(void *arg) { t((int)(long)arg); return NULL; }
int main(int argc, char **argv) {
    (void)argv;
    void *(*bodies[])(void *) = {waiter, run_a, run_e, run_f, run_even, run_c, run_s, run_t};
    pthread_t threads[8];
    indirect(argc);
    if (argc > 5)
        m1(argc);
    for (int i = 0; i < 8; i++)
        pthread_create(&threads[i], NULL, bodies[i], (void *)(long)(argc + i));
    pthread_join(threads[0], NULL);
    return 0;
}
"""
TAIL_THREADS = 9
SYS_FUTEX = 202


# ----------------------------------------------------------------------------- helpers


def _compile(tmp_path: Path, source: str, name: str, flags: list[str],
             compiler: str | None = GCC) -> Path:
    assert compiler is not None
    suffix = ".cc" if compiler == GXX else ".c"
    path = tmp_path / (name + suffix)
    path.write_text(source)
    out = tmp_path / name
    result = subprocess.run([compiler, *flags, "-o", str(out), str(path)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"{compiler} {' '.join(flags)} failed: {result.stderr.strip()[:200]}")
    return out


class Programs:
    """Test programs started until they block (killed at the end of the test)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, program: Path, syscall: int | None, pipe_stdout: bool = False) -> int:
        """Run ``program`` until it sits in system call number ``syscall`` (None: a busy
        loop, given time to get there); its pid."""
        process = subprocess.Popen([str(program)], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE if pipe_stdout else None)
        self.started.append(process)
        if syscall is None:
            time.sleep(0.3)
            return process.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                fields = Path(f"/proc/{process.pid}/syscall").read_text().split()
            except OSError:
                fields = []
            if fields and fields[0] == str(syscall):
                time.sleep(0.05)
                return process.pid
            time.sleep(0.01)
        pytest.skip("the test program did not block in the expected system call")

    def start_threads(self, program: Path, tasks: int, syscalls: set[int]) -> int:
        """Run ``program`` until it has ``tasks`` threads, each in one of ``syscalls``."""
        process = subprocess.Popen([str(program)], stdin=subprocess.DEVNULL)
        self.started.append(process)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = []
            try:
                for task in os.listdir(f"/proc/{process.pid}/task"):
                    fields = Path(f"/proc/{process.pid}/task/{task}/syscall").read_text().split()
                    states.append(int(fields[0]) if fields and fields[0].isdigit() else -1)
            except OSError:
                states = []
            if len(states) == tasks and all(state in syscalls for state in states):
                time.sleep(0.05)
                return process.pid
            time.sleep(0.01)
        pytest.skip("the test program's threads did not block in the expected system calls")

    def stop(self) -> None:
        for process in self.started:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


@pytest.fixture
def programs() -> Iterator[Programs]:
    running = Programs()
    yield running
    running.stop()


@dataclass
class GdbFrame:
    index: int
    name: str
    pc: int
    has_source: bool


_FRAME = re.compile(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(.*)$")
_WHERE = re.compile(r" (at \S+:\d+|from \S+)$")
_PC = re.compile(r"^\$\d+ = (0x[0-9a-f]+)$")


def _frame_name(text: str) -> tuple[str, bool] | None:
    """(function name, has a source line) of a ``bt`` line after ``#N  [0x... in ]``: the
    name is what precedes the argument list, the last balanced ``(...)`` (names such as
    ``H<int (int)>::run(int) const`` contain parentheses and spaces)."""
    where = _WHERE.search(text)
    has_source = where is not None and where.group(1).startswith("at ")
    if where is not None:
        text = text[:where.start()]
    if not text.endswith(")"):
        return None
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        if text[index] == ")":
            depth += 1
        elif text[index] == "(":
            depth -= 1
            if depth == 0:
                return (text[:index - 1], has_source) if text[index - 1] == " " else None
    return None


def _gdb_frames(pid: int) -> list[GdbFrame]:
    assert GDB is not None
    result = subprocess.run(
        [GDB, "-batch", "-nx", "-p", str(pid), "-ex", "set pagination off",
         "-ex", "set width 0", "-ex", "bt", "-ex", "frame apply all -q p/x $pc"],
        capture_output=True, text=True, timeout=60)
    names: list[tuple[int, str, bool]] = []
    pcs: list[int] = []
    for line in result.stdout.splitlines():
        frame = _FRAME.match(line)
        parsed = _frame_name(frame.group(2)) if frame else None
        if frame and parsed:
            names.append((int(frame.group(1)), *parsed))
            continue
        pc = _PC.match(line)
        if pc:
            pcs.append(int(pc.group(1), 16))
    if not names or len(names) != len(pcs):
        pytest.skip(f"gdb could not attach or print the frames: {result.stderr[-300:]}")
    return [GdbFrame(index, name, pc, source)
            for (index, name, source), pc in zip(names, pcs, strict=True)]


def _maps(pid: int) -> list[tuple[int, int, int, str]]:
    rows = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            start, end = (int(text, 16) for text in parts[0].split("-"))
            rows.append((start, end, int(parts[2], 16), parts[5]))
    return rows


def _link_address(maps: list[tuple[int, int, int, str]], pc: int) -> tuple[str, int] | None:
    """(file, link-time address) of a runtime pc, through the file's PT_LOAD segments."""
    for start, end, offset, path in maps:
        if start <= pc < end:
            file_offset = pc - start + offset
            with open(path, "rb") as handle:
                for segment in ELFFile(handle).iter_segments():
                    if segment["p_type"] != "PT_LOAD":
                        continue
                    if segment["p_offset"] <= file_offset < \
                            segment["p_offset"] + segment["p_filesz"]:
                        return path, file_offset - segment["p_offset"] + segment["p_vaddr"]
    return None


def _groups(frames: list[GdbFrame]) -> list[list[GdbFrame]]:
    """gdb's frames grouped by real frame: inline frames share their function's pc."""
    groups: list[list[GdbFrame]] = []
    for frame in frames:
        if groups and groups[-1][0].pc == frame.pc:
            groups[-1].append(frame)
        else:
            groups.append([frame])
    return groups


def _compare(pid: int) -> list[tuple[list[str], list[str] | None]]:
    """(gdb's names, ours) for every real frame of ``pid``; asserts they agree wherever
    the frame's file has DWARF for it."""
    frames = _gdb_frames(pid)
    maps = _maps(pid)
    opened: dict[str, DwarfNames | None] = {}
    pairs = []
    for number, group in enumerate(_groups(frames)):
        lookup = group[0].pc if number == 0 else group[0].pc - 1
        found = _link_address(maps, lookup)
        assert found is not None, f"no mapping for {lookup:#x}"
        path, address = found
        if path not in opened:
            opened[path] = DwarfNames.open(path, None)
        names = opened[path]
        ours = names.frames_at(address) if names is not None else None
        expected = [frame.name for frame in group]
        pairs.append((expected, ours))
        if ours is None:
            # gdb named it from the ELF symbols (no source line): no DWARF function there.
            assert len(group) == 1 and not group[0].has_source, (expected, path, hex(address))
        else:
            assert ours == expected, (path, hex(address))
    return pairs


TAILCALL_FRAME = 3          # gdb.TAILCALL_FRAME
INLINE_FRAME = 2

_THREADS_SCRIPT = r"""
import gdb
for thread in sorted(gdb.selected_inferior().threads(), key=lambda t: t.num):
    thread.switch()
    print("@thread %d" % thread.num)
    gdb.execute("bt")
    frame = gdb.newest_frame()
    while frame is not None:
        print("@frame %d %#x" % (frame.type(), frame.pc()))
        frame = frame.older()
"""


@dataclass
class ThreadFrame:
    name: str
    kind: int
    pc: int
    has_source: bool


def _gdb_threads(pid: int, tmp_path: Path) -> list[list[ThreadFrame]]:
    """Every thread's ``bt`` (names) and frame types and pcs (gdb's Python API)."""
    assert GDB is not None
    script = tmp_path / "threads.py"
    script.write_text(_THREADS_SCRIPT)
    result = subprocess.run(
        [GDB, "-batch", "-nx", "-p", str(pid), "-ex", "set pagination off",
         "-ex", "set width 0", "-ex", f"source {script}"],
        capture_output=True, text=True, timeout=60)
    threads: list[list[ThreadFrame]] = []
    for part in result.stdout.split("@thread ")[1:]:
        names: list[tuple[str, bool]] = []
        kinds: list[tuple[int, int]] = []
        for line in part.splitlines():
            frame = _FRAME.match(line)
            parsed = _frame_name(frame.group(2)) if frame else None
            if parsed:
                names.append(parsed)
            elif line.startswith("@frame "):
                kind, pc = line.split()[1:]
                kinds.append((int(kind), int(pc, 16)))
        if not names or len(names) != len(kinds):
            pytest.skip(f"gdb could not print a thread's frames: {result.stderr[-300:]}")
        threads.append([ThreadFrame(name, kind, pc, source)
                        for (name, source), (kind, pc) in zip(names, kinds, strict=True)])
    if not threads:
        pytest.skip(f"gdb could not attach: {result.stderr[-300:]}")
    return threads


class Files:
    """DwarfNames of a process's files, and gdb's minimal-symbol lookup across them."""

    def __init__(self, pid: int) -> None:
        self.maps = _maps(pid)
        self.order = list(dict.fromkeys(path for *_, path in self.maps))
        self.opened: dict[str, DwarfNames | None] = {}

    def names(self, path: str) -> DwarfNames | None:
        if path not in self.opened:
            self.opened[path] = DwarfNames.open(path, None)
        return self.opened[path]

    def link(self, pc: int) -> tuple[str, int]:
        found = _link_address(self.maps, pc)
        assert found is not None, f"no mapping for {pc:#x}"
        return found

    def resolve(self, name: str) -> tuple[str, int] | None:
        """gdb's ``lookup_minimal_symbol``: the first global symbol in load order, else
        the first local one."""
        local: tuple[str, int] | None = None
        for path in self.order:
            names = self.names(path)
            found = names.symbol_address(name) if names is not None else None
            if found is not None:
                if found[1]:
                    return path, found[0]
                local = local or (path, found[0])
        return local

    def tail_frames(self, callee_pc: int, return_address: int) -> list[tuple[str, str, int]]:
        """Our tail-call frames (name, file, link-time pc) between a callee frame looked
        up at ``callee_pc`` and its caller, which returns to ``return_address``."""
        callee_path, callee_address = self.link(callee_pc)
        caller_path, caller_address = self.link(return_address)
        caller = self.names(caller_path)
        callee = self.names(callee_path)
        if caller is None or callee is None:
            return []
        targets = caller.call_site_targets(caller_address)
        target_path = caller_path
        if isinstance(targets, str):
            found = self.resolve(targets)
            if found is None:
                return []
            target_path, address = found
            targets = [address]
        entry = callee.function_entry(callee_address)
        if targets is None or target_path != callee_path or entry is None:
            return []
        chain = callee.tail_call_chain(targets, entry)
        assert chain is not None, (callee_path, targets, hex(entry))
        return [(name, callee_path, pc) for name, pc in chain]


def _compare_with_tail_calls(pid: int, tmp_path: Path) -> list[tuple[list[str], list[str]]]:
    """For every thread, our frames (``frames_at`` of gdb's real frames, where the file
    has DWARF for them, with our tail-call frames inserted between them) must be gdb's
    ``bt`` frames exactly, names and tail-call pcs. Returns (all names, tail-call frame
    names) per thread."""
    files = Files(pid)
    threads = []
    for frames in _gdb_threads(pid, tmp_path):
        real = [GdbFrame(index, frame.name, frame.pc, frame.has_source)
                for index, frame in enumerate(frames) if frame.kind != TAILCALL_FRAME]
        expected = [frame.name for frame in frames]
        expected_tails = [(frame.name, *files.link(frame.pc)) for frame in frames
                          if frame.kind == TAILCALL_FRAME]
        ours: list[str] = []
        our_tails: list[tuple[str, str, int]] = []
        groups = _groups(real)
        for number, group in enumerate(groups):
            lookup = group[0].pc if number == 0 else group[0].pc - 1
            path, address = files.link(lookup)
            names = files.names(path)
            found = names.frames_at(address) if names is not None else None
            if found is None:
                assert len(group) == 1 and not group[0].has_source, (path, hex(address))
                found = [group[0].name]
            ours += found
            if number + 1 < len(groups):
                tails = files.tail_frames(lookup, groups[number + 1][0].pc)
                ours += [name for name, _, _ in tails]
                our_tails += tails
        assert ours == expected
        assert our_tails == expected_tails
        threads.append((expected, [name for name, _, _ in expected_tails]))
    return threads


# ----------------------------------------------------------------------------- gdb parity


@needs_tools
@pytest.mark.parametrize("flags", [["-gdwarf-5"], ["-gdwarf-4"], ["-gdwarf-5", "-gz=zlib"]],
                         ids=["dwarf5", "dwarf4", "dwarf5-zlib"])
def test_inline_chain_matches_gdb(tmp_path: Path, programs: Programs, flags: list[str]
                                  ) -> None:
    program = _compile(tmp_path, INLINE_C, "inline", ["-O2", *flags])
    pid = programs.start(program, SYS_PAUSE)
    pairs = _compare(pid)
    ours = [name for _, names in pairs for name in names or ()]
    # The program's own frames all came from DWARF, inline ones included.
    for name in ("block_here", "renamed_impl", "level3", "level2", "level1", "nested",
                 "with_nested", "outer", "main"):
        assert name in ours
    chain = next(names for expected, names in pairs if "level3" in expected)
    assert chain == ["level3", "level2", "level1", "nested"]


@needs_tools
def test_frame_zero_at_inline_entry_matches_gdb(tmp_path: Path, programs: Programs) -> None:
    program = _compile(tmp_path, SPIN_C, "spin", ["-O2", "-g"])
    pid = programs.start(program, None)
    pairs = _compare(pid)
    assert pairs[0][1] == ["spin", "spin2", "spinner"]


@needs_tools
def test_cplusplus_names_match_gdb(tmp_path: Path, programs: Programs) -> None:
    if GXX is None:
        pytest.skip("needs g++")
    program = _compile(tmp_path, INLINE_CXX, "inline_cxx", ["-O2", "-g"], GXX)
    pid = programs.start(program, SYS_PAUSE)
    ours = [name for _, names in _compare(pid) for name in names or ()]
    for name in ("outer_ns::(anonymous namespace)::block_here", "outer_ns::Widget::twice<long>",
                 "outer_ns::Widget::operator+", "outer_ns::Holder<int (int)>::apply(int) const",
                 "operator()", "outer_ns::Widget::run", "main"):
        assert name in ours


@needs_tools
def test_dwz_supplementary_file_matches_gdb(tmp_path: Path, programs: Programs) -> None:
    """DWARF moved by dwz into a supplementary file (.gnu_debugaltlink, a relative path):
    abstract origins and names are DW_FORM_GNU_ref_alt / DW_FORM_GNU_strp_alt."""
    if shutil.which("dwz") is None:
        pytest.skip("needs dwz")
    first = _compile(tmp_path, INLINE_C, "first", ["-O2", "-g"])
    second = _compile(tmp_path, INLINE_C, "second", ["-O2", "-g", "-DVARIANT=1"])
    result = subprocess.run(["dwz", "-m", "common.debug", first.name, second.name],
                            cwd=tmp_path, capture_output=True, text=True)
    if result.returncode != 0 or not (tmp_path / "common.debug").exists():
        pytest.skip(f"dwz made no supplementary file: {result.stderr.strip()[:200]}")
    with open(first, "rb") as handle:
        assert ELFFile(handle).get_section_by_name(".gnu_debugaltlink") is not None
    pid = programs.start(first, SYS_PAUSE)
    pairs = _compare(pid)
    chain = next(names for expected, names in pairs if "level3" in expected)
    assert chain == ["level3", "level2", "level1", "nested"]


@needs_tools
def test_libc_write_frames_match_gdb(tmp_path: Path, programs: Programs) -> None:
    """printf into a full pipe: libc's frames (asm-renamed ``__GI___libc_write``, static
    ``new_do_write``, ``outstring_func`` inlined into ``__vfprintf_internal``, an inlined
    ``_IO_new_file_xsputn`` in the out-of-line one) need the libc debug file (Debian's
    libc6-dbg)."""
    program = _compile(tmp_path, WRITE_C, "writer", ["-O2", "-g"])
    pid = programs.start(program, SYS_WRITE, pipe_stdout=True)
    libcs = {path for _, _, _, path in _maps(pid) if os.path.basename(path).startswith("libc.so")}
    if not libcs or any(DwarfNames.open(path, None) is None for path in libcs):
        pytest.skip("no DWARF for libc (libc6-dbg is not installed)")
    pairs = _compare(pid)
    ours = [name for _, names in pairs for name in names or ()]
    assert ours[0] == "__GI___libc_write"
    assert "main" in ours


@needs_tools
@pytest.mark.parametrize("flags", [["-gdwarf-5"], ["-gdwarf-4"]], ids=["dwarf5", "dwarf4"])
def test_tail_call_frames_match_gdb(tmp_path: Path, programs: Programs, flags: list[str]
                                    ) -> None:
    program = _compile(tmp_path, TAIL_C, "tail", ["-O2", "-pthread", *flags])
    pid = programs.start_threads(program, TAIL_THREADS, {SYS_PAUSE, SYS_FUTEX})
    threads = _compare_with_tail_calls(pid, tmp_path)

    def tails_under(name: str) -> list[str]:
        found = [tails for names, tails in threads if name in names]
        assert len(found) == 1, name
        return found[0]

    assert tails_under("b") == ["a"]
    assert tails_under("run_e") == ["h", "e"]       # f, g1, g2: not on every path
    assert tails_under("run_f") == ["h"]
    assert tails_under("b3") == []                  # even/odd: nothing common
    assert tails_under("b4") == ["wrap"]            # the inlined function, no "c" frame
    assert tails_under("b6") == []                  # s: split, the cold part fails
    assert tails_under("b8") == []                  # t -> k: k's abstract instance
    libc = next(path for *_, path in _maps(pid) if os.path.basename(path).startswith("libc."))
    if DwarfNames.open(libc, None) is not None:
        assert "___pthread_join" in tails_under("main")
        assert "__GI___futex_abstimed_wait_cancelable64" in tails_under("waiter")


# ----------------------------------------------------------------------------- lookups


def _function_address(path: Path, name: str) -> int:
    with open(path, "rb") as handle:
        symbols = ELFFile(handle).get_section_by_name(".symtab")
        assert isinstance(symbols, SymbolTableSection)
        for symbol in symbols.iter_symbols():
            if symbol.name == name:
                return int(symbol["st_value"])
    raise AssertionError(name)


@pytest.fixture
def inline_program(tmp_path: Path) -> Path:
    if GCC is None:
        pytest.skip("needs gcc")
    return _compile(tmp_path, INLINE_C, "inline", ["-O2", "-g"])


def test_names_for_function_addresses(inline_program: Path) -> None:
    names = DwarfNames.open(str(inline_program), None)
    assert names is not None
    assert names.frames_at(_function_address(inline_program, "renamed_impl")) == \
        ["renamed_impl"]
    main = _function_address(inline_program, "main")
    assert names.frames_at(main) == ["main"]
    assert names.frames_at(main) == ["main"]          # cached
    assert names.frames_at(0x7FFF_FFFF_0000) is None  # outside every CU


def test_separate_debug_files(inline_program: Path, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("objcopy") is None:
        pytest.skip("needs objcopy")
    address = _function_address(inline_program, "renamed_impl")
    expected = DwarfNames.open(str(inline_program), None)
    assert expected is not None
    want = expected.frames_at(address)
    with open(inline_program, "rb") as handle:
        note = ELFFile(handle).get_section_by_name(".note.gnu.build-id")
        assert isinstance(note, NoteSection)
        build_id = bytes.fromhex(next(iter(note.iter_notes()))["n_desc"])
    debug = tmp_path / "inline.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(inline_program), str(debug)],
                   check=True)
    stripped = tmp_path / "stripped"
    subprocess.run(["objcopy", "--strip-debug", str(inline_program), str(stripped)],
                   check=True)
    monkeypatch.setenv("PYSFRAME_DEBUG_FILE_DIRECTORY", str(tmp_path / "root"))
    assert DwarfNames.open(str(stripped), None) is None

    # By build id under the debug root (the id is read from the file when not given).
    text = build_id.hex()
    by_id = tmp_path / "root" / ".build-id" / text[:2] / (text[2:] + ".debug")
    by_id.parent.mkdir(parents=True)
    shutil.copy(debug, by_id)
    for given in (build_id, None):
        found = DwarfNames.open(str(stripped), given)
        assert found is not None and found.debug_file == str(by_id)
        assert found.frames_at(address) == want
    by_id.unlink()

    # By .gnu_debuglink, beside the file.
    linked = tmp_path / "linked"
    subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(stripped), str(linked)],
                   check=True, cwd=tmp_path)
    found = DwarfNames.open(str(linked), build_id)
    assert found is not None and found.debug_file == str(debug)
    assert found.frames_at(address) == want


def test_none_without_dwarf(tmp_path: Path) -> None:
    if GCC is None:
        pytest.skip("needs gcc")
    program = _compile(tmp_path, INLINE_C, "plain", ["-O2", "-g0"])
    assert DwarfNames.open(str(program), None) is None
    text = tmp_path / "text"
    text.write_text("not an ELF file\n")
    assert DwarfNames.open(str(text), None) is None
    assert DwarfNames.open(str(tmp_path / "missing"), None) is None


def _section(path: Path, name: str) -> tuple[int, int]:
    with open(path, "rb") as handle:
        section = ELFFile(handle).get_section_by_name(name)
        assert section is not None
        return int(section["sh_offset"]), int(section["sh_size"])


def _corrupted_copies(program: Path, directory: Path, generator: random.Random, variants: int,
                      sections: tuple[str, ...]) -> Iterator[tuple[str, int, Path]]:
    """(section, variant, file): copies of ``program`` with one section zeroed (variant 0)
    or with a run of up to 63 random bytes written into it (the other variants)."""
    original = program.read_bytes()
    for name in sections:
        offset, size = _section(program, name)
        for variant in range(variants):
            data = bytearray(original)
            if variant == 0:
                data[offset:offset + size] = bytes(size)
            else:
                start = offset + generator.randrange(size)
                length = min(generator.randrange(1, 64), offset + size - start)
                data[start:start + length] = generator.randbytes(length)
            broken = directory / f"broken{name}{variant}"
            broken.write_bytes(bytes(data))
            yield name, variant, broken


def test_bad_dwarf_gives_none_not_exceptions(inline_program: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    address = _function_address(inline_program, "renamed_impl")
    original = inline_program.read_bytes()

    # Truncated: the section headers are gone.
    truncated = tmp_path / "truncated"
    truncated.write_bytes(original[:len(original) // 2])
    assert DwarfNames.open(str(truncated), None) is None

    # .debug_info (or another section) zeroed or filled with garbage.
    for name, variant, broken in _corrupted_copies(
            inline_program, tmp_path, random.Random(1234), 4,
            (".debug_info", ".debug_abbrev", ".debug_str", ".debug_rnglists",
             ".debug_aranges", ".debug_line_str")):
        names = DwarfNames.open(str(broken), None)
        assert names is not None
        for probe in (address, address + 1, 0, 0x7FFF_FFFF_0000):
            result = names.frames_at(probe)
            assert result is None or all(isinstance(item, str) for item in result)
        if variant == 0 and name in (".debug_info", ".debug_abbrev"):
            assert names.frames_at(address) is None

    # A garbage separate debug file found by build id.
    monkeypatch.setenv("PYSFRAME_DEBUG_FILE_DIRECTORY", str(tmp_path / "root"))
    build_id = bytes(range(20))
    garbage = tmp_path / "root" / ".build-id" / "00" / (build_id.hex()[2:] + ".debug")
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"\x7fELF" + os.urandom(4000))
    stripped = tmp_path / "stripped"
    stripped.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(100))
    assert DwarfNames.open(str(stripped), build_id) is None


# ----------------------------------------------------------------------------- call sites


_FUNCTION_LINE = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")
_INSTRUCTION = re.compile(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$")


@dataclass
class Transfer:
    function: str           # the function that makes the call or jump
    kind: str               # "call" or "jmp"
    target: str             # the symbol called, or "*" for an indirect call
    return_address: int     # the address after the instruction


def _transfers(program: Path) -> list[Transfer]:
    """Calls and jumps to other functions, from objdump."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs objdump")
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(program)],
                          capture_output=True, text=True, check=True).stdout
    rows: list[tuple[str, int, str, str]] = []
    function = ""
    for line in text.splitlines():
        header = _FUNCTION_LINE.match(line)
        if header:
            function = header.group(2)
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction:
            rows.append((function, int(instruction.group(1), 16), instruction.group(2),
                         instruction.group(3)))
    transfers = []
    for (function, _, mnemonic, operands), following in itertools.pairwise(rows):
        if mnemonic not in ("call", "jmp"):
            continue
        if operands.startswith("*"):
            target = "*"
        else:
            named = re.search(r"<([^>+]+)>", operands)
            if named is None:
                continue
            target = named.group(1)
        if target != function:
            transfers.append(Transfer(function, mnemonic, target, following[1]))
    return transfers


def _transfer(transfers: list[Transfer], function: str, target: str) -> int:
    found = [t.return_address for t in transfers if t.function == function
             and t.target == target]
    assert len(found) == 1, (function, target, found)
    return found[0]


@pytest.fixture(params=["-gdwarf-5", "-gdwarf-4"], ids=["dwarf5", "dwarf4"])
def tail_program(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if GCC is None:
        pytest.skip("needs gcc")
    return _compile(tmp_path, TAIL_C, "tail", ["-O2", "-pthread", request.param])


def test_call_site_targets(tail_program: Path) -> None:
    """DWARF 5 DW_TAG_call_site (DW_AT_call_return_pc, DW_AT_call_origin) and DWARF 4
    DW_TAG_GNU_call_site (DW_AT_low_pc, DW_AT_abstract_origin) alike."""
    names = DwarfNames.open(str(tail_program), None)
    assert names is not None
    transfers = _transfers(tail_program)
    symbol = {name: _function_address(tail_program, name)
              for name in ("a", "b", "c", "b4", "indirect", "s", "s.cold")}
    # Calls and tail calls of functions defined in the unit: their entry.
    assert names.call_site_target(_transfer(transfers, "main", "indirect")) == \
        symbol["indirect"]
    assert names.call_site_target(_transfer(transfers, "run_a", "a")) == symbol["a"]
    assert names.call_site_target(_transfer(transfers, "a", "b")) == symbol["b"]
    assert names.call_site_target(_transfer(transfers, "c", "b4")) == symbol["b4"]
    # A declaration: the name gdb looks up as a minimal symbol.
    assert names.call_site_target(_transfer(transfers, "b", "pause@plt")) == "pause"
    assert names.call_site_targets(_transfer(transfers, "b", "pause@plt")) == "pause"
    # A function also inlined elsewhere: GCC names its abstract instance, no address.
    assert names.call_site_target(_transfer(transfers, "t", "k")) is None
    # An indirect call: nothing gdb can use without a frame.
    assert names.call_site_target(_transfer(transfers, "indirect", "*")) is None
    # A hot/cold split callee: an address per range, the entry first.
    split = names.call_site_targets(_transfer(transfers, "run_s", "s"))
    assert split == [symbol["s"], symbol["s.cold"]]
    assert names.call_site_target(_transfer(transfers, "run_s", "s")) == symbol["s"]
    # No call site there.
    assert names.call_site_target(symbol["s"]) is None
    assert names.call_site_target(0) is None
    # Function entries: of the non-inlined function, the first range of a split one.
    assert names.function_entry(symbol["a"] + 1) == symbol["a"]
    assert names.function_entry(_transfer(transfers, "c", "b4") - 1) == symbol["c"]
    assert names.frames_at(_transfer(transfers, "c", "b4") - 1) == ["wrap", "c"]
    assert names.function_entry(symbol["s.cold"]) == symbol["s"]
    assert names.function_entry(0x7FFF_FFFF_0000) is None
    # ELF symbols.
    assert names.symbol_address("a") == (symbol["a"], True)
    assert names.symbol_address("s.cold") == (symbol["s.cold"], False)
    assert names.symbol_address("pause") is None
    assert names.symbol_address("") is None


def test_tail_call_chains(tail_program: Path) -> None:
    names = DwarfNames.open(str(tail_program), None)
    assert names is not None
    transfers = _transfers(tail_program)

    def entry(name: str) -> int:
        return _function_address(tail_program, name)

    def after(function: str, target: str) -> int:
        return _transfer(transfers, function, target)

    assert names.tail_call_chain(entry("a"), entry("b")) == [("a", after("a", "b"))]
    assert names.tail_call_chain(entry("b"), entry("b")) == []
    # Two paths: only what they share at both ends.
    assert names.tail_call_chain(entry("e"), entry("b2")) == \
        [("h", after("h", "b2")), ("e", after("e", "f"))]
    # From f, the paths share only h's site.
    assert names.tail_call_chain(entry("f"), entry("b2")) == [("h", after("h", "b2"))]
    assert names.tail_call_chain(entry("g1"), entry("b2")) == \
        [("h", after("h", "b2")), ("g1", after("g1", "h"))]
    # A cycle with paths of every length: nothing common.
    assert names.tail_call_chain(entry("even"), entry("b3")) == []
    # Named after the inlined function the jmp is in.
    assert names.tail_call_chain(entry("c"), entry("b4")) == [("wrap", after("c", "b4"))]
    # A split callee: gdb tries the cold part as a function entry and gives up.
    assert names.tail_call_chain([entry("s"), entry("s.cold")], entry("b6")) == []
    assert names.tail_call_chain(entry("s"), entry("b6")) == [("s", after("s", "b6"))]
    # No tail calls, or not a function entry.
    assert names.tail_call_chain(entry("main"), entry("b")) == []
    assert names.tail_call_chain(entry("a") + 1, entry("b")) == []
    # b calls pause (declared, not in this file): gdb would look in the other files.
    assert names.tail_call_chain(entry("b"), 0x1234) == []


def test_tail_calls_on_bad_dwarf(tmp_path: Path) -> None:
    """Garbage in the sections the call-site lookups read: no exception, no hang."""
    if GCC is None:
        pytest.skip("needs gcc")
    program = _compile(tmp_path, TAIL_C, "tail", ["-O2", "-pthread", "-g"])
    transfers = _transfers(program)
    entries = [_function_address(program, name) for name in ("a", "b", "e", "b2", "even",
                                                             "b3", "c", "b4", "s", "b6")]
    for _name, _variant, broken in _corrupted_copies(
            program, tmp_path, random.Random(4321), 5,
            (".debug_info", ".debug_abbrev", ".debug_rnglists", ".debug_str",
             ".debug_aranges", ".symtab", ".strtab")):
        names = DwarfNames.open(str(broken), None)
        if names is None:
            continue
        for transfer in transfers:
            target = names.call_site_targets(transfer.return_address)
            assert target is None or isinstance(target, str) or (
                isinstance(target, list) and all(isinstance(t, int) for t in target))
            entry = names.function_entry(transfer.return_address - 1)
            assert entry is None or isinstance(entry, int)
        for first in entries:
            for second in entries:
                chain = names.tail_call_chain(first, second)
                assert chain is None or all(
                    isinstance(name, str) and isinstance(pc, int) for name, pc in chain)
        assert names.symbol_address("a") is None or \
            isinstance(names.symbol_address("a"), tuple)

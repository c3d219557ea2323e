"""DwarfNames against gdb: the names ``bt`` prints, inline frames included, frame for frame.

Small C (and C++) programs are compiled at test time, run until they block in a system
call, and gdb attaches and prints the backtrace and every frame's pc. For each real frame
(the frames gdb prints with the same pc: inline frames, then their function) our
``frames_at`` of that pc (pc - 1 for callers), made link-time with the mapping's load bias,
must give gdb's names in gdb's order.
"""

from __future__ import annotations

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

from pysframe.symbolize.dwarf_names import DwarfNames

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
    monkeypatch.setattr(DwarfNames, "debug_root", str(tmp_path / "root"))
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


def test_bad_dwarf_gives_none_not_exceptions(inline_program: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    address = _function_address(inline_program, "renamed_impl")
    original = inline_program.read_bytes()

    # Truncated: the section headers are gone.
    truncated = tmp_path / "truncated"
    truncated.write_bytes(original[:len(original) // 2])
    assert DwarfNames.open(str(truncated), None) is None

    # .debug_info (or another section) zeroed or filled with garbage.
    generator = random.Random(1234)
    for name in (".debug_info", ".debug_abbrev", ".debug_str", ".debug_rnglists",
                 ".debug_aranges", ".debug_line_str"):
        offset, size = _section(inline_program, name)
        for variant in range(4):
            data = bytearray(original)
            if variant == 0:
                data[offset:offset + size] = bytes(size)
            else:
                start = offset + generator.randrange(size)
                length = min(generator.randrange(1, 64), offset + size - start)
                data[start:start + length] = generator.randbytes(length)
            broken = tmp_path / f"broken{name}{variant}"
            broken.write_bytes(bytes(data))
            names = DwarfNames.open(str(broken), None)
            assert names is not None
            for probe in (address, address + 1, 0, 0x7FFF_FFFF_0000):
                result = names.frames_at(probe)
                assert result is None or all(isinstance(item, str) for item in result)
            if variant == 0 and name in (".debug_info", ".debug_abbrev"):
                assert names.frames_at(address) is None

    # A garbage separate debug file found by build id.
    monkeypatch.setattr(DwarfNames, "debug_root", str(tmp_path / "root"))
    build_id = bytes(range(20))
    garbage = tmp_path / "root" / ".build-id" / "00" / (build_id.hex()[2:] + ".debug")
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"\x7fELF" + os.urandom(4000))
    stripped = tmp_path / "stripped"
    stripped.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(100))
    assert DwarfNames.open(str(stripped), build_id) is None

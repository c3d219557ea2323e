"""A binary whose own ``.sframe`` is damaged (issue 27, item 2): one flipped byte in its FRE
sub-section, and a table the kernel would drop at its first fault. ``sframe script``
unwinds it from the table generated from its ``.eh_frame``, as a binary without
``.sframe``, says so in one line and exits 1; the generated table's cache entry is kept
apart from the merged one of the undamaged binary with the same build id."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from pysframe.elf import ElfImage
from pysframe.format.decode import SFrameReader
from pysframe.format.errors import SFrameError
from pysframe.format.lookup import SFrameLookup
from pysframe.generate.cache import cache_path, table_for

LUA_DIR = FIXTURES / "real" / "lua-2.46-x86_64"
LUA = LUA_DIR / "lua"
DAMAGED_LINE = re.compile(r"^sframe: (\S+): \.sframe damaged at file offset 0x[0-9a-f]+: .+; "
                          r"frames from its \.eh_frame instead$")

pytestmark = pytest.mark.skipif(not (LUA_DIR / "perf.data").exists(),
                                reason="../shared/fixtures is not present")


def symbol_address(image: ElfImage, name: str) -> int:
    symbols = image.elf.get_section_by_name(".symtab")
    return next(int(symbol["st_value"]) for symbol in symbols.iter_symbols()
                if symbol.name == name)


def damaged_copy(source: Path, target: Path, function: str) -> int:
    """A copy of ``source`` (same build id) with one bit flipped in the FRE sub-section
    of ``function``'s FDE (its attribute record or rows): the first flip that makes a
    lookup in ``function`` fail. Returns the flipped byte's file offset."""
    image = ElfImage(str(source))
    section = image.sframe_sections()[0]
    lookup = SFrameLookup(SFrameReader(section.raw, section.address))
    entry = lookup.find_fde(symbol_address(image, function))
    assert entry is not None
    raw = bytearray(section.raw)
    # V3: the attribute record (5 bytes) is in the FRE sub-section, just before the rows.
    for at in range(entry.fres_offset - 5, lookup.reader.fre_block_end(entry)):
        for bit in range(8):
            raw[at] ^= 1 << bit
            if _lookup_fails(bytes(raw), section.address, entry.start):
                data = bytearray(source.read_bytes())
                data[section.file_offset + at] ^= 1 << bit
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(bytes(data))
                target.chmod(0o755)
                return section.file_offset + at
            raw[at] ^= 1 << bit
    raise AssertionError(f"no flip in {function}'s FREs makes a lookup fail")


def _lookup_fails(raw: bytes, address: int, pc: int) -> bool:
    try:
        SFrameLookup(SFrameReader(raw, address)).find_fre_stepwise(pc)
    except SFrameError:
        return True
    return False


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(directory with the undamaged binary, directory with the damaged one): the hottest
    function of the recording, luaV_execute, damaged."""
    root = tmp_path_factory.mktemp("damaged")
    good = root / "good" / "lua"
    good.parent.mkdir()
    good.write_bytes(LUA.read_bytes())
    damaged_copy(LUA, root / "damaged" / "lua", "luaV_execute")
    return good.parent, root / "damaged"


def script(binaries: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``sframe script`` on the Lua recording, its binary found by build id under
    ``binaries`` only (HOME elsewhere: not perf's ~/.debug copy)."""
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    return subprocess.run([sys.executable, "-m", "pysframe", "script", "--binaries",
                           str(binaries), str(LUA_DIR / "perf.data")],
                          capture_output=True, text=True, env=env, timeout=600)


def test_a_flip_makes_the_section_fault(copies: tuple[Path, Path]) -> None:
    good, damaged = copies
    for directory, faulty in ((good, False), (damaged, True)):
        image = ElfImage(str(directory / "lua"))
        section = image.sframe_sections()[0]
        fault = SFrameLookup(SFrameReader(section.raw, section.address)).first_fault()
        assert (fault is not None) == faulty
    assert ElfImage(str(damaged / "lua")).build_id() == ElfImage(str(LUA)).build_id()


def test_script_unwinds_a_damaged_binary_from_its_eh_frame(
        copies: tuple[Path, Path], tmp_path: Path) -> None:
    good, damaged = copies
    expected = script(good, tmp_path / "home-good")
    assert expected.returncode == 0, expected.stderr
    assert expected.stderr == ""
    for run in (1, 2):  # the table generated, then taken from the cache
        result = script(damaged, tmp_path / "home-damaged")
        assert result.returncode == 1, (run, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, (run, lines)
        match = DAMAGED_LINE.match(lines[0])
        assert match and match.group(1) == str(damaged / "lua"), (run, lines)
        assert result.stdout.count("\n") == expected.stdout.count("\n") > 70_000
        assert result.stdout == expected.stdout, run


def test_cache_keeps_the_damaged_and_the_good_table_apart(
        copies: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One build id, two files: each gets its own table from a shared cache, in any order,
    and only the damaged one is said to be damaged."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    good, damaged = copies

    def made(directory: Path, use_cache: bool = True) -> tuple[bytes, int, str | None]:
        table = table_for(ElfImage(str(directory / "lua")), use_cache=use_cache)
        return table.data, table.address, None if table.damage is None else str(table.damage)

    uncached = {"good": made(good, False), "damaged": made(damaged, False)}
    assert uncached["good"][2] is None
    assert uncached["damaged"][2] is not None
    assert uncached["damaged"][0] != uncached["good"][0]  # generated, not merged
    for name, directory in [("good", good), ("damaged", damaged)] * 2:
        assert made(directory) == uncached[name], name
    build_id = ElfImage(str(LUA)).build_id()
    assert build_id is not None
    for kind in ("merged", "replaced"):  # one entry each, side by side
        entry = cache_path(build_id, 3, kind)
        assert entry is not None and entry.exists(), kind


def test_defer_keeps_the_kernels_drop_and_its_report_says_so(
        copies: tuple[Path, Path], tmp_path: Path) -> None:
    """The kernel's model takes the damaged section, drops it at its first fault and does
    not fall back to the CFI: the samples cut short in the Lua binary are charged to that
    (not to a missing PT_GNU_SFRAME), and the one line says what the kernel does."""
    _, damaged = copies
    (tmp_path / "home").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home"),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "pysframe", "defer", "--report", "--binaries",
                          str(damaged), "-o", str(tmp_path / "deferred.data"),
                          str(LUA_DIR / "perf.data")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sframe: {damaged / 'lua'}: .sframe damaged "
                                                   "at file offset 0x"), lines
    assert "the kernel drops it at its first fault" in lines[0]
    causes = [line.split() for line in run.stdout.splitlines() if "cut short:" in line]
    lua = [cause for cause in causes if cause[0].endswith("/lua")]
    assert lua and all(" ".join(cause[1:-1]) == "cut short: kernel dropped its damaged .sframe"
                       for cause in lua), run.stdout
    assert int(lua[0][-1].replace(",", "")) > 2000, run.stdout


# --- a live process: sframe stack and sframe record --------------------------------------

#: leaf <- middle <- outer <- main, no frame pointers: a lost table loses the frames above.
CHAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile unsigned long sink;

__attribute__((noinline)) void leaf(long rounds) {
    if (rounds < 0) {  /* stack: wait in read() until stdin closes */
        char c;
        puts("ready");
        fflush(stdout);
        if (read(0, &c, 1) < 0)
            sink++;
        return;
    }
    for (long i = 0; i < rounds; i++)  /* record: spin here */
        sink += (unsigned long)i * 7;
}

__attribute__((noinline)) void middle(long rounds) {
    volatile char pad[64];
    pad[0] = 1;
    leaf(rounds);
    sink += pad[0];
}

__attribute__((noinline)) void outer(long rounds) {
    volatile char pad[32];
    pad[0] = 2;
    middle(rounds);
    sink += pad[0];
}

int main(int argc, char **argv) {
    outer(argc > 1 ? atol(argv[1]) : -1);
    return 0;
}
"""
EXPECTED = ["leaf", "middle", "outer", "main", "__libc_start_call_main", "__libc_start_main",
            "_start"]


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the program built with its own .sframe by gas 2.47.50, gcc -O2
    -fomit-frame-pointer; a copy with ``middle``'s FREs damaged)."""
    from tests.support.oracles import missing, need_binutils

    gas = Path(need_binutils("as", "2.47.50"))
    driver = gas.parent.parent / "gcc-B" / "2.47.50" / "x86_64"
    if not (driver / "as").exists():
        missing(f"gcc's -B directory for binutils 2.47.50 ({driver})", "tools/install-oracles.sh")
    root = tmp_path_factory.mktemp("chain")
    (root / "chain.c").write_text(CHAIN)
    good = root / "good" / "chain"
    good.parent.mkdir()
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", f"-B{driver}/", "-Wa,--gsframe",
                    "-o", str(good), str(root / "chain.c")], check=True, timeout=120)
    assert ElfImage(str(good)).sframe_sections()
    damaged = root / "damaged" / "chain"
    damaged_copy(good, damaged, "middle")
    return good, damaged


def stack_frames(program: Path, home: Path) -> tuple[list[tuple[str, str, int]], str, int]:
    """``sframe stack --json`` of ``program`` waiting in read(): each frame's function,
    file name and file offset; stderr; the exit status."""
    import json

    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    child = subprocess.Popen([str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        run = subprocess.run([sys.executable, "-m", "pysframe", "stack", "--json",
                              "--no-debuginfo", str(child.pid)],
                             capture_output=True, text=True, env=env, timeout=120)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=10)
    if run.returncode == 2 and "not permitted" in run.stderr:
        pytest.skip("ptrace is not permitted here")
    frames = json.loads(run.stdout)["threads"][0]["frames"] if run.stdout else []
    return ([(frame["function"], Path(frame["path"]).name, frame["file_offset"])
             for frame in frames], run.stderr, run.returncode)


def test_stack_of_a_damaged_binary_names_the_same_frames(
        chains: tuple[Path, Path], tmp_path: Path) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("sframe stack is x86-64 only")
    good, damaged = chains
    expected, stderr, status = stack_frames(good, tmp_path / "home")
    assert (stderr, status) == ("", 0)
    assert [name.split("+")[0].split("@")[0] for name, _, _ in expected[1:]] == EXPECTED
    frames, stderr, status = stack_frames(damaged, tmp_path / "home")  # one cache for both
    assert frames == expected
    lines = stderr.splitlines()
    assert len(lines) == 1 and status == 1, stderr
    match = DAMAGED_LINE.match(lines[0])
    assert match and match.group(1) == str(damaged), lines


def recorded_chains(program: Path, home: Path) -> tuple[list[list[str]], str, int]:
    """``sframe record`` of ``program`` spinning in ``leaf``: each sample's user functions,
    read back by ``sframe script``; the recorder's stderr and exit status."""
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    data = home / f"{program.parent.name}.data"
    run = subprocess.run([sys.executable, "-m", "pysframe", "record", "-o", str(data), "--",
                          str(program), "1000000000"],
                         capture_output=True, text=True, env=env, timeout=300)
    text = subprocess.run([sys.executable, "-m", "pysframe", "script", str(data)],
                          capture_output=True, text=True, env=env, timeout=300,
                          check=True).stdout
    samples = []
    for block in text.split("\n\n"):
        lines = block.strip("\n").splitlines()[1:]
        samples.append([line.split()[1].split("+")[0].split("@")[0] for line in lines])
    return samples, run.stderr, run.returncode


def test_record_walks_a_damaged_binary_with_its_generated_table(
        chains: tuple[Path, Path], tmp_path: Path) -> None:
    """The walker gets the rows generated from the damaged binary's .eh_frame (not none,
    as for a table the kernel's rules refuse): every sample in ``leaf`` is walked to
    ``_start``, as with the intact binary. One line says so; the exit status is the
    workload's, as perf's (and as for the other notes of sframe record)."""
    from tests.test_record_bpf import REASON

    if REASON is not None:
        pytest.skip(REASON)
    for program in chains:
        samples, stderr, status = recorded_chains(program, tmp_path / "home")
        in_leaf = [sample for sample in samples if sample and sample[0] == "leaf"]
        assert len(in_leaf) > 100, (program, len(samples), stderr)
        assert all(sample == EXPECTED for sample in in_leaf), (program, stderr)
        assert status == 0, stderr
        notes = [line for line in stderr.splitlines() if not line.startswith(
            ("sframe record: ", "sframe: the tables of "))]
        if program == chains[0]:
            assert notes == [], stderr
        else:
            assert len(notes) == 1, stderr
            match = DAMAGED_LINE.match(notes[0])
            assert match and match.group(1) == str(program), notes


def _every_row_made(lookup: SFrameLookup) -> SFrameError | None:
    """first_fault as it was: every row of every function made (the reference)."""
    reader, decoded = lookup.reader, 0
    try:
        for index in range(reader.num_fdes):
            entry, _, offsets = lookup._read_function(index)
            decoded += len(offsets)
            if decoded > reader.header.num_fres:
                return SFrameError("too many FREs", entry.offset)
            for k, at in enumerate(offsets):
                lookup.make_row(entry, k, reader.read_fre(entry, at)[0])
    except SFrameError as error:
        return error
    return None


@pytest.mark.parametrize("arch", ["x86_64", "aarch64", "s390x"])
def test_first_fault_skipping_plain_rows_finds_what_making_every_row_finds(arch: str) -> None:
    """first_fault makes only the rows whose words could fail (flexible ones, default ones
    with more words than their rules use): over 400 copies of a fixture's table, each with
    a few bytes of its FRE sub-section changed, it finds the fault (message and offset)
    that making every row finds."""
    import random

    image = ElfImage(str(FIXTURES / "2.46" / arch / "O2" / "prog"))
    section = image.sframe_sections()[0]
    reader = SFrameReader(section.raw, section.address)
    start = reader.header.fres_start
    rng = random.Random(26)
    faults = 0
    for _ in range(400):
        data = bytearray(section.raw)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(start, len(data))] = rng.randrange(256)
        try:
            lookup = SFrameLookup(SFrameReader(bytes(data), section.address))
        except SFrameError:
            continue
        found, expected = lookup.first_fault(), _every_row_made(lookup)
        if expected is None or found is None:
            assert found is None and expected is None
            continue
        faults += 1
        if expected.message != "too many FREs":
            assert (found.message, found.offset) == (expected.message, expected.offset)
    assert faults >= 40

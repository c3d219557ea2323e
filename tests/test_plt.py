"""PLT stubs: the rules that hold for them, whatever GNU ld wrote (issue 12, item 5).

GNU ld writes CFA = SP+16 for x86-64 ``.plt.got`` entries; an entry is a bare
``jmp *GOT(%rip)`` reached by the caller's ``call``, so CFA = SP+8, as the FDE ld
writes for the section into ``.eh_frame`` says. Unwinding takes the stubs' rows from
the generator (correct by default), ``generate --as-gnu`` reproduces ld's bytes, and
``validate --against-eh-frame`` reports ld's rule.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.oracles import missing, need_binutils, need_perf, need_perf7

from conftest import FIXTURES, needs_fixtures
from pysframe.elf import ElfImage
from pysframe.elf.headers import ET_DYN
from pysframe.format.constants import ABI
from pysframe.format.decode import SFrameReader
from pysframe.format.lookup import SFrameLookup
from pysframe.generate.cache import sframe_for
from pysframe.generate.section import generate
from pysframe.unwind.address_space import AddressSpace, Mapping, Module
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.unwinder import Registers, Unwinder

REPO = Path(__file__).resolve().parent.parent
PROG = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"
#: __cxa_finalize@plt, the .plt.got entry of PROG, and the return address of its one
#: caller (``call d0f0`` at 0xd362 in __do_global_dtors_aux).
PLT_GOT_ENTRY, RETURN_ADDRESS = 0xD0F0, 0xD367


def _cfa_offset(data: bytes, address: int, pc: int) -> int:
    row = SFrameLookup(SFrameReader(data, address)).find_fre(pc)
    assert row is not None
    return row.cfa.offset


@needs_fixtures
def test_ld_writes_sp_16_for_plt_got_and_as_gnu_reproduces_it() -> None:
    image = ElfImage(str(PROG))
    own = image.sframe_sections()[0]
    assert _cfa_offset(own.raw, own.address, PLT_GOT_ENTRY) == 16  # ld 2.46's bytes
    from pysframe.format.encode import encode

    gnu, correct = generate(image, as_gnu=True).section, generate(image).section
    gnu_rows = SFrameLookup(SFrameReader(encode(gnu), gnu.address))
    correct_rows = SFrameLookup(SFrameReader(encode(correct), correct.address))

    def offset(lookup: SFrameLookup, pc: int) -> int:
        row = lookup.find_fre(pc)
        assert row is not None
        return row.cfa.offset

    assert offset(gnu_rows, PLT_GOT_ENTRY) == 16
    assert offset(correct_rows, PLT_GOT_ENTRY) == 8
    # .plt (PLT0 and the lazy entries): the same rules either way.
    plt = image.section_ranges(".plt")[".plt"]
    assert all(offset(gnu_rows, pc) == offset(correct_rows, pc) for pc in range(*plt))


def _unwind_at_plt_got(data: bytes, address: int) -> int:
    """The caller the unwinder finds for a sample at the first byte of the .plt.got
    entry: the stack holds the return address and, above it, a decoy."""
    image = ElfImage(str(PROG))
    lookup = SFrameLookup(SFrameReader(data, address))
    module = Module(str(PROG), None, 0, lookup, "test", image)
    space = AddressSpace()
    space.add(Mapping(0xD000, 0x1A000, 0xD000, str(PROG), None, module))
    sp = 0x7FFF0000
    stack = RETURN_ADDRESS.to_bytes(8, "little") + (0xD100 + 1).to_bytes(8, "little")
    stack += bytes(64)
    result = Unwinder(ABI.AMD64_ENDIAN_LITTLE).unwind(
        Registers(PLT_GOT_ENTRY, sp, 0), StackMemory(sp, stack), space)
    return result.frames[1].pc


@needs_fixtures
def test_unwinding_at_plt_got_finds_the_caller(tmp_path: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    image = ElfImage(str(PROG))
    own = image.sframe_sections()[0]
    # With ld's own table, the caller would be read one slot too high (the decoy).
    assert _unwind_at_plt_got(own.raw, own.address) == 0xD101
    data, address = sframe_for(image)  # the table the unwinder uses (merged)
    assert _unwind_at_plt_got(data, address) == RETURN_ADDRESS


@needs_fixtures
def test_validate_against_eh_frame_reports_lds_plt_got_rule() -> None:
    result = subprocess.run([sys.executable, "-m", "pysframe", "validate", "--against-eh-frame",
                             str(PROG)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, lines
    assert "at 0xd0f0: SFrame says CFA r7+16; .eh_frame says CFA r7+8" in lines[0]
    assert "GNU ld's .plt.got rule" in lines[0]


# --- a perf recording of a program whose hot loop calls through .plt.got ---------------

_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
extern int work(int);
int (*volatile keep)(int);
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000, s = 0;
  keep = work;  /* address taken and called: with -z now, ld puts work@plt in .plt.got */
  for (long i = 0; i < n; i++) s += work((int)i);
  printf("%ld\n", s);
  return 0;
}
"""


def _run(*command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})


@pytest.fixture(scope="session")
def plt_got_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording of a program built with GNU ld's .plt.got SFrame rule (made with
    ``inject --as-gnu``), sampled inside its .plt.got stub (:func:`_record`)."""
    perf = need_perf()
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    work = tmp_path_factory.mktemp("pltgot")
    (work / "main.c").write_text(_MAIN)
    (work / "lib.c").write_text("int work(int x) { return x * 3 + 1; }\n")
    for command in (("gcc", "-O2", "-fPIC", "-shared", "-o", "libw.so", "lib.c"),
                    ("gcc", "-O2", "-o", "plain", "main.c", "-L.", "-lw",
                     "-Wl,-rpath,$ORIGIN", "-Wl,-z,now")):
        assert _run(*command, cwd=work).returncode == 0
    disassembly = _run("objdump", "-d", "-j", ".plt.got", "plain", cwd=work).stdout
    assert "<work@plt>" in disassembly
    injected = _run(sys.executable, "-m", "pysframe", "inject", "--as-gnu", "plain", "-o", "prog",
                    cwd=work)
    assert injected.returncode == 0, injected.stderr
    _record(perf, work)
    return work


#: Where the kernel loads a PIE when address randomization is off (setarch -R), x86-64.
_PIE_BASE = 0x555555554000


def _record(perf: str, work: Path) -> None:
    """Samples taken at the stub itself: a hardware breakpoint on its first instruction
    (every 1,000th hit sampled), the address fixed by running without address
    randomization. A timer lands in the stub, a single jmp, in 0 to 3 samples of a run
    whatever its length or frequency (0 of 149 in one CI run at 999 Hz)."""
    image = ElfImage(str(work / "prog"))
    stub = image.section_ranges(".plt.got")[".plt.got"][0]
    address = stub + (_PIE_BASE if image.header.type == ET_DYN else 0)
    # perf 6.1 aborts about one run in two (exit 134: "assertion failed at
    # util/build-id.c:1010", then "stack smashing detected") while sframe record's BPF
    # programs are loaded, --no-bpf-event or not (perf 7.2 does not): a failed recording
    # fails under CI=true, where nothing else runs and the record tests unload theirs.
    record = _run("setarch", "-R", perf, "record", "-q", "--no-bpf-event", "-e",
                  f"mem:{address:#x}:x", "-c", "1000", "--call-graph", "dwarf,8192", "-o",
                  "perf.data", "./prog", "120000", cwd=work)
    if record.returncode != 0:
        missing("a perf that records", f"perf record failed: "
                f"{record.stderr.strip().splitlines()[-1:]}")


def _chains(text: str) -> list[list[str]]:
    """Each sample's frames as addresses (names differ: perf 6.1 calls the stub _init+0x50)."""
    return [re.findall(r"^\s+([0-9a-f]+) ", block, re.M) for block in text.split("\n\n")
            if block.strip()]


def test_a_sample_in_plt_got_gets_perfs_caller(plt_got_recording: Path) -> None:
    work = plt_got_recording
    stub = ElfImage(str(work / "prog")).section_ranges(".plt.got")[".plt.got"]
    sframe = _run(sys.executable, "-m", "pysframe", "script", "perf.data", cwd=work)
    assert sframe.returncode == 0, sframe.stderr
    perf = _run(need_perf(), "script", "--no-inline", "-i", "perf.data", cwd=work)
    ours, theirs = _chains(sframe.stdout), _chains(perf.stdout)
    assert len(ours) == len(theirs)
    in_stub = [(mine, other) for mine, other in zip(ours, theirs, strict=True)
               if mine and stub[0] <= int(mine[0], 16) < stub[1]]
    assert in_stub, "no sample landed in the .plt.got stub"
    print(f"{len(in_stub)} of {len(ours)} samples in .plt.got")
    for mine, other in in_stub:
        assert mine[0] == other[0]
        assert mine[1:len(other)] == other[1:], (mine, other)  # the caller (main) and on


#: A PIE whose one .plt.got stub (__cxa_finalize) is 8 bytes, or 16 with IBT (endbr64).
PLT_GOT_C = """\
#include <stdio.h>
int main(void) { puts("x"); return 0; }
"""
LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")
LABEL = re.compile(r"^([0-9a-f]+) <(\S+)>:$", re.MULTILINE)


def objdump_labels(objdump: str, binary: Path, section: str) -> dict[int, str]:
    listing = subprocess.run([objdump, "-d", "-j", section, str(binary)], capture_output=True,
                             text=True, check=True, timeout=120)
    return {int(address, 16): name for address, name in LABEL.findall(listing.stdout)}


def function_names(binary: Path) -> dict[int, set[str]]:
    """nm's names of the symbols by address (versions dropped): the dynamic ones, and those
    of the separate debug file found by build id (as ``load_symbols`` finds it)."""
    notes = subprocess.run(["readelf", "-n", str(binary)], capture_output=True, text=True,
                           check=True, timeout=120).stdout
    build_id = re.search(r"Build ID: ([0-9a-f]+)", notes)
    commands = [["nm", "-D", "--defined-only", str(binary)]]
    if build_id is not None:
        debug = Path("/usr/lib/debug/.build-id") / build_id[1][:2] / f"{build_id[1][2:]}.debug"
        if debug.is_file():
            commands.append(["nm", "--defined-only", str(debug)])
    found: dict[int, set[str]] = {}
    for command in commands:
        listing = subprocess.run(command, capture_output=True, text=True, check=True,
                                 timeout=120)
        for line in listing.stdout.splitlines():
            fields = line.split()
            if len(fields) == 3:
                found.setdefault(int(fields[0], 16), set()).add(fields[2].split("@")[0])
    return found


def built(tmp_path: Path, flags: list[str]) -> Path:
    gcc = shutil.which("gcc") or missing("gcc", "apt-get install gcc")
    (tmp_path / "t.c").write_text(PLT_GOT_C)
    out = tmp_path / ("t" + "".join(flag.strip("-=,") for flag in flags))
    subprocess.run([gcc, "-O2", *flags, "-o", str(out), str(tmp_path / "t.c")], check=True,
                   timeout=120)
    return out


FLAGS = [["-fcf-protection=none"], ["-fcf-protection=full", "-Wl,-z,ibtplt"]]


@pytest.mark.parametrize("flags", FLAGS, ids=["8-byte", "ibt-16-byte"])
def test_plt_got_stubs_are_named_as_objdump_names_them(tmp_path: Path, flags: list[str]) -> None:
    """Each ``.plt.got`` stub is ``name@plt`` after the ``.rela.dyn`` symbol of the GOT slot
    it jumps through (perf 6.3 and later name them so; 6.1 left them unnamed): the same
    addresses and names as objdump's synthetic labels, on a PIE of either stub size, the
    fixture, and the system's ls and libc; `script`'s table holds them."""
    from pysframe.symbolize.plt import plt_got_symbols
    from pysframe.symbolize.symbols import load_symbols

    objdump = need_binutils("objdump", "2.47.50")
    for binary in [built(tmp_path, flags), PROG, Path("/bin/ls"), LIBC]:
        theirs = sorted(objdump_labels(objdump, binary, ".plt.got").items())
        image = ElfImage(str(binary))
        stubs = plt_got_symbols(image)
        assert [(start, name) for start, _, name in stubs] == theirs and theirs, binary
        section = image.section_header(".plt.got")
        assert section is not None
        assert {end - start for start, end, _ in stubs} == {section.entsize}
        table = load_symbols(image, use_cache=False)
        assert [table.lookup(start) for start, _ in theirs] == \
            [(name, 0) for _, name in theirs], binary


@pytest.mark.parametrize("flags", FLAGS, ids=["lazy", "ibt-plt-sec"])
def test_plt_stubs_are_named_after_the_slot_they_jump_through(tmp_path: Path,
                                                              flags: list[str]) -> None:
    """A lazy PLT stub is named after the ``.rela.plt`` relocation of its GOT slot, not its
    index: libc's relocations are in another order than its stubs (its IRELATIVE slots),
    and all 53 of its stubs were misnamed (perf 6.1 misnames them so). Named slots: objdump's
    labels, address for address; an IRELATIVE slot (objdump: ``*ABS*+0xADDEND@plt``): one
    of nm's names of the function at the addend (its resolver; the debug file's too). ``.plt``: the header."""
    from pysframe.symbolize.plt import plt_symbols
    from pysframe.symbolize.symbols import load_symbols

    objdump = need_binutils("objdump", "2.47.50")
    for binary in [built(tmp_path, flags), PROG, Path("/bin/ls"), LIBC]:
        image = ElfImage(str(binary))
        section = ".plt.sec" if image.section_header(".plt.sec") else ".plt"
        theirs = {address: name for address, name in
                  objdump_labels(objdump, binary, section).items() if name.endswith("@plt")}
        table = load_symbols(image, use_cache=False)
        stubs = {start: name for start, _, name in plt_symbols(image, None) if name != ".plt"}
        assert stubs.keys() == theirs.keys() and theirs, binary
        resolvers = function_names(binary)
        for address, label in theirs.items():
            named = table.lookup(address)
            assert named is not None and named[1] == 0, (binary, hex(address))
            irelative = re.fullmatch(r"\*ABS\*\+0x([0-9a-f]+)@plt", label)
            if irelative is None:
                assert named[0] == label, (binary, hex(address), named, label)
            else:
                name = named[0].removesuffix("@plt")
                assert name in resolvers.get(int(irelative[1], 16), set()) or \
                    name == f"offset_{address:#x}", (binary, hex(address), named, label)
        header = image.section_header(".plt")
        assert header is not None and table.lookup(header.address) == (".plt", 0)


def test_plt_names_are_those_perf_7_lists(tmp_path: Path) -> None:
    """The names made for PLT code (``.plt`` for the lazy-binding header, ``name@plt`` for
    the stubs of .plt, .plt.sec and .plt.got) are those perf 7 makes: ``perf probe -F`` lists
    them with the file's own symbols (binaries without IRELATIVE slots, whose names perf 7
    takes from wherever it finds an IFUNC symbol)."""
    from pysframe.symbolize.plt import plt_got_symbols, plt_symbols

    command = need_perf7()
    for binary in [*(built(tmp_path, flags) for flags in FLAGS), PROG, Path("/bin/ls")]:
        listed = subprocess.run([*command, "probe", "-x", str(binary), "-F", "--filter=*"],
                                capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr[-300:]
        theirs = {name for name in listed.stdout.split() if "plt" in name}
        image = ElfImage(str(binary))
        ours = {name for _, _, name in plt_symbols(image) + plt_got_symbols(image)}
        assert ".plt" in ours and ours == theirs, (binary, sorted(ours ^ theirs))


def test_perf61_comparison_forgives_plt_names_alone() -> None:
    """The helper that compares with perf 6.1 lets a PLT name stand for perf's ``[unknown]``
    or its by-index stub name, and nothing else."""
    from tests.support.parity import as_perf61

    theirs = ["dd 1 1.0: 1 cpu-clock: 55e9180f8026 [unknown] (/usr/bin/dd)",
              "\t7f35889612ad memcpy@plt+0x4 (/usr/lib/x86_64-linux-gnu/libc.so.6)"]
    plt = ["dd 1 1.0: 1 cpu-clock: 55e9180f8026 .plt+0x6 (/usr/bin/dd)",
           "\t7f35889612ad strlen@plt+0x4 (/usr/lib/x86_64-linux-gnu/libc.so.6)"]
    assert as_perf61(plt, theirs) == theirs
    other = ["dd 1 1.0: 1 cpu-clock: 55e9180f8026 main+0x6 (/usr/bin/dd)",
             "\t7f35889612ad strlen+0x4 (/usr/lib/x86_64-linux-gnu/libc.so.6)"]
    assert as_perf61(other, theirs) == other

"""`sframe stack --core` on AArch64 and s390x cores against gdb-multiarch: a corpus of
programs cross-compiled with and without ``--gsframe`` (so unwound with gas 2.47.50's
tables and with tables we generate from the CFI), run under qemu-user until they abort in
a chosen frame (deep recursion, a signal handler, a leaf without a frame faulting, a
callback through libc's qsort, a C++ exception in flight), every core's frames named as
gdb names them, frame for frame (tests/support/cross_cores.py builds it).

Skipped with one line where qemu-user, gdb-multiarch, the cross compilers and C libraries
or binutils 2.47.50 are missing (a failure under CI=true, which installs them)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cross_cores import ARCHES, Arch, Core, GdbFrame, build_corpus, gdb_frames, need_cross

Frames = list[tuple[int | None, str]]


class Corpus:
    def __init__(self, arch: Arch, cores: list[Core], cache: Path) -> None:
        self.arch, self.cores, self.cache = arch, cores, cache
        self._gdb: dict[Path, list[GdbFrame]] | None = None

    def gdb(self, core: Core) -> list[GdbFrame]:
        if self._gdb is None:
            self._gdb = {}
            for program in sorted({c.program for c in self.cores}):
                self._gdb.update(gdb_frames(self.arch, program,
                                            [c.core for c in self.cores if c.program == program]))
        return self._gdb.get(core.core, [])

    def ours(self, core: Core, *options: str) -> dict[str, Any]:
        """`sframe stack --json --core CORE --sysroot ...`, run in this process."""
        from pysframe.cli.stack import run_stack

        out = io.StringIO()
        with contextlib.redirect_stdout(out), _environment(XDG_CACHE_HOME=str(self.cache)):
            status = run_stack(None, as_json=True, show_build_id=False, max_depth=256,
                               core=str(core.core), sysroot=self.arch.sysroot,
                               debuginfo=False, exe=options[0] if options else None)
        assert status == 0, f"{core.name}: exit status {status}"
        document: dict[str, Any] = json.loads(out.getvalue())
        return document


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_CORPORA: dict[str, Corpus] = {}


@pytest.fixture(scope="module", params=sorted(ARCHES))
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """The cores of one architecture, built once per session."""
    arch = ARCHES[request.param]
    driver = need_cross(arch)
    if arch.name not in _CORPORA:
        directory = tmp_path_factory.mktemp(f"cross-{arch.name}")
        _CORPORA[arch.name] = Corpus(arch, build_corpus(arch, directory, driver),
                                     tmp_path_factory.mktemp(f"cache-{arch.name}"))
    return _CORPORA[arch.name]


def frames_of(document: dict[str, Any]) -> Frames:
    """Our frames as gdb prints them: pc and name ("??" unnamed), the signal trampoline as
    gdb's "<signal handler called>"."""
    (thread,) = document["threads"]
    frames: Frames = []
    for frame in thread["frames"]:
        if frame["method"] == "sigreturn":
            frames.append((None, "<signal handler called>"))
            continue
        name = frame["names"][0] if frame["names"] else "[unknown]"
        frames.append((frame["pc"], "??" if name == "[unknown]" else name))
    return frames


NT_ARM_PAC_MASK = 0x406


def gdb_stopped_at_pac(core: Core, ours: Frames, theirs: Frames) -> bool:
    """Whether gdb's chain is ours cut short where the return address it had to load was
    signed: the core keeps no NT_ARM_PAC_MASK (qemu writes none), so gdb 13 cannot strip
    the pointer-authentication code and takes the signed word for an address outside every
    function. Checked from the core: the next frame's return address is on the stack
    with a PAC in its top bits (a stripped copy may be there too: a C++ exception's
    unwinder keeps the return addresses it read, stripped, in its context on the stack;
    one CI run's throw core had one)."""
    from pysframe.sources.core import CoreFile

    if len(theirs) >= len(ours) or ours[:len(theirs)] != theirs:
        return False
    core_file = CoreFile(str(core.core))
    if NT_ARM_PAC_MASK in core_file.note_types:
        return False
    wanted = ours[len(theirs)][0]
    sp = core_file.threads[0].registers["sp"]
    stack = core_file.memory.read_bytes(sp, 1 << 16)
    words = struct.unpack_from(f"<{len(stack) // 8}Q", stack)
    saved = [word for word in words if word & ((1 << 48) - 1) == wanted]
    # A signed word whose code is all zeros looks unsigned: qemu's PAC field here is 7
    # bits (48-54, top byte ignored), zero once in 128 signings (one CI run's die+0x10,
    # which gdb stopped at: "Register 69 is not available"). There the function of gdb's
    # last frame is asked: does its code sign the return address before the call?
    return any(word >> 48 for word in saved) or (bool(saved) and _signs_before(
        core.program, theirs[-1][0] - 4))


#: AArch64 PACIASP, PACIBSP: sign the return address (pac-ret's prologue).
_PAC_SIGN = {0xD503233F, 0xD503237F}


def _signs_before(program: Path, call: int) -> bool:
    """Whether the function of ``program`` holding ``call`` signs its return address
    between its start and ``call`` (by its symbol and its bytes)."""
    from elftools.elf.elffile import ELFFile

    with open(program, "rb") as handle:
        elf = ELFFile(handle)
        symbols = elf.get_section_by_name(".symtab")
        text = elf.get_section_by_name(".text")
        if symbols is None or text is None:
            return False
        for symbol in symbols.iter_symbols():
            start, size = symbol["st_value"], symbol["st_size"]
            if symbol["st_info"]["type"] == "STT_FUNC" and start <= call < start + size:
                offset = start - text["sh_addr"]
                code = text.data()[offset:offset + call - start]
                return any(word in _PAC_SIGN for word in
                           struct.unpack_from(f"<{len(code) // 4}I", code))
    return False


def test_same_frames_as_gdb(corpus: Corpus) -> None:
    """Every core: the same frames as gdb-multiarch's bt, pc and name, to the outermost;
    where gdb stops short at a signed return address it cannot strip (AArch64 pac-ret),
    gdb's frames are ours up to there."""
    assert len(corpus.cores) >= 30
    differences, explained = [], []
    stops: Counter[str] = Counter()
    for core in corpus.cores:
        theirs = [(frame.pc, frame.name) for frame in corpus.gdb(core)]
        document = corpus.ours(core)
        stops[f"{'gas' if core.gsframe else 'generated'}: {document['threads'][0]['stop']}"] += 1
        ours = frames_of(document)
        assert theirs, f"gdb printed no frame for {core.name}"
        if ours == theirs:
            continue
        if corpus.arch.name == "aarch64" and gdb_stopped_at_pac(core, ours, theirs):
            explained.append(core.name)
            continue
        differences.append(f"{core.name}:\n  gdb:  {theirs}\n  ours: {ours}")
    tables = {gsframe: sum(core.gsframe == gsframe for core in corpus.cores)
              for gsframe in (True, False)}
    same = len(corpus.cores) - len(differences) - len(explained)
    print(f"\n{corpus.arch.name}: {len(corpus.cores)} cores ({tables[True]} with gas's "
          f"tables, {tables[False]} with generated ones): {same} name gdb's frames exactly, "
          f"{len(explained)} gdb's frames up to a PAC-signed return address gdb cannot "
          f"strip, {len(differences)} differ; our chains end: {dict(sorted(stops.items()))}")
    assert not differences, "\n".join(differences)


def test_scenarios_reach_their_frames(corpus: Corpus) -> None:
    """The frames each scenario is about are there: the signal frame and the frame it
    interrupted, the leaf's caller (its return address still in the link register), libc's
    qsort under the callback, __cxa_throw under std::terminate."""
    expected = {"signal": ["on_signal", "<signal handler called>", "raise", "deliver"],
                "segv": ["on_signal", "<signal handler called>", "leaf", "to_leaf"],
                "leaf": ["leaf", "to_leaf", "to_leaf", "to_leaf", "main"],
                "qsort": ["compare", "qsort_r", "sort", "main"],
                "throw": ["std::terminate()", "__cxa_throw", "thrower(int)"],
                "cleanup": ["Guard::~Guard()", "guarded(int, bool)", "main"]}
    for core in corpus.cores:
        scenario = core.name.split()[1]
        if scenario not in expected:
            continue
        names = [name for _, name in frames_of(corpus.ours(core))]
        wanted = iter(names)
        assert all(name in wanted for name in expected[scenario]), (core.name, names)
        assert names[-1] == "_start", (core.name, names)


@pytest.mark.parametrize("corpus", ["aarch64"], indirect=True)  # AArch64's alone
def test_pointer_authentication_stripped(corpus: Corpus) -> None:
    """AArch64 -mbranch-protection=pac-ret: the return addresses saved on the stack carry a
    pointer-authentication code (qemu's CPU signs them), and the frames are still found:
    each frame's pc is a saved word with its PAC stripped."""
    from pysframe.sources.core import CoreFile

    signed = 0
    for core in (c for c in corpus.cores if "-own-" in c.name and " recurse 40" in c.name):
        document = corpus.ours(core)
        pcs = {frame["pc"] for frame in document["threads"][0]["frames"]}
        core_file = CoreFile(str(core.core))
        sp = core_file.threads[0].registers["sp"]
        stack = core_file.memory.read_bytes(sp, 1 << 16)
        words = struct.unpack_from(f"<{len(stack) // 8}Q", stack)
        signed += sum(1 for word in words if word >> 48 and word & ((1 << 48) - 1) in pcs)
    assert signed >= 40


def test_the_signing_prologue_is_found_by_its_bytes(corpus: Corpus) -> None:
    """The check that explains gdb stopping at a frame whose saved return address has a
    PAC of zeros: ``die``'s call of abort is signed for in the pac-ret builds (``-own-``),
    not in the others; on s390x (no pointer authentication) in none."""
    from elftools.elf.elffile import ELFFile

    programs = {core.program for core in corpus.cores}
    verdicts = {}
    for program in programs:
        with open(program, "rb") as handle:
            symbols = ELFFile(handle).get_section_by_name(".symtab")
            found = symbols.get_symbol_by_name("die")  # type: ignore[union-attr]
            if not found:
                continue  # the C++ programs: no die()
            end = found[0]["st_value"] + found[0]["st_size"]
        verdicts[program.name] = _signs_before(program, end - 4)  # its last insn: bl abort
    pac = corpus.arch.name == "aarch64"
    assert verdicts == {name: pac and "-own-" in name for name in verdicts}, verdicts
    assert len(verdicts) >= 6 and any(verdicts.values()) == pac


def test_program_found_without_sysroot_path(corpus: Corpus) -> None:
    """--exe names the program of a core without NT_FILE; the libraries come from the
    loader's list in the core and --sysroot."""
    core = corpus.cores[0]
    ours = frames_of(corpus.ours(core, str(core.program)))
    assert ours == frames_of(corpus.ours(core))

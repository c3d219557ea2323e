"""The kernel's deferred unwinder (``pysframe.deferred``, the model ``sframe defer`` runs)
over the AArch64 and s390x cores of test_cross_cores.py: each core's first thread given
as a perf sample carries it (user registers and a 65528-byte copy of the stack from SP),
over its files mapped as the ELF loader maps them, walked with its machine's rules
(``deferred/arch.py``), and compared frame by frame with ``sframe stack --core`` (whose
frames test_cross_cores.py checks against gdb-multiarch's bt).

Two ways the process's files are given tables: as built (the kernel registers a file's
``PT_GNU_SFRAME``: the programs built with ``--gsframe``; the C library and the rest fall
back to frame records on AArch64 and the back chain on s390x) and every file with our
generated table (a distribution built with ``--gsframe``: ``sframe defer
--assume-sframe``). Each walk either is our chain to the outermost frame (_start) or
stops or goes elsewhere for a reason :func:`support.defer_cores.explain` derives from
the kernel's rules; a walk no rule explains fails the test.

Skipped with the same line as test_cross_cores.py where the corpus cannot be built (a
failure under CI=true)."""

from __future__ import annotations

from collections import Counter

import pytest

from support.cross_cores import Core
from support.defer_cores import Frame, deferred_walk, explain
from test_cross_cores import Corpus, corpus  # noqa: F401 (the module-scoped fixture)


def our_frames(built: Corpus, core: Core) -> list[Frame]:
    """``sframe stack --core``'s frames of ``core``."""
    document = built.ours(core)
    (thread,) = document["threads"]
    return [Frame(frame["pc"], frame["method"]) for frame in thread["frames"]]


@pytest.mark.parametrize("assume_sframe", [False, True], ids=["as-built", "generated"])
def test_deferred_walks_reach_outermost_or_stop_for_a_reason(corpus: Corpus,  # noqa: F811
                                                             assume_sframe: bool) -> None:
    reasons: Counter[str] = Counter()
    stops: Counter[str] = Counter()
    unexplained: list[str] = []
    frames = [0, 0]
    gdb_same = 0
    for core in corpus.cores:
        ours = our_frames(corpus, core)
        walked = deferred_walk(core.core, corpus.arch.sysroot, assume_sframe=assume_sframe)
        entries = walked.trace.entries
        assert entries and entries[0] == ours[0].pc, core.name  # the sample's own pc
        frames[0] += sum(1 for a, b in zip(entries, ours, strict=False) if a == b.pc)
        frames[1] += len(ours)
        reason = explain(walked, ours)
        stops[walked.trace.stop.name] += 1
        if reason is None:
            unexplained.append(f"{core.name}: stop {walked.trace.stop.name}, methods "
                               f"{walked.trace.methods}\n  kernel: {[hex(a) for a in entries]}"
                               f"\n  ours:   {[(hex(f.pc), f.method) for f in ours]}")
            continue
        reasons[reason] += 1
        if reason == "complete":
            # gdb-multiarch's bt, frame by frame (its pc None: "<signal handler called>";
            # it may stop short at a signed RA, test_cross_cores.py explains those).
            theirs = [frame.pc for frame in corpus.gdb(core)]
            assert all(pc is None or pc == entry
                       for pc, entry in zip(theirs, entries, strict=False)), core.name
            assert len(theirs) == len(entries) or corpus.arch.name == "aarch64", core.name
            gdb_same += len(theirs) == len(entries)
    complete = reasons["complete"]
    print(f"\n{corpus.arch.name} {'generated tables' if assume_sframe else 'as built'}: "
          f"{len(corpus.cores)} cores, {complete} reach the outermost frame ({gdb_same} of "
          f"them gdb's bt to its last frame, the others up to the signed RA where gdb "
          f"stops); frames {frames[0]}/{frames[1]}; stops "
          f"{dict(sorted(stops.items()))}")
    for reason, count in reasons.most_common():
        print(f"  {count:3}  {reason}")
    assert not unexplained, "\n".join(unexplained)
    assert len(corpus.cores) >= 30


@pytest.mark.parametrize("corpus", ["aarch64"], indirect=True)
def test_pointer_authentication_stripped_by_the_model(corpus: Corpus) -> None:  # noqa: F811
    """pac-ret: the saved return addresses are signed (qemu's CPU signs them); the kernel's
    walk strips the code (SFrame rows with the mangled-RA bit; frame records always), so no
    entry is a signed word and the entries are our frames' pcs."""
    from pysframe.sources.core import CoreFile

    found = signed = 0
    for core in (c for c in corpus.cores if "-own-" in c.name):
        ours = {frame.pc for frame in our_frames(corpus, core)}
        stack = CoreFile(str(core.core))
        sp = stack.threads[0].registers["sp"]
        words = {stack.memory.read(sp + 8 * i) for i in range(4096)}
        for assume_sframe in (False, True):
            walked = deferred_walk(core.core, corpus.arch.sysroot, assume_sframe=assume_sframe)
            assert all(entry >> 48 == 0 for entry in walked.trace.entries), core.name
            found += sum(1 for entry in walked.trace.entries if entry in ours)
            signed += sum(1 for entry in walked.trace.entries
                          if any(w is not None and w >> 48 and w & ((1 << 48) - 1) == entry
                                 for w in words))
    assert found >= 40 and signed >= 40, (found, signed)


def test_validate_kernel_per_machine(corpus: Corpus) -> None:  # noqa: F811
    """``validate --kernel`` of the programs gas built: registered as they are, with one
    warning per AArch64 pac-ret program (its rows sign the RA) and none elsewhere."""
    from pysframe.elf import ElfImage
    from pysframe.format.validation import ERROR, validate

    programs = sorted({core.program for core in corpus.cores if core.gsframe})
    assert programs
    for program in programs:
        (section,) = ElfImage(str(program)).sframe_sections()
        findings = [f for f in validate(section.raw, section.address, kernel=True)
                    if f.check == "kernel"]
        assert not [f for f in findings if f.severity == ERROR], program
        signed = [f for f in findings if "signed RA" in f.message]
        pac = corpus.arch.name == "aarch64" and "-own-" in program.name
        assert bool(signed) == pac and len(findings) == len(signed), (program, findings)

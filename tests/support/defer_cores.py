"""A core of the cross-architecture corpus (``cross_cores.py``) as a perf sample would
carry it to the kernel's deferred unwinder: the thread's user registers and a copy of
its stack from SP (perf's largest, 65528 bytes), over the process's files mapped as the
ELF loader maps them (each ``PT_GNU_SFRAME`` registered as the series' ``binfmt_elf``
does, or, with ``assume_sframe``, every file given our generated table: a distribution
built with ``--gsframe``). The walk is :func:`pysframe.deferred.unwind_user`."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from pysframe.cli.stack_core import load_core
from pysframe.deferred import EntryRegisters, Mm, UserTrace, unwind_user
from pysframe.deferred.mm import map_elf
from pysframe.deferred.what_if import assume_sframe as register_generated
from pysframe.format.lookup import FrameRow
from pysframe.session.tables import GeneratedTables
from pysframe.unwind.address_space import AddressSpace, Mapping
from pysframe.unwind.modules import BinaryFinder
from pysframe.unwind.step import Stop

#: perf's largest user stack copy (``--call-graph dwarf,65528``).
STACK_COPY = 65528


class Walked(NamedTuple):
    trace: UserTrace
    mm: Mm
    space: AddressSpace
    #: The registry's answer per file (0 registered, a negative errno, None: no table).
    tables: dict[str, int | None]


def deferred_walk(core: Path, sysroot: str, *, assume_sframe: bool) -> Walked:
    """The kernel's walk of the core's first thread."""
    finder = BinaryFinder(report_unreadable=False, tables=GeneratedTables())
    space = AddressSpace()
    refused: list[Mapping] = []
    core_file, arch = load_core(str(core), finder, space, None, sysroot, refused)
    mm = Mm(abi=arch.abi)
    tables: dict[str, int | None] = {}
    for mapping in space.mappings:
        module = mapping.module
        if module is None or module.image is None or mapping.filename in tables:
            continue
        mapped = map_elf(mm, module.image.data, module.bias, mapping.filename)
        tables[mapping.filename] = mapped.sframe
        if assume_sframe and mapped.sframe != 0 and mapped.text is not None:
            tables[mapping.filename] = register_generated(mm, module, mapped.text,
                                                          mapping.filename)
    registers = core_file.threads[0].registers
    sp = registers[arch.sp]
    mm.overlay = (sp, core_file.memory.read_bytes(sp, STACK_COPY))
    others = {number: registers[name] for name, number in arch.dwarf}
    entry = EntryRegisters(registers[arch.pc], sp, registers[arch.fp], others,
                           registers[arch.lr] if arch.lr is not None else None)
    return Walked(unwind_user(mm, entry), mm, space, tables)


class Frame(NamedTuple):
    """One frame of ``sframe stack --core --json`` (checked against gdb-multiarch by
    test_cross_cores.py): its pc and how it was found ("sigreturn": a signal
    trampoline; "signal": the frame a signal interrupted)."""

    pc: int
    method: str


def _function_end(walked: Walked, address: int) -> int | None:
    """The end of the function holding ``address`` by the registered tables (None: no
    table covers it)."""
    section = walked.mm.sframes.find_section(address)
    if section is None or section.lookup is None:
        return None
    entry = section.lookup.find_fde(address)
    return None if entry is None else entry.start + entry.size


def _file(walked: Walked, address: int) -> str:
    mapping = walked.space.find(address)
    return mapping.filename.rsplit("/", 1)[-1] if mapping is not None else "no file"


def explain(walked: Walked, ours: list[Frame]) -> str | None:
    """Why the kernel's trace is not our chain, from the kernel's rules, each premise
    checked on the walk; "complete" when it is our chain; None when no rule explains it (a
    defect of the model or of the test)."""
    entries = walked.trace.entries
    pcs = [frame.pc for frame in ours]
    if entries == pcs:
        return "complete"
    same = next((i for i, (a, b) in enumerate(zip(entries, pcs, strict=False)) if a != b),
                min(len(entries), len(pcs)))
    # The step that failed or went elsewhere: from frame ``last``, by SFrame where a
    # registered table covers its pc, else by the machine's fallback.
    last = same - 1
    pc = pcs[last]
    if last > 0 and _function_end(walked, pc - 1) == pc:
        return ("a call that does not return ends its function: the kernel looks the "
                "caller's row up at the return address, in the next function")
    if same < len(entries):
        return _went_elsewhere(walked, ours, last)
    return _cut_short(walked, ours, last)


def _went_elsewhere(walked: Walked, ours: list[Frame], last: int) -> str | None:
    pc, fallback = ours[last].pc, walked.mm.arch.fallback
    row = walked.mm.sframes.find(pc)
    if isinstance(row, FrameRow):
        methods = walked.trace.methods
        if (last > 0 and methods[last - 1] == "fp" and fallback == "frame record"
                and row.cfa.regnum == walked.mm.arch.policy.sp_reg):
            return ("the frame record step before gave SP = FP + 16, which is not the "
                    "caller's SP where the record sits at the bottom of its frame: this "
                    "frame's SP-based row reads the wrong slots")
        return None
    if ours[last + 1].method == "signal":
        return (f"past a signal frame the {fallback} leads to a return address of the "
                "interrupted code, not its pc: the interrupted frame is skipped")
    if last == 0 and fallback != "frame pointer":
        return (f"topmost frame in {_file(walked, pc)} without SFrame: the {fallback} is "
                "read from the stack, the return address still in the link register is "
                "not (the caller is skipped or a stale one taken)")
    if fallback == "back chain":
        return (f"{_file(walked, pc)} has no registered SFrame and the word at SP is not "
                "its caller's SP (code built without -mbackchain keeps other data there)")
    return None


def _cut_short(walked: Walked, ours: list[Frame], last: int) -> str | None:
    stop, fallback = walked.trace.stop, walked.mm.arch.fallback
    pc = ours[last].pc
    if ours[last].method == "sigreturn" or (last + 1 < len(ours)
                                            and ours[last + 1].method == "sigreturn"):
        return "signal trampoline: the kernel has no rule for a signal frame"
    if stop is Stop.DEPTH:
        return "depth limit"
    if stop is Stop.MEMORY and walked.trace.fault is not None and walked.mm.overlay_missed(
            walked.trace.fault):
        return "the caller's frame lies beyond the stack copy"
    if walked.mm.sframes.find_section(pc) is not None:
        return None
    if fallback == "back chain" and stop is Stop.OUTERMOST:
        return (f"{_file(walked, pc)} has no registered SFrame and the word at SP is 0, "
                "which the back chain method takes for the outermost frame")
    return (f"{_file(walked, pc)} has no registered SFrame and the {fallback} method finds "
            f"no caller ({stop.name})")

"""What ``sframe stack`` prints: each thread's frames named as gdb names them (inline and
tail-call frames included), as text or JSON, and the legend of modules."""

from __future__ import annotations

import sys

from ..records import NamedTuple
from ..symbolize.frames import FrameNamer
from ..symbolize.symbolizer import SymbolHit
from ..unwind.address_space import JIT_FILENAME, Mapping
from ..unwind.modules import ORIGIN_REPLACED
from ..unwind.unwinder import EXACT_PC, Unwind
from .errors import EXIT_INVALID, EXIT_OK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TAILCALL = "tailcall"


class NamedFrame(NamedTuple):
    """One printed frame: its pc, how it was found, the ELF symbol (``None`` for a
    tail-call frame or an unknown one), its names innermost first, its mapping."""

    pc: int
    method: str
    symbol: SymbolHit | None
    function: str
    names: list[str]
    mapping: Mapping | None

    def build_id(self) -> str | None:
        module = self.mapping.module if self.mapping is not None else None
        found = module.image.build_id() if module is not None and module.image else None
        return found.hex() if found else None

    def as_json(self) -> dict[str, Any]:
        mapping = self.mapping
        return {
            "pc": self.pc, "function": self.function, "names": self.names,
            "path": mapping.filename if mapping else None,
            "file_offset": (self.pc - mapping.start + mapping.pgoff) if mapping else None,
            "build_id": self.build_id(),
            "sframe": mapping.module.origin if mapping and mapping.module else None,
            "method": self.method}


class NamedThread(NamedTuple):
    tid: int
    name: str
    frames: list[NamedFrame]
    stop: str


def describe(tid: int, name: str, result: Unwind, namer: FrameNamer) -> NamedThread:
    """One thread's frames, with the tail-call frames gdb would show (method
    ``tailcall``)."""
    frames: list[NamedFrame] = []
    previous: tuple[Mapping | None, int] | None = None  # the callee's (mapping, lookup pc)
    for index, (frame, mapping) in enumerate(zip(result.frames, result.mappings, strict=True)):
        lookup = frame.pc if index == 0 or frame.method in EXACT_PC else frame.pc - 1
        if previous is not None and frame.method not in EXACT_PC:
            for called, pc in namer.tail_calls(mapping, frame.pc, *previous):
                frames.append(NamedFrame(pc, TAILCALL, None, called, [called],
                                         namer.space.find(pc - 1)))
        symbol, names = namer.frame(mapping, lookup)
        frames.append(NamedFrame(frame.pc, frame.method.value, symbol,
                                 namer.function_label(mapping, lookup, symbol, names), names,
                                 mapping))
        previous = (mapping, lookup)
    return NamedThread(tid, name, frames, result.stop.value)


def print_json(pid: int, threads: list[NamedThread]) -> int:
    document = {"pid": pid, "threads": [
        {"tid": thread.tid, "name": thread.name,
         "frames": [frame.as_json() for frame in thread.frames], "stop": thread.stop}
        for thread in threads]}
    import json  # only for --json

    json.dump(document, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return EXIT_OK


def print_text(threads: list[NamedThread], show_build_id: bool, modules: bool) -> int:
    out = []
    for thread in threads:
        out.append(f"Thread {thread.tid} ({thread.name}):" if thread.name
                   else f"Thread {thread.tid}:")
        number = 0
        for frame in thread.frames:
            out.extend(_frame_lines(frame, number, show_build_id))
            number += len(frame.names)
        out.append("")
    if modules:
        out.extend(_module_legend(threads))
    sys.stdout.write("\n".join(out))
    return EXIT_OK if threads else EXIT_INVALID


def _frame_lines(frame: NamedFrame, number: int, show_build_id: bool) -> list[str]:
    mapping = frame.mapping
    if mapping is not None and mapping.filename == JIT_FILENAME:
        where = JIT_FILENAME  # code with no file: its offset would be into nothing
    else:
        where = (f"{mapping.filename}+{frame.pc - mapping.start + mapping.pgoff:#x}"
                 if mapping and mapping.filename else "[unknown]")
    build_id = frame.build_id()
    if show_build_id and build_id:
        where += f" {build_id}"
    lines = []
    # Inlined calls first, as gdb and eu-stack -i show them: same pc, no offset.
    for inlined in frame.names[:-1]:
        lines.append(f"#{number:<2} {frame.pc:#018x} {inlined} (inlined)")
        number += 1
    lines.append(f"#{number:<2} {frame.pc:#018x} {frame.function} ({where})")
    return lines


_ORIGINS = {".sframe": "its own .sframe section (+ CFI for functions it lacks)",
            "generated": "SFrame generated from its .eh_frame (cached by build id)",
            ORIGIN_REPLACED: "SFrame generated from its .eh_frame, its own .sframe being "
                             "damaged (cached by build id)"}


def _module_legend(threads: list[NamedThread]) -> list[str]:
    """Which SFrame table each module on the stacks was unwound with."""
    seen: dict[str, tuple[str | None, str | None]] = {}
    for thread in threads:
        for frame in thread.frames:
            mapping = frame.mapping
            if mapping is not None and mapping.filename and mapping.filename not in seen:
                origin = mapping.module.origin if mapping.module else None
                seen[mapping.filename] = (frame.build_id(), origin)
    lines = ["Modules:"]
    for path, (build_id, origin) in seen.items():
        lines.append(f"  {path}")
        lines.append(f"      build id {build_id or '(none)'}; unwound with "
                     f"{_ORIGINS.get(origin or '', origin or 'no SFrame table')}")
    lines.append("")
    return lines

"""``sframe stack PID``: every thread's stack of a running process (x86-64), via ptrace."""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

from .errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, CommandError


def run_stack(pid: int, *, as_json: bool, show_build_id: bool, max_depth: int,
              report: Any) -> int:
    from ..format.constants import ABI
    from ..sources.live import Attached, LiveError, dwarf_registers, read_maps
    from ..symbolize.symbolizer import Symbolizer
    from ..unwind.modules import AddressSpace, BinaryFinder, Mapping
    from ..unwind.unwinder import EXACT_PC, Registers, Unwinder

    if platform.machine() != "x86_64":
        raise CommandError(f"sframe stack supports x86-64 only (this is {platform.machine()})",
                           EXIT_UNREADABLE)
    finder = BinaryFinder()
    space = AddressSpace()
    try:
        maps = read_maps(pid)
    except OSError as error:
        raise CommandError(f"process {pid}: {error.strerror or error}", EXIT_UNREADABLE) from None
    for entry in maps:
        if "x" in entry.perms and entry.path.startswith("/"):
            module = finder.module(entry.path, None, entry.start, entry.pgoff)
            space.add(Mapping(entry.start, entry.end, entry.pgoff, entry.path, None, module))
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE, max_depth)
    symbolizer = Symbolizer()
    threads_out: list[dict[str, Any]] = []
    try:
        with Attached(pid) as attached:
            memory = attached.memory()
            for thread in attached.threads():
                regs = thread.registers
                registers = Registers(regs["rip"], regs["rsp"], regs["rbp"],
                                      others=dwarf_registers(regs))
                result = unwinder.unwind(registers, memory, space)  # type: ignore[arg-type]
                frames: list[dict[str, Any]] = []
                for index, (frame, mapping) in enumerate(zip(result.frames, result.mappings,
                                                             strict=True)):
                    lookup = (frame.pc if index == 0 or frame.method in EXACT_PC
                              else frame.pc - 1)
                    image = mapping.module.image if mapping and mapping.module else None
                    build_id = image.build_id() if image is not None else None
                    frames.append({
                        "pc": frame.pc, "function": symbolizer.symbol(mapping, lookup),
                        "path": mapping.filename if mapping else None,
                        "file_offset": (frame.pc - mapping.start + mapping.pgoff) if mapping
                        else None,
                        "build_id": build_id.hex() if build_id else None,
                        "method": frame.method})
                threads_out.append({"tid": thread.tid, "name": thread.name, "frames": frames,
                                    "stop": result.stop.value})
    except LiveError as error:
        raise CommandError(str(error.strerror or error), EXIT_UNREADABLE) from None
    if as_json:
        json.dump({"pid": pid, "threads": threads_out}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return EXIT_OK
    out = []
    for listed in threads_out:
        out.append(f"Thread {listed['tid']} ({listed['name']}):")
        for number, frame in enumerate(listed["frames"]):
            where = (f"{frame['path']}+{frame['file_offset']:#x}" if frame["path"]
                     else "[unknown]")
            if show_build_id and frame["build_id"]:
                where += f" {frame['build_id']}"
            out.append(f"#{number:<2} {frame['pc']:#018x} {frame['function']} ({where})")
        out.append("")
    sys.stdout.write("\n".join(out))
    return EXIT_OK if threads_out else EXIT_INVALID

"""``sframe stack PID``: every thread's stack of a running process (x86-64), via ptrace."""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

from .errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, CommandError


def run_stack(pid: int | None, *, as_json: bool, show_build_id: bool, max_depth: int,
              report: Any, core: str | None = None) -> int:
    from ..format.constants import ABI
    from ..sources.live import Attached, LiveError, read_maps
    from ..symbolize.symbolizer import Symbolizer
    from ..unwind.modules import AddressSpace, BinaryFinder, Mapping
    from ..unwind.unwinder import Unwinder

    if platform.machine() != "x86_64":
        raise CommandError(f"sframe stack supports x86-64 only (this is {platform.machine()})",
                           EXIT_UNREADABLE)
    finder = BinaryFinder()
    space = AddressSpace()
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE, max_depth)
    symbolizer = Symbolizer()
    threads_out: list[dict[str, Any]] = []
    if core is not None:
        from ..sources.core import CoreError, CoreFile

        try:
            core_file = CoreFile(core)
        except (OSError, CoreError) as error:
            raise CommandError(str(error), EXIT_UNREADABLE if isinstance(error, OSError)
                               else EXIT_INVALID) from None
        for mapped in core_file.mappings:
            module = finder.module(mapped.path, None, mapped.start, mapped.pgoff)
            if module is not None:
                space.add(Mapping(mapped.start, mapped.end, mapped.pgoff, mapped.path, None,
                                  module))
        for core_thread in core_file.threads:
            threads_out.append(_walk(core_thread.tid, "", core_thread.registers,
                                     core_file.memory, space, unwinder, symbolizer))
        pid = core_file.threads[0].tid if core_file.threads else 0
        return _print(pid, threads_out, as_json, show_build_id)
    assert pid is not None
    try:
        maps = read_maps(pid)
    except OSError as error:
        raise CommandError(f"process {pid}: {error.strerror or error}", EXIT_UNREADABLE) from None
    for entry in maps:
        if "x" in entry.perms and entry.path.startswith("/"):
            module = finder.module(entry.path, None, entry.start, entry.pgoff)
            space.add(Mapping(entry.start, entry.end, entry.pgoff, entry.path, None, module))
    try:
        with Attached(pid) as attached:
            memory = attached.memory()
            for thread in attached.threads():
                threads_out.append(_walk(thread.tid, thread.name, thread.registers, memory,
                                         space, unwinder, symbolizer))
    except LiveError as error:
        raise CommandError(str(error.strerror or error), EXIT_UNREADABLE) from None
    return _print(pid, threads_out, as_json, show_build_id)


def _walk(tid: int, name: str, regs: dict[str, int], memory: Any, space: Any, unwinder: Any,
          symbolizer: Any) -> dict[str, Any]:
    """One thread's frames as plain data."""
    from ..sources.live import dwarf_registers
    from ..unwind.unwinder import EXACT_PC, Registers

    registers = Registers(regs["rip"], regs["rsp"], regs["rbp"], others=dwarf_registers(regs))
    result = unwinder.unwind(registers, memory, space)
    frames: list[dict[str, Any]] = []
    for index, (frame, mapping) in enumerate(zip(result.frames, result.mappings, strict=True)):
        lookup = frame.pc if index == 0 or frame.method in EXACT_PC else frame.pc - 1
        image = mapping.module.image if mapping and mapping.module else None
        build_id = image.build_id() if image is not None else None
        frames.append({
            "pc": frame.pc, "function": symbolizer.symbol(mapping, lookup),
            "path": mapping.filename if mapping else None,
            "file_offset": (frame.pc - mapping.start + mapping.pgoff) if mapping else None,
            "build_id": build_id.hex() if build_id else None,
            "method": frame.method})
    return {"tid": tid, "name": name, "frames": frames, "stop": result.stop.value}


def _print(pid: int, threads_out: list[dict[str, Any]], as_json: bool,
           show_build_id: bool) -> int:
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

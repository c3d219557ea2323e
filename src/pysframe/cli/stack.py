"""``sframe stack PID`` / ``--core CORE``: every thread's stack (x86-64).

A live process is stopped only while its threads' registers are read and its stacks are
walked; modules are opened before the stop and names are looked up after the detach, so
the target is held as briefly as possible. A deadline (``--timeout``) bounds the stop:
when it passes the walk is abandoned, the threads are detached and the tool fails.
"""

from __future__ import annotations

import contextlib
import errno
import json
import platform
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import PysframeError
from .errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, CommandError


@dataclass(slots=True)
class _Walked:
    tid: int
    name: str
    unwind: Any  # unwind.unwinder.Unwind


class StackTimeout(PysframeError):
    """The walk of a stopped process outlived ``--timeout``."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`StackTimeout` in the main thread after ``seconds`` (disarmed on exit)."""
    if seconds <= 0:
        yield
        return

    def expired(_signum: int, _frame: object) -> None:
        raise StackTimeout(f"gave up after {seconds:g} s (--timeout)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_stack(pid: int | None, *, as_json: bool, show_build_id: bool, max_depth: int,
              report: Any, core: str | None = None, timeout: float = 10.0,
              debuginfo: bool = True, modules: bool = False, exe: str | None = None) -> int:
    from ..format.constants import ABI
    from ..unwind.address_space import AddressSpace
    from ..unwind.modules import BinaryFinder
    from ..unwind.unwinder import Unwinder

    if platform.machine() != "x86_64":
        raise CommandError(f"sframe stack supports x86-64 only (this is {platform.machine()})",
                           EXIT_UNREADABLE)
    finder = BinaryFinder()
    space = AddressSpace()
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE, max_depth)
    if core is not None:
        pid, walked = _walk_core(core, finder, space, unwinder, exe)
    else:
        assert pid is not None
        walked = _walk_live(pid, finder, space, unwinder, timeout)
    names = _Names(debuginfo, space)
    threads_out = [_describe(thread, names) for thread in walked]
    names.save()
    return _print(pid, threads_out, as_json, show_build_id, modules)


def _walk_core(core: str, finder: Any, space: Any, unwinder: Any,
               exe: str | None) -> tuple[int, list[_Walked]]:
    from ..sources.core import CoreFile
    from ..unwind.address_space import Mapping

    core_file = CoreFile(core)
    program = core_file.executable
    if exe is not None and program is None:
        raise CommandError(f"{core}: the core does not say which file is the program "
                           "(no AT_ENTRY in NT_AUXV), so --exe cannot replace it",
                           EXIT_INVALID)
    for mapped in core_file.mappings:
        # --exe: the program as it is now (moved, or rebuilt with the same build id).
        path = exe if exe is not None and mapped.path == program else mapped.path
        module = finder.module(path, None, mapped.start, mapped.pgoff)
        if module is not None:
            space.add(Mapping(mapped.start, mapped.end, mapped.pgoff, path, None, module))
    walked = [_Walked(thread.tid, "", _unwind(thread.registers, core_file.memory, space,
                                              unwinder))
              for thread in core_file.threads]
    return (core_file.threads[0].tid if core_file.threads else 0), walked


def _walk_live(pid: int, finder: Any, space: Any, unwinder: Any,
               timeout: float) -> list[_Walked]:
    from ..sources.live import Attached, LiveError, read_maps
    from ..unwind.address_space import Mapping

    try:
        maps = read_maps(pid)
    except OSError as error:
        raise CommandError(f"process {pid}: {error.strerror or error}", EXIT_UNREADABLE) from None
    # Open every module (and generate missing SFrame) before the target is stopped.
    for entry in maps:
        if "x" in entry.perms and entry.path.startswith("/"):
            source = entry.path
            if source.endswith(" (deleted)"):
                # Replaced or removed since it was mapped (a library upgraded under a running
                # process): the kernel still serves the mapped file itself.
                source = f"/proc/{pid}/map_files/{entry.start:x}-{entry.end:x}"
            module = finder.module(source, None, entry.start, entry.pgoff)
            space.add(Mapping(entry.start, entry.end, entry.pgoff, entry.path, None, module))
    walked: list[_Walked] = []
    try:
        # Attached is left (threads detached) after the deadline is disarmed, so the
        # alarm can never interrupt the detaching itself.
        with Attached(pid, timeout=min(2.0, timeout) if timeout > 0 else 2.0) as attached, \
                _deadline(timeout):
            memory = attached.memory()
            for thread in attached.threads():
                walked.append(_Walked(thread.tid, thread.name,
                                      _unwind(thread.registers, memory, space, unwinder)))
    except StackTimeout as error:
        raise CommandError(f"process {pid}: {error}; the process was released",
                           EXIT_UNREADABLE) from None
    except LiveError as error:
        message = str(error)
        if error.errno == errno.EPERM:
            message += " (ptrace not permitted: see /proc/sys/kernel/yama/ptrace_scope)"
        raise CommandError(message, EXIT_UNREADABLE) from None
    return walked


def _unwind(regs: dict[str, int], memory: Any, space: Any, unwinder: Any) -> Any:
    from ..sources.live import dwarf_registers
    from ..unwind.unwinder import Registers

    registers = Registers(regs["rip"], regs["rsp"], regs["rbp"], others=dwarf_registers(regs))
    return unwinder.unwind(registers, memory, space)


class _Names:
    """ELF symbols (``name+0xoff``) and, with debug info, gdb's names, inline frames and
    tail-call frames."""

    def __init__(self, debuginfo: bool, space: Any) -> None:
        from ..symbolize.symbolizer import Symbolizer

        self.symbolizer = Symbolizer()
        self.debuginfo = debuginfo
        self.space = space
        self._dwarf: dict[tuple[str, bytes | None], Any] = {}
        self._exported: dict[tuple[str, bytes | None],
                             tuple[dict[str, int], dict[str, int]]] = {}

    def dwarf(self, module: Any) -> Any:
        if not self.debuginfo or module is None or module.image is None:
            return None
        key = (module.path, module.build_id)
        if key not in self._dwarf:
            from ..symbolize.dwarf_cache import CachedDwarfNames

            self._dwarf[key] = CachedDwarfNames(module.path, module.image.build_id())
        return self._dwarf[key]

    def save(self) -> None:
        """Keep what the DWARF said for the next run (memo by build id)."""
        for dwarf in self._dwarf.values():
            if dwarf is not None:
                dwarf.save()

    def frame(self, mapping: Any, lookup: int) -> tuple[str, list[str]]:
        """The symbol text and the frame names innermost first (inlined ones, then the
        function), for the runtime ``lookup`` address."""
        symbol = self.symbolizer.symbol(mapping, lookup)
        names = None
        if mapping is not None:
            dwarf = self.dwarf(mapping.module)
            if dwarf is not None:
                names = dwarf.frames_at(lookup - mapping.module.bias)
        if not names:
            names = [symbol.rsplit("+0x", 1)[0]]
        return symbol, names

    def tail_calls(self, caller: Any, return_address: int, callee: Any,
                   callee_lookup: int) -> list[tuple[str, int]]:
        """The frames gdb synthesizes between a caller (returning to ``return_address``)
        and its callee from DWARF call sites: functions that were left by a tail call
        (``jmp``), innermost first, each with its runtime pc. Remembered in the caller's
        DWARF memo, so a warm run reads no DWARF and no symbol table for them."""
        if (not self.debuginfo or caller is None or callee is None or caller.module is None
                or callee.module is None):
            return []
        caller_dwarf, callee_dwarf = self.dwarf(caller.module), self.dwarf(callee.module)
        if caller_dwarf is None or callee_dwarf is None:
            return []
        caller_pc = return_address - caller.module.bias
        callee_pc = callee_lookup - callee.module.bias
        callee_key = (callee.module.build_id or b"").hex() or callee.module.path

        def compute() -> list[tuple[str, int]]:
            targets = caller_dwarf.call_site_targets(caller_pc)
            if targets is None:
                return []
            if isinstance(targets, str):
                # A declaration (often a call into another file): gdb looks the name up
                # in every file, in load order, global symbols first.
                found = self._address_of(targets)
                if found is None or found[0] is not callee.module.image:
                    return []
                targets = [found[1]]
            elif caller.module.image is not callee.module.image:
                return []
            callee_entry = callee_dwarf.function_entry(callee_pc)
            if callee_entry is None:  # no DWARF for it: gdb takes the ELF symbol's start
                symbol = self.symbolizer.symbol(callee, callee_lookup)
                if "+0x" not in symbol:
                    return []
                callee_entry = callee_pc - int(symbol.rsplit("+0x", 1)[1], 16)
            if callee_entry in targets:
                return []
            return callee_dwarf.tail_call_chain(targets, callee_entry) or []

        chain = caller_dwarf.remember(("tail_frames", caller_pc, callee_key, callee_pc), compute)
        bias = callee.module.bias
        return [(name, pc + bias) for name, pc in chain]

    def _address_of(self, name: str) -> tuple[Any, int] | None:
        """(image, link-time address) of function ``name``: the first global definition in
        load order, else the first local one (gdb's minimal-symbol lookup)."""
        from ..symbolize.symbols import function_addresses

        tables = []
        for mapping in self.space.mappings:  # the program, then libraries, as loaded
            module = mapping.module
            if module is None or module.image is None:
                continue
            key = (module.path, module.build_id)
            if key not in self._exported:
                self._exported[key] = function_addresses(module.image)
            tables.append((module.image, self._exported[key]))
        for scope in (0, 1):  # globals, then locals
            for image, (global_names, local_names) in tables:
                address = (global_names if scope == 0 else local_names).get(name)
                if address is not None:
                    return image, address
        return None


def _describe(thread: _Walked, names: _Names) -> dict[str, Any]:
    """One thread's frames as plain data (tail-call frames gdb would show included, with
    method "tailcall")."""
    from ..unwind.unwinder import EXACT_PC

    result = thread.unwind
    frames: list[dict[str, Any]] = []
    previous: tuple[Any, int] | None = None  # the callee's (mapping, lookup pc)
    for index, (frame, mapping) in enumerate(zip(result.frames, result.mappings, strict=True)):
        lookup = frame.pc if index == 0 or frame.method in EXACT_PC else frame.pc - 1
        if previous is not None and frame.method not in EXACT_PC:
            for name, pc in names.tail_calls(mapping, frame.pc, *previous):
                frames.append(_frame_record(pc, "tailcall", f"{name}", [name],
                                            names.space.find(pc - 1)))
        symbol, frame_names = names.frame(mapping, lookup)
        frames.append(_frame_record(frame.pc, frame.method.value, symbol, frame_names, mapping))
        previous = (mapping, lookup)
    return {"tid": thread.tid, "name": thread.name, "frames": frames,
            "stop": result.stop.value}


def _frame_record(pc: int, method: str, symbol: str, names: list[str],
                  mapping: Any) -> dict[str, Any]:
    image = mapping.module.image if mapping and mapping.module else None
    build_id = image.build_id() if image is not None else None
    return {
        "pc": pc, "function": symbol, "names": names,
        "path": mapping.filename if mapping else None,
        "file_offset": (pc - mapping.start + mapping.pgoff) if mapping else None,
        "build_id": build_id.hex() if build_id else None,
        "sframe": mapping.module.origin if mapping and mapping.module else None,
        "method": method}


def _print(pid: int, threads_out: list[dict[str, Any]], as_json: bool,
           show_build_id: bool, modules: bool = False) -> int:
    if as_json:
        json.dump({"pid": pid, "threads": threads_out}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return EXIT_OK
    out = []
    for listed in threads_out:
        out.append(f"Thread {listed['tid']} ({listed['name']}):" if listed["name"]
                   else f"Thread {listed['tid']}:")
        number = 0
        for frame in listed["frames"]:
            where = (f"{frame['path']}+{frame['file_offset']:#x}" if frame["path"]
                     else "[unknown]")
            if show_build_id and frame["build_id"]:
                where += f" {frame['build_id']}"
            # Inlined calls first, as gdb and eu-stack -i show them: same pc, no offset.
            for inlined in frame["names"][:-1]:
                out.append(f"#{number:<2} {frame['pc']:#018x} {inlined} (inlined)")
                number += 1
            outer = frame["names"][-1]
            symbol = frame["function"]
            if symbol != "[unknown]" and "+0x" in symbol:
                outer += "+" + symbol.rsplit("+", 1)[1]
            out.append(f"#{number:<2} {frame['pc']:#018x} {outer} ({where})")
            number += 1
        out.append("")
    if modules:
        out.extend(_module_legend(threads_out))
    sys.stdout.write("\n".join(out))
    return EXIT_OK if threads_out else EXIT_INVALID


_ORIGINS = {".sframe": "its own .sframe section (+ CFI for functions it lacks)",
            "generated": "SFrame generated from its .eh_frame (cached by build id)"}


def _module_legend(threads_out: list[dict[str, Any]]) -> list[str]:
    """Which SFrame table each module on the stacks was unwound with."""
    seen: dict[str, tuple[str | None, str | None]] = {}
    for listed in threads_out:
        for frame in listed["frames"]:
            if frame["path"] and frame["path"] not in seen:
                seen[frame["path"]] = (frame["build_id"], frame["sframe"])
    lines = ["Modules:"]
    for path, (build_id, origin) in seen.items():
        lines.append(f"  {path}")
        lines.append(f"      build id {build_id or '(none)'}; unwound with "
                     f"{_ORIGINS.get(origin or '', origin or 'no SFrame table')}")
    lines.append("")
    return lines

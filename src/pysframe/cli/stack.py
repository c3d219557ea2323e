"""``sframe stack PID`` / ``--core CORE``: every thread's stack (x86-64).

A live process is stopped only while its threads' registers are read and its stacks are
walked; modules are opened before the stop and names are looked up after the detach, so
the target is held as briefly as possible. A deadline (``--timeout``) bounds the stop:
when it passes the walk is abandoned, the threads are detached and the tool fails.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import PysframeError
from .errors import EXIT_INVALID, EXIT_UNREADABLE, CommandError

if TYPE_CHECKING:
    from ..unwind.unwinder import Unwind


@dataclass(slots=True)
class _Walked:
    tid: int
    name: str
    unwind: Unwind


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
              core: str | None = None, timeout: float = 10.0,
              debuginfo: bool = True, modules: bool = False, exe: str | None = None) -> int:
    from ..format.constants import ABI
    from ..unwind.address_space import AddressSpace
    from ..unwind.modules import BinaryFinder
    from ..unwind.unwinder import Unwinder

    if os.uname().machine != "x86_64":
        raise CommandError(f"sframe stack supports x86-64 only (this is {os.uname().machine})",
                           EXIT_UNREADABLE)
    finder = BinaryFinder()
    space = AddressSpace()
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE, max_depth)
    if core is not None:
        pid, walked = _walk_core(core, finder, space, unwinder, exe)
    else:
        assert pid is not None
        walked = _walk_live(pid, finder, space, unwinder, timeout)
    from ..symbolize.frames import FrameNamer
    from .stack_output import describe, print_json, print_text

    namer = FrameNamer(space, debuginfo=debuginfo)
    threads = [describe(thread.tid, thread.name, thread.unwind, namer) for thread in walked]
    namer.save()
    if as_json:
        return print_json(pid, threads)
    return print_text(threads, show_build_id, modules)


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

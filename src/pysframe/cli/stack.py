"""``sframe stack PID`` / ``--core CORE``: every thread's stack (x86-64; cores also of AArch64
and s390x, :mod:`.stack_core`).

A live process is stopped only while its threads' registers are read and its stacks are
walked; modules are opened before the stop and names are looked up after the detach, so
the target is held as briefly as possible. A deadline (``--timeout``) bounds the stop:
when it passes the walk is abandoned, the threads are detached and the tool fails.

The files mapped are checked to be the ones the target mapped, never assumed: a live
process's through its own view of the file system (``/proc/PID/map_files``,
``/proc/PID/root``: another mount namespace sees other files at the same paths), matched
by device and inode or build id; a core's by the build id the core kept. A file that
does not match is not used: a warning names it, its frames are left unnamed, and the
exit status is 1 if a stack went through it.
"""

from __future__ import annotations

import os
import stat
import sys
import time

from .. import c_signal as signal
from ..errors import Problems, PysframeError
from .errors import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    PHASES_VARIABLE,
    WHERE,
    CommandError,
    report,
)
from .stack_common import WalkedThread, add_jit_objects, shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from ..sources.core import CoreMemory
    from ..sources.live import MapEntry, ProcessMemory
    from ..unwind.address_space import Mapping
    from ..unwind.memory import StackReader

    # A static check (mypy) that the memories walked here fit the protocol the tracer takes.
    _READERS: tuple[type[StackReader], ...] = (CoreMemory, ProcessMemory)


class _Phases:
    """Where one run's time went, each :meth:`end` closing the phase of that name: the
    imports of the stack's own modules, opening modules (maps, binaries, tables from the
    cache), the JIT descriptor search, the target stopped (attach, walk, detach), naming
    the frames, printing. With PYSFRAME_PHASE_TIMES set, :meth:`report` prints them on
    stderr (as ``sframe script`` does)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def end(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.last
        self.last = now

    def report(self) -> None:
        if not os.environ.get(PHASES_VARIABLE):
            return
        try:
            sys.stdout.flush()  # the output's writing is part of its phase
        except OSError:
            pass
        self.end("output")
        shown = ", ".join(f"{name} {seconds * 1e3:.1f} ms"
                          for name, seconds in self.seconds.items())
        sys.stderr.write(f"phases: {shown}, total {(self.last - self.start) * 1e3:.1f} ms "
                         "(after the interpreter's start-up)\n")


class StackTimeout(PysframeError):
    """The walk of a stopped process outlived ``--timeout``."""


class _Deadline:
    """Raises :class:`StackTimeout` in the main thread after ``seconds`` (disarmed on exit).
    A class, not a ``contextlib`` generator: contextlib costs ~0.5 ms of a start-up."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.previous: Any = None

    def __enter__(self) -> None:
        if self.seconds > 0:
            self.previous = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *_: object) -> None:
        if self.seconds > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)

    def _expired(self, _signum: int, _frame: object) -> None:
        raise StackTimeout(f"gave up after {self.seconds:g} s (--timeout)")


def run_stack(pid: int | None, *, as_json: bool, show_build_id: bool, max_depth: int,
              core: str | None = None, timeout: float = 10.0,
              debuginfo: bool = True, modules: bool = False, exe: str | None = None,
              sysroot: str | None = None) -> int:
    phases = _Phases()
    from ..format.constants import ABI
    from ..session.tables import GeneratedTables
    from ..unwind.address_space import AddressSpace
    from ..unwind.modules import BinaryFinder
    from ..unwind.unwinder import Unwinder

    if core is None and os.uname().machine != "x86_64":
        raise CommandError(f"sframe stack supports x86-64 only (this is {os.uname().machine})",
                           EXIT_UNREADABLE)
    # Collected, and reported only after the target is released: nothing is written while
    # its threads are stopped (a closed stderr must not end us with threads held).
    problems = Problems()
    WHERE.at(core if core is not None else f"process {pid}")
    finder = BinaryFinder(problems=problems, report_unreadable=False,  # it warns itself
                          tables=GeneratedTables())
    space = AddressSpace()
    refused: list[Mapping] = []  # mappings whose file is not the one the target mapped
    phases.end("imports")
    if core is not None:
        from .stack_core import walk_core

        pid, walked = walk_core(core, finder, space, max_depth, exe, sysroot, refused)
        phases.end("core")
    else:
        assert pid is not None
        unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE, max_depth)
        walked = _walk_live(pid, finder, space, unwinder, timeout, refused, phases)
    from ..symbolize.frames import FrameNamer
    from .stack_output import describe, print_json, print_text

    namer = FrameNamer(space, debuginfo=debuginfo, problems=problems)
    threads = [describe(thread.tid, thread.name, thread.unwind, namer) for thread in walked]
    namer.save()
    phases.end("names")
    for problem in problems:
        report(str(problem))
    if as_json:
        status = print_json(pid, threads)
    else:
        status = print_text(threads, show_build_id, modules)
    lost = _lost(walked, refused) or bool(problems)
    phases.report()
    return EXIT_INVALID if status == EXIT_OK and lost else status


def _lost(walked: list[WalkedThread], refused: list[Mapping]) -> bool:
    """Whether a stack went through a file that could not be used (frames lost)."""
    ids = {id(mapping) for mapping in refused}
    return any(id(mapping) in ids for thread in walked for mapping in thread.unwind.mappings)


def _walk_live(pid: int, finder: Any, space: Any, unwinder: Any, timeout: float,
               refused: list[Mapping], phases: _Phases) -> list[WalkedThread]:
    from ..sources.live import Attached, LiveError, live_maps

    try:
        tid, maps = live_maps(pid)
        # Open every module (and generate missing SFrame) before the target is stopped.
        warnings = Problems()  # reported once the target is released
        _add_live_modules(pid, tid, maps, finder, space, refused, warnings)
        phases.end("modules")
        _add_live_jit_code(pid, tid, space, warnings)
        phases.end("jit")
    except LiveError as error:
        raise CommandError(str(error), EXIT_UNREADABLE) from None
    walked: list[WalkedThread] = []
    try:
        # Attached is left (threads detached) after the deadline is disarmed, so the
        # alarm can never interrupt the detaching itself.
        with Attached(pid, timeout=min(2.0, timeout) if timeout > 0 else 2.0) as attached, \
                _Deadline(timeout):
            memory = attached.memory()
            for thread in attached.threads():
                walked.append(WalkedThread(thread.tid, thread.name,
                                      _unwind(thread.registers, memory, space, unwinder)))
    except StackTimeout as error:
        raise CommandError(f"process {pid}: {error}; the process was released",
                           EXIT_UNREADABLE) from None
    except LiveError as error:
        raise CommandError(str(error), EXIT_UNREADABLE) from None
    phases.end("stopped")
    for warning in warnings:  # only now: a process that ended meanwhile needs none
        report(f"warning: {warning}")
    return walked


def _add_live_modules(pid: int, tid: int, maps: list[MapEntry], finder: Any, space: Any,
                      refused: list[Mapping], warnings: Problems) -> None:
    """The executable file mappings of ``pid``, each with its module when the file the
    process mapped can be opened; a warning in ``warnings`` for each file that could not
    be."""
    from ..sources.live import LiveError, open_memory
    from ..unwind.address_space import Mapping

    try:
        memory_fd = open_memory(pid, tid)  # for build ids, read before the target stops
    except LiveError:
        memory_fd = -1
    try:
        for entry in maps:
            if "x" not in entry.perms or not entry.path.startswith("/"):
                continue
            module, found = _live_module(pid, entry, maps, finder, memory_fd)
            mapping = Mapping(entry.start, entry.end, entry.pgoff, shown(entry.path), None,
                              module)
            if not found:
                refused.append(mapping)
                warnings.add(PysframeError(
                    f"not the file process {pid} mapped (another mount namespace, or "
                    "replaced since), and its own cannot be opened; its frames are not "
                    "unwound", path=mapping.filename))
            space.add(mapping)
    finally:
        if memory_fd >= 0:
            os.close(memory_fd)


def _add_live_jit_code(pid: int, tid: int, space: Any, problems: Problems) -> None:
    """:func:`add_jit_objects` of a live process, read before it is stopped."""
    from ..sources.live import LiveError, open_memory

    try:
        memory_fd = open_memory(pid, tid)
    except LiveError:
        return

    def read_bytes(address: int, size: int) -> bytes | None:
        try:
            return os.pread(memory_fd, size, address)
        except (OSError, OverflowError):
            return None

    try:
        add_jit_objects(read_bytes, space, problems)
    finally:
        os.close(memory_fd)


def _live_module(pid: int, entry: MapEntry, maps: list[MapEntry], finder: Any,
                 memory_fd: int) -> tuple[Any, bool]:
    """The module of ``entry`` (``None`` for a file that is not ELF) and whether the file
    the process mapped was found at all."""
    source = _mapped_file(pid, entry)
    if source is not None:
        return finder.module(source, None, entry.start, entry.pgoff), True
    # No path is known to be the mapped inode: only a file with the build id the process
    # has in memory will do (the same build installed again, or a file system whose
    # device numbers differ between stat and maps).
    build_id = _build_id_in_memory(memory_fd, entry, maps) if memory_fd >= 0 else None
    if build_id is None:
        return None, False
    path = entry.path.removesuffix(" (deleted)")
    for candidate in (path, f"/proc/{pid}/root{path}"):
        module = finder.module(candidate, build_id, entry.start, entry.pgoff)
        if module is not None:
            return module, True
    return None, False


def _mapped_file(pid: int, entry: MapEntry) -> str | None:
    """A path that opens the very file ``entry`` maps: its own path when that is the
    mapped inode here (so names and output stay the same), else the process's map_files
    link (the mapped file itself; needs privileges), else the path in the process's root
    (its mount namespace); ``None`` when none is known to be it."""
    if not entry.path.endswith(" (deleted)") and _is_mapped(entry.path, entry):
        return entry.path
    link = f"/proc/{pid}/map_files/{entry.start:x}-{entry.end:x}"
    if _is_mapped(link, entry, check_inode=False):
        return link
    inside = f"/proc/{pid}/root{entry.path}"
    if _is_mapped(inside, entry):
        return inside
    return None


def _is_mapped(path: str, entry: MapEntry, check_inode: bool = True) -> bool:
    """Whether ``path`` is a regular file, the inode ``entry`` maps when ``check_inode``."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return False
    if not stat.S_ISREG(status.st_mode):
        return False
    return not check_inode or (status.st_dev, status.st_ino) == (entry.device, entry.inode)


def _build_id_in_memory(memory_fd: int, entry: MapEntry, maps: list[MapEntry]) -> bytes | None:
    """The build id of the file ``entry`` maps, from the ELF headers the process has
    mapped at the start of that file (the mapping of the same inode at offset 0)."""
    from ..sources.core import build_id_in_headers

    first = next((other for other in maps if other.pgoff == 0 and other.inode == entry.inode
                  and other.device == entry.device and other.path == entry.path), None)
    if first is None:
        return None
    try:
        head = os.pread(memory_fd, min(first.end - first.start, 1 << 16), first.start)
    except (OSError, OverflowError):
        return None
    return build_id_in_headers(head)


def _unwind(regs: dict[str, int], memory: Any, space: Any, unwinder: Any) -> Any:
    from ..sources.live import dwarf_registers
    from ..unwind.unwinder import Registers

    registers = Registers(regs["rip"], regs["rsp"], regs["rbp"], others=dwarf_registers(regs))
    return unwinder.unwind(registers, memory, space)

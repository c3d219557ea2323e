"""``sframe stack --core CORE``: the threads of a core dump of x86-64, AArch64 or s390x.

The files are those the core's NT_FILE note names; a core without one (qemu-user writes
none) lists them through the dynamic loader's ``link_map`` in its memory, from the
program, which is then ``--exe`` or the path it was started by (AT_EXECFN; a relative
one taken from the core's directory). ``--sysroot DIR`` is where the target's files are
on this machine (a cross tree such as ``/usr/aarch64-linux-gnu``, or a copy of the
target's root): an absolute path the core names is looked up under it first. A file of
another machine than the core's is never used (the host's own libraries are found at
the target's paths without ``--sysroot``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import Problems
from ..format.constants import ABI
from ..records import record_class
from .errors import EXIT_INVALID, CommandError, report
from .stack_common import WalkedThread, add_jit_objects, shown

if TYPE_CHECKING:
    from ..sources.core import CoreFile
    from ..unwind.address_space import Mapping
    from ..unwind.unwinder import Registers

PT_DYNAMIC = 2
PF_X = 1
_PAGE = 0xFFF


@record_class(frozen=True)
class CoreArch:
    """What ``stack`` needs of a core's machine: the SFrame ABI, the ELF machine name its
    files must have, and how a thread's registers seed the unwinder."""

    abi: ABI
    machine: str
    pc: str
    sp: str
    fp: str
    #: The link register (None: x86-64, the return address is on the stack).
    lr: str | None
    #: The DWARF numbers of the other registers, by name.
    dwarf: tuple[tuple[str, int], ...]


_ARCHES = {
    62: CoreArch(ABI.AMD64_ENDIAN_LITTLE, "EM_X86_64", "rip", "rsp", "rbp", None,
                 (("rax", 0), ("rdx", 1), ("rcx", 2), ("rbx", 3), ("rsi", 4), ("rdi", 5),
                  ("rbp", 6), ("rsp", 7), *((f"r{n}", n) for n in range(8, 16)))),
    183: CoreArch(ABI.AARCH64_ENDIAN_LITTLE, "EM_AARCH64", "pc", "sp", "x29", "x30",
                  (*((f"x{n}", n) for n in range(31)), ("sp", 31))),
    22: CoreArch(ABI.S390X_ENDIAN_BIG, "EM_S390", "pswa", "r15", "r11", "r14",
                 tuple((f"r{n}", n) for n in range(16))),
}


def core_arch(machine: int) -> CoreArch:
    return _ARCHES[machine]


def thread_registers(arch: CoreArch, regs: dict[str, int]) -> Registers:
    """The unwinder's registers of a thread, from its NT_PRSTATUS values."""
    from ..unwind.unwinder import Registers

    lr = regs[arch.lr] if arch.lr is not None else 0
    return Registers(regs[arch.pc], regs[arch.sp], regs[arch.fp], lr,
                     others={number: regs[name] for name, number in arch.dwarf})


def in_sysroot(path: str, sysroot: str | None) -> str:
    """Where the target's file ``path`` is here: under ``sysroot`` if it is there (the
    path itself, else the same name in the sysroot's ``lib``), else ``path``."""
    if sysroot is None or not path.startswith("/"):
        return path
    for candidate in (os.path.join(sysroot, path.lstrip("/")),
                      os.path.join(sysroot, "lib", os.path.basename(path))):
        if os.path.isfile(candidate):
            return candidate
    return path


def load_core(core: str, finder: Any, space: Any, exe: str | None, sysroot: str | None,
              refused: list[Mapping]) -> tuple[CoreFile, CoreArch]:
    """The core and its machine, with the files it mapped added to ``space`` (modules from
    ``finder``; files that are not the ones the process mapped into ``refused``)."""
    from ..sources.core import CoreError, CoreFile

    core_file = CoreFile(core)
    if not core_file.threads:
        raise CoreError("no thread in the core (no NT_PRSTATUS note)", path=core)
    arch = core_arch(core_file.machine)
    if core_file.mappings:
        _add_file_mappings(core, core_file, arch, finder, space, exe, sysroot, refused)
    else:
        _add_loaded_objects(core, core_file, arch, finder, space, exe, sysroot, refused)
    return core_file, arch


def walk_core(core: str, finder: Any, space: Any, max_depth: int, exe: str | None,
              sysroot: str | None, refused: list[Mapping]) -> tuple[int, list[WalkedThread]]:
    from ..unwind.unwinder import Unwinder

    core_file, arch = load_core(core, finder, space, exe, sysroot, refused)
    add_jit_objects(core_file.memory.read_bytes, space,
                 Problems(lambda text: report(f"warning: {text}")))
    unwinder = Unwinder(arch.abi, max_depth)
    # Code outside every file (qemu's signal trampoline page, the vdso) from the core.
    unwinder.code_in_memory = core_file.memory.read_bytes
    walked = [WalkedThread(thread.tid, "", unwinder.unwind(
        thread_registers(arch, thread.registers), core_file.memory, space))
        for thread in core_file.threads]
    return core_file.threads[0].tid, walked


def _add_file_mappings(core: str, core_file: CoreFile, arch: CoreArch, finder: Any,
                       space: Any, exe: str | None, sysroot: str | None,
                       refused: list[Mapping]) -> None:
    """The files of NT_FILE, each checked against the build id the core kept."""
    from ..unwind.address_space import Mapping
    program = core_file.executable
    if exe is not None and program is None:
        raise CommandError(f"{core}: the core does not say which file is the program "
                           "(no AT_ENTRY in NT_AUXV), so --exe cannot replace it",
                           EXIT_INVALID)
    build_ids = core_file.build_ids()
    warned: set[str] = set()
    for mapped in core_file.mappings:
        # --exe: the program as it is now (moved, or rebuilt with the same build id).
        path = (exe if exe is not None and mapped.path == program
                else in_sysroot(mapped.path, sysroot))
        # With the core's build id, only a file with that build id is used (at the path,
        # or in ~/.debug's build-id cache).
        build_id = build_ids.get(mapped.path)
        module = _module(finder, path, build_id, mapped.start, mapped.pgoff, arch, warned)
        mapping = Mapping(mapped.start, mapped.end, mapped.pgoff, shown(path), None, module)
        if module is None and build_id is not None:
            refused.append(mapping)
            if path not in warned:
                warned.add(path)
                hint = " (give the right program with --exe)" if path == program else ""
                report(f"warning: {shown(path)}: {_mismatch(path, build_id)}; its frames "
                       f"are not unwound{hint}")
        if module is not None or build_id is not None:
            space.add(mapping)


def _module(finder: Any, path: str, build_id: bytes | None, start: int, pgoff: int,
            arch: CoreArch, warned: set[str]) -> Any:
    """The module of ``path`` mapped at ``start``, if it is a file of the core's machine
    (else a warning, once, and None)."""
    module = finder.module(path, build_id, start, pgoff)
    image = module.image if module is not None else None
    if image is not None and image.machine != arch.machine:
        if path not in warned:
            warned.add(path)
            report(f"warning: {shown(path)}: an {image.machine} file, the core is "
                   f"{arch.machine} (give the target's files with --sysroot); its frames "
                   "are not unwound")
        return None
    return module


def program_file(core: str, core_file: CoreFile, exe: str | None) -> str:
    """The program of a core without NT_FILE: ``exe``, else the path it was started by,
    relative paths taken from the core's directory (qemu writes the core in the
    directory the program ran in), then from here."""
    if exe is not None:
        return exe
    started = core_file.program_path
    if started is None:
        raise CommandError(f"{core}: the core names no files (no NT_FILE note) nor its "
                           "program; give the program with --exe", EXIT_INVALID)
    for candidate in (os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(core)),
                                                    started)), started):
        if os.path.isfile(candidate):
            return candidate
    raise CommandError(f"{core}: the core names no files (no NT_FILE note), and its program "
                       f"{started!r} is not found; give it with --exe", EXIT_INVALID)


def _add_loaded_objects(core: str, core_file: CoreFile, arch: CoreArch, finder: Any,
                        space: Any, exe: str | None, sysroot: str | None,
                        refused: list[Mapping]) -> None:
    """The files of a core without NT_FILE: the program, and the objects the dynamic
    loader's list in the core names, each mapped where its executable segments were
    loaded (the file's program headers plus its load bias)."""
    from ..elf import ElfError, ElfImage

    program = program_file(core, core_file, exe)
    try:
        image = ElfImage(program)
    except ElfError as error:
        raise CommandError(str(error), EXIT_INVALID) from None
    entry = core_file.entry
    displacement = entry - image.header.entry if entry is not None else 0
    dynamic = next((segment.vaddr for segment in image.program_headers()
                    if segment.type == PT_DYNAMIC), None)
    objects = (core_file.loaded_objects(dynamic + displacement) if dynamic is not None
               else [])
    if not objects:
        objects = [(displacement, "")]
    warned: set[str] = set()
    for number, (bias, name) in enumerate(objects):
        if number == 0 or not name:
            path = program if number == 0 else ""
        else:
            path = in_sysroot(name, sysroot)
        if not path.startswith("/") and number:
            continue  # the vdso ("linux-vdso.so.1"): in the core's memory, no file
        _add_object(path, bias, arch, finder, space, warned, refused)


def _add_object(path: str, bias: int, arch: CoreArch, finder: Any, space: Any,
                warned: set[str], refused: list[Mapping]) -> None:
    """The executable segments of the file at ``path`` loaded with ``bias``."""
    from ..elf import ElfError, ElfImage
    from ..unwind.address_space import Mapping
    try:
        segments = ElfImage(path).program_headers()
    except ElfError as error:
        if path not in warned:
            warned.add(path)
            report(f"warning: {error}; its frames are not unwound")
        return
    for segment in segments:
        if segment.type != 1 or not segment.flags & PF_X:  # PT_LOAD, executable
            continue
        start = bias + (segment.vaddr & ~_PAGE)
        end = bias + segment.vaddr + segment.memsz
        pgoff = segment.offset & ~_PAGE
        module = _module(finder, path, None, start, pgoff, arch, warned)
        mapping = Mapping(start, end, pgoff, shown(path), None, module)
        if module is None:
            refused.append(mapping)
        space.add(mapping)


def _mismatch(path: str, wanted: bytes) -> str:
    """Why the file at ``path`` is not the one with build id ``wanted``, in words."""
    from ..elf import ElfError, ElfImage

    try:
        found = ElfImage(path).build_id()
    except ElfError as error:
        return error.message
    if found is None:
        return f"has no build id; the core's is {wanted.hex()}"
    return f"build id {found.hex()} does not match the core's {wanted.hex()}"

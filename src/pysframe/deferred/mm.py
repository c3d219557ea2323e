"""A process's memory as the kernel's deferred unwinder sees it: VMAs and user reads.

The model of an ``mm_struct`` of one machine (x86-64 by default; AArch64 or s390x: its
word order, user address limit and unwinding rules, :mod:`.arch`): mapped areas (start, end, executable, their bytes), word
reads that fault outside them or above the user address limit (the kernel's
``get_user`` fails there), and the per-process SFrame registry
(:class:`~.registry.SFrameRegistry`) that the areas' changes drive: mapping an ELF
file with ``PT_GNU_SFRAME`` registers its section, unmapping drops what it covered.
"""

from __future__ import annotations

import mmap
import struct
from bisect import bisect_right

from ..format.constants import ABI
from ..records import record_class

#: x86-64 user addresses (47 bits; TASK_SIZE_MAX is one page below 2^47).
USER_LIMIT = (1 << 47) - 4096


@record_class
class Vma:
    """A mapped area ``[start, end)``; ``data`` its bytes (shorter: the rest reads 0,
    as the zero fill after a file's end)."""

    start: int
    end: int
    executable: bool
    data: bytes | memoryview
    name: str = ""


class Mm:
    """Mapped areas of one process, its user-memory reads and its SFrame registry."""

    def __init__(self, user_limit: int | None = None, validation: bool = False, *,
                 abi: ABI = ABI.AMD64_ENDIAN_LITTLE) -> None:
        from .arch import kernel_arch
        from .registry import SFrameRegistry

        #: The machine (:mod:`.arch`): its word order, its user address limit (the
        #: default ``user_limit``) and the unwinder's rules.
        self.arch = kernel_arch(abi)
        self.user_limit = self.arch.user_limit if user_limit is None else user_limit
        self._word = struct.Struct(f"{self.arch.byteorder}Q")
        self._vmas: list[Vma] = []
        self._starts: list[int] = []
        #: A thread's stack copy ``(base, bytes)`` read before the areas (a perf sample's
        #: STACK_USER: the stack beyond it reads as unmapped).
        self.overlay: tuple[int, bytes | memoryview] | None = None
        #: The ELF files :func:`map_elf` mapped, by name, with their SFrame outcome.
        self.files: dict[str, int | None] = {}
        #: The sections registered for this process (sframe_add_section's maple tree).
        self.sframes = SFrameRegistry(self, validation=validation)

    # -- areas ---------------------------------------------------------------------

    def mmap(self, start: int, size: int, data: bytes | memoryview = b"", *,
             executable: bool = False, name: str = "") -> Vma:
        """Map ``size`` bytes at ``start`` (page alignment is the caller's business); an
        overlapped part of an earlier area is unmapped first, as MAP_FIXED does."""
        if size <= 0 or start < 0 or start + size > self.user_limit:
            raise ValueError(f"cannot map {size:#x} bytes at {start:#x}")
        self.munmap(start, size)
        vma = Vma(start, start + size, executable, data[:size], name)
        index = bisect_right(self._starts, start)
        self._vmas.insert(index, vma)
        self._starts.insert(index, start)
        return vma

    def munmap(self, start: int, size: int) -> None:
        """Unmap ``[start, start + size)``: areas are cut or dropped, and the SFrame
        sections whose text or table lay there are removed."""
        end = start + size
        kept: list[Vma] = []
        for vma in self._vmas:
            if vma.end <= start or vma.start >= end:
                kept.append(vma)
                continue
            if vma.start < start:
                kept.append(Vma(vma.start, start, vma.executable, vma.data[:start - vma.start],
                                vma.name))
            if vma.end > end:
                kept.append(Vma(end, vma.end, vma.executable, vma.data[end - vma.start:],
                                vma.name))
        self._vmas = kept
        self._starts = [vma.start for vma in kept]
        self.sframes.unmapped(start, end)

    def vma_at(self, address: int) -> Vma | None:
        """The area holding ``address`` (``vma_lookup``)."""
        index = bisect_right(self._starts, address) - 1
        if index >= 0 and address < self._vmas[index].end:
            return self._vmas[index]
        return None

    @property
    def vmas(self) -> tuple[Vma, ...]:
        return tuple(self._vmas)

    def fork(self) -> Mm:
        """The memory of a child this process forks (``dup_mmap``): a copy of the areas
        (their bytes shared until either side writes: :meth:`write` replaces them), of
        the files mapped and of the registered sections, which describe the same code at
        the same addresses in the child. An exec in the child starts from an empty
        :class:`Mm` instead."""
        child = Mm(self.user_limit, self.sframes.validation, abi=self.arch.abi)
        child._vmas = [Vma(vma.start, vma.end, vma.executable, vma.data, vma.name)
                       for vma in self._vmas]
        child._starts = list(self._starts)
        child.files = dict(self.files)
        child.sframes.inherit(self.sframes)
        return child

    # -- user reads ------------------------------------------------------------------

    def read_bytes(self, address: int, size: int) -> bytes | None:
        """``size`` bytes at ``address`` from one area, or None (a fault)."""
        if address < 0 or size < 0 or address + size > self.user_limit:
            return None
        if self.overlay is not None:
            base, copy = self.overlay
            if base <= address < base + len(copy):
                return bytes(copy[address - base:address - base + size]) if (
                    address + size <= base + len(copy)) else None
        vma = self.vma_at(address)
        if vma is None or address + size > vma.end:
            return None
        offset = address - vma.start
        chunk = bytes(vma.data[offset:offset + size])
        return chunk + bytes(size - len(chunk))

    def overlay_missed(self, address: int, reach: int = 1 << 23) -> bool:
        """Whether ``address`` lies in the stack around the copy but outside it (below the
        sampled SP, or past the copied bytes, within ``reach``): memory the live process
        had and the recording did not keep."""
        if self.overlay is None:
            return False
        base, copy = self.overlay
        return base - 4096 <= address < base + reach and not (
            base <= address and address + 8 <= base + len(copy))

    def read(self, address: int) -> int | None:
        """The 8-byte word at ``address`` in the machine's byte order (the unwinders'
        reader), or None."""
        raw = self.read_bytes(address, 8)
        return None if raw is None else int(self._word.unpack(raw)[0])

    def write(self, address: int, data: bytes) -> None:
        """Store ``data`` (a test or a JIT writing its code and tables); it must lie in
        one mapped area."""
        vma = self.vma_at(address)
        if vma is None or address + len(data) > vma.end:
            raise ValueError(f"{len(data)} bytes at {address:#x} are not mapped")
        offset = address - vma.start
        padded = bytes(vma.data).ljust(offset, b"\0")
        vma.data = padded[:offset] + data + padded[offset + len(data):]
        self.sframes.written(address, address + len(data))


PAGE = 4096


@record_class
class MappedElf:
    """What :func:`map_elf` did: the areas, the executable text, and the SFrame outcome:
    0 registered, a negative errno refused, None (no ``PT_GNU_SFRAME``)."""

    areas: list[Vma]
    text: tuple[int, int] | None
    sframe: int | None


def map_elf(mm: Mm, data: bytes | memoryview | mmap.mmap, bias: int, name: str = ""
            ) -> MappedElf:
    """Map an ELF file's PT_LOAD segments at ``bias`` (page-granular, as the loader does;
    the areas view ``data``, no copy) and, when it has ``PT_GNU_SFRAME``, register its
    section for its executable text (what the series adds to ``binfmt_elf``; a section
    the registry refuses is left out, the mapping stands)."""
    from ..elf.headers import PT_GNU_SFRAME, PT_LOAD, read_file_header, read_program_headers

    view = memoryview(data)
    header = read_file_header(view, name or "<elf>")
    segments = read_program_headers(view, header)
    result = MappedElf([], None, None)
    for segment in segments:
        if segment.type != PT_LOAD or not segment.memsz:
            continue
        start = (bias + segment.vaddr) & ~(PAGE - 1)
        end = -(-(bias + segment.vaddr + segment.memsz) // PAGE) * PAGE
        lead = bias + segment.vaddr - start
        first = segment.offset - lead
        if first < 0 or segment.offset + segment.filesz > len(view):
            continue  # a segment the file does not hold: not mapped
        executable = bool(segment.flags & 1)
        result.areas.append(mm.mmap(start, end - start, view[first:segment.offset + segment.filesz],
                                    executable=executable, name=name))
        if executable and result.text is None:
            result.text = (bias + segment.vaddr, bias + segment.vaddr + segment.memsz)
    for segment in segments:
        if segment.type == PT_GNU_SFRAME and result.text is not None and segment.memsz:
            table = bias + segment.vaddr
            result.sframe = mm.sframes.add(table, table + segment.memsz, *result.text, name)
    mm.files[name] = result.sframe
    return result

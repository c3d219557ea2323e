"""Loading the modules of an address space: mapped ELF files, their load bias and their
SFrame table (the data model itself is in :mod:`.address_space`).

Binaries are found by build id, in perf's order: in its build-id cache (``~/.debug``),
at the recorded path, or in directories the user names (searched recursively). A
file whose build id differs is never used.

Tables come from the :class:`~.provider.TableProvider` the caller passes: this stage reads
them and never makes one. On a first run most binaries have no table in the cache yet:
:meth:`BinaryFinder.prefetch` finds the binaries and lets the provider make the missing
tables in parallel before the samples are unwound.
"""

from __future__ import annotations

import os

from ..cfi.errors import CFIError
from ..elf import ElfError, ElfImage
from ..elf.headers import PT_LOAD
from ..errors import Problems, PysframeError
from ..format.decode import SFrameReader
from ..format.errors import SFrameError
from ..format.lookup import SFrameLookup
from .address_space import Module, TableGuard
from .provider import NoTable, OnDemand, TableProvider

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: What follows from a damaged own table, as the commands that unwind with it say.
DAMAGE_OUTCOME = "frames from its {cfi} instead"
#: The origin of a module's table made from its CFI because its own table is damaged.
ORIGIN_REPLACED = "generated (its .sframe is damaged)"


class BinaryFinder:
    """Locates the file for a (path, build id): ~/.debug, recorded path, user directories."""

    def __init__(self, directories: Iterable[str] = (), build_ids: dict[str, bytes] | None = None,
                 *, tables: TableProvider, problems: Problems | None = None,
                 report_unreadable: bool = True) -> None:
        self.directories = list(directories)
        self.build_ids = build_ids or {}
        #: Where each binary's SFrame table comes from.
        self.tables = tables
        #: Where errors that cost one binary its frames are reported (None: silently).
        self.problems = problems
        #: Whether a recorded file that cannot be read is one of them (a caller that checks
        #: and reports the files itself, as ``sframe stack`` does, says no).
        self.report_unreadable = report_unreadable
        #: Binaries opened for their symbols only: no table read or generated (a recording
        #: without stack copies is never unwound here).
        self.symbols_only = False
        #: What the line about a damaged own table says follows from it (``{cfi}``: what
        #: its table was made from instead); ``sframe defer`` says what the kernel does.
        self.damage_outcome = DAMAGE_OUTCOME
        self._index: dict[str, list[str]] | None = None
        self._modules: dict[tuple[str, bytes | None], Module | None] = {}
        #: Images of no file, by the (path, build id) they stand for (:meth:`give`).
        self._given: dict[tuple[str, bytes | None], ElfImage] = {}
        #: Images found by :meth:`prefetch` (used once).
        self._prepared: dict[tuple[str, bytes | None], ElfImage] = {}

    def _candidates(self, path: str, build_id: bytes | None) -> Iterable[str]:
        # perf's order: its build-id cache first (perf record copies each binary there, so
        # a binary stripped since, with the same build id, is named from the copy), then
        # the recorded path.
        if build_id:
            yield os.path.join(os.path.expanduser("~/.debug"), ".build-id", build_id.hex()[:2],
                               build_id.hex()[2:] + "/elf")
        yield path
        if self._index is None:
            self._index = {}
            for directory in self.directories:
                for root, _, names in os.walk(directory):
                    for name in names:
                        self._index.setdefault(name, []).append(os.path.join(root, name))
        yield from self._index.get(os.path.basename(path), [])

    def image(self, path: str, build_id: bytes | None) -> ElfImage | None:
        """The file for ``path`` with ``build_id``: the first candidate that is a readable
        ELF file with that build id. A corrupt file at the recorded path is reported (its
        frames are lost); other candidates are only guesses by name and skipped quietly."""
        for candidate in self._candidates(path, build_id):
            if not os.path.isfile(candidate):
                continue
            try:
                image = ElfImage(candidate)
                if build_id is not None and image.build_id() != build_id:
                    continue
                return image
            except ElfError as error:
                if candidate == path and self.problems is not None and self.report_unreadable:
                    self.problems.add(error)
                continue
        return None

    def module(self, path: str, build_id: bytes | None, start: int, pgoff: int) -> Module | None:
        build_id = build_id or self.build_ids.get(path)
        key = (path, build_id)
        if key in self._modules:
            cached = self._modules[key]
            if cached is None:
                return None
            return _rebased(cached, self._bias(cached, start, pgoff))
        image = (self._prepared.pop(key, None) or self._given.get(key)
                 or self.image(path, build_id))
        if image is None:
            self._modules[key] = None
            return None
        lookup, origin, file_offset, damage = self._table(image)
        module = Module(image.path, build_id, 0, lookup, origin, image,
                        TableGuard(self.problems, file_offset), damage)
        self._modules[key] = module
        return _rebased(module, self._bias(module, start, pgoff))

    def give(self, path: str, build_id: bytes | None, image: ElfImage) -> None:
        """Open ``image`` whenever the binary ``path`` with ``build_id`` is asked for: an
        image of no file (this process's vDSO, read from its memory), which the caller
        has checked is that binary."""
        self._given[(path, build_id)] = image

    def opened(self, files: Iterable[tuple[str, bytes | None]]) -> list[Module]:
        """The modules of ``files`` (path, build id), each opened now if it is not yet, as
        its first mapping would open it (its table chosen, a damaged one reported); the
        files not found are left out."""
        modules = (self.module(path, build_id, 0, 0) for path, build_id in files)
        return [module for module in modules if module is not None]

    def forget(self, path: str, build_id: bytes | None = None) -> None:
        """Drop what is kept of the binary asked for as ``path`` (its image and table):
        opened again if asked for again (a recorder running for hours sees thousands)."""
        self._modules.pop((path, build_id or self.build_ids.get(path)), None)

    def forget_file(self, path: str) -> None:
        """Drop every binary opened from the file at ``path``, however it was asked for (its
        table has changed: made in the background since)."""
        for key in [key for key, module in self._modules.items()
                    if key[0] == path or (module is not None and module.path == path)]:
            del self._modules[key]

    def _table(self, image: ElfImage
               ) -> tuple[SFrameLookup | OnDemand | None, str, int | None, PysframeError | None]:
        """The SFrame lookup to unwind ``image`` with, its origin, the file offset of the
        table when it is the file's own section, and the fault found in the file's own table
        when it is damaged (the table is then made from the file's CFI; reported here, once
        per binary). A binary without CFI simply has no table; a malformed one is reported
        as a problem."""
        if self.symbols_only:
            return None, "no SFrame: not needed (nothing to unwind)", None, None
        try:
            data, address, damage, on_demand = self.tables.table(image)
            if on_demand is not None:
                return on_demand, ".sframe" if image.sframe_sections() else "generated", \
                    None, None
            reader = SFrameReader(data, address)
            own = image.sframe_sections()
        except NoTable as error:
            return None, f"no SFrame: {error}", None, None
        except (ElfError, SFrameError, CFIError) as error:
            if self.problems is not None:
                self.problems.add(error, image.path)
            return None, f"no SFrame: {error}", None, None
        if damage is not None:
            self._report_damage(image, damage)
            return SFrameLookup(reader), ORIGIN_REPLACED, None, damage
        file_offset = next((s.file_offset for s in own if s.address == address and s.raw == data), None)
        return SFrameLookup(reader), ".sframe" if own else "generated", file_offset, None

    def _report_damage(self, image: ElfImage, damage: PysframeError) -> None:
        """One line: the file's own table is damaged, its frames come from its CFI."""
        if self.problems is not None:
            self.problems.add(PysframeError(damage_message(image, damage, self.damage_outcome),
                                            path=image.path))

    def prefetch(self, files: Iterable[tuple[str, bytes | None]], *, progress: bool = False,
                 workers: int | None = None) -> int:
        """Find the binaries of ``files`` (path, build id) and let the table provider make
        their tables ready (:meth:`TableProvider.prefetch`: generated in parallel, with a
        progress bar if ``progress``). Returns how many were made.

        Only a warm-up: a file that cannot be read or a table that cannot be made is
        left to :meth:`module`, which reports it as it would have without this."""
        if self.symbols_only:
            return 0
        images: list[ElfImage] = []
        for path, build_id in files:
            build_id = build_id or self.build_ids.get(path)
            key = (path, build_id)
            if key in self._modules or key in self._prepared:
                continue
            image = self._quiet_image(path, build_id)
            if image is not None:
                self._prepared[key] = image
                images.append(image)
        return self.tables.prefetch(images, progress=progress, workers=workers)

    def _quiet_image(self, path: str, build_id: bytes | None) -> ElfImage | None:
        """:meth:`image` without reporting an unreadable file (:meth:`module` does, for
        the files the samples need)."""
        report, self.report_unreadable = self.report_unreadable, False
        try:
            return self.image(path, build_id)
        finally:
            self.report_unreadable = report

    @staticmethod
    def _bias(module: Module, start: int, pgoff: int) -> int:
        image = module.image
        if image is None:
            return start - pgoff
        loads = [segment for segment in image.program_headers() if segment.type == PT_LOAD]
        # A segment whose mapping starts at pgoff first: with lld's packed layout the
        # read-only segment before the code also covers the code's first file page.
        for exact in (True, False):
            for segment in loads:
                offset = segment.offset & ~0xFFF
                if (pgoff == offset if exact
                        else offset <= pgoff < segment.offset + max(segment.filesz, 1)):
                    return int(start - ((segment.vaddr & ~0xFFF) + (pgoff - offset)))
        return start - pgoff


def damage_message(image: ElfImage, damage: PysframeError, outcome: str = "") -> str:
    """What to say of a binary whose own .sframe is damaged (``damage``: the fault, its
    offset in the file) and whose table was made from its CFI instead: the fault, then
    ``outcome`` (default :data:`DAMAGE_OUTCOME`)."""
    where = f" at file offset {damage.offset:#x}" if damage.offset is not None else ""
    # The generator reads .debug_frame only when there is no .eh_frame.
    cfi = ".eh_frame" if image.section_header(".eh_frame") is not None else ".debug_frame"
    return (f".sframe damaged{where}: {damage.message}; "
            f"{(outcome or DAMAGE_OUTCOME).format(cfi=cfi)}")


def _rebased(module: Module, bias: int) -> Module:
    if module.bias == bias:
        return module
    return Module(module.path, module.build_id, bias, module.lookup, module.origin, module.image,
                  module.guard, module.damage)

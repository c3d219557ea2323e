"""The SFrame table the unwinder uses for an ELF file, generated or merged, validated, and
kept in the cache of derived data (:mod:`pysframe.cachedir`) by build id.

Binaries without .sframe get their table generated once; binaries with one get the
functions their table lacks merged in, unless their table is damaged: one that faults
where a reader reads it (:func:`own_fault`; the kernel drops such a section at its first
fault) is not used at all, and the table is generated from the CFI as for a binary
without one. That table is kept under a kind of its own (``replaced``), apart from the
merged tables, so a binary's entry says which of the two it holds. Every table is
validated before it is used or kept, with the checks ``sframe validate`` runs on a file (functions inside executable
segments included; the kernel's registration policy does not apply to this process's
unwinder): an FDE with an error is left out, so its function is unwound as one without
SFrame data, and a table that still does not validate is not used at all. An entry is
verified against the bytes the table was made from (:func:`table_source`): a copy of the
binary with the same build id but other bytes (another build, a damaged file) gets a
table of its own and never the good one's, nor the good one its.
"""

from __future__ import annotations

from bisect import bisect_right

from ..cachedir import (
    Source,
    describe,
    entry_path,
    load,
    stamp_of,
    stamped,
    store,
)
from ..format.decode import SFrameReader, decode
from ..format.errors import SFrameError
from ..records import NamedTuple, replace
from .errors import GenerateError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from mmap import mmap
    from pathlib import Path

    from ..elf import ElfImage
    from ..elf.sections import SFrameSectionData
    from ..format.model import FDE, Section

# The generator (CFI parser, gas rules, encoder) and the validator are imported only on a
# cache miss: a warm `sframe stack` never needs them.

#: Bumped whenever the generator's output changes, so old entries are not reused (4: a
#: damaged own table is no longer merged with its faulting FDEs left out: such entries
#: are stale; 5: functions with a DW_CFA_GNU_args_size, _init and _fini are in).
GENERATOR_VERSION = 5
#: Linker stub sections: a merged table takes their rows from the generator (correct
#: ones), not from the file's own table (GNU ld's x86-64 .plt.got rows are wrong).
_STUBS = (".plt", ".plt.got", ".plt.sec")
#: The sections a generated or merged table is made from (with the ELF headers).
_MADE_FROM = (".eh_frame", ".eh_frame_hdr", ".sframe", ".plt", ".plt.got", ".plt.sec")
#: Rounds of leaving out the FDEs the validator finds errors in (each round can only
#: shrink the table; more than two means something no round fixes).
_ROUNDS = 4


def entry_kind(version: int = 3, kind: str = "generated") -> str:
    """The cache kind of a ``generated`` or ``merged`` table of SFrame ``version``."""
    return f"sframe/{kind}.g{GENERATOR_VERSION}.v{version}"


def cache_path(build_id: bytes, version: int = 3, kind: str = "generated") -> Path | None:
    """Where the table for ``build_id`` is kept (None for a build id that names none)."""
    path = entry_path(entry_kind(version, kind), build_id)
    from pathlib import Path  # here: pathlib costs ~5 ms of every start-up

    return Path(path) if path is not None else None


def image_source(image: ElfImage, names: tuple[str, ...], *, linked: bool = False) -> Source:
    """What is derived from the sections ``names`` of ``image`` depends on (see
    :func:`image_parts`). An image read from a file is stamped (see
    :class:`~pysframe.cachedir.Source`): hashed only when the entry was made from another
    file or from this one before it changed (a warm ``stack`` hashed ~750 KB of libc's
    sections at every run); bytes given otherwise are hashed now."""
    if image.status is None:
        return describe(len(image.data), image_parts(image, names, linked=linked))
    return stamped(len(image.data), stamp_of(image.status),
                   lambda: image_parts(image, names, linked=linked))


def file_source(path: str, names: Callable[[ElfImage], tuple[str, ...]], *,
                linked: bool = False) -> Source:
    """The same for the ELF file ``path``, which the caller does not otherwise read (a
    debug file): opened here (:func:`image_source`). Raises
    :class:`~pysframe.errors.PysframeError` for a file that cannot be read."""
    from ..elf import ElfImage

    image = ElfImage(path)
    return image_source(image, names(image), linked=linked)


def image_parts(image: ElfImage, names: tuple[str, ...], *, linked: bool = False
                ) -> list[bytes | mmap]:
    """The bytes of ``image`` that what is derived from its sections ``names`` depends
    on: its ELF header, program and section header tables and section names, and the
    contents of those sections (with ``linked``, also of the sections they link to, e.g.
    a symbol table's strings). A relocatable file is taken whole: its relocations and
    symbols change what its sections say."""
    data = image.data
    if image.elf_type == "REL":
        return [data]
    header = image.header
    parts: list[bytes | mmap] = [
        data[:64], data[header.phoff:header.phoff + header.phnum * header.phentsize],
        data[header.shoff:header.shoff + header.shnum * header.shentsize]]
    sections = image.section_headers()
    wanted = {s.number for s in sections if s.name in names}
    if linked:
        wanted |= {sections[n].link for n in wanted if 0 < sections[n].link < len(sections)}
    if 0 < header.shstrndx < len(sections):
        wanted.add(header.shstrndx)
    for number in sorted(wanted):
        section = sections[number]
        if section.has_contents:
            parts.append(data[section.offset:section.offset + section.size])
    return parts


def table_source(image: ElfImage) -> Source:
    """The bytes a generated or merged table of ``image`` is made from (.debug_frame
    only when there is no .eh_frame, as the generator reads it only then)."""
    names: tuple[str, ...] = _MADE_FROM
    if image.section_header(".eh_frame") is None:
        names += (".debug_frame",)
    return image_source(image, names)


class Table(NamedTuple):
    """A table to unwind a file with: section bytes and address, and ``damage``, the fault
    found in the file's own .sframe (offset: in the file) when it is damaged and this table
    was generated from the CFI instead (None otherwise)."""

    data: bytes
    address: int
    damage: SFrameError | None = None


def sframe_for(image: ElfImage, *, version: int = 3, use_cache: bool = True,
               merge_cfi: bool = True) -> tuple[bytes, int]:
    """(section bytes, section address) of the SFrame table to unwind ``image`` with: the
    table of :func:`table_for`."""
    own = image.sframe_sections()
    if own and not merge_cfi:
        return own[0].raw, own[0].address
    table = table_for(image, version=version, use_cache=use_cache)
    return table.data, table.address


def table_for(image: ElfImage, *, version: int = 3, use_cache: bool = True) -> Table:
    """The SFrame table to unwind ``image`` with.

    A file without .sframe gets one generated from its CFI. A file with .sframe
    gets the functions its table lacks (the C run-time's ``_start`` and friends were not
    assembled with --gsframe) added from its CFI, so chains end at ``_start``'s "RA
    undefined" row instead of running out of rules, and the rows of its PLT stubs
    replaced by correct ones (GNU ld writes CFA SP+16 for x86-64 ``.plt.got`` entries,
    which have SP+8). A file whose own table is damaged (:func:`own_fault`) gets one
    generated from its CFI, as a file without .sframe, with the fault as ``damage``.
    Generated and merged tables sit at address 0 (link-time starts), are validated (see
    the module's description) and cached by build id (a file without one by the digest of
    what its table is made from). When no valid table can be made, a file's own table is
    used as it is (damaged or not: a reader drops it at its first fault); a file without
    one raises :class:`GenerateError`.
    """
    own = image.sframe_sections()
    source = table_source(image) if use_cache else None
    key = cache_key(image, source) if source is not None else None
    if key is not None and source is not None:
        cached = _cached(image, own, key, source, version)
        if cached is not None:
            return cached
    fault = own_fault(image, own[0]) if own else None
    if fault is not None:
        return _replaced(image, own[0], fault, key, source, version)
    kind = entry_kind(version, "merged" if own else "generated")
    data = _valid_table(image, own[0].raw if own else None, own[0].address if own else 0,
                        version)
    if data is None:
        return Table(own[0].raw, own[0].address)  # _valid_table raises without an own table
    if key is not None and source is not None:
        store(kind, key, data, source)
    return Table(data, 0)


def own_fault(image: ElfImage, section: SFrameSectionData) -> SFrameError | None:
    """The first fault a reader meets in ``section``, the file's own .sframe (its offset:
    in the file), or None. Only faults count (what makes a lookup fail, and the kernel
    drop the section: :meth:`~pysframe.format.lookup.SFrameLookup.first_fault`); a table
    that reads cleanly but breaks a rule of the format is merged, its bad FDEs left out."""
    from ..format.lookup import SFrameLookup

    try:
        fault = SFrameLookup(SFrameReader(section.raw, section.address)).first_fault()
    except SFrameError as error:
        fault = error
    if fault is None:
        return None
    offset = None if fault.offset is None else section.file_offset + fault.offset
    return SFrameError(fault.message, offset, path=image.path)


def _replaced(image: ElfImage, own: SFrameSectionData, fault: SFrameError, key: bytes | None,
              source: Source | None, version: int) -> Table:
    """The table generated from the CFI of ``image``, whose own table ``own`` is damaged
    (``fault``); the own table as it is when none can be made (no usable CFI)."""
    try:
        data = _valid_table(image, None, 0, version)
    except GenerateError:
        return Table(own.raw, own.address)
    assert data is not None  # without an own table, _valid_table returns or raises
    if key is not None and source is not None:
        store(entry_kind(version, "replaced"), key, data, source)
    return Table(data, 0, fault)


def _cached(image: ElfImage, own: list[SFrameSectionData], key: bytes, source: Source,
            version: int) -> Table | None:
    """The table :func:`table_for` made for ``image`` before, from the cache, or None. An
    entry of the kind ``replaced`` stands for a damaged own table: its fault is found again
    (rare, and the line that reports it needs it)."""
    if not own:
        cached = load(entry_kind(version, "generated"), key, source)
        return Table(cached, 0) if cached is not None and _readable(cached) else None
    cached = load(entry_kind(version, "merged"), key, source)
    if cached is not None and _readable(cached):
        return Table(cached, 0)
    cached = load(entry_kind(version, "replaced"), key, source)
    fault = own_fault(image, own[0]) if cached is not None and _readable(cached) else None
    return Table(cached, 0, fault) if cached is not None and fault is not None else None


def cache_key(image: ElfImage, source: Source) -> bytes:
    """The cache entry's name: the file's build id, else the digest of the bytes its
    table is made from (a file without build id is cached too: the entry is checked
    against those bytes either way)."""
    build_id = image.build_id()
    if build_id:
        return build_id
    return b"sha:" + (source.late_digest() if source.stamped else source.digest)[:16]


def cached_table(image: ElfImage, *, version: int = 3) -> bytes | None:
    """The table (at address 0) :func:`sframe_for` would take from the cache for
    ``image``, or None."""
    table = cached(image, version=version)
    return table.data if table is not None else None


def cached(image: ElfImage, *, version: int = 3) -> Table | None:
    """The table :func:`table_for` would take from the cache for ``image``, or None."""
    source = table_source(image)
    return _cached(image, image.sframe_sections(), cache_key(image, source), source, version)


def _readable(data: bytes) -> bool:
    try:
        SFrameReader(data, 0)
    except SFrameError:
        return False
    return True


def _valid_table(image: ElfImage, own_raw: bytes | None, own_address: int,
                 version: int) -> bytes | None:
    """The generated (or, with the file's own table ``own_raw``, merged) table at address
    0, validated; None when there is an own table and no valid merge (GenerateError
    when there is none).

    A merged table takes from the CFI only the functions the file's own table does not
    start (and the linker stubs), so only those are generated: the Lua fixture's merge
    took ~110 ms, a third of it generating the ~700 functions its .sframe already has.
    Should the validator leave out one of the own table's functions, its rows come from
    the CFI, so the table is merged again with every function generated."""
    from .section import generate

    own = None
    if own_raw is not None:
        from ..format.encode import convert

        try:
            own = decode(own_raw, own_address)
            if own.version != version:
                own = convert(own, version)
        except SFrameError:
            return None
    include = _not_started_by(image, own) if own is not None else None
    for _ in range(2):
        try:
            generated = generate(image, version=version, address=0, unwinder=True,
                                 include=include).section
        except GenerateError:
            if own is not None:
                return None
            raise
        merged = _without_stubs(image, own, generated) if own is not None else None
        data, problem, own_left_out = _validated(image, merged, generated)
        if not own_left_out or include is None:
            break
        include = None  # every function generated: the left-out ones' rows are needed
    if data is None and own is None:
        raise GenerateError(f"generated SFrame table does not validate: {problem}")
    return data


def _not_started_by(image: ElfImage, own: Section) -> Callable[[int, int], bool]:
    """Whether a function of the CFI (start, size) may be merged into ``own``: a linker
    stub, or one whose start no FDE of ``own`` covers (a function whose start it covers
    is always left out by :func:`_combined`, whose test is the whole range)."""
    in_stub = _stub_test(image)
    ranges = sorted((fde.start, fde.end) for fde in own.fdes)
    starts = [start for start, _ in ranges]

    def include(start: int, size: int) -> bool:
        if in_stub(start):
            return True
        index = bisect_right(starts, start) - 1
        return not (index >= 0 and start < ranges[index][1])

    return include


def _without_stubs(image: ElfImage, own: Section, generated: Section) -> Section:
    """``own`` without its FDEs for PLT stubs that ``generated`` describes."""
    in_stub = _stub_test(image)
    if not any(in_stub(fde.start) for fde in generated.fdes):
        return own
    return replace(own, fdes=[fde for fde in own.fdes if not in_stub(fde.start)])


def _stub_test(image: ElfImage) -> Callable[[int], bool]:
    """Whether an address is in one of the linker's stub sections (:data:`_STUBS`)."""
    stubs = list(image.section_ranges(*_STUBS).values())
    return lambda address: any(lo <= address < hi for lo, hi in stubs)


def _validated(image: ElfImage, own: Section | None, generated: Section
               ) -> tuple[bytes | None, str, bool]:
    """(the table's bytes, "", whether an FDE of ``own`` was left out) once no error is
    left, leaving out the FDEs that have one; (None, why, ...) when a table-wide error
    remains or it cannot be encoded."""
    from ..format.encode import encode
    from ..format.validation import ERROR, encoded_errors, validate

    relocatable = image.elf_type == "REL"
    text = None if relocatable else image.executable_ranges()
    left_out: set[tuple[bool, int, int]] = set()  # (from the file's own table, start, size)
    problem = "no FDE could be kept"
    for _ in range(_ROUNDS):
        section, from_own = _combined(own, generated, left_out)
        try:
            data = encode(section)
        except SFrameError as error:
            return None, error.message, _any_own(left_out)
        errors = ([finding for finding in validate(data, 0, text, relocatable=True)
                   if finding.severity == ERROR] if relocatable
                  else encoded_errors(section, data, text))
        if not errors:
            return data, "", _any_own(left_out)
        problem = f"{errors[0].message} ({errors[0].location()})"
        if any(finding.fde is None or finding.fde >= len(section.fdes) for finding in errors):
            return None, problem, _any_own(left_out)
        for finding in errors:
            assert finding.fde is not None
            fde = section.fdes[finding.fde]
            left_out.add((from_own[finding.fde], fde.start, fde.size))
    return None, problem, _any_own(left_out)


def _any_own(left_out: set[tuple[bool, int, int]]) -> bool:
    return any(from_own for from_own, _, _ in left_out)


def _combined(own: Section | None, generated: Section, left_out: set[tuple[bool, int, int]]
              ) -> tuple[Section, list[bool]]:
    """The table to use, without the FDEs in ``left_out``, and for each of its FDEs
    whether it comes from the file's own table: the generated table, or the file's own
    one plus the generated FDEs of the functions it does not cover."""
    extra = [fde for fde in generated.fdes if (False, fde.start, fde.size) not in left_out]
    if own is None:
        return replace(generated, fdes=[replace(fde) for fde in extra]), [False] * len(extra)
    mine = [replace(fde, fre_off=None) for fde in own.fdes
            if (True, fde.start, fde.size) not in left_out]
    ranges = sorted((fde.start, fde.end) for fde in mine)
    starts = [start for start, _ in ranges]
    section = replace(own, fdes=mine + [replace(fde, fre_off=None) for fde in extra
                                         if not _overlaps(fde, starts, ranges)],
                      address=0, flags=generated.flags)
    from_own = {id(fde) for fde in mine}
    section.sort_fdes()
    return section, [id(fde) in from_own for fde in section.fdes]


def _overlaps(fde: FDE, starts: list[int], ranges: list[tuple[int, int]]) -> bool:
    index = bisect_right(starts, fde.start) - 1
    if index >= 0 and fde.start < ranges[index][1]:
        return True
    return index + 1 < len(ranges) and ranges[index + 1][0] < fde.end

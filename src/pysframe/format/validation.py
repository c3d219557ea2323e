"""Structural validation of an SFrame section: every fault a consumer could trip on.

Each check yields a :class:`Finding` (FDE index, FRE index, byte offset, what is
wrong). The checks cover what the Linux kernel's SFrame validation
(``CONFIG_SFRAME_VALIDATION``) and libsframe refuse, plus the consistency rules
of the format (tiling of the sub-sections, counts, trailing bytes). With
``kernel=True`` the kernel's registration policy is checked too (version 3,
sorted, PC-relative starts, no auxiliary header, at least one FDE and FRE), and, as
warnings, the rows its walk refuses on the section's machine (:mod:`.kernel_rules`).
The validator never raises for bad bytes: a structure it cannot read becomes a
finding and the checks that depend on it are skipped.
"""

from __future__ import annotations

import itertools

from ..records import record_class, replace
from .constants import (
    ABI,
    F_FDE_FUNC_START_PCREL,
    F_FDE_SORTED,
    FLAGS_MASK,
    FLEX_REG_P,
    INFO2_FDE_TYPE_MASK,
    INFO_PAUTH_KEY_B_BIT,
    INFO_PC_TYPE_BIT,
    INFO_SIGNAL_BIT,
    MAX_DATA_WORDS,
    VERSION_1,
    VERSION_3,
    WORD_SIZE_OF_CODE,
    FDEType,
    PCType,
)
from .decode import FDEEntry, SFrameReader, word_struct
from .encode import encode
from .errors import SFrameError
from .model import FDE, FRE, Section

TYPE_CHECKING = False
if TYPE_CHECKING:  # (collections.abc imports collections: ~1 ms of a first run)
    from collections.abc import Iterator, Sequence

#: Check identifiers, in the order they run (documented in the README).
CHECKS = {
    "header": "magic, version, header length",
    "flags": "flags legal for the version (V3 forbids FRAME_POINTER; unknown bits)",
    "abi": "known ABI id; fixed FP/RA offsets legal for the ABI",
    "auxhdr": "auxiliary header absent (no ABI defines one; the kernel refuses it)",
    "layout": "FDE and FRE sub-sections inside the section and tiling it",
    "counts": "num_fdes, num_fres and fre_len consistent with the contents",
    "trailing": "bytes after the FRE sub-section are zero",
    "fde": "FDE readable; FRE type, FDE type and info bits legal",
    "fre-area": "every FDE's FREs inside the FRE sub-section, blocks not overlapping",
    "sorted": "FDEs sorted by start address when SFRAME_F_FDE_SORTED is set",
    "overlap": "no two functions overlap",
    "text": "every function inside an executable segment of the ELF file",
    "rep-size": "PCMASK FDEs have a non-zero rep_size, PCINC FDEs zero",
    "fre-starts": "FRE starts strictly ascending, the first at 0, all below the function size",
    "data-words": "data-word count and size legal for the ABI, version and FDE type",
    "kernel": "the kernel's registration policy, and (warnings) rows its walk refuses on "
              "the section's machine (with --kernel)",
}


#: Findings that real GNU toolchains produce and every reader tolerates: reported as
#: warnings, which do not make a section invalid (``--strict`` counts them too).
WARNING = "warning"
ERROR = "error"


@record_class(frozen=True)
class Finding:
    """One problem: which check, where (FDE/FRE index, section byte offset) and what."""

    check: str
    message: str
    offset: int | None = None
    fde: int | None = None
    fre: int | None = None
    severity: str = ERROR

    def location(self, file_offset: int | None = None, section: str = "") -> str:
        """"FDE i, FRE k, offset 0x..": the offset in the section, or with ``file_offset``
        (where the section starts in its file) the offset in the file and in the section."""
        parts = []
        if self.fde is not None:
            parts.append(f"FDE {self.fde}")
        if self.fre is not None:
            parts.append(f"FRE {self.fre}")
        if self.offset is not None:
            parts.append(f"offset {self.offset:#x}" if file_offset is None else
                         f"offset {file_offset + self.offset:#x} ({section}+{self.offset:#x})")
        return ", ".join(parts)


#: Highest DWARF register number of the supported ABIs (AArch64 SVE/SME go up to 127).
MAX_DWARF_REGNUM = 127


def _legal_word_counts(abi: ABI, fixed_ra: int, fixed_fp: int) -> set[int]:
    """Data-word counts of a default FRE: CFA, then RA if tracked, then FP if not fixed."""
    counts = {1}
    ra_words = 0 if fixed_ra else 1
    fp_words = 0 if fixed_fp else 1
    counts.add(1 + ra_words)
    counts.add(1 + ra_words + fp_words)
    if abi.is_amd64:
        counts.discard(1 + ra_words) if ra_words else None
    return counts


class _Validator:
    def __init__(self, data: bytes | memoryview, address: int,
                 text_ranges: Sequence[tuple[int, int]] | None, kernel: bool,
                 relocatable: bool) -> None:
        self.relocatable = relocatable
        self.data = memoryview(data)
        self.address = address
        self.text_ranges = text_ranges
        self.kernel = kernel
        #: AArch64 FDEs with a row whose saved RA is signed (with ``kernel``).
        self.signed: set[int] = set()

    def run(self) -> Iterator[Finding]:
        try:
            reader = SFrameReader(self.data, self.address)
        except SFrameError as error:
            yield Finding("header", error.message, error.offset)
            return
        h = reader.header
        yield from self._header(reader)
        entries: list[FDEEntry | None] = []
        for index in range(h.num_fdes):
            try:
                entries.append(reader.fde(index))
            except SFrameError as error:
                entries.append(None)
                yield Finding("fde", error.message, error.offset, index)
        good = [e for e in entries if e is not None]
        try:
            reader.check_fre_total()
        except SFrameError as error:
            # FDEs claim more rows than exist: walking them could take num_fdes x fre_len steps.
            yield Finding("counts", error.message, error.offset)
            return
        for entry in good:
            yield from self._fde_bits(reader, entry)
        yield from self._fre_blocks(reader, good)
        if not self.relocatable:
            # In relocatable objects every text section starts at 0: starts do not compare.
            yield from self._order(reader, good)
        for entry in good:
            yield from self._fres(reader, entry)
        if self.signed:
            from .kernel_rules import signed_return_addresses

            yield Finding("kernel", signed_return_addresses(len(self.signed)),
                          severity=WARNING)

    # --- header-level -------------------------------------------------------------------

    def _header(self, reader: SFrameReader) -> Iterator[Finding]:
        h = reader.header
        illegal = h.flags & ~FLAGS_MASK[h.version]
        if illegal:
            yield Finding("flags", f"flags {h.flags:#x} set bits {illegal:#x} that SFrame "
                          f"version {h.version} does not allow", 3)
        abi: ABI | None
        try:
            abi = ABI(h.abi)
        except ValueError:
            abi = None
            yield Finding("abi", f"unknown ABI id {h.abi}", 4)
        if abi is not None:
            if abi.is_amd64:
                if h.cfa_fixed_ra_offset != -8:
                    yield Finding("abi", f"AMD64 needs the fixed RA offset -8, not "
                                  f"{h.cfa_fixed_ra_offset}", 6)
                if h.cfa_fixed_fp_offset != 0:
                    yield Finding("abi", f"AMD64 keeps FP in the FREs; fixed FP offset "
                                  f"{h.cfa_fixed_fp_offset} is not legal", 5)
            else:
                for name, value, at in (("FP", h.cfa_fixed_fp_offset, 5),
                                        ("RA", h.cfa_fixed_ra_offset, 6)):
                    if value:
                        yield Finding("abi", f"{abi.name} tracks {name} in the FREs; fixed "
                                      f"{name} offset {value} is not legal", at)
        if h.auxhdr_len:
            yield Finding("auxhdr", f"auxiliary header of {h.auxhdr_len} bytes (no ABI defines "
                          "one)", 7)
        expected_fdes_start = h.header_end
        if h.fdeoff != 0:
            yield Finding("layout", f"FDE sub-section at fdeoff {h.fdeoff:#x}, not right after "
                          "the header", 0x14)
        if h.freoff != h.fdeoff + h.num_fdes * h.fde_size:
            yield Finding("layout", f"freoff {h.freoff:#x} does not follow the {h.num_fdes} FDEs "
                          f"(expected {h.fdeoff + h.num_fdes * h.fde_size:#x})", 0x18)
        del expected_fdes_start
        end = max(h.fres_end, h.fdes_end)
        tail = self.data[end:]
        if any(tail):
            first = next(i for i, b in enumerate(tail) if b)
            yield Finding("trailing", f"{len(tail)} bytes after the FRE sub-section are not all "
                          "zero", end + first)
        if self.kernel:
            yield from self._kernel_policy(reader)

    def _kernel_policy(self, reader: SFrameReader) -> Iterator[Finding]:
        h = reader.header
        if h.version != VERSION_3:
            yield Finding("kernel", f"the kernel registers only SFrame version 3, not "
                          f"{h.version}", 2)
        if not h.flags & F_FDE_SORTED:
            yield Finding("kernel", "the kernel needs SFRAME_F_FDE_SORTED", 3)
        if not h.flags & F_FDE_FUNC_START_PCREL:
            yield Finding("kernel", "the kernel needs SFRAME_F_FDE_FUNC_START_PCREL", 3)
        if h.num_fdes == 0 or h.num_fres == 0:
            yield Finding("kernel", "the kernel refuses a section without FDEs or FREs", 8)

    # --- FDE-level ----------------------------------------------------------------------

    def _fde_bits(self, reader: SFrameReader, entry: FDEEntry) -> Iterator[Finding]:
        h = reader.header
        at = entry.offset
        if entry.info & 0x40 or (h.version != VERSION_3 and entry.info & INFO_SIGNAL_BIT):
            yield Finding("fde", f"unused func_info bits set ({entry.info:#04x})", at, entry.index)
        if entry.info & INFO_PAUTH_KEY_B_BIT and h.abi not in (ABI.AARCH64_ENDIAN_BIG,
                                                              ABI.AARCH64_ENDIAN_LITTLE):
            yield Finding("fde", "pauth key B bit set outside AArch64", at, entry.index)
        if h.version == VERSION_3:
            if entry.fde_type not in (FDEType.DEFAULT, FDEType.FLEX):
                yield Finding("fde", f"unknown FDE type {entry.fde_type}", entry.fres_offset - 2,
                              entry.index)
            if entry.fde_type == FDEType.FLEX and h.abi in (ABI.AARCH64_ENDIAN_BIG,
                                                            ABI.AARCH64_ENDIAN_LITTLE):
                # gas 2.46 emits these (e.g. for .cfi_register of FP) though AArch64 has no
                # flexible-FDE support in the spec's tracer or the kernel.
                yield Finding("fde", "flexible FDE on AArch64", entry.fres_offset - 2,
                              entry.index, severity=WARNING)
            if entry.info2 & ~INFO2_FDE_TYPE_MASK:
                yield Finding("fde", f"unused func_info2 bits set ({entry.info2:#04x})",
                              entry.fres_offset - 2, entry.index)
        if entry.pc_type == PCType.MASK and entry.rep_size == 0 and h.version != VERSION_1:
            yield Finding("rep-size", "PCMASK FDE with rep_size 0", at, entry.index)
        if entry.pc_type == PCType.INC and entry.rep_size != 0:
            # ld 2.44 writes rep_size 16 in its x86-64 PLT0 FDE; readers ignore the field.
            yield Finding("rep-size", f"PCINC FDE with rep_size {entry.rep_size}", at, entry.index,
                          severity=WARNING)
        if entry.size == 0:
            yield Finding("fde", "function of size 0", at, entry.index)
        if self.text_ranges is not None and not self.relocatable and not any(
                lo <= entry.start and entry.start + entry.size <= hi for lo, hi in self.text_ranges):
            yield Finding("text", f"function {entry.start:#x}..{entry.start + entry.size:#x} is "
                          "not inside an executable segment", at, entry.index)

    def _fre_blocks(self, reader: SFrameReader, entries: list[FDEEntry]) -> Iterator[Finding]:
        """FRE blocks (V3: attribute + FREs) must tile the FRE sub-section exactly."""
        h = reader.header
        blocks = []
        total = 0
        for entry in entries:
            total += entry.num_fres
            try:
                end = reader.fre_block_end(entry)
            except SFrameError as error:
                yield Finding("fre-area", error.message, error.offset, entry.index)
                continue
            begin = entry.fres_offset - (5 if h.version == VERSION_3 else 0)
            blocks.append((begin, end, entry.index))
        if total != h.num_fres:
            yield Finding("counts", f"num_fres is {h.num_fres} but the FDEs hold {total} FREs",
                          0x0C)
        if len(blocks) != len(entries):
            return
        blocks.sort()
        position = h.fres_start
        for begin, end, index in blocks:
            if begin < position:
                yield Finding("fre-area", f"FRE data overlaps the previous function's "
                              f"(starts at {begin:#x}, previous ends at {position:#x})", begin,
                              index)
            elif begin > position:
                yield Finding("fre-area", f"{begin - position} unused bytes before this "
                              "function's FRE data", position, index)
            position = max(position, end)
        if position != h.fres_end and entries:
            yield Finding("counts", f"fre_len is {h.fre_len} but the FRE data ends "
                          f"{position - h.fres_start} bytes into the sub-section", 0x10)

    def _order(self, reader: SFrameReader, entries: list[FDEEntry]) -> Iterator[Finding]:
        h = reader.header
        if h.flags & F_FDE_SORTED:
            for previous, entry in itertools.pairwise(entries):
                if entry.start <= previous.start:
                    yield Finding("sorted", f"start {entry.start:#x} is not above the previous "
                                  f"FDE's {previous.start:#x} although SFRAME_F_FDE_SORTED is set",
                                  entry.offset, entry.index)
        by_start = sorted(entries, key=lambda e: (e.start, e.index))
        for previous, entry in itertools.pairwise(by_start):
            if entry.start < previous.start + previous.size:
                yield Finding("overlap", f"function {entry.start:#x}..{entry.end:#x} overlaps FDE "
                              f"{previous.index} ({previous.start:#x}..{previous.end:#x})",
                              entry.offset, entry.index)

    # --- FRE-level ----------------------------------------------------------------------

    def _fres(self, reader: SFrameReader, entry: FDEEntry) -> Iterator[Finding]:
        h = reader.header
        abi = ABI(h.abi) if h.abi in ABI._value2member_map_ else None
        limit = entry.rep_size if entry.pc_type == PCType.MASK and entry.rep_size else entry.size
        previous = -1
        try:
            pairs = list(reader.fres_with_offsets(entry))
        except SFrameError:
            return  # reported by _fre_blocks
        for k, (at, fre) in enumerate(pairs):
            if k == 0 and fre.start != 0:
                yield Finding("fre-starts", f"first FRE starts at {fre.start:#x}, not 0", at,
                              entry.index, k)
            if fre.start <= previous:
                yield Finding("fre-starts", f"FRE start {fre.start:#x} is not above the previous "
                              f"{previous:#x}", at, entry.index, k)
            if fre.start >= limit:
                what = "rep_size" if entry.pc_type == PCType.MASK else "function size"
                yield Finding("fre-starts", f"FRE start {fre.start:#x} is not below the {what} "
                              f"{limit:#x}", at, entry.index, k)
            previous = fre.start
            if abi is not None:
                yield from self._words(reader, abi, entry, k, at, fre.words, fre.base_reg,
                                       fre.mangled_ra)

    def _words(self, reader: SFrameReader, abi: ABI, entry: FDEEntry, k: int, at: int,
               words: tuple[int, ...], base_reg: int, mangled: bool) -> Iterator[Finding]:
        h = reader.header
        count = len(words)

        def finding(message: str) -> Finding:
            return Finding("data-words", message, at, entry.index, k)

        if mangled and not abi.is_aarch64:
            yield finding("mangled-RA bit set outside AArch64")
        if self.kernel and count <= MAX_DATA_WORDS:
            from .kernel_rules import kernel_row_problems

            flexible = entry.fde_type == FDEType.FLEX and h.version == VERSION_3
            if mangled and abi.is_aarch64:
                self.signed.add(entry.index)
            for problem in kernel_row_problems(abi, words, flexible, h.cfa_fixed_ra_offset,
                                               h.cfa_fixed_fp_offset):
                yield Finding("kernel", problem, at, entry.index, k, severity=WARNING)
        if count > MAX_DATA_WORDS:
            yield finding(f"{count} data words (readers accept at most {MAX_DATA_WORDS})")
            return
        if count == 0:
            if h.version == VERSION_1:
                yield finding("FRE without data words (RA undefined needs version 2 or 3)")
            return
        if entry.fde_type == FDEType.FLEX and h.version == VERSION_3:
            if count not in (2, 4, 5, 6):
                yield finding(f"flexible FRE with {count} data words (2, 4, 5 or 6 expected)")
                return
            if not words[0] & FLEX_REG_P:
                yield finding("flexible CFA rule without a base register")
            controls = [0] + ([2] if count >= 4 else []) + ([3] if count == 5 else []) + (
                [4] if count == 6 else [])
            for position in controls:
                control = words[position]
                if control & 0x4:
                    yield finding(f"control word {control:#x} has reserved bit 2 set")
                if control & FLEX_REG_P and control >> 3 > MAX_DWARF_REGNUM:
                    yield finding(f"control word {control:#x} names DWARF register "
                                  f"{control >> 3}, which no ABI has")
            if count == 5 and words[2] != 0:
                yield finding("five-word flexible FRE without the RA padding word")
            if count in (4, 6) and words[2] == 0:
                yield finding("RA padding word followed by an offset instead of an FP rule")
            return
        legal = _legal_word_counts(abi, h.cfa_fixed_ra_offset, h.cfa_fixed_fp_offset)
        if count not in legal:
            yield finding(f"{count} data words; {abi.name} default FREs have "
                          f"{' or '.join(str(c) for c in sorted(legal))}")
        if abi.is_s390x and words[0] * 8 + 160 < 0:
            yield finding(f"s390x CFA offset {words[0] * 8 + 160} is negative")
        if base_reg not in (0, 1):
            yield finding(f"bad base register {base_reg}")


def plainly_valid(section: Section, text_ranges: Sequence[tuple[int, int]] | None) -> bool:
    """True when ``section``, just written by :func:`~.encode.encode`, certainly draws no
    ERROR from :func:`validate` (with ``text_ranges``, not relocatable, not ``kernel``):
    a version 3 section of default, PC-incrementing FDEs, sorted and apart, whose rows
    plainly keep every rule above. False means only "not plainly": run :func:`validate`.

    Why a second reading of the rules: a table made one function at a time (the unwinder's
    on-demand rows) validated each function's bytes whole, which was a third of making it;
    the encoder's layout (tiling, counts, header) holds by construction, so only the
    model's values need a look. tests/test_validation_fast.py holds it to :func:`validate`
    over generated tables."""
    plain = _plain_fdes(section, text_ranges)
    return plain is not None and all(plain)


def encoded_errors(section: Section, data: bytes,
                   text_ranges: Sequence[tuple[int, int]] | None) -> list[Finding]:
    """The ERROR findings of :func:`validate` for ``data``, which ``encode(section)``
    wrote (not relocatable, not ``kernel``). The FDEs :func:`plainly_valid`'s reading
    passes are not read again: when the others, encoded alone, draw no error, there is
    none (each rule they could break is one FDE's own once the section's order is
    plain); else the whole section is validated, for the exact findings. A generated
    table's validation read every row in Python: ~1/3 of making libc's table."""
    plain = _plain_fdes(section, text_ranges)
    if plain is not None:
        rest = [replace(fde, fre_off=None) for fde, ok in zip(section.fdes, plain, strict=True)
                if not ok]
        if not rest:
            return []
        try:
            alone = encode(replace(section, fdes=rest))
        except SFrameError:
            alone = None
        if alone is not None and not any(finding.severity == ERROR
                                         for finding in validate(alone, 0, text_ranges)):
            return []
    return [finding for finding in validate(data, 0, text_ranges) if finding.severity == ERROR]


def _plain_fdes(section: Section, text_ranges: Sequence[tuple[int, int]] | None
                ) -> list[bool] | None:
    """Per FDE, whether it plainly draws no error; None when the section's own reading
    fails (not version 3, odd header fields, FDEs not sorted and apart)."""
    abi = section.abi
    fixed_ra, fixed_fp = section.cfa_fixed_ra_offset, section.cfa_fixed_fp_offset
    if (section.version != VERSION_3 or section.flags & ~FLAGS_MASK[VERSION_3]
            or section.aux_header or any(section.tail)
            or (fixed_ra, fixed_fp) != ((-8, 0) if abi.is_amd64 else (0, 0))):
        return None
    previous: FDE | None = None
    for fde in section.fdes:
        if previous is not None and (fde.start <= previous.start
                                     or fde.start < previous.start + previous.size):
            return None
        previous = fde
    legal = _legal_word_counts(abi, fixed_ra, fixed_fp)
    return [_plain_fde(fde, legal, abi, text_ranges) for fde in section.fdes]


def _plain_fde(fde: FDE, legal: set[int], abi: ABI,
               text_ranges: Sequence[tuple[int, int]] | None) -> bool:
    end = fde.start + fde.size
    return not (fde.pc_type != PCType.INC or fde.fde_type != FDEType.DEFAULT or fde.rep_size
                or fde.size <= 0 or (fde.pauth_key_b and not abi.is_aarch64)
                or (text_ranges is not None
                    and not any(lo <= fde.start and end <= hi for lo, hi in text_ranges))
                or not _plain_rows(fde.fres, fde.size, legal, abi))


def _plain_rows(fres: Sequence[FRE], size: int, legal: set[int], abi: ABI) -> bool:
    """The rows of a default FDE of ``size`` bytes: starting at 0, ascending, inside the
    function, each with a legal count of words on its base register."""
    previous = -1
    aarch64, s390x = abi.is_aarch64, abi.is_s390x
    for fre in fres:
        words = fre.words
        if (fre.start <= previous or len(words) not in legal or fre.base_reg not in (0, 1)
                or (fre.mangled_ra and not aarch64) or (s390x and words[0] * 8 + 160 < 0)):
            return False
        previous = fre.start
    return not fres or (fres[0].start == 0 and previous < size)


def plain_stored_rows(reader: SFrameReader, entry: FDEEntry,
                      text_ranges: Sequence[tuple[int, int]] | None) -> int | None:
    """Where the stored rows of ``entry``, an FDE of the version 3 table ``reader``, end
    (a section offset) when the FDE it decodes to (:meth:`~.decode.SFrameReader.to_fde`),
    encoded alone under a generated table's header, is one :func:`encoded_errors` passes
    plainly (:func:`_plain_fde`): its rows are then encoded as they are stored
    (:func:`~.encode.single_function`). None when it is not (the caller decodes it).
    Raises what reading its rows raises. Read from the bytes, no record made: an
    on-demand table made each function of a file's own table by decoding and encoding
    it again (the Lua fixture's 702: 21 against 5.5 us each, tests/test_own_functions.py
    holds the two ways equal)."""
    abi = reader.abi()
    info, start, size = entry.info, entry.start, entry.size
    if (entry.info2 & INFO2_FDE_TYPE_MASK != FDEType.DEFAULT or info & INFO_PC_TYPE_BIT
            or entry.rep_size or size <= 0 or (info & INFO_PAUTH_KEY_B_BIT and not abi.is_aarch64)
            or (text_ranges is not None
                and not any(lo <= start and start + size <= hi for lo, hi in text_ranges))):
        return None
    legal = _GENERATED_COUNTS.get(abi)
    if legal is None:
        legal = _GENERATED_COUNTS[abi] = _legal_word_counts(abi, -8 if abi.is_amd64 else 0, 0)
    rows, end = reader.row_infos(entry)
    previous = -1
    aarch64, s390x = abi.is_aarch64, abi.is_s390x
    for row_start, row_info, words_at in rows:
        count = (row_info >> 1) & 0xF
        if (row_start <= previous or count not in legal or (row_info & 0x80 and not aarch64)
                or (s390x and _first_word(reader, row_info, words_at) * 8 + 160 < 0)):
            return None
        previous = row_start
    return end if not rows or (rows[0][0] == 0 and previous < size) else None


#: The data-word counts :func:`_plain_fdes` allows under a generated table's header.
_GENERATED_COUNTS: dict[ABI, set[int]] = {}


def _first_word(reader: SFrameReader, row_info: int, words_at: int) -> int:
    """The first data word (signed) of a row whose info byte is ``row_info``."""
    size = WORD_SIZE_OF_CODE[(row_info >> 5) & 0x3]
    return int(word_struct(reader.header.big_endian, 1, size).unpack_from(
        reader.buffer, words_at)[0])


def validate(data: bytes | memoryview, address: int = 0,
             text_ranges: Sequence[tuple[int, int]] | None = None,
             kernel: bool = False, relocatable: bool = False) -> list[Finding]:
    """All findings for a section at ``address`` (no finding of severity ERROR: valid).

    ``text_ranges``: ``[start, end)`` address ranges of executable code; when
    given, every function must lie inside one. ``relocatable``: the section
    comes from a relocatable object, whose function starts are per text
    section, so ordering, overlap and text checks do not apply.
    """
    return list(_Validator(data, address, text_ranges, kernel, relocatable).run())


__all__ = ["CHECKS", "ERROR", "WARNING", "Finding", "encoded_errors", "plain_stored_rows",
           "plainly_valid", "validate"]

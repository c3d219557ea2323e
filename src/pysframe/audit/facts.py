"""What ``sframe audit`` says of one ELF file: its SFrame sections, whether the kernel would
take them, how much of the code they cover and why not the rest, whether they agree with
the file's CFI, and their size against ``.eh_frame``.

Each file is judged alone, from its bytes (a path on disk, or an archive member read into
memory), into a :class:`~.model.FileFacts` record that crosses a process or a Dask worker
and sits in the cache (as JSON) keyed by the file's content. A file that is not ELF, or is
damaged, gets a result that says so; it never stops the audit. Function symbols are read
as the symbolizer reads them (FUNC and IFUNC, :mod:`pysframe.symbolize.symbols`), and a
disagreement with the CFI is classified by its kind, decided from the rows
(:class:`pysframe.generate.compare.Kind`), not by the words of its message.
"""

from __future__ import annotations

import mmap
from bisect import bisect_right
from collections import Counter

from ..cfi.eh_frame import fde_instructions, parse_eh_frame
from ..cfi.instructions import DW_CFA_advance_loc, DW_CFA_restore_state, DW_CFA_set_loc
from ..elf import ElfError, ElfImage
from ..errors import PysframeError
from ..format.constants import ABI
from ..format.decode import SFrameReader
from ..format.errors import UnsupportedVersionError
from ..format.validation import ERROR, validate
from ..generate.compare import Kind, compare_with_cfi, section_for_comparison
from ..generate.section import PLT_SECTIONS, Generated, generate
from ..symbolize.symbols import defined_functions
from .model import FileFacts, FileKind, SectionFacts

#: Bumped when the facts change, so that cached results of an older audit are not reused.
FACTS_VERSION = 4
#: Disagreements with the CFI kept per file (the count is always whole).
KEPT_MESSAGES = 5


def audit_bytes(name: str, data: bytes | mmap.mmap) -> FileFacts:
    """The facts of the file ``name`` whose contents are ``data``."""
    facts = FileFacts(name, FileKind.NOT_ELF, size=len(data))
    if data[:4] != b"\x7fELF":
        return facts
    try:
        image = ElfImage(name, data)
        facts.kind, facts.type, facts.machine = FileKind.ELF, image.elf_type, image.machine
        facts.sframe = _sframe(image)
        _coverage(image, facts)
    except PysframeError as error:  # the file's fault, said in one line
        # What we cannot read (32-bit x86 relocations, say) is not damage in the file.
        unsupported = ((isinstance(error, ElfError) and error.unsupported)
                       or isinstance(error, UnsupportedVersionError))
        facts.kind = FileKind.UNSUPPORTED if unsupported else FileKind.DAMAGED
        facts.error = str(error)
    except (MemoryError, RecursionError) as error:  # the file is too much for us
        facts.kind, facts.error = FileKind.UNREADABLE, f"too large to judge ({error!r})"
    except Exception as error:  # ours, not the file's: said as such, the audit goes on
        facts.kind = FileKind.INTERNAL
        facts.error = f"{type(error).__name__}: {error} (please report this)"
    return facts


def _sframe(image: ElfImage) -> list[SectionFacts]:
    """The SFrame sections: version, ABI, counts, size, validity (and the kernel's view)."""
    sections = []
    relocatable = image.elf_type == "REL"
    text = None if relocatable else image.executable_ranges()
    for section in image.sframe_sections():
        entry = SectionFacts(section.name, len(section.raw))
        contents = section.relocated if relocatable else section.raw
        try:
            header = SFrameReader(contents, section.address).header
            entry.version, entry.abi = header.version, _abi_name(header.abi)
            entry.fdes, entry.fres = header.num_fdes, header.num_fres
        except PysframeError as error:
            entry.error = str(error)
        errors = [f for f in validate(contents, section.address, text, relocatable=relocatable)
                  if f.severity == ERROR]
        entry.valid = not errors
        if errors:
            entry.first_error = errors[0].message
        if not relocatable:
            refusal = [f for f in validate(section.raw, section.address, kernel=True)
                       if f.severity == ERROR]
            entry.kernel_ok = not refusal
            if refusal:
                entry.kernel_refuses = refusal[0].message
        sections.append(entry)
    return sections


def _abi_name(value: int) -> str:
    try:
        return ABI(value).name
    except ValueError:
        return f"unknown ({value})"


def _coverage(image: ElfImage, facts: FileFacts) -> None:
    """The functions of ``.eh_frame``, those without an SFrame FDE and why, the executable
    symbols no CFI describes, the disagreements with the CFI, and the sizes."""
    found = image.section(".eh_frame", relocated=True)
    facts.eh_frame_size = len(found[0]) if found else 0
    if found is None:
        facts.functions = 0
        return
    data, address, _ = found
    fdes, _ = parse_eh_frame(data, address, big_endian=image.big_endian,
                             address_size=image.elf_class // 8)
    functions = {(fde.pc_begin, fde.pc_range) for fde in fdes if fde.pc_range}
    facts.functions = len(functions)
    covered: set[tuple[int, int]] = set()
    for section in image.sframe_sections():
        try:
            reader = SFrameReader(section.relocated if image.elf_type == "REL" else section.raw,
                                  section.address)
            covered |= {(entry.start, entry.size) for entry in reader.fdes()}
        except PysframeError:
            continue
    missing = functions - covered
    facts.without_sframe = len(missing) if facts.sframe else len(functions)
    made = _Made(image)  # our translation of the CFI, made once for both uses below
    reasons: Counter[str] = Counter()
    if missing and facts.sframe:
        reasons.update(_reasons(image, missing, made))
    facts.reasons = dict(reasons.most_common())
    facts.no_cfi_symbols = _symbols_without_cfi(image, functions)
    if facts.sframe and image.elf_type != "REL":
        _against_cfi(image, facts, made)


class _Made:
    """``generate(image, version=3, address=...)`` of one file, made once per address."""

    def __init__(self, image: ElfImage) -> None:
        self.image = image
        self._made: dict[int, Generated | None] = {}

    def at(self, address: int) -> Generated | None:
        """The generated section at ``address`` (None: the CFI gives none)."""
        if address not in self._made:
            try:
                self._made[address] = generate(self.image, version=3, address=address)
            except PysframeError:
                self._made[address] = None
        return self._made[address]


def _reasons(image: ElfImage, missing: set[tuple[int, int]], made: _Made) -> Counter[str]:
    """Why functions of the CFI have no SFrame FDE: gas's reason when our translation of
    their CFI would have skipped them too (.cfi_escape, DRAP on V2, ...), PLT stubs, or
    none given (an object assembled without --gsframe)."""
    reasons: Counter[str] = Counter()
    sections = image.sframe_sections()
    generated = made.at(sections[0].address if sections else 0)
    skipped = ({(start, size): reason for start, size, reason in generated.skipped}
               if generated is not None else {})
    stubs = image.section_ranges(*PLT_SECTIONS)
    for start, size in missing:
        reason = skipped.get((start, size))
        if reason is None and any(lo <= start < hi for lo, hi in stubs.values()):
            reason = "PLT stub"
        reasons[_short(reason) if reason else "no SFrame FDE (assembled without --gsframe?)"] += 1
    return reasons


def _short(reason: str) -> str:
    """A reason without its per-function details (register numbers, offsets)."""
    return reason.split(":", 1)[0].split(" (", 1)[0]


def _symbols_without_cfi(image: ElfImage, functions: set[tuple[int, int]]) -> int:
    """Function symbols (FUNC and IFUNC, sized) in code that no CFI covers (hand-written
    asm), read from the file's own .symtab, else its .dynsym."""
    ranges = sorted(functions)
    starts = [start for start, _ in ranges]
    count = 0
    for symbol in defined_functions(image):
        if not symbol.start or not symbol.size:
            continue
        at = bisect_right(starts, symbol.start) - 1
        if at < 0 or symbol.start >= ranges[at][0] + ranges[at][1]:
            count += 1
    return count


#: The known cause of each kind of disagreement with the CFI (the rows of the fixtures'
#: programs of binutils 2.44 against 2.46 and the CFI show each one).
CAUSES = {
    Kind.PLT_GOT_RULE: "GNU ld's .plt.got rule (CFA SP+16 for a stub reached by a call)",
    Kind.RA_UNDEFINED_UNMARKED: "gas < 2.46: the outermost frame (RA undefined) not marked",
    Kind.RA_IN_REGISTER: "gas < 2.46: an RA kept in a register (V2 cannot say it)",
}
OTHER_CAUSE = "other"
RESTORE_STATE_CAUSE = "gas 2.44: rows from a .cfi_restore_state on lost the restored state"


def _restore_state_rows(image: ElfImage) -> list[tuple[int, int]]:
    """``[from, to)``: from a function's first restore of a remembered state to its end."""
    found = image.section(".eh_frame", relocated=True)
    if found is None:
        return []
    data, address, _ = found
    fdes, _ = parse_eh_frame(data, address, big_endian=image.big_endian,
                             address_size=image.elf_class // 8)
    rows: list[tuple[int, int]] = []
    for fde in fdes:
        try:
            instructions = fde_instructions(data, fde, image.big_endian, address)
        except (PysframeError, ValueError):
            continue
        location = fde.pc_begin
        for insn in instructions:
            if insn.op == DW_CFA_advance_loc:
                location += insn.a
            elif insn.op == DW_CFA_set_loc:
                location = insn.a
            elif insn.op == DW_CFA_restore_state:
                rows.append((location, fde.pc_begin + fde.pc_range))
                break
    return rows


def _against_cfi(image: ElfImage, facts: FileFacts, made: _Made) -> None:
    disagreements = 0
    causes: Counter[str] = Counter()
    restored: list[tuple[int, int]] | None = None
    kept: list[str] = []
    for section in image.sframe_sections():
        try:
            data = section_for_comparison(image, section.raw, section.relocated)
            found, _ = compare_with_cfi(image, data, section.address,
                                        made.at(section.address))
        except PysframeError as error:
            kept.append(f"not compared: {error}")
            continue
        disagreements += len(found)
        for item in found:
            cause = CAUSES.get(item.kind, OTHER_CAUSE)
            if cause == OTHER_CAUSE:
                restored = _restore_state_rows(image) if restored is None else restored
                if any(start <= item.pc < end for start, end in restored):
                    cause = RESTORE_STATE_CAUSE
            causes[cause] += 1
        kept += [f"{item.pc:#x}: {item.message}" for item in found[:KEPT_MESSAGES - len(kept)]]
    facts.cfi_disagreements = disagreements
    facts.cfi_causes = dict(causes.most_common())
    facts.cfi_examples = kept[:KEPT_MESSAGES]

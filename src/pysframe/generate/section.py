"""Assemble a whole .sframe section for an ELF file from its CFI, as GNU ld would link it."""

from __future__ import annotations

from ..cfi.eh_frame import FDE as CFIFDE
from ..cfi.eh_frame import (
    CFIError,
    cie_instructions,
    fde_instructions,
    parse_debug_frame,
    parse_eh_frame,
)
from ..cfi.leb128 import DecodeError
from ..elf import ElfImage
from ..errors import Problems
from ..format.constants import ABI, F_FDE_FUNC_START_PCREL, VERSION_2, VERSION_3
from ..format.model import FDE, Section
from ..records import field, record_class
from .abi import abi_of
from .crt import crt_fdes
from .errors import GenerateError
from .gas import Skip, strip_padding, translate
from .plt import plt_fdes

TYPE_CHECKING = False
if TYPE_CHECKING:  # (collections.abc imports collections: ~1 ms of a first run)
    from collections.abc import Callable

PLT_SECTIONS = (".plt", ".plt.got", ".plt.sec")
__all__ = ["PLT_SECTIONS", "GenerateError", "Generated", "abi_of", "generate"]


@record_class
class Generated:
    section: Section
    #: (start, size, gas's reason) of every function gas would have skipped, and of every
    #: function left out because its FDE could not be a valid one (damaged CFI).
    skipped: list[tuple[int, int, str]] = field(default_factory=list)
    #: The CFI entries that could not be read (each names its offset in the section).
    cfi_errors: Problems = field(default_factory=Problems)
    #: (start, size, what) of functions kept with part of their CFI left out (rows past
    #: the function's end).
    trimmed: list[tuple[int, int, str]] = field(default_factory=list)


def generate(image: ElfImage, *, version: int = VERSION_3, address: int | None = None,
             include: Callable[[int, int], bool] | None = None,
             as_gnu: bool = False, unwinder: bool = False) -> Generated:
    """The SFrame section ld would have linked for ``image`` had gas made SFrame for every
    function of its CFI (``include(start, size)`` may leave functions out).

    By default every row is a correct one; ``as_gnu`` reproduces GNU as and ld byte for
    byte, their wrong rows included (see :mod:`.gas` and :mod:`.plt`). ``unwinder``: the
    table this package's unwinder uses, which also has the functions whose rules are
    known though gas makes no SFrame for them: those with a DW_CFA_GNU_args_size escape
    (see :func:`.gas.translate`) and x86-64 ``_init`` and ``_fini`` (:mod:`.crt`)."""
    if version not in (VERSION_2, VERSION_3):
        raise GenerateError(f"cannot generate SFrame version {version} (2 or 3)")
    abi = abi_of(image)
    found = image.section(".eh_frame", relocated=True)
    debug = False
    if found is None:
        found = image.section(".debug_frame", relocated=True)
        debug = True
    if found is None:
        raise GenerateError("no .eh_frame or .debug_frame section")
    data, cfi_address, _ = found
    parse = parse_debug_frame if debug else parse_eh_frame
    cfi_fdes, errors = parse(data, cfi_address, big_endian=image.big_endian,
                             address_size=image.elf_class // 8)
    ranges = image.section_ranges(*PLT_SECTIONS)
    result = Generated(Section(version=version, abi=abi))
    for error in errors:
        result.cfi_errors.add(error)
    fdes: list[FDE] = []
    for cfi in cfi_fdes:
        start, size = cfi.pc_begin, cfi.pc_range
        if any(lo <= start < hi for lo, hi in ranges.values()) or (
                include is not None and not include(start, size)):
            continue  # PLT FDEs (made from ld's rules below), or left out by the caller
        fde = translate_entry(data, cfi_address, cfi, abi, image.big_endian, result,
                              version=version, as_gnu=as_gnu, args_size=unwinder)
        if fde is not None:
            fdes.append(fde)
    heads = {name: (lo, hi, (image.section(name) or (b"", 0, 0))[0][:16])
             for name, (lo, hi) in ranges.items()}
    plt = plt_fdes(abi, heads, pie=image.is_pie(), version=version, as_gnu=as_gnu)
    if include is not None:
        plt = [fde for fde in plt if include(fde.start, fde.size)]
    fdes += plt
    if unwinder and abi.is_amd64:
        fdes += crt_fdes(image, [(fde.start, fde.end) for fde in fdes])
    section = result.section
    section.fdes = fdes
    section.flags = F_FDE_FUNC_START_PCREL if version == VERSION_3 else 0
    section.cfa_fixed_ra_offset = -8 if abi.is_amd64 else 0
    existing = image.sframe_sections()
    # Default: where the file's own .sframe is, else address 0, where `sframe inject`
    # puts it (a section that is not loaded; starts are then link-time addresses).
    section.address = address if address is not None else (
        existing[0].address if existing else 0)
    section.sort_fdes()  # ld: index sorted by address, FRE data in input order
    text = None if image.elf_type == "REL" else image.executable_ranges()
    section.fdes = _placeable(section.fdes, section.address, version, text, result.skipped)
    return result


def translate_entry(data: bytes, cfi_address: int, cfi: CFIFDE, abi: ABI, big_endian: bool,
                    result: Generated, *, version: int, as_gnu: bool,
                    start: int | None = None, args_size: bool = False) -> FDE | None:
    """The SFrame FDE gas makes for one CFI FDE (read from ``data``, the CFI section at
    ``cfi_address``) for the function at ``start`` (default: the FDE's ``pc_begin``), or
    None with the reason added to ``result.skipped`` (``args_size``: also for a function
    with a DW_CFA_GNU_args_size escape, see :func:`.gas.translate`)."""
    start = cfi.pc_begin if start is None else start
    size = cfi.pc_range
    cie = cfi.cie
    notes: list[str] = []
    try:
        if not 0 < size <= 0xFFFFFFFF:
            raise Skip(f"function size {size} (1 to 2**32-1 bytes in SFrame)")
        instructions = strip_padding(cie_instructions(data, cie, big_endian)) + \
            strip_padding(fde_instructions(data, cfi, big_endian, cfi_address))
        fde = translate(instructions, start, size, abi, version=version,
                        signal=cie.signal_frame, b_key=cie.b_key,
                        return_register=cie.return_register, notes=notes, as_gnu=as_gnu,
                        args_size=args_size)
    except Skip as skip:
        result.skipped.append((start, size, skip.reason))
        return None
    except (CFIError, DecodeError) as error:
        result.skipped.append((start, size, f"unreadable CFI: {error}"))
        return None
    result.trimmed += [(start, size, note) for note in notes]
    return fde


def _placeable(fdes: list[FDE], address: int, version: int,
               text: list[tuple[int, int]] | None, skipped: list[tuple[int, int, str]]
               ) -> list[FDE]:
    """The (sorted) FDEs a valid section can hold: inside an executable segment and
    overlapping no earlier one (unless the file is relocatable: ``text`` None, every text
    section at 0), close enough to the section for the start field. Only damaged CFI has
    others; they go to ``skipped``."""
    reach = 1 << (63 if version == VERSION_3 else 31)
    # The start field is relative to the FDE's own place in the section (V2/V3): keep a
    # margin for the header and the index before it.
    margin = 64 + 32 * len(fdes)
    kept: list[FDE] = []
    end = None
    for fde in fdes:
        reason = None
        if text is not None and not any(lo <= fde.start and fde.end <= hi for lo, hi in text):
            reason = "not inside an executable segment"
        elif text is not None and end is not None and fde.start < end:
            reason = f"overlaps the function at {kept[-1].start:#x}"
        elif not -reach + margin <= fde.start - address < reach - margin:
            reason = f"too far from the section at {address:#x} for SFrame V{version}"
        if reason is not None:
            skipped.append((fde.start, fde.size, reason))
            continue
        kept.append(fde)
        end = fde.end
    return kept

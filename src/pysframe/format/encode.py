"""Writing the SFrame object model as bytes, in any version, as GNU as and ld do.

Hand-written: no library writes SFrame. Choices the model leaves open are made
the way gas makes them: the FRE start width from the function size and the
smallest data-word size that holds every word of a row (offsets signed, V3
flexible control words unsigned). Values given explicitly in the model (as a
decoder fills them in) are kept, so decoded sections re-encode exactly.
"""

from __future__ import annotations

import struct

from ..records import replace
from .constants import (
    ABI,
    CODE_OF_WORD_SIZE,
    F_FDE_FUNC_START_PCREL,
    F_FRAME_POINTER,
    FDE_SIZE,
    FLAGS_MASK,
    FRE_START_SIZE,
    HEADER_SIZE,
    INFO_PAUTH_KEY_B_BIT,
    INFO_PC_TYPE_BIT,
    INFO_SIGNAL_BIT,
    KNOWN_VERSIONS,
    MAGIC,
    V3_ATTR_SIZE,
    VERSION_1,
    VERSION_2,
    VERSION_3,
    BaseReg,
    FDEType,
    FREType,
    PCType,
    fre_type_for_size,
)
from .decode import FLEX_CONTROL_POSITIONS, read_header
from .errors import EncodeError
from .model import FDE, FRE, Section

_U8_FMT = {1: "B", 2: "H", 4: "I"}


def _fits_signed(value: int, size: int) -> bool:
    bound = 1 << (8 * size - 1)
    return -bound <= value < bound


def _fits_unsigned(value: int, size: int) -> bool:
    return 0 <= value < (1 << (8 * size))


def choose_word_size(words: tuple[int, ...], control_positions: tuple[int, ...] = ()) -> int:
    """Smallest data-word size (1, 2 or 4) that holds every word, as gas chooses it."""
    if not control_positions and words:  # all signed offsets: their least and greatest
        lo, hi = min(words), max(words)
        for size in (1, 2, 4):
            bound = 1 << (8 * size - 1)
            if -bound <= lo and hi < bound:
                return size
        raise EncodeError(f"data word out of the 32-bit range in {words}")
    for size in (1, 2, 4):
        if all(
            _fits_unsigned(word, size) if position in control_positions else _fits_signed(word, size)
            for position, word in enumerate(words)
        ):
            return size
    raise EncodeError(f"data word out of the 32-bit range in {words}")


def _control_positions(fde: FDE, fre: FRE) -> tuple[int, ...]:
    if fde.fde_type == FDEType.FLEX:
        return FLEX_CONTROL_POSITIONS.get(len(fre.words), tuple(range(0, len(fre.words), 2)))
    return ()


#: The bytes after an FRE's start (info byte, data words) by what makes them: a table's
#: rows take a few dozen shapes, and generating encodes each row of thousands of
#: functions (kept only when they encode: an error is raised again, with its place).
_BODIES: dict[tuple[object, ...], bytes] = {}
_BODIES_KEPT = 1 << 14


def encode_fre(fde: FDE, fre: FRE, start_size: int, big_endian: bool, where: str) -> bytes:
    """Bytes of one FRE: start offset, info byte, data words."""
    if not 0 <= fre.start < 1 << (8 * start_size):
        raise EncodeError(f"{where}: FRE start {fre.start:#x} does not fit in {start_size} bytes")
    key = _body_key(fde.fde_type == FDEType.FLEX, fre, big_endian)
    body = _BODIES.get(key)
    if body is None:
        body = _fre_body(fde, fre, big_endian, where)
        if len(_BODIES) < _BODIES_KEPT:
            _BODIES[key] = body
    return _start_struct(big_endian, start_size).pack(fre.start) + body


def _body_key(flex: bool, fre: FRE, big_endian: bool) -> tuple[object, ...]:
    """What an FRE's body (:data:`_BODIES`) is made of (the base register as it is: an int
    enum hashes and compares as its value)."""
    return (flex, fre.words, fre.word_size, fre.mangled_ra, fre.base_reg, big_endian)


def _fre_body(fde: FDE, fre: FRE, big_endian: bool, where: str) -> bytes:
    """An FRE's info byte and data words."""
    words = fre.words
    count = len(words)
    if count > 15:
        raise EncodeError(f"{where}: {count} data words (at most 15 fit in the info byte)")
    controls = _control_positions(fde, fre)
    size = fre.word_size
    if size is None:  # chosen to hold every word: no word to check again
        size = choose_word_size(words, controls)
    elif size not in CODE_OF_WORD_SIZE:
        raise EncodeError(f"{where}: invalid data-word size {size}")
    else:
        _check_words(words, size, controls, where)
    mask = (1 << (8 * size)) - 1
    info = (int(fre.mangled_ra) << 7) | (CODE_OF_WORD_SIZE[size] << 5) | (count << 1) | int(
        fre.base_reg)
    if not count:
        return bytes((info,))
    return bytes((info,)) + _words_struct(big_endian, size, count).pack(
        *(word & mask for word in words))


def _check_words(words: tuple[int, ...], size: int, controls: tuple[int, ...],
                 where: str) -> None:
    """Every word fits ``size`` bytes (signed; control words also unsigned)."""
    bound = 1 << (8 * size - 1)
    if not controls and (not words or (-bound <= min(words) and max(words) < bound)):
        return  # the usual case, in two comparisons; else the word that does not fit
    mask = (1 << (8 * size)) - 1
    for position, word in enumerate(words):
        ok = (-(1 << (8 * size - 1)) <= word <= mask) if position in controls else _fits_signed(
            word, size)
        if not ok:
            raise EncodeError(f"{where}: data word {word} does not fit in {size} bytes")


#: Structs made so far (dicts, not functools.cache: functools, with collections, costs
#: ~3 ms of the start-up of every command that reads a table).
_START_STRUCTS: dict[tuple[bool, int], struct.Struct] = {}
_WORDS_STRUCTS: dict[tuple[bool, int, int], struct.Struct] = {}


def _start_struct(big_endian: bool, start_size: int) -> struct.Struct:
    made = _START_STRUCTS.get((big_endian, start_size))
    if made is None:
        made = _START_STRUCTS[big_endian, start_size] = struct.Struct(
            (">" if big_endian else "<") + _U8_FMT[start_size])
    return made


def _words_struct(big_endian: bool, size: int, count: int) -> struct.Struct:
    made = _WORDS_STRUCTS.get((big_endian, size, count))
    if made is None:
        made = _WORDS_STRUCTS[big_endian, size, count] = struct.Struct(
            (">" if big_endian else "<") + _U8_FMT[size] * count)
    return made


def _func_info(fde: FDE, fre_type: FREType, version: int, where: str) -> int:
    info = int(fre_type)
    if fde.pc_type == PCType.MASK:
        info |= INFO_PC_TYPE_BIT
    if fde.pauth_key_b:
        info |= INFO_PAUTH_KEY_B_BIT
    if fde.signal:
        if version != VERSION_3:
            raise EncodeError(f"{where}: signal-frame FDEs need SFrame V3")
        info |= INFO_SIGNAL_BIT
    return info


def _check_fde(fde: FDE, version: int, where: str) -> None:
    if fde.fde_type != FDEType.DEFAULT and version != VERSION_3:
        raise EncodeError(f"{where}: flexible FDEs need SFrame V3")
    if version == VERSION_1 and fde.rep_size:
        raise EncodeError(f"{where}: SFrame V1 has no rep_size field (rep_size {fde.rep_size})")
    if version == VERSION_1 and any(not fre.words for fre in fde.fres):
        raise EncodeError(f"{where}: RA-undefined FREs (no data words) need SFrame V2 or V3")
    if version == VERSION_3 and len(fde.fres) > 0xFFFF:
        raise EncodeError(f"{where}: {len(fde.fres)} FREs (SFrame V3 allows at most 65535)")
    if not _fits_unsigned(fde.size, 4):
        raise EncodeError(f"{where}: function size {fde.size} does not fit in 32 bits")
    if not _fits_unsigned(fde.rep_size, 1):
        raise EncodeError(f"{where}: rep_size {fde.rep_size} does not fit in a byte")


def encode(section: Section) -> bytes:
    """The bytes of ``section`` as it sits at ``section.address``."""
    version = section.version
    if version not in KNOWN_VERSIONS:
        raise EncodeError(f"unknown SFrame version {version}")
    abi = ABI(section.abi)
    if section.flags & ~FLAGS_MASK[version] & 0xFF:
        raise EncodeError(f"flags {section.flags:#x} are not legal in SFrame version {version}")
    if len(section.aux_header) > 0xFF:
        raise EncodeError("auxiliary header longer than 255 bytes")
    big_endian = abi.big_endian
    order = ">" if big_endian else "<"
    fdes = section.fdes
    fde_size = FDE_SIZE[version]
    header_end = HEADER_SIZE + len(section.aux_header)

    # FRE data, laid out in the remembered order (ld sorts the index, not the data).
    layout = sorted(range(len(fdes)), key=lambda i: (fdes[i].fre_off is None, fdes[i].fre_off or 0, i))
    fre_area = bytearray()
    fre_offsets = [0] * len(fdes)
    infos = [0] * len(fdes)
    for i in layout:
        fde = fdes[i]
        where = f"FDE {i}"
        _check_fde(fde, version, where)
        fre_type = fde.fre_type if fde.fre_type is not None else fre_type_for_size(fde.size)
        info = _func_info(fde, fre_type, version, where)
        infos[i] = info
        fre_offsets[i] = len(fre_area)
        if version == VERSION_3:
            fre_area += struct.pack(order + "HBBB", len(fde.fres), info, int(fde.fde_type),
                                    fde.rep_size)
        start_size = FRE_START_SIZE[fre_type]
        # Each row's start, then its body as encode_fre keeps it: found here at once for a
        # row whose shape was met before (generating encodes thousands of functions).
        flex, limit = fde.fde_type == FDEType.FLEX, 1 << (8 * start_size)
        start_pack = _start_struct(big_endian, start_size).pack
        bodies = _BODIES
        for k, fre in enumerate(fde.fres):
            body = bodies.get(_body_key(flex, fre, big_endian))
            if body is not None and 0 <= fre.start < limit:
                fre_area += start_pack(fre.start)
                fre_area += body
                continue
            try:
                fre_area += encode_fre(fde, fre, start_size, big_endian, "")
            except EncodeError:  # said again with its place (made only for an error)
                encode_fre(fde, fre, start_size, big_endian, f"{where} FRE {k}")
                raise

    out = bytearray()
    out += struct.pack(order + "HBBBbbB", MAGIC, version, section.flags, int(abi),
                       section.cfa_fixed_fp_offset, section.cfa_fixed_ra_offset,
                       len(section.aux_header))
    num_fres = sum(len(fde.fres) for fde in fdes)
    if num_fres > 0xFFFFFFFF:
        raise EncodeError("more than 2**32-1 FREs")
    out += struct.pack(order + "IIIII", len(fdes), num_fres, len(fre_area), 0, len(fdes) * fde_size)
    out += section.aux_header
    pcrel = bool(section.flags & F_FDE_FUNC_START_PCREL)
    for i, fde in enumerate(fdes):
        entry_offset = header_end + i * fde_size
        field = fde.start - section.address - (entry_offset if pcrel else 0)
        if version == VERSION_3:
            if not _fits_signed(field, 8):
                raise EncodeError(f"FDE {i}: start {fde.start:#x} out of the 64-bit range")
            out += struct.pack(order + "qII", field, fde.size, fre_offsets[i])
        else:
            if not _fits_signed(field, 4):
                raise EncodeError(
                    f"FDE {i}: start {fde.start:#x} is more than 2 GiB from the section "
                    f"(SFrame V{version} start fields are 32-bit)")
            out += struct.pack(order + "iIII", field, fde.size, fre_offsets[i], len(fde.fres))
            out.append(infos[i])
            if version == VERSION_2:
                out += struct.pack(order + "BH", fde.rep_size, 0)
    out += fre_area
    out += section.tail
    return bytes(out)


#: A generated single-function table up to its rows: header, the FDE's index entry and
#: its attribute record (see :func:`single_function`).
_SINGLE = {big: struct.Struct((">" if big else "<") + "HBBBbbBIIIIIqIIHBBB")
           for big in (False, True)}
#: The FDE info bits a default FDE's decoded model keeps (:func:`_func_info` writes them
#: back): FRE type, PC type, pauth key, signal.
_INFO_KEPT = 0x0F | INFO_PC_TYPE_BIT | INFO_PAUTH_KEY_B_BIT | INFO_SIGNAL_BIT


def single_function(header: Section, start: int, size: int, info: int,
                    rows: bytes | memoryview, num_fres: int) -> bytes:
    """What :func:`encode` writes for ``header`` (a version 3 section at address 0 with
    PC-relative starts and no auxiliary header or tail; its FDEs are not read) and one
    default FDE, not PC-masking and without repetitions, at ``start`` of ``size`` bytes,
    its stored FDE info byte ``info``, whose ``num_fres`` rows' encoding is ``rows`` (as a
    version 3 table stores them: each row's start, info byte and words).
    :class:`EncodeError` as :func:`encode` raises it."""
    assert (header.version == VERSION_3 and header.flags == F_FDE_FUNC_START_PCREL
            and not header.address and not header.aux_header and not header.tail)
    field = start - HEADER_SIZE  # (PC-relative: from the FDE's index entry)
    if not _fits_signed(field, 8):
        raise EncodeError(f"FDE 0: start {start:#x} out of the 64-bit range")
    if num_fres > 0xFFFF:
        raise EncodeError(f"FDE 0: {num_fres} FREs (SFrame V3 allows at most 65535)")
    abi = ABI(header.abi)
    head = _SINGLE[abi.big_endian].pack(
        MAGIC, VERSION_3, header.flags, int(abi), header.cfa_fixed_fp_offset,
        header.cfa_fixed_ra_offset, 0, 1, num_fres, V3_ATTR_SIZE + len(rows), 0,
        FDE_SIZE[VERSION_3], field, size, 0, num_fres, info & _INFO_KEPT,
        int(FDEType.DEFAULT), 0)
    return head + rows


def relocate(data: bytes | memoryview, address: int, new_address: int) -> bytes:
    """The bytes of the section ``data`` at ``address`` moved to ``new_address``, for the
    same code: only the FDEs' start fields change (relative to the section, or to the
    entry with PC-relative starts, they move by the same amount either way), so a table of
    tens of thousands of FDEs moves without decoding its rows (what
    ``encode(decode(data, address))`` at the new address gives, for a table laid out as
    :func:`encode` lays it out). :class:`EncodeError` if a V1/V2 start field would not fit
    in 32 bits."""
    header = read_header(data)
    wide = header.version == VERSION_3
    field = struct.Struct((">" if header.big_endian else "<") + ("q" if wide else "i"))
    delta = address - new_address
    out = bytearray(data)
    for offset in range(header.fdes_start, header.fdes_end, header.fde_size):
        moved = field.unpack_from(out, offset)[0] + delta
        if not _fits_signed(moved, field.size):
            raise EncodeError(f"FDE at offset {offset:#x}: start more than 2 GiB from the "
                              f"section at {new_address:#x} (SFrame V{header.version} start "
                              "fields are 32-bit)")
        field.pack_into(out, offset, moved)
    return bytes(out)


def convert(section: Section, version: int) -> Section:
    """A copy of ``section`` in another SFrame version, or :class:`EncodeError` if it cannot be.

    V2 -> V3 turns s390x V2 register-number words into flexible FDEs; V3 -> V2
    refuses flexible and signal-frame FDEs. The FRE data is kept as is
    otherwise (the start-address fields follow from ``address``).
    """
    if version not in KNOWN_VERSIONS:
        raise EncodeError(f"unknown SFrame version {version}")
    flags = section.flags
    if version == VERSION_3 and flags & F_FRAME_POINTER:
        raise EncodeError("SFRAME_F_FRAME_POINTER cannot be represented in SFrame V3")
    if version >= VERSION_2:
        flags |= F_FDE_FUNC_START_PCREL
    else:
        flags &= ~F_FDE_FUNC_START_PCREL
    fdes: list[FDE] = []
    for i, fde in enumerate(section.fdes):
        new = replace(fde, fres=[replace(fre) for fre in fde.fres])
        if version == VERSION_3 and section.version != VERSION_3 and section.abi == ABI.S390X_ENDIAN_BIG:
            new = _s390x_v2_registers_to_flex(new)
        _check_fde(new, version, f"FDE {i}")
        if new.signal and version != VERSION_3:
            raise EncodeError(f"FDE {i}: signal-frame FDEs need SFrame V3")
        if version == VERSION_1 and new.pc_type == PCType.MASK:
            raise EncodeError(f"FDE {i}: PCMASK FDEs with a repeat size cannot be written as V1")
        fdes.append(new)
    return replace(section, version=version, flags=flags, fdes=fdes)


def _s390x_v2_registers_to_flex(fde: FDE) -> FDE:
    """Rewrite an s390x V2 FDE whose RA/FP words name registers (LSB set) as a V3 flex FDE."""
    if fde.fde_type != FDEType.DEFAULT or not any(
        any(word & 1 for word in fre.words[1:]) for fre in fde.fres
    ):
        return fde
    fres = []
    sp, fp = 15, 11
    for fre in fde.fres:
        if not fre.words:
            fres.append(replace(fre, word_size=None))
            continue
        base = sp if fre.base_reg == 1 else fp
        words: list[int] = [(base << 3) | 1, fre.words[0]]
        rest = list(fre.words[1:])
        ra = rest[0] if rest else None
        fp_word = rest[1] if len(rest) > 1 else None

        def pair(word: int) -> list[int]:
            if word & 1:
                return [((word >> 1) << 3) | 1, 0]
            return [2, word]

        if ra is not None and ra != 0:
            words += pair(ra)
        elif fp_word is not None:
            words.append(0)
        if fp_word is not None:
            words += pair(fp_word)
        fres.append(replace(fre, words=tuple(words), base_reg=BaseReg.FP, word_size=None))
    return replace(fde, fde_type=FDEType.FLEX, fres=fres)

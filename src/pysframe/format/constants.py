"""Numbers of the SFrame format (all versions), named as in the public spec."""

from __future__ import annotations

from ..enums import IntEnum

MAGIC = 0xDEE2
HEADER_SIZE = 28

VERSION_1 = 1
VERSION_2 = 2
VERSION_3 = 3
KNOWN_VERSIONS = (VERSION_1, VERSION_2, VERSION_3)

# Section-wide flags (sfp_flags).
F_FDE_SORTED = 0x01
F_FRAME_POINTER = 0x02  # V1/V2 only; reserved in V3
F_FDE_FUNC_START_PCREL = 0x04  # V2 erratum 1 and V3

#: Flag bits each version may legally set (as libsframe 2.46 checks them).
FLAGS_MASK = {VERSION_1: 0x07, VERSION_2: 0x07, VERSION_3: 0x05}

FLAG_NAMES = {
    F_FDE_SORTED: "SFRAME_F_FDE_SORTED",
    F_FRAME_POINTER: "SFRAME_F_FRAME_POINTER",
    F_FDE_FUNC_START_PCREL: "SFRAME_F_FDE_FUNC_START_PCREL",
}

#: Size of one FDE entry in the FDE sub-section (V3: the index entry only).
FDE_SIZE = {VERSION_1: 17, VERSION_2: 20, VERSION_3: 16}
#: V3 function attribute record, at start_fre_off in the FRE sub-section.
V3_ATTR_SIZE = 5


class ABI(IntEnum):
    """sfh_abi_arch: the target ABI, which also fixes the byte order."""

    AARCH64_ENDIAN_BIG = 1
    AARCH64_ENDIAN_LITTLE = 2
    AMD64_ENDIAN_LITTLE = 3
    S390X_ENDIAN_BIG = 4

    @property
    def big_endian(self) -> bool:
        return self in (ABI.AARCH64_ENDIAN_BIG, ABI.S390X_ENDIAN_BIG)

    @property
    def is_aarch64(self) -> bool:
        return self in (ABI.AARCH64_ENDIAN_BIG, ABI.AARCH64_ENDIAN_LITTLE)

    @property
    def is_s390x(self) -> bool:
        return self is ABI.S390X_ENDIAN_BIG

    @property
    def is_amd64(self) -> bool:
        return self is ABI.AMD64_ENDIAN_LITTLE


class FREType(IntEnum):
    """Width of an FRE's start-address field (func_info bits 0-3)."""

    ADDR1 = 0
    ADDR2 = 1
    ADDR4 = 2


FRE_START_SIZE = {FREType.ADDR1: 1, FREType.ADDR2: 2, FREType.ADDR4: 4}


class PCType(IntEnum):
    """func_info bit 4: how FRE starts relate to a PC (V1/V2 call it the FDE type)."""

    INC = 0
    MASK = 1


class FDEType(IntEnum):
    """V3 func_info2 bits 0-4: how an FRE's data words are laid out."""

    DEFAULT = 0
    FLEX = 1


class BaseReg(IntEnum):
    """FRE info bit 0: the register the CFA is computed from (default FDEs)."""

    FP = 0
    SP = 1


#: Data-word size codes (FRE info bits 5-6) and their byte widths; code 3 is invalid.
WORD_SIZE_OF_CODE = {0: 1, 1: 2, 2: 4}
CODE_OF_WORD_SIZE = {1: 0, 2: 1, 4: 2}

#: Maximum data words in one FRE that readers accept (a flexible FRE needs 6).
MAX_DATA_WORDS = 6

# func_info bits.
INFO_FRE_TYPE_MASK = 0x0F
INFO_PC_TYPE_BIT = 0x10
INFO_PAUTH_KEY_B_BIT = 0x20
INFO_SIGNAL_BIT = 0x80  # V3 only
INFO2_FDE_TYPE_MASK = 0x1F

# s390x: the CFA offset word is stored as (offset - 160) / 8.
S390X_CFA_OFFSET_ADJUSTMENT = -160
S390X_CFA_OFFSET_ALIGNMENT = 8
S390X_SP_VAL_OFFSET = -160

# V3 flexible-FDE control word.
FLEX_REG_P = 0x1
FLEX_DEREF_P = 0x2
FLEX_REGNUM_SHIFT = 3


class DwarfRegs:
    """DWARF numbers of the stack pointer, frame pointer and return address per ABI."""

    __slots__ = ("fp", "ra", "sp")

    def __init__(self, sp: int, fp: int, ra: int) -> None:
        self.sp = sp
        self.fp = fp
        self.ra = ra


DWARF_REGS = {
    ABI.AARCH64_ENDIAN_BIG: DwarfRegs(31, 29, 30),
    ABI.AARCH64_ENDIAN_LITTLE: DwarfRegs(31, 29, 30),
    ABI.AMD64_ENDIAN_LITTLE: DwarfRegs(7, 6, 16),
    ABI.S390X_ENDIAN_BIG: DwarfRegs(15, 11, 14),
}


def fre_type_for_size(func_size: int) -> FREType:
    """The FRE type gas and libsframe pick for a function (or PLT section) of this size."""
    if func_size < 0x100:
        return FREType.ADDR1
    if func_size < 0x10000:
        return FREType.ADDR2
    return FREType.ADDR4

"""The DWARF attribute forms, declared once: codes, pyelftools' names for them, and the
classes of forms this package tells apart.

The byte scanners compare codes; the code that reads pyelftools' DIEs compares the names
pyelftools gives (``attribute.form``). Each class is declared here by code and its name
set derived from it, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable

ADDR = 0x01
BLOCK2 = 0x03
BLOCK4 = 0x04
DATA2 = 0x05
DATA4 = 0x06
DATA8 = 0x07
STRING = 0x08
BLOCK = 0x09
BLOCK1 = 0x0A
DATA1 = 0x0B
SDATA = 0x0D
UDATA = 0x0F
REF_ADDR = 0x10
REF_UDATA = 0x15
INDIRECT = 0x16
SEC_OFFSET = 0x17
EXPRLOC = 0x18
FLAG_PRESENT = 0x19
IMPLICIT_CONST = 0x21
RNGLISTX = 0x23

#: Form code -> name, as pyelftools spells it (DWARF 5 and the GNU extensions; 0x02 is
#: DWARF 1's DW_FORM_ref, which pyelftools still names).
NAMES: dict[int, str] = {
    0x01: "DW_FORM_addr", 0x02: "DW_FORM_ref", 0x03: "DW_FORM_block2",
    0x04: "DW_FORM_block4", 0x05: "DW_FORM_data2", 0x06: "DW_FORM_data4",
    0x07: "DW_FORM_data8", 0x08: "DW_FORM_string", 0x09: "DW_FORM_block",
    0x0A: "DW_FORM_block1", 0x0B: "DW_FORM_data1", 0x0C: "DW_FORM_flag",
    0x0D: "DW_FORM_sdata", 0x0E: "DW_FORM_strp", 0x0F: "DW_FORM_udata",
    0x10: "DW_FORM_ref_addr", 0x11: "DW_FORM_ref1", 0x12: "DW_FORM_ref2",
    0x13: "DW_FORM_ref4", 0x14: "DW_FORM_ref8", 0x15: "DW_FORM_ref_udata",
    0x16: "DW_FORM_indirect", 0x17: "DW_FORM_sec_offset", 0x18: "DW_FORM_exprloc",
    0x19: "DW_FORM_flag_present", 0x1A: "DW_FORM_strx", 0x1B: "DW_FORM_addrx",
    0x1C: "DW_FORM_ref_sup4", 0x1D: "DW_FORM_strp_sup", 0x1E: "DW_FORM_data16",
    0x1F: "DW_FORM_line_strp", 0x20: "DW_FORM_ref_sig8", 0x21: "DW_FORM_implicit_const",
    0x22: "DW_FORM_loclistx", 0x23: "DW_FORM_rnglistx", 0x24: "DW_FORM_ref_sup8",
    0x25: "DW_FORM_strx1", 0x26: "DW_FORM_strx2", 0x27: "DW_FORM_strx3",
    0x28: "DW_FORM_strx4", 0x29: "DW_FORM_addrx1", 0x2A: "DW_FORM_addrx2",
    0x2B: "DW_FORM_addrx3", 0x2C: "DW_FORM_addrx4", 0x1F01: "DW_FORM_GNU_addr_index",
    0x1F02: "DW_FORM_GNU_str_index", 0x1F20: "DW_FORM_GNU_ref_alt",
    0x1F21: "DW_FORM_GNU_strp_alt",
}

#: References inside the unit (an offset from the unit header). DW_FORM_ref has no size
#: the scanners know, so they reject it before asking.
LOCAL_REFERENCE = frozenset((0x02, 0x11, 0x12, 0x13, 0x14, REF_UDATA))
#: References into the supplementary (dwz) file.
SUPPLEMENTARY_REFERENCE = frozenset((0x1F20, 0x1C, 0x24))
#: Every reference to another DIE.
REFERENCE = LOCAL_REFERENCE | SUPPLEMENTARY_REFERENCE | {REF_ADDR, 0x20}
#: Constants: DW_AT_high_pc in one of these is an offset from DW_AT_low_pc.
CONSTANT = frozenset((DATA1, DATA2, DATA4, DATA8, UDATA, SDATA, IMPLICIT_CONST))
#: The forms of a DW_AT_ranges that is an offset into the range lists.
RANGES_OFFSET = frozenset((SEC_OFFSET, DATA4, DATA8, UDATA, DATA2, DATA1))
#: Indexes into .debug_addr.
ADDRESS_INDEX = frozenset((0x1B, 0x29, 0x2A, 0x2B, 0x2C, 0x1F01))
#: The size of the forms whose size does not depend on the unit.
FIXED_SIZES = {DATA2: 2, DATA4: 4, DATA8: 8, DATA1: 1, 0x0C: 1, 0x11: 1, 0x12: 2,
               0x13: 4, 0x14: 8, FLAG_PRESENT: 0, 0x1C: 4, 0x1E: 16, 0x20: 8,
               IMPLICIT_CONST: 0, 0x24: 8, 0x25: 1, 0x26: 2, 0x27: 3, 0x28: 4, 0x29: 1,
               0x2A: 2, 0x2B: 3, 0x2C: 4}
#: Forms as wide as a section offset (4 bytes in 32-bit DWARF, 8 in 64-bit).
OFFSET_SIZED = frozenset((0x0E, SEC_OFFSET, 0x1D, 0x1F, 0x1F20, 0x1F21))
#: Unsigned LEB128 forms.
ULEB128 = frozenset((UDATA, REF_UDATA, 0x1A, 0x1B, 0x22, RNGLISTX, 0x1F01, 0x1F02))
#: Every LEB128 form.
LEB128 = ULEB128 | {SDATA}


def names(codes: Iterable[int]) -> frozenset[str]:
    """pyelftools' names for the forms ``codes``."""
    return frozenset(NAMES[code] for code in codes)


LOCAL_REFERENCE_NAMES = names(LOCAL_REFERENCE)
SUPPLEMENTARY_REFERENCE_NAMES = names(SUPPLEMENTARY_REFERENCE)
REFERENCE_NAMES = names(REFERENCE)
CONSTANT_NAMES = names(CONSTANT)
RANGES_OFFSET_NAMES = names(RANGES_OFFSET)
REF_ADDR_NAME = NAMES[REF_ADDR]

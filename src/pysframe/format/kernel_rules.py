"""What the kernel's SFrame unwinder makes of a row on each machine (``sframe validate
--kernel``): rows it decodes but whose rules its walk refuses, per architecture, as the
series (x86-64) and Jens Remus's arm64 and s390 patches define them.

- Every machine: the walk needs a word-aligned CFA, so a CFA offset that is not a
  multiple of 8 from SP or FP (both aligned) stops it; RA and FP slots are words.
- Registers in flexible rules (a CFA base other than SP/FP, RA or FP in a register) are
  read through the architecture's ``unwind_user_get_reg``, in the topmost frame only,
  and only the registers it knows: x86-64 the 16 general registers, AArch64 x0-x30 and
  SP, s390x r0-r15 and the floating-point registers f0-f15 (DWARF 16-31).
- AArch64: a row's mangled-RA bit says the saved return address is signed (pac-ret);
  the posted arm64 patches do not strip pointer authentication yet (our model strips
  it, as arm64's perf callchain does), so the kernel would report a signed address.
- s390x: the CFA word is stored as (offset - 160) / 8, so the offset is always aligned;
  an odd RA or FP word is a V2-style register number, which V3 (the only version the
  kernel reads) spells as a flexible rule: the kernel takes it for a stack offset.
"""

from __future__ import annotations

from collections.abc import Iterator

from .constants import ABI, FLEX_REG_P, FLEX_REGNUM_SHIFT

#: The highest DWARF register number ``unwind_user_get_reg`` reads, by machine.
READABLE_REGISTERS = {ABI.AMD64_ENDIAN_LITTLE: 15, ABI.AARCH64_ENDIAN_LITTLE: 31,
                      ABI.AARCH64_ENDIAN_BIG: 31, ABI.S390X_ENDIAN_BIG: 31}
WORD = 8
_S390X_CFA_BIAS = 160


def signed_return_addresses(functions: int) -> str:
    """The one finding of an AArch64 section whose rows sign return addresses."""
    return (f"{functions} functions save a signed RA (mangled-RA bit): the posted arm64 "
            "patches do not strip pointer authentication yet")


def kernel_row_problems(abi: ABI, words: tuple[int, ...], flexible: bool,
                        fixed_ra: int, fixed_fp: int) -> Iterator[str]:
    """What the kernel's walk refuses in one row (data words as stored)."""
    if not words:
        return  # RA undefined: the outermost frame, taken as such
    if flexible:
        yield from _flexible(abi, words)
    else:
        cfa = words[0] * 8 + _S390X_CFA_BIAS if abi.is_s390x else words[0]
        if cfa % WORD:
            yield (f"CFA offset {cfa} is not a multiple of {WORD}: the kernel's walk refuses "
                   "an unaligned CFA")
        saved = list(words[1:])
        if fixed_ra:
            saved.insert(0, 0)
        if fixed_fp:
            saved.append(fixed_fp)
        for name, offset in zip(("RA", "FP"), saved, strict=False):
            if offset and abi.is_s390x and offset & 1:
                yield (f"{name} word {offset} is odd: a V2 register number, which the kernel "
                       "(version 3 only) reads as a stack offset")
            elif offset % WORD:
                yield f"{name} slot at CFA{offset:+d} is not a word"


def _flexible(abi: ABI, words: tuple[int, ...]) -> Iterator[str]:
    """Control words naming a register the machine's ``unwind_user_get_reg`` cannot read."""
    highest = READABLE_REGISTERS[abi]
    controls = [words[0]]
    if len(words) >= 4 and words[2]:
        controls.append(words[2])
    if len(words) in (5, 6):
        controls.append(words[len(words) - 2])
    for control in controls:
        regnum = control >> FLEX_REGNUM_SHIFT
        if control & FLEX_REG_P and regnum > highest:
            yield (f"rule based on DWARF register {regnum}, which the kernel cannot read on "
                   f"{abi.name}")

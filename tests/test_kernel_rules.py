"""``sframe validate --kernel``'s per-machine rules (``format/kernel_rules.py``): rows the
kernel's walk refuses on x86-64, AArch64 and s390x, from the data words as stored."""

from __future__ import annotations

from pysframe.format.constants import ABI
from pysframe.format.kernel_rules import READABLE_REGISTERS, kernel_row_problems

AMD64, AARCH64, S390X = ABI.AMD64_ENDIAN_LITTLE, ABI.AARCH64_ENDIAN_LITTLE, ABI.S390X_ENDIAN_BIG


def problems(abi: ABI, words: tuple[int, ...], flexible: bool = False) -> list[str]:
    fixed_ra = -8 if abi is AMD64 else 0
    return list(kernel_row_problems(abi, words, flexible, fixed_ra, 0))


def test_rows_gas_writes_pass() -> None:
    """The rows gas writes on each machine: entry rows, saved FP/RA, the outermost row."""
    assert problems(AMD64, (8,)) == problems(AMD64, (16, -16)) == []
    assert problems(AARCH64, (0,)) == problems(AARCH64, (32, -24, -32)) == []
    # s390x: CFA word (offset - 160) / 8; RA padding (0) when only FP is saved.
    assert problems(S390X, (0,)) == problems(S390X, (20, -48, -72)) == []
    assert problems(S390X, (20, 0, -72)) == []
    assert all(problems(abi, ()) == [] for abi in (AMD64, AARCH64, S390X))


def test_unaligned_cfa_and_slots() -> None:
    assert any("CFA offset 12" in p for p in problems(AARCH64, (12,)))
    assert any("RA slot" in p for p in problems(AARCH64, (32, -20, -32)))
    # s390x CFA offsets are multiples of 8 by their encoding.
    assert all("CFA" not in p for p in problems(S390X, (3,)))


def test_s390x_register_tag_of_version_2() -> None:
    """An odd RA word is V2's register number (r16 << 1 | 1): read as an offset by the kernel."""
    assert any("odd" in p for p in problems(S390X, (20, (16 << 1) | 1)))


def test_flexible_registers_the_machine_cannot_read() -> None:
    """CFA from DWARF register n: (n << 3) | 1; the kernel reads registers its machine's
    hook knows (s390x: the FPRs too)."""
    for abi, highest in READABLE_REGISTERS.items():
        readable = ((highest << 3) | 1, 16)
        unreadable = (((highest + 1) << 3) | 1, 16)
        assert problems(abi, readable, flexible=True) == [], abi
        assert problems(abi, unreadable, flexible=True), abi
    # RA in register 17 (an FPR on s390x): readable there, not on x86-64.
    ra_in_f17 = ((15 << 3) | 1, 160 // 8 - 20, (17 << 3) | 1, 0)
    assert problems(S390X, ra_in_f17, flexible=True) == []
    assert problems(AMD64, ((7 << 3) | 1, 8, (17 << 3) | 1, 0), flexible=True)

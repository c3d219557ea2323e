"""The kernel's user unwinder on AArch64 and s390x (``pysframe.deferred.arch``), on small
synthetic processes: tables written with our encoder, stacks laid out by hand. (The qemu
cores of ``test_defer_cores.py`` check the same rules on real programs.)"""

from __future__ import annotations

import struct

from pysframe.deferred import EntryRegisters, Mm, unwind_user
from pysframe.format.constants import ABI
from pysframe.format.encode import encode
from pysframe.format.model import FDE, FRE, default_section
from pysframe.unwind.step import S390X_R14_SLOT, Stop

TEXT, TABLE, STACK = 0x400000, 0x410000, 0x7F000000
LEAF, F2, MAIN, NO_LR, START, BARE = 0x400100, 0x400200, 0x400300, 0x400500, 0x400400, 0x401800
SP = STACK + 0x800
#: A pointer-authentication code in bits 48-54, as pac-ret leaves it in a saved x30.
PAC = 0x2A << 48


def process(abi: ABI, fdes: list[FDE] | None) -> Mm:
    """Text (its table registered when ``fdes`` are given) and an empty stack."""
    mm = Mm(abi=abi)
    mm.mmap(TEXT, 0x2000, bytes(0x2000), executable=True, name="prog")
    mm.mmap(STACK, 0x1000, name="[stack]")
    if fdes is not None:
        section = default_section(abi)
        section.address = TABLE
        section.fdes = fdes
        section.sort_fdes()
        data = encode(section)
        mm.mmap(TABLE, 0x1000, data, name="prog")
        assert mm.sframes.add(TABLE, TABLE + len(data), TEXT, TEXT + 0x1000, "prog") == 0
    return mm


def store(mm: Mm, address: int, *values: int) -> None:
    mm.write(address, struct.pack(f"{mm.arch.byteorder}{len(values)}Q", *values))


AARCH64_FDES = [
    FDE(LEAF, 0x40, [FRE(0, (0,))]),  # a leaf: CFA = SP, RA still in x30
    # stp x29, x30, [sp, -32]! (pac-ret: x30 signed first)
    FDE(F2, 0x40, [FRE(0, (0,)), FRE(4, (32, -24, -32), mangled_ra=True)]),
    FDE(MAIN, 0x40, [FRE(0, (0,)), FRE(4, (16, -8, -16))]),
    FDE(NO_LR, 0x40, [FRE(0, (16,))]),  # RA "not saved": only the topmost frame's is known
    FDE(START, 0x20, [FRE(0, ())]),
]


def test_aarch64_link_register_and_signed_return_address() -> None:
    """The topmost frame's RA from x30; F2's saved RA signed, stripped; to _start."""
    mm = process(ABI.AARCH64_ENDIAN_LITTLE, AARCH64_FDES)
    store(mm, SP, SP + 32, PAC | (MAIN + 0x20), 0, 0, SP + 48, START + 0x10)
    trace = unwind_user(mm, EntryRegisters(LEAF + 8, SP, SP, lr=F2 + 0x20))
    assert trace.entries == [LEAF + 8, F2 + 0x20, MAIN + 0x20, START + 0x10]
    assert trace.stop is Stop.OUTERMOST and trace.methods == ["sframe"] * 3


def test_aarch64_return_address_in_the_link_register_only_in_the_topmost_frame() -> None:
    """A caller whose row keeps the RA in x30: the kernel cannot know it (REGISTER); and
    without the link register the topmost frame's is refused too."""
    mm = process(ABI.AARCH64_ENDIAN_LITTLE, AARCH64_FDES)
    store(mm, SP, SP + 32, NO_LR + 0x10)
    trace = unwind_user(mm, EntryRegisters(LEAF + 8, SP, SP, lr=F2 + 0x20))
    assert trace.entries == [LEAF + 8, F2 + 0x20, NO_LR + 0x10]
    assert trace.stop is Stop.REGISTER
    alone = unwind_user(mm, EntryRegisters(LEAF + 8, SP, SP))
    assert alone.entries == [LEAF + 8] and alone.stop is Stop.BAD_RULE


def test_aarch64_frame_records_without_sframe() -> None:
    """No table: the frame records at x29, their x30 stripped of a PAC; x29 = 0 ends it
    (FP below SP)."""
    mm = process(ABI.AARCH64_ENDIAN_LITTLE, None)
    store(mm, SP + 16, SP + 48, PAC | (MAIN + 0x20), 0, 0, 0, START + 4)
    trace = unwind_user(mm, EntryRegisters(BARE, SP, SP + 16, lr=0))
    assert trace.entries == [BARE, MAIN + 0x20, START + 4]
    assert trace.methods == ["fp", "fp"] and trace.stop is Stop.FP_BELOW_SP


S390X_FDES = [
    FDE(LEAF, 0x40, [FRE(0, (0,))]),  # CFA = SP + 160 (word (160 - 160) / 8), RA in r14
    FDE(F2, 0x40, [FRE(0, (0,)), FRE(6, ((192 - 160) // 8, -48))]),  # r14 saved at CFA - 48
    FDE(START, 0x20, [FRE(0, ())]),
]


def test_s390x_r14_and_the_cfa_160_above_sp() -> None:
    """Big-endian words; the topmost frame's RA from r14; caller's SP = CFA - 160."""
    mm = process(ABI.S390X_ENDIAN_BIG, S390X_FDES)
    store(mm, SP + 192 - 48, START + 4)
    trace = unwind_user(mm, EntryRegisters(LEAF + 8, SP, 0, lr=F2 + 0x20))
    assert trace.entries == [LEAF + 8, F2 + 0x20, START + 4]
    assert trace.stop is Stop.OUTERMOST


def test_s390x_back_chain_without_sframe() -> None:
    """No table: the word at SP is the caller's SP, r14 in the caller's save area; a zero
    back chain is the outermost frame."""
    mm = process(ABI.S390X_ENDIAN_BIG, None)
    caller, outer = SP + 160, SP + 400
    store(mm, SP, caller)
    store(mm, caller, outer)
    store(mm, caller + S390X_R14_SLOT, MAIN + 0x20)
    store(mm, outer, 0)
    store(mm, outer + S390X_R14_SLOT, START + 4)
    trace = unwind_user(mm, EntryRegisters(BARE, SP, 0x1234, lr=0))
    assert trace.entries == [BARE, MAIN + 0x20, START + 4]
    assert trace.methods == ["fp", "fp"] and trace.stop is Stop.OUTERMOST

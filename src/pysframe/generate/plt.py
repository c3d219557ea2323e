"""The SFrame FDEs GNU ld synthesizes for PLT sections (ld has no CFI to translate there).

x86-64 (``bfd/elfxx-x86.c``): the lazy ``.plt`` gets an FDE for PLT0 and a
PCMASK FDE repeating every 16 bytes over the other entries; ``.plt.got`` and
``.plt.sec`` get one PCMASK FDE each. s390x (``bfd/elf64-s390.c``): PLT0 and a
PCMASK FDE for the 32-byte entries (not for PIE executables). AArch64: none.
Each FRE uses the stack pointer as CFA base and one 1-byte word.
"""

from __future__ import annotations

from ..format.constants import ABI, BaseReg, PCType, fre_type_for_size
from ..format.model import FDE, FRE

SP = BaseReg.SP
ENDBR64 = bytes.fromhex("f30f1efa")


def plt_fdes(abi: ABI, sections: dict[str, tuple[int, int, bytes]], *, pie: bool,
             version: int = 3) -> list[FDE]:
    """FDEs for the PLT sections present: ``sections`` maps name -> (start, end, first bytes)."""
    out: list[FDE] = []
    if abi.is_amd64:
        plt = sections.get(".plt")
        if plt is not None and plt[1] - plt[0] > 16:
            start, end, head = plt
            fre_type = fre_type_for_size(end - start)
            ibt = head.startswith(ENDBR64)
            out.append(FDE(start, 16, [FRE(0, (16,), SP), FRE(6, (24,), SP)], fre_type=fre_type,
                           rep_size=16 if version == 2 else 0))
            out.append(FDE(start + 16, end - start - 16,
                           [FRE(0, (8,), SP), FRE(9 if ibt else 11, (16,), SP)],
                           pc_type=PCType.MASK, rep_size=16, fre_type=fre_type))
        # .plt.got entries jump with the return address and one more slot pushed
        # (CFA sp+16); .plt.sec entries with just the return address (sp+8).
        for name, cfa in ((".plt.got", 16), (".plt.sec", 8)):
            found = sections.get(name)
            if found is None or found[1] <= found[0]:
                continue
            start, end, head = found
            entry = 16 if head.startswith(ENDBR64) else 8
            out.append(FDE(start, end - start, [FRE(0, (cfa,), SP)], pc_type=PCType.MASK,
                           rep_size=entry, fre_type=fre_type_for_size(end - start)))
    elif abi.is_s390x and not pie:
        plt = sections.get(".plt")
        if plt is not None and plt[1] - plt[0] > 32:
            start, end, _ = plt
            fre_type = fre_type_for_size(end - start)
            out.append(FDE(start, 32, [FRE(0, (0,), SP)], fre_type=fre_type))
            out.append(FDE(start + 32, end - start - 32, [FRE(0, (0,), SP)], pc_type=PCType.MASK,
                           rep_size=32, fre_type=fre_type))
    return out

"""The SFrame FDEs GNU ld synthesizes for PLT sections (ld has no CFI to translate there).

x86-64 (``bfd/elfxx-x86.c``): the lazy ``.plt`` gets an FDE for PLT0 and a
PCMASK FDE repeating every 16 bytes over the other entries; ``.plt.got`` and
``.plt.sec`` get one PCMASK FDE each. s390x (``bfd/elf64-s390.c``): PLT0 and a
PCMASK FDE for the 32-byte entries (not for PIE executables). AArch64: none.
Each FRE uses the stack pointer as CFA base and one 1-byte word.

By default the rules are the ones that hold for the stubs; ``as_gnu`` reproduces ld's
bytes, including two x86-64 bugs: ``.plt.got`` entries get CFA = SP+16, but a
``.plt.got`` entry is a bare ``jmp *GOT(%rip)`` (or ``endbr64; bnd jmp *GOT(%rip)``)
reached by the caller's ``call``, with only the return address pushed: CFA = SP+8, as
the FDE ld itself writes for the section into ``.eh_frame`` says (its CIE's rule, no
instructions). And ld 2.41-2.45 wrote rep_size 16 in the (non-PCMASK) PLT0 FDE of a
V2 section, where the field must be 0 (readers ignore it).
"""

from __future__ import annotations

from ..format.constants import ABI, BaseReg, PCType, fre_type_for_size
from ..format.model import FDE, FRE

SP = BaseReg.SP
ENDBR64 = bytes.fromhex("f30f1efa")


#: CFA offset from SP in each entry of .plt.got and .plt.sec: (correct, GNU ld's).
_STUB_CFA = {".plt.got": (8, 16), ".plt.sec": (8, 8)}


def plt_fdes(abi: ABI, sections: dict[str, tuple[int, int, bytes]], *, pie: bool,
             version: int = 3, as_gnu: bool = False) -> list[FDE]:
    """FDEs for the PLT sections present: ``sections`` maps name -> (start, end, first bytes)."""
    out: list[FDE] = []
    if abi.is_amd64:
        plt = sections.get(".plt")
        if plt is not None and plt[1] - plt[0] > 16:
            start, end, head = plt
            fre_type = fre_type_for_size(end - start)
            ibt = head.startswith(ENDBR64)
            out.append(FDE(start, 16, [FRE(0, (16,), SP), FRE(6, (24,), SP)], fre_type=fre_type,
                           rep_size=16 if version == 2 and as_gnu else 0))
            out.append(FDE(start + 16, end - start - 16,
                           [FRE(0, (8,), SP), FRE(9 if ibt else 11, (16,), SP)],
                           pc_type=PCType.MASK, rep_size=16, fre_type=fre_type))
        for name, (correct, gnu) in _STUB_CFA.items():
            cfa = gnu if as_gnu else correct
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

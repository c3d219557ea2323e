"""SFrame FDEs for ``_init`` and ``_fini``, which have no CFI to translate (x86-64).

glibc's ``crti.o`` opens the ``.init`` and ``.fini`` sections of every program and library
with ``[endbr64;] sub $8,%rsp`` and ``crtn.o`` closes them with ``add $8,%rsp; ret``;
neither has CFI, so neither gas nor ld makes SFrame for them and a sample taken inside
(``_fini`` runs at exit for every loaded library) is unwound by the frame-pointer
fallback, which skips the caller (``_dl_fini``): ``_fini`` does not save RBP, so RBP is
still its caller's frame pointer. The rules are plain from the bytes: CFA = SP+8 until
the ``sub`` is done, SP+16 until the ``add`` is, SP+8 at the ``ret``. A section is given
an FDE only if it is exactly that frame around instructions that leave RSP alone (the
ones crti and other objects put there: a call through ``__gmon_start__``'s GOT slot, a
direct call); anything else keeps the fallback.
"""

from __future__ import annotations

from ..elf import ElfImage
from ..format.constants import BaseReg, fre_type_for_size
from ..format.model import FDE, FRE

SECTIONS = (".init", ".fini")
ENDBR64 = bytes.fromhex("f30f1efa")
SUB_8 = bytes.fromhex("4883ec08")
ADD_8_RET = bytes.fromhex("4883c408c3")
#: (opcode bytes, whole length) of the instructions allowed between: mov x(%rip),%rax;
#: test %rax,%rax; je rel8; call *%rax; call rel32.
_BETWEEN = ((bytes.fromhex("488b05"), 7), (bytes.fromhex("4885c0"), 3), (b"\x74", 2),
            (bytes.fromhex("ffd0"), 2), (b"\xe8", 5))


def crt_fdes(image: ElfImage, taken: list[tuple[int, int]]) -> list[FDE]:
    """FDEs for the ``.init`` and ``.fini`` sections of ``image`` that have crti/crtn's
    shape (see the module's description) and no FDE in ``taken`` ([start, end) ranges)."""
    found = []
    for name in SECTIONS:
        section = image.section(name)
        if section is None:
            continue
        code, start, _ = section
        end = start + len(code)
        if any(lo < end and start < hi for lo, hi in taken):
            continue
        fde = frame_of(code, start)
        if fde is not None:
            found.append(fde)
    return found


def frame_of(code: bytes, start: int) -> FDE | None:
    """The FDE of a crti/crtn-shaped function at ``start``, or None if ``code`` has
    another shape."""
    body = code[len(ENDBR64):] if code.startswith(ENDBR64) else code
    sub_end = len(code) - len(body) + len(SUB_8)
    if not body.startswith(SUB_8) or not body.endswith(ADD_8_RET):
        return None
    at, stop = sub_end, len(code) - len(ADD_8_RET)
    while at < stop:
        length = next((size for opcode, size in _BETWEEN if code.startswith(opcode, at)), 0)
        if not length or at + length > stop:
            return None
        at += length
    size = len(code)
    fres = [FRE(0, (8,), BaseReg.SP), FRE(sub_end, (16,), BaseReg.SP),
            FRE(size - 1, (8,), BaseReg.SP)]
    return FDE(start, size, fres, fre_type=fre_type_for_size(size))

"""The SFrame ABI of an ELF file (apart from the generator: the on-demand tables need it
on every run, the generator only on a cache miss)."""

from __future__ import annotations

from ..format.constants import ABI
from .errors import GenerateError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..elf import ElfImage

_ABI_OF_MACHINE = {"EM_X86_64": ABI.AMD64_ENDIAN_LITTLE, "EM_S390": ABI.S390X_ENDIAN_BIG}


def abi_of(image: ElfImage) -> ABI:
    """The ABI of ``image``; raises :class:`GenerateError` for a machine SFrame has none
    for."""
    if image.machine == "EM_AARCH64":
        return ABI.AARCH64_ENDIAN_BIG if image.big_endian else ABI.AARCH64_ENDIAN_LITTLE
    abi = _ABI_OF_MACHINE.get(image.machine)
    if abi is None or image.elf_class != 64:
        raise GenerateError(f"SFrame has no ABI for {image.machine} ELF{image.elf_class}")
    return abi

"""Add a generated .sframe section to a copy of an ELF file.

A linked file (ET_EXEC, ET_DYN) gets it loaded, with ``PT_GNU_SFRAME``: see
:mod:`.loadable`. What follows is the way for every other file.

Hand-written because no ELF library in Python writes ELF files (pyelftools only
reads). The new file is the old one plus, at its end, the section bytes, a new
section-name table and a new section header table; nothing already in the file
moves, so the program runs exactly as before. The section is not loaded (no
program header can be added without moving the existing ones), so it sits at
address 0 and its function starts are the link-time addresses, which is what
``sframe`` itself and objdump read.
"""

from __future__ import annotations

import struct

from ..elf import ElfImage
from ..format.encode import encode
from .section import GenerateError, generate

SHT_GNU_SFRAME = 0x6FFFFFF4
SHN_LORESERVE = 0xFF00


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


#: The end of a file signed the way Linux signs modules (``scripts/sign-file``): the
#: file, the signature, a 12-byte ``module_signature`` (its big-endian ``sig_len`` last),
#: this marker.
SIGNATURE_MARKER = b"~Module signature appended~\n"


def appended_signature(data: bytes | memoryview) -> int:
    """The bytes of a signature appended to ``data`` as Linux signs modules, or 0."""
    if len(data) < len(SIGNATURE_MARKER) + 12 or bytes(
            data[len(data) - len(SIGNATURE_MARKER):]) != SIGNATURE_MARKER:
        return 0
    info_at = len(data) - len(SIGNATURE_MARKER) - 12
    size = len(SIGNATURE_MARKER) + 12 + struct.unpack_from(">I", data, info_at + 8)[0]
    return size if size < len(data) else 0


def inject(image: ElfImage, *, version: int = 3, name: str = ".sframe",
           as_gnu: bool = False) -> tuple[bytes, int]:
    """The bytes of ``image``'s file with a generated SFrame section added, and its size
    (``as_gnu``: the section GNU as and ld would have made, wrong rows included).
    A relocatable object gets what ``as --gsframe`` writes (:mod:`.relocatable`). A
    signature appended as Linux signs modules still ends the new file (it no longer
    matches it: the file must be signed again, see :func:`appended_signature`)."""
    signature = appended_signature(memoryview(image.data))
    if signature:
        unsigned = ElfImage(image.path, bytes(image.data[:len(image.data) - signature]))
        data, size = _inject(unsigned, version=version, name=name, as_gnu=as_gnu)
        return data + bytes(image.data[len(image.data) - signature:]), size
    return _inject(image, version=version, name=name, as_gnu=as_gnu)


def _inject(image: ElfImage, *, version: int, name: str, as_gnu: bool) -> tuple[bytes, int]:
    if image.elf_type == "REL":
        from .relocatable import inject_relocatable

        return inject_relocatable(image, version=version, name=name, as_gnu=as_gnu)
    if image.sframe_sections():
        raise GenerateError("the file already has an SFrame section")
    if image.elf_type in ("EXEC", "DYN"):
        from .loadable import inject_loadable

        def build(address: int) -> bytes:
            return encode(generate(image, version=version, address=address,
                                   as_gnu=as_gnu).section)

        return inject_loadable(image, build)
    sframe = encode(generate(image, version=version, address=0, as_gnu=as_gnu).section)
    data = bytearray(image.data)
    order = ">" if image.big_endian else "<"
    wide = image.elf_class == 64
    header = struct.Struct(order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII"))
    shoff_at, shoff_fmt = (0x28, "Q") if wide else (0x20, "I")
    shnum_at = 0x3C if wide else 0x30
    shoff = struct.unpack_from(order + shoff_fmt, data, shoff_at)[0]
    shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, shnum_at - 2)
    if shoff == 0 or shnum == 0 or shnum + 1 >= SHN_LORESERVE or shstrndx >= shnum:
        raise GenerateError("the file has no usable section header table to extend")
    if shentsize != header.size:
        raise GenerateError(f"unexpected section header size {shentsize}")
    headers = [list(header.unpack_from(data, shoff + i * shentsize)) for i in range(shnum)]
    strtab = headers[shstrndx]
    names = bytes(data[strtab[4]:strtab[4] + strtab[5]])

    # 1. the section bytes, 8-aligned
    data += bytes(_align(len(data), 8) - len(data))
    sframe_offset = len(data)
    data += sframe
    # 2. a new section-name table with the new name
    name_index = len(names)
    new_names = names + name.encode() + b"\0"
    names_offset = len(data)
    data += new_names
    strtab[4], strtab[5] = names_offset, len(new_names)
    # 3. the new section header table
    data += bytes(_align(len(data), 8) - len(data))
    table_offset = len(data)
    # name, type, flags, addr, offset, size, link, info, addralign, entsize
    headers.append([name_index, SHT_GNU_SFRAME, 0, 0, sframe_offset, len(sframe), 0, 0, 8, 0])
    for fields in headers:
        data += header.pack(*fields)
    struct.pack_into(order + shoff_fmt, data, shoff_at, table_offset)
    struct.pack_into(order + "H", data, shnum_at, shnum + 1)
    return bytes(data), len(sframe)

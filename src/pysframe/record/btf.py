"""The BTF a program with ``bpf_loop`` callbacks must carry: its functions' types.

Written by hand from the BTF format (kernel Documentation/bpf/btf.rst): a header, type
records, a string table. Only the kinds a function signature needs (INT, PTR,
FUNC_PROTO, FUNC); :func:`function_btf` gives the blob and the ``func_info`` records
(instruction offset, type id) that tie each function to its code.
"""

from __future__ import annotations

import struct

MAGIC, VERSION = 0xEB9F, 1
KIND_INT, KIND_PTR, KIND_FUNC, KIND_FUNC_PROTO = 1, 2, 12, 13
SIGNED = 1
LINKAGE_STATIC, LINKAGE_GLOBAL = 0, 1


class _Builder:
    def __init__(self) -> None:
        self.types = bytearray()
        self.strings = bytearray(b"\0")
        self.count = 0

    def name(self, text: str) -> int:
        offset = len(self.strings)
        self.strings += text.encode() + b"\0"
        return offset

    def add(self, name: str, kind: int, vlen: int, size_or_type: int, extra: bytes = b"") -> int:
        self.types += struct.pack("<III", self.name(name) if name else 0, (kind << 24) | vlen,
                                  size_or_type) + extra
        self.count += 1
        return self.count

    def blob(self) -> bytes:
        header = struct.pack("<HBBIIIII", MAGIC, VERSION, 0, 24, 0, len(self.types),
                             len(self.types), len(self.strings))
        return header + bytes(self.types) + bytes(self.strings)


def function_btf(main: str, callbacks: list[tuple[str, int]], main_offset: int = 0
                 ) -> tuple[bytes, bytes]:
    """BTF for a program ``int main(void *ctx)`` at ``main_offset`` and callbacks
    ``long name(unsigned int index, void *ctx)`` at the given instruction offsets; returns
    (blob, func_info records)."""
    b = _Builder()
    int_type = b.add("int", KIND_INT, 0, 4, struct.pack("<I", (SIGNED << 24) | 32))
    long_type = b.add("long", KIND_INT, 0, 8, struct.pack("<I", (SIGNED << 24) | 64))
    u32_type = b.add("unsigned int", KIND_INT, 0, 4, struct.pack("<I", 32))
    void_pointer = b.add("", KIND_PTR, 0, 0)
    main_proto = b.add("", KIND_FUNC_PROTO, 1, int_type,
                       struct.pack("<II", b.name("ctx"), void_pointer))
    records = [(main_offset, b.add(main, KIND_FUNC, LINKAGE_GLOBAL, main_proto))]
    callback_proto = b.add("", KIND_FUNC_PROTO, 2, long_type,
                           struct.pack("<IIII", b.name("index"), u32_type, b.name("ctx"),
                                       void_pointer))
    for name, offset in callbacks:
        records.append((offset, b.add(name, KIND_FUNC, LINKAGE_STATIC, callback_proto)))
    records.sort()
    return b.blob(), b"".join(struct.pack("<II", offset, type_id) for offset, type_id in records)


#: Bytes after a type record's 12-byte header, by kind: fixed, and per ``vlen`` item.
_TRAILING = {1: (4, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8), 13: (0, 8),
             14: (4, 0), 15: (0, 12), 17: (4, 0), 19: (0, 12)}
KIND_STRUCT = 4
VMLINUX_BTF = "/sys/kernel/btf/vmlinux"


def member_offset(blob: bytes, struct_name: str, member: str) -> int | None:
    """The byte offset of ``member`` in the struct ``struct_name`` of a BTF blob (the
    running kernel's: :data:`VMLINUX_BTF`), or None if either is not there. Every read is
    bounds-checked: a short or odd blob gives None."""
    if len(blob) < 24:
        return None
    magic, _, _, header_len, type_off, type_len, str_off, str_len = struct.unpack_from(
        "<HBBIIIII", blob)
    types_at, strings_at = header_len + type_off, header_len + str_off
    if magic != MAGIC or strings_at + str_len > len(blob) or types_at + type_len > len(blob):
        return None
    strings = blob[strings_at:strings_at + str_len]

    def name_of(offset: int) -> bytes:
        end = strings.find(b"\0", offset)
        return strings[offset:end] if 0 <= offset < end else b""

    wanted, field = struct_name.encode(), member.encode()
    at, end = types_at, types_at + type_len
    while at + 12 <= end:
        name_off, info, _ = struct.unpack_from("<III", blob, at)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        fixed, each = _TRAILING.get(kind, (0, 0))
        members_at, at = at + 12, at + 12 + fixed + each * vlen
        if kind != KIND_STRUCT or at > end or name_of(name_off) != wanted:
            continue
        for index in range(vlen):
            member_name, _, offset = struct.unpack_from("<III", blob, members_at + 12 * index)
            if name_of(member_name) == field:
                bits = offset & 0xFFFFFF if info >> 31 else offset
                return bits // 8 if bits % 8 == 0 else None
    return None


_TASK_MM: list[int | None] = []


def task_mm_offset() -> int | None:
    """Where ``struct task_struct`` of the running kernel keeps ``mm`` (None: no BTF)."""
    if not _TASK_MM:
        try:
            with open(VMLINUX_BTF, "rb") as handle:
                blob = handle.read(64 << 20)
        except OSError:
            blob = b""
        _TASK_MM.append(member_offset(blob, "task_struct", "mm"))
    return _TASK_MM[0]

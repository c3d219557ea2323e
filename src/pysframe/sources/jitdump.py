"""perf's jitdump files (``jit-PID.dump``): the code a JIT loaded, read for ``sframe script``.

Layout in ``shared/spec/jit.md`` section 2. A hostile input like any other: a regular file
only (opened without following a symlink), read whole up to :data:`MAX_DUMP` bytes, every
record's size checked against what is left; a record that does not fit ends the reading
with a problem (one line naming the file and offset), and what came before it is kept.
``JIT_CODE_UNWINDING_INFO`` applies to the ``JIT_CODE_LOAD`` that follows it.
"""

from __future__ import annotations

import struct

from ..errors import PysframeError
from ..inputs import InputError, load
from ..records import record_class

MAGIC = 0x4A695444
JIT_CODE_LOAD, JIT_CODE_MOVE, JIT_CODE_DEBUG_INFO, JIT_CODE_CLOSE = 0, 1, 2, 3
JIT_CODE_UNWINDING_INFO = 4
MAX_DUMP = 256 << 20
_HEADER = struct.Struct("<IIIIIIQQ")
_RECORD = struct.Struct("<IIQ")
_LOAD = struct.Struct("<IIQQQQ")
_UNWIND = struct.Struct("<QQQ")


@record_class
class CodeLoad:
    """One ``JIT_CODE_LOAD``: the code's address, bytes and name, and the unwinding data
    that came before it (``.eh_frame`` then ``.eh_frame_hdr``, as perf inject lays them
    out after the code), if any."""

    address: int
    code: bytes
    name: str
    index: int
    timestamp: int
    unwinding: bytes = b""
    eh_frame_hdr_size: int = 0


class JitDumpError(PysframeError):
    """A damaged jitdump: ``path: offset 0x..: message``."""

    def __init__(self, path: str, offset: int, message: str) -> None:
        super().__init__(f"offset {offset:#x}: {message}", path=path)


def read_jitdump(path: str) -> tuple[list[CodeLoad], list[str]]:
    """The code loads of the dump at ``path`` and the problems met (a truncated or
    damaged dump keeps the loads before the damage)."""
    try:  # small files read, large ones mapped; a symbolic link is not followed
        data = load(path, max_size=MAX_DUMP, min_size=0, follow_symlinks=False)
    except InputError as error:
        return [], [str(error)]
    if len(data) < _HEADER.size:
        return [], [str(JitDumpError(path, 0, "shorter than a jitdump header"))]
    magic, version, header_size, _, _, _, _, _ = _HEADER.unpack_from(data)
    if magic != MAGIC:
        return [], [str(JitDumpError(path, 0, f"not a little-endian jitdump (magic "
                                              f"{magic:#x})"))]
    if version != 1 or not _HEADER.size <= header_size <= len(data):
        return [], [str(JitDumpError(path, 4, f"version {version}, header size {header_size}"))]
    loads: list[CodeLoad] = []
    offset = header_size
    unwinding: tuple[bytes, int] | None = None
    while offset + _RECORD.size <= len(data):
        kind, size, timestamp = _RECORD.unpack_from(data, offset)
        if size < _RECORD.size or offset + size > len(data):
            return loads, [str(JitDumpError(path, offset, f"record of {size} bytes runs past "
                                                          "the end"))]
        body = data[offset + _RECORD.size:offset + size]
        try:
            if kind == JIT_CODE_LOAD:
                loads.append(_code_load(body, timestamp, unwinding))
                unwinding = None
            elif kind == JIT_CODE_UNWINDING_INFO:
                unwinding = _unwinding(body)
            elif kind == JIT_CODE_CLOSE:
                break
        except ValueError as error:
            return loads, [str(JitDumpError(path, offset, str(error)))]
        offset += size
    return loads, []


def _code_load(body: bytes, timestamp: int, unwinding: tuple[bytes, int] | None) -> CodeLoad:
    if len(body) < _LOAD.size:
        raise ValueError("JIT_CODE_LOAD record too short")
    _, _, _, address, size, index = _LOAD.unpack_from(body)
    end = body.find(b"\0", _LOAD.size)
    if end < 0 or end + 1 + size > len(body):
        raise ValueError("JIT_CODE_LOAD: name or code runs past the record")
    name = body[_LOAD.size:end].decode("utf-8", "replace")
    code = body[end + 1:end + 1 + size]
    data, header_size = unwinding or (b"", 0)
    return CodeLoad(address, code, name, index, timestamp, data, header_size)


def _unwinding(body: bytes) -> tuple[bytes, int]:
    if len(body) < _UNWIND.size:
        raise ValueError("JIT_CODE_UNWINDING_INFO record too short")
    size, header_size, _ = _UNWIND.unpack_from(body)
    if size > len(body) - _UNWIND.size or header_size > size:
        raise ValueError("JIT_CODE_UNWINDING_INFO: sizes run past the record")
    return body[_UNWIND.size:_UNWIND.size + size], header_size

"""Run every reader of the format over some bytes: the body of the fuzz targets and of
the robustness tests. Bad bytes may raise only :class:`SFrameError` subclasses."""

from __future__ import annotations

from .decode import SFrameReader
from .dump import dump_text, style_for
from .dump_vector import dump_vectorized
from .encode import encode
from .errors import SFrameError
from .jsondump import section_json
from .validate import validate


def exercise(data: bytes, address: int = 0x1000) -> None:
    """Decode, re-encode, dump, validate and look up PCs of ``data``.

    Raises :class:`SFrameError` for invalid data; anything else is a bug.
    """
    validate(data, address)
    reader = SFrameReader(data, address)
    try:
        dump_text(reader)
    except SFrameError:
        pass
    try:
        # The numpy dumper, which dump_text uses only for large sections.
        dump_vectorized(reader, ".sframe", style_for(reader.version, reader.header.flags))
    except SFrameError:
        pass
    try:
        section_json(reader)
    except SFrameError:
        pass
    try:
        lookup = reader.lookup()
    except SFrameError:
        lookup = None
    if lookup is not None:
        count = min(reader.num_fdes, 64)
        for index in range(count):
            start = reader.fde_start(index)
            for pc in (start, start + 1, start + 7, start - 1):
                try:
                    lookup.find_fre(pc)
                except SFrameError:
                    pass
        try:
            lookup.build_flat_index()
            for index in range(count):
                lookup.find_fre(reader.fde_start(index) + 3)
        except SFrameError:
            pass
    section = reader.to_section()
    try:
        encode(section)
    except SFrameError:
        pass  # e.g. flags or layouts the encoder refuses to write; never another exception

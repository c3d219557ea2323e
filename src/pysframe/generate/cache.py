"""A cache of generated SFrame sections, keyed by build id, under the XDG cache directory.

Binaries without .sframe get their table generated once; the unwinder then
reads it from ``$XDG_CACHE_HOME/pysframe/sframe/`` (default ``~/.cache``).
Entries are written with :func:`pysframe.cachedir.store` (temporary file and rename);
a corrupt entry is regenerated.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..cachedir import entry_path, store
from ..format.decode import SFrameReader, decode
from ..format.errors import SFrameError
from .errors import GenerateError

if TYPE_CHECKING:
    from ..elf import ElfImage
    from ..format.model import Section

# The generator (CFI parser, gas rules, encoder) is imported only on a cache miss: a warm
# `sframe stack` never needs it.

#: Bumped whenever the generator's output changes, so old entries are not reused.
GENERATOR_VERSION = 1


def cache_path(build_id: bytes, version: int = 3, kind: str = "generated") -> Path:
    return Path(entry_path("sframe", build_id,
                           f".{kind}.g{GENERATOR_VERSION}.v{version}.sframe"))


def sframe_for(image: ElfImage, *, version: int = 3, use_cache: bool = True,
               merge_cfi: bool = True) -> tuple[bytes, int]:
    """(section bytes, section address) of the SFrame table to unwind ``image`` with.

    A file without .sframe gets one generated from its CFI. A file with .sframe
    gets, with ``merge_cfi``, the functions its table lacks (the C run-time's
    ``_start`` and friends were not assembled with --gsframe) added from its CFI,
    so chains end at ``_start``'s "RA undefined" row instead of running out of
    rules. Generated and merged tables sit at address 0 (link-time starts) and are
    cached by build id.
    """
    own = image.sframe_sections()
    if own and not merge_cfi:
        return own[0].raw, own[0].address
    build_id = image.build_id() if use_cache else None
    kind = "merged" if own else "generated"
    path = cache_path(build_id, version, kind) if build_id else None
    if path is not None and path.exists():
        data = path.read_bytes()
        try:
            SFrameReader(data, 0)
            return data, 0
        except SFrameError:
            pass  # corrupt entry: rebuild it
    from ..format.encode import encode
    from .section import generate

    try:
        generated = generate(image, version=version, address=0).section
    except GenerateError:
        if own:
            return own[0].raw, own[0].address
        raise
    if own:
        try:
            merged = _merge(own[0].raw, own[0].address, generated, version)
        except SFrameError:
            return own[0].raw, own[0].address
        data = encode(merged)
    else:
        data = encode(generated)
    if path is not None:
        store(str(path), data)
    return data, 0


def _merge(raw: bytes, address: int, generated: Section, version: int) -> Section:
    """The file's own section plus the generated FDEs of functions it does not cover."""
    from ..format.encode import convert

    section = decode(raw, address)
    if section.version != version:
        section = convert(section, version)
    ranges = sorted((fde.start, fde.end) for fde in section.fdes)
    starts = [start for start, _ in ranges]
    extra = []
    for fde in generated.fdes:
        index = bisect_right(starts, fde.start) - 1
        overlaps = index >= 0 and fde.start < ranges[index][1]
        overlaps = overlaps or (index + 1 < len(ranges) and ranges[index + 1][0] < fde.end)
        if not overlaps:
            extra.append(fde)
    for fde in section.fdes:
        fde.fre_off = None
    section.fdes += [replace(fde, fre_off=None) for fde in extra]
    section.address = 0
    section.flags = generated.flags
    section.sort_fdes()
    return section

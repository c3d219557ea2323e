"""Run every reader of the format over some bytes: the body of the fuzz targets and of
the robustness tests. Bad bytes may raise only :class:`SFrameError` subclasses.

:func:`counting_work` counts what the readers did meanwhile (FDE and FRE reads), so
tests can bound the work a hostile section causes without measuring time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pysframe.format.decode import FDEEntry, SFrameReader
from pysframe.format.dump import dump_text
from pysframe.format.dump_style import style_for
from pysframe.format.dump_vector import dump_vectorized
from pysframe.format.encode import encode
from pysframe.format.errors import SFrameError
from pysframe.format.jsondump import section_json
from pysframe.format.lookup import SFrameLookup
from pysframe.format.model import FRE
from pysframe.format.validation import validate


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
        lookup: SFrameLookup | None = SFrameLookup(reader)
    except SFrameError:
        lookup = None
    if lookup is not None:
        _look_up(reader, lookup)
    section = reader.to_section()
    try:
        encode(section)
    except SFrameError:
        pass  # e.g. flags or layouts the encoder refuses to write; never another exception


def _look_up(reader: SFrameReader, lookup: SFrameLookup) -> None:
    """PCs around the first functions' starts, stepwise and then through the flat index."""
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


@dataclass(slots=True)
class Work:
    """What the checked reader did: FDEs and FREs read (each read is bounds-checked,
    so these count the steps of every whole-section walk)."""

    fde_reads: int = 0
    fre_reads: int = 0

    @property
    def reads(self) -> int:
        return self.fde_reads + self.fre_reads


@contextmanager
def counting_work() -> Iterator[Work]:
    """Count the :meth:`SFrameReader.fde` and :meth:`SFrameReader.read_fre` calls of
    every reader while the block runs (the methods are wrapped on the class)."""
    work = Work()
    read_fde = SFrameReader.fde
    read_fre = SFrameReader.read_fre

    def counted_fde(self: SFrameReader, index: int) -> FDEEntry:
        work.fde_reads += 1
        return read_fde(self, index)

    def counted_fre(self: SFrameReader, fde: FDEEntry, offset: int) -> tuple[FRE, int]:
        work.fre_reads += 1
        return read_fre(self, fde, offset)

    SFrameReader.fde = counted_fde  # type: ignore[method-assign]
    SFrameReader.read_fre = counted_fre  # type: ignore[method-assign]
    try:
        yield work
    finally:
        SFrameReader.fde = read_fde  # type: ignore[method-assign]
        SFrameReader.read_fre = read_fre  # type: ignore[method-assign]

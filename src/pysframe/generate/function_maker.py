"""The rows of one function of an on-demand table (:mod:`.on_demand`), made as the whole
generated table makes them: its CFI FDE translated (or ld's PLT rules, or the file's own
FDE), kept by the same placement rule and validated by the same validator, encoded as a
single-function table with the whole table's header.

Apart from :mod:`.on_demand` because only a run that makes functions needs it (a warm
``sframe stack`` never imports it), and so its imports are made once, at the top: made
inside the methods, they cost ~6 us of each of the thousands of functions a first run
makes.
"""

from __future__ import annotations

import struct

from ..cfi.eh_frame import FDE as CFIFDE
from ..cfi.eh_frame import CFIError, _Parser
from ..cfi.leb128 import DecodeError
from ..format.constants import ABI, F_FDE_FUNC_START_PCREL, VERSION_3
from ..format.decode import SFrameReader
from ..format.encode import encode, single_function
from ..format.errors import SFrameError
from ..format.model import FDE, Section
from ..format.validation import encoded_errors, plain_stored_rows
from ..records import replace
from .cache import _STUBS
from .crt import crt_fdes
from .errors import IrregularFunction
from .merged_index import own_number
from .plain_cfi import plain_fde
from .plt import plt_fdes
from .section import Generated, _placeable, translate_entry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..elf import ElfImage
    from ..elf.sections import SFrameSectionData
    from .function_index import FunctionIndex


def header(abi: ABI) -> Section:
    """An empty section with the header of the whole generated table."""
    return Section(version=VERSION_3, abi=abi, flags=F_FDE_FUNC_START_PCREL,
                   cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0, address=0)


class FunctionMaker:
    """Makes the functions of one binary's index (:meth:`make`); also gives the FDEs made
    from no CFI (:meth:`plt_fdes`) the index is built with."""

    def __init__(self, image: ElfImage, abi: ABI, own: SFrameSectionData | None,
                 text: list[tuple[int, int]]) -> None:
        self.image, self.abi, self.own, self.text = image, abi, own, text
        #: The file's own table (set by the merged scan, or made on first use).
        self.own_reader: SFrameReader | None = None
        self._plt: list[FDE] | None = None
        #: Where the crti/crtn FDEs start in :meth:`plt_fdes`'s list.
        self.crt_from = 0
        self._eh_frame: tuple[bytes, int] | None = None
        self._parser: _Parser | None = None  # parses the FDEs (and keeps their CIEs)
        #: The section each function is encoded in (its FDE replaced each time), and what
        #: the translation notes of it (its lists emptied each time).
        self._section = header(abi)
        self._result = Generated(header(abi))
        #: Whether the plain CFI of most functions is read in one pass (:mod:`.plain_cfi`).
        self._amd64 = abi.is_amd64 and not image.big_endian

    def make(self, index: FunctionIndex, position: int) -> tuple[bytes, FDE | None] | None:
        """The single-function table of the function at ``position``, validated as the
        whole table is, and the FDE it encodes (None: one written from the file's own
        table, not made); None when the whole table would leave the function out;
        :class:`IrregularFunction` when it might not give the function as made here."""
        ref = index.refs[position]
        number = own_number(ref)
        if number is not None:
            return self._own_function(index, number, position)
        result = self._result
        result.skipped.clear()
        result.trimmed.clear()
        if ref < 0:
            plt = self.plt_fdes()
            if ~ref >= len(plt):
                raise IrregularFunction("no such PLT function")  # from another layout
            fde: FDE | None = plt[~ref]
        else:
            data, address = self._eh_frame_data()
            cfi = self._cfi_fde(index, ref, data, address, position)
            fde = plain_fde(data, cfi) if self._amd64 else None
            if fde is None:
                fde = translate_entry(data, address, cfi, self.abi, self.image.big_endian,
                                      result, version=VERSION_3, as_gnu=False, args_size=True)
        if fde is None:
            return None
        if not _placeable([fde], 0, VERSION_3, self.text, result.skipped):
            return None
        table = self._validated(fde)
        return (table, fde) if table is not None else None

    def _own_function(self, index: FunctionIndex, number: int, position: int
                      ) -> tuple[bytes, FDE | None]:
        """The single-function table of the own table's FDE ``number``, validated as the
        whole merge validates it; irregular if the merge would leave it out. A plain one
        (:func:`~pysframe.format.validation.plain_stored_rows`) is written from its stored
        rows, with no FDE made (None); any other is decoded and encoded again."""
        assert self.own is not None
        if self.own_reader is None:  # the index came from the cache
            self.own_reader = SFrameReader(self.own.raw, self.own.address)
        reader = self.own_reader
        try:
            entry = reader.fde(number)
            if (entry.start, entry.end) != (index.starts[position], index.ends[position]):
                raise IrregularFunction("the own FDE does not match the index")
            rows_end = plain_stored_rows(reader, entry, self.text)
            if rows_end is not None:
                return single_function(self._section, entry.start, entry.size, entry.info,
                                       reader.buffer[entry.fres_offset:rows_end],
                                       entry.num_fres), None
            fde = reader.to_fde(entry)
        except SFrameError as error:
            raise IrregularFunction(error.message) from None
        except IndexError as error:  # a cache entry naming an FDE the table lacks
            raise IrregularFunction(str(error)) from None
        data = self._validated(fde)
        if data is None:  # the whole merge makes this function from the CFI instead
            raise IrregularFunction("an own FDE the validator leaves out")
        return data, fde

    def _validated(self, fde: FDE) -> bytes | None:
        section = self._section
        section.fdes = [fde if fde.fre_off is None else replace(fde, fre_off=None)]
        try:
            try:
                data = encode(section)
            except SFrameError as error:
                raise IrregularFunction(error.message) from None
            errors = encoded_errors(section, data, self.text)
        finally:
            section.fdes = []
        if not errors:
            return data
        if any(finding.fde != 0 for finding in errors):
            # A table-wide error: the whole table decides.
            raise IrregularFunction(errors[0].message)
        return None  # the whole table leaves this function out

    def plt_fdes(self) -> list[FDE]:
        """The FDEs made from no CFI: ld's for the PLT sections (the whole generator's,
        :func:`~.plt.plt_fdes`), then the unwinder's for crti/crtn's ``_init`` and
        ``_fini`` (x86-64, :func:`~.crt.crt_fdes`; the index leaves out one that a CFI
        FDE overlaps, as the whole generator does)."""
        if self._plt is None:
            image = self.image
            heads = {name: (lo, hi, (image.section(name) or (b"", 0, 0))[0][:16])
                     for name, (lo, hi) in image.section_ranges(*_STUBS).items()}
            self._plt = plt_fdes(self.abi, heads, pie=image.is_pie(), version=VERSION_3)
            self.crt_from = len(self._plt)
            if self.abi.is_amd64:
                self._plt += crt_fdes(image, [])
        return self._plt

    def eh_frame(self) -> tuple[bytes, int] | None:
        """The file's ``.eh_frame`` (bytes, address), read once: the index is scanned from
        the same copy, made before a ``-j`` run's fork (each worker had read its own at its
        first function, ~0.1 ms of page faults for libc's); None without one."""
        if self._eh_frame is None:
            found = self.image.section(".eh_frame", relocated=True)
            if found is None:
                return None
            self._eh_frame = (found[0], found[1])
        return self._eh_frame

    def _eh_frame_data(self) -> tuple[bytes, int]:
        found = self.eh_frame()
        if found is None:
            raise IrregularFunction("no .eh_frame")
        return found

    def _cfi_fde(self, index: FunctionIndex, offset: int, data: bytes, address: int,
                 position: int) -> CFIFDE:
        """The CFI FDE at ``offset`` of .eh_frame, checked against the index."""
        if self._parser is None:
            self._parser = _Parser(data, address, self.image.big_endian,
                                   self.image.elf_class // 8, False)
        try:
            cfi = self._parser.fde_at(offset)
        except (CFIError, DecodeError, struct.error, IndexError, ValueError) as error:
            raise IrregularFunction(str(error)) from None
        if (cfi.pc_begin, cfi.pc_end) != (index.starts[position], index.ends[position]):
            raise IrregularFunction("the FDE does not match the index")
        return cfi


__all__ = ["FunctionMaker", "header"]

"""The SFrame object model: a section, its functions (FDEs) and their rows (FREs).

These are plain records. :mod:`pysframe.format.decode` builds them from bytes and
:mod:`pysframe.format.encode` writes them back; both directions are exact, so
a decoded section re-encodes to the same bytes.
"""

from __future__ import annotations

from ..records import field, record_class
from .constants import (
    ABI,
    F_FDE_FUNC_START_PCREL,
    F_FDE_SORTED,
    VERSION_3,
    BaseReg,
    FDEType,
    FREType,
    PCType,
)


@record_class
class FRE:
    """One frame row entry: the recovery rules from ``start`` to the next row.

    ``words`` are the data words ("stack offsets" in V1/V2) as integers:
    offsets are signed; in V3 flexible FDEs the control words are unsigned.
    ``word_size`` is 1, 2 or 4 bytes, or ``None`` to let the encoder pick the
    smallest size, as gas does. An FRE without data words marks an outermost
    frame: RA undefined (V2 erratum 2, V3).
    """

    start: int
    words: tuple[int, ...]
    base_reg: BaseReg = BaseReg.SP
    mangled_ra: bool = False
    word_size: int | None = None


@record_class
class FDE:
    """One function: its address range, the kind of its rows, and the rows."""

    start: int
    size: int
    fres: list[FRE] = field(default_factory=list)
    pc_type: PCType = PCType.INC
    fde_type: FDEType = FDEType.DEFAULT
    pauth_key_b: bool = False
    signal: bool = False
    rep_size: int = 0
    #: Width of the FRE start fields; ``None``: chosen from ``size`` as gas does.
    fre_type: FREType | None = None
    #: Where this FDE's FRE data sat in the FRE sub-section when decoded. The
    #: encoder lays FRE blocks out in this order so that sections re-encode
    #: exactly (ld sorts the index but not the FRE data); ``None`` = index order.
    fre_off: int | None = None

    @property
    def end(self) -> int:
        return self.start + self.size


@record_class
class Section:
    """A whole .sframe section: header fields and functions in index order.

    ``address`` is where the section sits (its ``sh_addr``); FDE starts are
    absolute addresses computed from it, so moving a section keeps them.
    """

    version: int
    abi: ABI
    flags: int = F_FDE_FUNC_START_PCREL
    cfa_fixed_fp_offset: int = 0
    cfa_fixed_ra_offset: int = 0
    fdes: list[FDE] = field(default_factory=list)
    aux_header: bytes = b""
    address: int = 0
    #: Bytes after the FRE sub-section (must be zero; kept for exact round trips).
    tail: bytes = b""

    @property
    def num_fres(self) -> int:
        return sum(len(fde.fres) for fde in self.fdes)

    def sort_fdes(self) -> None:
        """Sort the function index by start address and set SFRAME_F_FDE_SORTED, as ld does.

        The FRE data keeps its order (each FDE remembers ``fre_off``).
        """
        if any(fde.fre_off is None for fde in self.fdes):
            for position, fde in enumerate(self.fdes):
                fde.fre_off = position
        self.fdes.sort(key=lambda fde: fde.start)
        self.flags |= F_FDE_SORTED


def default_section(abi: ABI, version: int = VERSION_3) -> Section:
    """An empty section with the header values GNU as writes for ``abi``."""
    flags = F_FDE_FUNC_START_PCREL if version >= 2 else 0
    fixed_ra = -8 if abi is ABI.AMD64_ENDIAN_LITTLE else 0
    return Section(version=version, abi=abi, flags=flags, cfa_fixed_ra_offset=fixed_ra)

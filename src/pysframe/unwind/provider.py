"""Where the tracer's SFrame tables come from: a :class:`TableProvider` the caller passes in.

``unwind`` reads tables and never makes one. A binary's own ``.sframe`` section is read
here (:class:`OwnSections`); tables generated from CFI and kept in the private cache come
from a later stage (``pysframe.session.tables.GeneratedTables``), handed to
:class:`~.modules.BinaryFinder` by the command that unwinds. So this stage imports neither
the generator nor the recording readers (``tests/test_layers.py`` holds it to that), as
framehop's unwinder takes its sections through ``ModuleSectionInfo`` and never parses ELF.
"""

from __future__ import annotations

from ..errors import PysframeError
from ..records import NamedTuple, Protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..elf import ElfImage
    from ..format.lookup import FrameRow, SFrameLookup


class NoTable(PysframeError):
    """The binary has no table to give (no CFI, an unsupported machine): its frames fall back
    to the frame pointer. Not a problem to report, unlike a malformed file."""


class Table(NamedTuple):
    """The SFrame table to unwind a binary with: section bytes and address; ``damage``:
    when the file's own ``.sframe`` is damaged (it faults where a reader reads it) and this
    table was made from the file's CFI instead, that fault (its offset: in the file)."""

    data: bytes
    address: int
    damage: PysframeError | None = None
    #: A table whose rows are made per function when first needed (``data`` is then
    #: empty and unused).
    on_demand: OnDemand | None = None


class OnDemand(Protocol):
    """A binary's table made per function on first use (``pysframe.generate.on_demand``):
    its rows are those of the whole table, looked up as
    :class:`~pysframe.format.lookup.SFrameLookup` looks them up."""

    #: Changes whenever functions are made, so copies of the rows know they are stale.
    generation: int
    #: The whole table's lookup, once the table had to be made whole (None before).
    whole: SFrameLookup | None

    @property
    def cache_id(self) -> bytes | None:
        """The binary's name in the private cache (None: nothing of it is kept there),
        known once :meth:`index_ranges` or a lookup was asked."""
        ...

    def find_fre(self, pc: int) -> FrameRow | None:
        """The row for the link-time ``pc`` (its function made if it is not yet)."""
        ...

    def ensure(self, pc: int) -> None:
        """Make the function covering the link-time ``pc``, if not made yet."""
        ...

    def index_ranges(self) -> tuple[list[int], list[int]] | None:
        """(starts, ends) of every function in address order (None once whole)."""
        ...

    def made_after(self, count: int) -> list[tuple[int, SFrameLookup | None]]:
        """The functions made after the first ``count``, each once: (position in
        :meth:`index_ranges`, its single-function lookup or None for no rows)."""
        ...


class TableProvider(Protocol):
    """Gives the SFrame table to unwind a binary with."""

    def table(self, image: ElfImage) -> Table:
        """The table to unwind ``image`` with. Raises :class:`NoTable` when there is none,
        ``ElfError``/``SFrameError``/``CFIError`` when the file is malformed."""
        ...

    def prefetch(self, images: Sequence[ElfImage], *, progress: bool = False,
                 workers: int | None = None) -> int:
        """Make ready the tables of ``images`` before they are asked for (e.g. generate the
        missing ones in parallel, with a progress bar if ``progress``); how many were made.
        Only a warm-up: a table that cannot be made is left to :meth:`table`."""
        ...


class OwnSections:
    """The binaries' own ``.sframe`` sections, as they are (nothing generated or cached)."""

    def table(self, image: ElfImage) -> Table:
        own = image.sframe_sections()
        if not own:
            raise NoTable("the file has no .sframe section")
        return Table(own[0].raw, own[0].address)

    def prefetch(self, images: Sequence[ElfImage], *, progress: bool = False,
                 workers: int | None = None) -> int:
        return 0

"""The tables ``unwind`` is given: SFrame generated from CFI and kept in the private cache
(:mod:`pysframe.generate.cache`), as a :class:`~pysframe.unwind.provider.TableProvider`.

A binary gets an on-demand table (:mod:`pysframe.generate.on_demand`; its own version 3
``.sframe`` merged with its CFI that way too): the rows of each function are made when the
unwinder first needs them and kept in the cache as they accumulate, so a first run pays for
the functions its samples touch, not for every function of every binary. Other binaries
(an older or damaged own table, odd CFI) and the recorder's get whole tables: on a
first run :meth:`GeneratedTables.prefetch` generates the missing ones in parallel (a process pool; generation is pure Python and
CPU-bound, so threads would not help) before the samples are unwound. Progress is shown
by whatever the command passes as ``progress_bar`` (``cli`` draws it; this stage draws
nothing).
"""

from __future__ import annotations

import atexit
import os
import sys

from ..elf import ElfImage
from ..errors import PysframeError
from ..generate.cache import cached, table_for
from ..generate.errors import GenerateError
from ..generate.on_demand import OnDemandTable, on_demand_possible, on_demand_table
from ..records import Protocol
from ..unwind.provider import NoTable, Table

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..made_exchange import MadeExchange
    from .background import BackgroundTables


class TablePending(NoTable):
    """The binary's table is being generated in the helper process (``background``): none
    now; :meth:`BackgroundTables.take_ready` names the binary once it is in the cache."""


#: Every on-demand table given out, whose made functions :func:`save_made` keeps (held
#: to the end: a provider may be gone by then).
_GIVEN: list[OnDemandTable] = []
#: The tables whose index every worker of a ``-j`` run has (made before the fork): the
#: parent keeps what each worker made of them, once they have ended (:func:`adopt_made`).
_SHARED: list[OnDemandTable] = []


def save_made(shared: bool = True) -> None:
    """Keep in the cache the functions every on-demand table made (done at exit; a forked
    worker that ends with ``os._exit`` calls it itself), and the flat rows the batch
    engine made of them. ``shared`` False: not those of the tables the workers share
    (:func:`workers_started`), which the parent keeps for all (:func:`adopt_made`)."""
    from ..cachedir import KeptDirectories

    left_out = set() if shared else {id(table) for table in _SHARED}
    with KeptDirectories():
        for table in _GIVEN:
            if id(table) not in left_out:
                table.save()
        flat_cache = sys.modules.get("pysframe.unwind.flat_cache")
        if flat_cache is not None:  # (imported with numpy, by the batch engine alone)
            flat_cache.save_function_rows()


def workers_started() -> None:
    """In each process of a ``-j`` run as it starts (the parent once its children are
    forked): the tables whose index is made are the workers' shared ones. Each worker
    keeps only the others itself (``save_made(shared=False)``); the parent keeps the
    shared ones, with what every worker made, at the end (:func:`adopt_made`): two workers
    keeping one binary's entry at once had each waited for the other's lock and merged
    the same functions again (a first run of the Lua recording: ~3 ms more at its end)."""
    _SHARED[:] = [table for table in _GIVEN if table.index is not None and table.whole is None]


def adopt_made(exchange: MadeExchange) -> int:
    """In the parent of a ``-j`` run, once every worker has ended: the functions they made
    of the shared tables (all they gave ``exchange``) join this process's, to be kept by
    :func:`save_made`; the number taken in. (A worker whose exchange broke, a full disk,
    kept what it made only in the exchange up to then: the rest is made again by a later
    run.)"""
    given = exchange.given()
    return sum(table.adopt(given) for table in _SHARED) if given else 0


atexit.register(save_made)


class ProgressBar(Protocol):
    """A started progress bar: one step per binary done, then stopped."""

    def advance(self, name: str) -> None: ...

    def stop(self) -> None: ...


class GeneratedTables:
    """Each binary's table from the cache, else generated from its CFI (and cached, unless
    ``use_cache`` is false); a file's own ``.sframe`` gains the functions it lacks, or, when
    it is damaged, is replaced by the table generated from the CFI (see
    :func:`~pysframe.generate.cache.table_for`). ``progress_bar(total)`` starts the bar
    :meth:`prefetch` shows when asked to."""

    def __init__(self, use_cache: bool = True,
                 progress_bar: Callable[[int], ProgressBar] | None = None,
                 apart: bool = False, flat_abi: str | None = None,
                 on_demand: bool = True) -> None:
        self.use_cache = use_cache
        #: Binaries without a table of their own get their rows made per function when
        #: first needed (:mod:`pysframe.generate.on_demand`), not a whole table up front;
        #: not for the recorder (``apart``), whose BPF map holds whole tables.
        self.on_demand = on_demand and not apart
        self._on_demand: list[OnDemandTable] = []
        self.progress_bar = progress_bar
        #: Tables missing from the cache are generated in a helper process and read back
        #: from the cache (``sframe record``: generating a large library's table takes a
        #: few hundred MiB for a moment, which a long-running recorder would keep).
        self.apart = apart and use_cache
        #: With ``apart``: the ABI whose flat rows the helper caches too (the recorder's).
        self.flat_abi = flat_abi
        #: With ``apart``: a missing table is not waited for; its generation is started in
        #: the helper and the binary has no table until then (:class:`TablePending`; the
        #: recorder while it samples: one library's minutes of generation must not hold
        #: up the tables of every process started meanwhile).
        self.background = False
        self._later: BackgroundTables | None = None
        #: Tables made ready by :meth:`prefetch`, by ``id`` of their image (used once).
        self._ready: dict[int, tuple[ElfImage, Table]] = {}

    @property
    def later(self) -> BackgroundTables:
        """The helper process's queue (made on first use: ``stack`` and ``script``, which
        generate no table apart, do not import it)."""
        if self._later is None:
            from .background import BackgroundTables

            self._later = BackgroundTables(self.flat_abi)
        return self._later

    def table(self, image: ElfImage) -> Table:
        ready = self._ready.pop(id(image), None)
        if ready is not None and ready[0] is image:
            return ready[1]
        if self.apart:
            found = self._made_apart(image)
            if found is not None:
                return found
        if self.on_demand and on_demand_possible(image):
            try:
                lazy = on_demand_table(image, use_cache=self.use_cache)
            except GenerateError as error:
                raise NoTable(error.message, error.offset, path=error.path) from None
            # (a file whose own table faults gets the table made from its CFI, below,
            # which says so)
            if lazy is not None and not (lazy.own is not None and lazy.own_damaged()):
                self._on_demand.append(lazy)
                _GIVEN.append(lazy)
                return Table(b"", 0, None, lazy)
        try:
            return Table(*table_for(image, use_cache=self.use_cache))
        except GenerateError as error:
            raise NoTable(error.message, error.offset, path=error.path) from None

    def _made_apart(self, image: ElfImage) -> Table | None:
        """The cache's table for ``image``, generated by the helper process if missing;
        None if it could not be made there (this process tries, and reports why)."""
        for attempt in range(2):
            try:
                found = cached(image)
            except PysframeError:
                return None
            if found is not None:
                return Table(*found)
            if attempt == 0 and self.background and image.path not in self.later.tried:
                self.later.add(image.path)
                raise TablePending("its table is being generated", path=image.path)
            if attempt == 0 and not self.later.generate(image.path):
                return None  # the helper could not start: made here
        return None

    def make_apart(self, path: str) -> bool:
        """With ``apart`` and ``flat_abi``: the helper process caches the table of the file
        at ``path`` and its flat rows (when they are not cached yet, before they are read
        here). False when that is left to run in the background (:attr:`background`)."""
        if self.apart and self.flat_abi is not None and self.background \
                and path not in self.later.tried:
            self.later.add(path)
            return False
        if self.apart and self.flat_abi is not None:
            self.later.generate(path)  # (if the helper cannot start, they are made here)
        return True

    def save(self) -> None:
        """Keep the functions the on-demand tables made in the cache (done at exit too)."""
        for lazy in self._on_demand:
            lazy.save()

    def close(self) -> None:
        """Keep what the on-demand tables made; kill the helper processes still generating
        in the background."""
        self.save()
        if self._later is not None:
            self._later.close()

    def prefetch(self, images: Sequence[ElfImage], *, progress: bool = False,
                 workers: int | None = None) -> int:
        """Take the tables the cache has for ``images``; when more than one is missing,
        generate those in parallel (this process makes the largest, a pool of ``workers``
        - 1 processes the others; default: one per CPU) and put them into the cache, with
        a progress bar if ``progress``. Returns how many were generated."""
        if not self.use_cache or self.background:
            return 0  # (background: each missing table is generated when asked for)
        missing: list[ElfImage] = []
        for image in images:
            if self.on_demand and on_demand_possible(image):
                continue  # made per function when needed
            try:
                table = cached(image)
            except PysframeError:
                table = None
            if table is not None:
                self._ready[id(image)] = (image, Table(*table))
            elif image.build_id():
                missing.append(image)
        processes = workers or os.cpu_count() or 1
        if len(missing) < 2 or processes < 2:
            return 0  # nothing to overlap: each table is made where it is needed
        # Largest first: the longest job starts at once instead of last on a busy worker.
        missing.sort(key=lambda image: len(image.data), reverse=True)
        if self.apart:  # none made here: the pool makes them all
            paths = list(dict.fromkeys(image.path for image in missing))
            bar = self.progress_bar(len(paths)) if progress and self.progress_bar else None
            _generate_all(paths, processes, None, bar, self.flat_abi)
            return len(missing)
        here = missing[0]
        others = [path for path in dict.fromkeys(image.path for image in missing[1:])
                  if path != here.path]
        bar = self.progress_bar(len(others) + 1) if progress and self.progress_bar else None
        _generate_all(others, processes - 1, lambda: self._generate_here(here), bar)
        return len(missing)

    def _generate_here(self, image: ElfImage) -> str:
        """Generate (and cache) the table of ``image`` in this process."""
        try:
            self._ready[id(image)] = (image, Table(*table_for(image)))
        except PysframeError:
            pass  # table() tries again and the finder reports it
        return image.path


#: Set by a process that raised its own scheduling priority (the recorder): the nice
#: value its helpers go back to, so that generating tables does not take the CPU from
#: the workload being recorded.
BASE_NICE = "PYSFRAME_BASE_NICE"


def _base_priority() -> None:
    """This helper process back at the priority :data:`BASE_NICE` names, if any."""
    value = os.environ.get(BASE_NICE, "")
    try:
        if value:
            os.setpriority(os.PRIO_PROCESS, 0, int(value))
    except (ValueError, OSError):
        pass  # a lower priority is always allowed; a bad value changes nothing


def _make_table(path: str, flat_abi: str | None = None) -> str:
    """In a worker process: generate and cache the table of the ELF file ``path``, and
    with ``flat_abi`` (an :class:`~pysframe.format.constants.ABI` name) its flat rows for
    that ABI too (what the recorder loads: flattening a large table also takes a few
    hundred MiB for a moment)."""
    _base_priority()
    try:
        image = ElfImage(path)
        table = table_for(image)
        if flat_abi is not None:
            from ..format.constants import ABI
            from ..format.decode import SFrameReader
            from ..format.lookup import SFrameLookup
            from ..unwind.flat_cache import cached_flat

            lookup = SFrameLookup(SFrameReader(table.data, table.address))
            cached_flat(lookup, ABI[flat_abi], image.build_id())
    except (PysframeError, ValueError):
        pass  # reported by the main process, which tries again
    return path


def _generate_all(paths: list[str], workers: int, here: Callable[[], str] | None,
                  bar: ProgressBar | None, flat_abi: str | None = None) -> None:
    """Run :func:`_make_table` for ``paths`` (with ``flat_abi``) in a pool of at most
    ``workers`` processes while this process runs ``here`` (if given), advancing ``bar``."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    try:
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(paths)))) as pool:
            futures = [pool.submit(_make_table, path, flat_abi) for path in paths]
            if here is not None:
                name = here()
                if bar is not None:
                    bar.advance(name)
            for done in as_completed(futures):
                try:
                    name = done.result()
                except Exception:  # a worker's bug: the main process does it again
                    name = ""
                if bar is not None:
                    bar.advance(name)
    finally:
        if bar is not None:
            bar.stop()

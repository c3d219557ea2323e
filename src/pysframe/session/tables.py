"""The tables ``unwind`` is given: SFrame generated from CFI and kept in the private cache
(:mod:`pysframe.generate.cache`), as a :class:`~pysframe.unwind.provider.TableProvider`.

On a first run most binaries have no table in the cache yet: :meth:`GeneratedTables.prefetch`
generates the missing ones in parallel (a process pool; generation is pure Python and
CPU-bound, so threads would not help) before the samples are unwound. Progress is shown
by whatever the command passes as ``progress_bar`` (``cli`` draws it; this stage draws
nothing).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Protocol

from ..elf import ElfImage
from ..errors import PysframeError
from ..generate.cache import cached, table_for
from ..generate.errors import GenerateError
from ..unwind.provider import NoTable, Table


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
                 progress_bar: Callable[[int], ProgressBar] | None = None) -> None:
        self.use_cache = use_cache
        self.progress_bar = progress_bar
        #: Tables made ready by :meth:`prefetch`, by ``id`` of their image (used once).
        self._ready: dict[int, tuple[ElfImage, Table]] = {}

    def table(self, image: ElfImage) -> Table:
        ready = self._ready.pop(id(image), None)
        if ready is not None and ready[0] is image:
            return ready[1]
        try:
            return Table(*table_for(image, use_cache=self.use_cache))
        except GenerateError as error:
            raise NoTable(error.message, error.offset, path=error.path) from None

    def prefetch(self, images: Sequence[ElfImage], *, progress: bool = False,
                 workers: int | None = None) -> int:
        """Take the tables the cache has for ``images``; when more than one is missing,
        generate those in parallel (this process makes the largest, a pool of ``workers``
        - 1 processes the others; default: one per CPU) and put them into the cache, with
        a progress bar if ``progress``. Returns how many were generated."""
        if not self.use_cache:
            return 0
        missing: list[ElfImage] = []
        for image in images:
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


def _make_table(path: str) -> str:
    """In a worker process: generate and cache the table of the ELF file ``path``."""
    try:
        table_for(ElfImage(path))
    except PysframeError:
        pass  # reported by the main process, which tries again
    return path


def _generate_all(paths: list[str], workers: int, here: Callable[[], str],
                  bar: ProgressBar | None) -> None:
    """Run :func:`_make_table` for ``paths`` in a pool of at most ``workers`` processes
    while this process runs ``here``, advancing ``bar``."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    try:
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(paths)))) as pool:
            futures = [pool.submit(_make_table, path) for path in paths]
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

"""``sframe script``: perf.data samples unwound with SFrame, printed like ``perf script``."""

from __future__ import annotations

import sys

from ..errors import Problems
from .errors import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    PHASES_VARIABLE,
    PREFIX,
    WHERE,
    CommandError,
)

TYPE_CHECKING = False  # typing is not imported at run time (~3 ms with re): see records
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from ..session.perf import UnwoundSample

#: ``sframe script`` has one pipeline: the records drive one process model
#: (:class:`~..session.perf.PerfUnwinder`), and each chunk's samples of one address-space
#: layout are unwound by the numpy batch engine when there are at least
#: ``session.vector.BATCH_FROM`` of them, else one by one by the scalar tracer (the same
#: step, the same chains). Recordings under :data:`VECTOR_FROM` bytes of records are
#: unwound sample by sample without numpy: its import (~60-80 ms) costs more than it
#: saves there (the 26 MiB Lua recording: 280 ms batch, 190 ms scalar).
#:
#: ``PYSFRAME_ENGINE`` moves those two thresholds, not the path (tests and benches compare
#: the two sides of the cost rule on the same recording): ``scalar`` never batches,
#: ``vector`` batches every group, even of one sample.
ENGINE_VARIABLE = "PYSFRAME_ENGINE"
VECTOR_FROM = 64 << 20
#: The batch pipeline's ``-j`` runs share out this many ranges at most (of whole chunks),
#: each process claiming the next one when done with its last (:func:`.jobs.in_order`;
#: each range holds two descriptors until the end: a recording of a million samples gets
#: 64 ranges of 4 chunks, not 245 of one).
CLAIMED_RANGES = 64


def _batched(data: Any) -> bool:
    """Whether the batch pipeline takes this recording, unless it is filtered (see
    :data:`ENGINE_VARIABLE`)."""
    import os

    chosen = os.environ.get(ENGINE_VARIABLE, "")
    return chosen == "vector" or (chosen != "scalar" and data.data_size >= VECTOR_FROM)


def _vector_text(data: Any, unwinder: Any, symbolizer: Any, kernel: Any, jobs: int,
                 problems: Problems, statuses: list[int], phases: Phases | None = None,
                 show_stops: bool = False, stream: Any = None) -> Iterator[str] | None:
    """The text in chunks from the batch pipeline, when it takes this recording (None: the
    sample-by-sample path does), made by ``jobs`` processes; with ``stream`` (where the
    text goes), the other processes' text is copied to it as bytes, not yielded. When it
    takes it, it makes the binaries' tables ready (``open_recording``'s
    ``tables_later``), from the walk's mappings or, giving the recording back, as
    ``open_recording`` would have."""
    import gc
    import os
    import time

    if not _batched(data) or unwinder.keep is not None:  # (filtered: the samples left are
        return None                                       # unwound one by one)
    try:
        from ..report.event_names import event_name
        from ..report.perf_script import name_width
        from ..report.perf_script_chunks import LineIndexes, chunk_text
        from ..session.vector import BATCH_FROM, VectorSession
        from ..sources.perf_arrays import sample_arrays
        from ..sources.perf_records import SAMPLE_CPU
        from ..symbolize.kernel import prefetching
    except ImportError:  # no numpy
        _tables_ready(data, unwinder)
        return None
    from ..heap import keep_freed_memory

    keep_freed_memory()  # (each chunk's arrays: the next chunk's, not new pages)
    # The record walk in two processes, unless a first run's kernel symbols are being made
    # the long way in a child meanwhile: three on two CPUs, the walk took 116-123 ms
    # against 80-83 alone (the system-wide recording). The child of a batch run parses a
    # text another child read (~30 ms): the walk is split.
    arrays = sample_arrays(data, split=jobs >= 2 and not prefetching())
    _tables_ready(data, unwinder, None if arrays is None else
                  [record for _, record in arrays.events])
    if arrays is None:
        return None
    attr = arrays.attr
    event, with_cpu = event_name(attr), bool(attr.sample_type & SAMPLE_CPU)
    width = name_width(data.attrs)
    lines: dict[int, dict[int, str]] = {}
    indexes: LineIndexes = {}  # the lines as sorted arrays, kept across chunks
    every_group = os.environ.get(ENGINE_VARIABLE) == "vector"
    session = VectorSession(unwinder, arrays, 1 if every_group else BATCH_FROM)

    def texts(first: int, last: int) -> Iterator[str]:
        for chunk in session.chunks(first, last):
            WHERE.at(data.path, int(arrays.offset[chunk.start]) if chunk.end > chunk.start
                     else None)
            if show_stops:
                _chunk_stops(chunk, session)
            begin = time.perf_counter()
            text = chunk_text(chunk, arrays, symbolizer, kernel, lines, event, with_cpu,
                              unwinder.unwinder.max_depth, indexes, width)
            if phases is not None:
                phases.seconds["format"] += time.perf_counter() - begin
            yield text

    # What is loaded by now (the recording's arrays, modules, caches) lives to the end:
    # the collector's passes skip it from here on, and forked workers share its pages.
    gc.freeze()
    if show_stops or jobs < 2:  # (stop lines in the samples' order)
        return texts(*session.ranges(1)[0])
    # Ranges of whole chunks, claimed by the processes as they go (jobs.in_order). Each
    # process reads the tables its ranges need (not :func:`_read_before_fork`: on the
    # system-wide recording, 13 files, that took 45-62 ms warm and 136-176 ms on a first
    # run, all before the fork).
    ranges = session.ranges(CLAIMED_RANGES)
    if len(ranges) == 1:
        return texts(*ranges[0])
    return _in_jobs(ranges, texts, problems, statuses, stream, processes=min(jobs, len(ranges)))


def _in_jobs(ranges: list[tuple[int, int]], texts: Any, problems: Problems, statuses: list[int],
             stream: Any, failed: Callable[[], bool] | None = None,
             processes: int | None = None) -> Iterator[str]:
    """The text of ``ranges`` (``texts(first, last)``), each made by a process of its own
    (:func:`.jobs.in_order`), or claimed by ``processes`` processes as they go: the
    workers take the functions another made; the functions of the tables they share
    (indexed before the fork) are kept by this process for all of them once they have
    ended, the rest by each; a child has failed if it noted ``problems`` or ``failed()``
    (if given) says so."""
    from ..made_exchange import MadeExchange, share, shared
    from ..session.tables import adopt_made, save_made, workers_started
    from .jobs import copier, in_order

    workers = MadeExchange.for_workers(processes or len(ranges))

    def started(mine: int) -> None:
        share(MadeExchange(workers, mine))
        workers_started()

    def kept_apart() -> None:
        # A child ends with os._exit: it keeps what its on-demand tables made that this
        # process does not keep for it. This process keeps the same while they finish.
        save_made(shared=False)

    shown: set[str] = set()

    def forward(line: str) -> None:
        # A child's stderr line: each problem is said once (-j 1 says it once), whichever
        # processes met it.
        if line in shown or problems.reported(line.removesuffix("\n").removeprefix(PREFIX)):
            return
        shown.add(line)
        sys.stderr.write(line)

    def failing() -> bool:
        return bool(problems) or (failed is not None and failed())

    # The workers take what another made (each its own exchange, from the same files).
    try:
        yield from in_order(ranges, texts, failing, statuses, finish=kept_apart,
                            copy=copier(stream) if stream is not None else None,
                            started=started, produced=kept_apart, forward=forward,
                            processes=processes)
        exchange = shared()
        if exchange is not None:  # (every child has ended: all they made is given)
            adopt_made(exchange)
            save_made()
    finally:
        share(None)
        MadeExchange.close_files(workers)


#: The sample-by-sample path is split between ``-j`` processes from this many samples
#: (estimated): each follows every record and unwinds and prints its share, the last one
#: reporting the records skipped. The Lua fixture's 3,171 samples, warm: -j 1 168 ms,
#: -j 2 148 (15 alternating runs, on a machine whose second CPU adds ~30% to the first).
SCALAR_JOBS_FROM = 1000
#: The end of the last share (past every recording's samples).
_TO_THE_END = 1 << 62
#: What a sample another worker unwinds costs a worker that follows it (parsed and put in
#: time order, not unwound), as a fraction of one it unwinds and prints: the later shares
#: are smaller by that much. Measured on the Lua fixture, warm, -j 2
#: (bench/script_timeline.py): with equal shares the child, which follows the parent's
#: samples first, ended 25-28 ms after the parent; with the parent's share 58% of the
#: samples (0.28) the child ended 2-6 ms before the parent in 12 runs of 12 (the parent
#: also hands on the child's text and keeps what it made). At 0.20 (the parent's share
#: 55.6%) runs took 1.3-2.8% less warm (per-run ratios, three sets of 21-25 alternating
#: runs against 0.28 and 0.14) and 2.4% less on a first run (15 runs).
FOLLOW_COST = 0.20


def share_bounds(count: int, jobs: int, follow_cost: float = FOLLOW_COST) -> list[int]:
    """The first sample of each of ``jobs`` shares of ``count`` samples, then the end:
    shares sized so that each worker, following the samples of the shares before its own
    at ``follow_cost`` each, ends at the same time as the first."""
    weights: list[float] = []
    followed = 0.0
    for _ in range(jobs):
        weights.append(max(1.0 - follow_cost * followed, 0.0))
        followed += weights[-1]
    total = sum(weights)
    bounds = [0]
    for weight in weights[:-1]:
        bound = bounds[-1] + round(count * weight / total)
        if bounds[-1] < bound < count:  # (no empty share: its worker would follow every
            bounds.append(bound)        # record for nothing)
    return [*bounds, _TO_THE_END]


def _scalar_jobs(path: str, data: Any, unwinder: Any, symbolizer: Any, kernel: Any,
                 jobs: int, problems: Problems, statuses: list[int], max_stack: int,
                 report: Any, stream: Any) -> Iterator[str] | None:
    """The sample-by-sample text made by ``jobs`` processes, or None when one makes it:
    ``-j 1``, a filter, deferred callchains (joined across records), compressed records
    or fewer samples than :data:`SCALAR_JOBS_FROM` (:func:`estimated_samples`)."""
    import gc
    from itertools import pairwise

    from ..report.perf_script import name_width, perf_script_text
    from ..sources.perf_data import estimated_samples
    if jobs < 2 or unwinder.keep is not None or unwinder.stitcher is not None:
        return None
    count = estimated_samples(data)
    if count < SCALAR_JOBS_FROM:
        return None
    bounds = share_bounds(count, jobs)
    width = name_width(data.attrs)
    files = recorded_files_of(data)
    records = unwinder.from_first_sample()  # each worker goes on from here
    _read_before_fork(files, unwinder, symbolizer, bounds[1])

    def texts(first: int, last: int) -> Iterator[str]:
        samples = _located(path, unwinder.samples(first, last, records))
        yield from perf_script_text(samples, kernel, problems, symbolizer=symbolizer,
                                    max_stack=max_stack, name_width=width,
                                    ahead=unwinder.frames_ahead)
        if last == _TO_THE_END:  # the only worker that read every record
            report_skipped(path, data, report)

    gc.freeze()  # (the set-up's objects: see _vector_text)
    return _in_jobs(list(pairwise(bounds)), texts, problems, statuses, stream,
                    lambda: bool(data.skipped))


def recorded_files_of(data: Any) -> list[tuple[str, bytes | None]]:
    """The user-space files (path, build id) of the recording's build-id table."""
    return [(entry.filename, entry.build_id) for entry in data.build_ids()
            if not entry.kernel and entry.filename.startswith("/")]


def _prefetch_symbols(data: Any, binaries: list[str]) -> None:
    """A first run that :func:`_scalar_jobs` will split: a child making the symbol tables
    of the recording's files (:mod:`pysframe.symbolize.symbols_prefetch`), forked now,
    as soon as they are known, with a finder of its own (as the unwinder's)."""
    from ..sources.perf_data import estimated_samples
    from ..sources.perf_deferred import defers_callchains
    from ..symbolize.symbols_prefetch import prefetch_symbols

    if (defers_callchains(attr.flags for attr in data.attrs)
            or estimated_samples(data) < SCALAR_JOBS_FROM):
        return  # (unwound in this process alone: it reads each table when it needs it)
    # (imported before the fork: this process imports them next anyway, and the child,
    # which finds its files with the first two and keeps its tables' sources with the
    # third, then has them: ~2 ms sooner at its tables)
    from ..generate import cache  # noqa: F401
    from ..session.finding import binary_finder, recorded_build_ids
    from ..unwind.provider import OwnSections

    def tools() -> Any:
        # (no table is asked for: the child reads symbols only)
        return binary_finder(recorded_build_ids(data), binaries, tables=OwnSections())

    prefetch_symbols(recorded_files_of(data), tools)


def _read_before_fork(files: list[tuple[str, bytes | None]], unwinder: Any,
                      symbolizer: Any, first_share: int) -> None:
    """Read now, in the process the -j workers fork from, what each of them would read
    again (on a first run: make again) for its share: the symbol table and the function
    index of each file the recording's samples hit (``files``: its build-id table). The
    Lua fixture's first run, -j 2 without this, had taken 286 ms against 232 with -j 1,
    and was left to one process; with it, -j 2: 263 ms against 337 with -j 1 (10
    alternating runs, in a slower spell). On a first run, the helper that
    :func:`open_recording` started (if any) makes the symbol tables that are not cached
    meanwhile (:mod:`pysframe.symbolize.symbols_prefetch`): the others and the indexes
    are read or made first; then, while the helper still works, the topmost frames of
    the first share's samples (``first_share`` of them) are planned
    (:meth:`~pysframe.session.perf.PerfUnwinder.plan_meanwhile`: their functions made
    once for every worker, rather than by each after the fork); then those files it has
    not begun are made here (the Lua fixture's first run had made ld.so's small table
    here, at ~4 times the helper's cost: its code not loaded in this process), then its
    tables read once it has ended (a run that fails before leaves it to the exit handler,
    which stops and reaps it)."""
    from ..format.lookup import SFrameLookup
    from ..symbolize.symbols_prefetch import started, take_started

    helper = started()
    theirs = helper.files if helper is not None else []
    symbolizer.read_tables(unwinder.finder.opened(
        [file for file in files if file not in theirs]))
    modules = unwinder.finder.opened(files)
    for module in modules:
        if module.lookup is not None and not isinstance(module.lookup, SFrameLookup):
            module.lookup.index_ranges()  # (an on-demand table: its index made or read)
    if helper is not None:
        unwinder.plan_meanwhile(first_share, lambda: not helper.child.done())
        while (number := helper.claims.next()) is not None:  # (those it has not begun)
            symbolizer.read_tables(unwinder.finder.opened([helper.files[number]]))
        helper.wait()
        take_started()
        for number, (path, table) in helper.tables().items():
            symbolizer.give_table(unwinder.finder.opened([helper.files[number]]), path, table)
    symbolizer.read_tables(modules)


def default_jobs() -> int:
    """The processes ``-j`` defaults to: the CPUs this process may run on."""
    from ..cpus import usable_cpus

    return usable_cpus()


#: perf's sample filters as given (``--pid``, ``--tid``, ``--comms``, ``--time``).
Filters = dict[str, str | None]


def open_recording(path: str, binaries: list[str], problems: Problems,
                   merge_callchains: bool = True, max_stack: int = 127,
                   filters: Filters | None = None, kallsyms: bool = False,
                   tables_later: bool = False, split: bool = False) -> tuple[Any, Any]:
    """The opened perf.data file and its unwinder (keeping the samples ``filters`` select),
    or a one-line CommandError. ``kallsyms``: the running kernel's symbols are made in a
    child meanwhile on a first run, if the recording may need them (:func:`_prefetch`).
    ``tables_later``: the caller makes the binaries' tables ready itself when the batch
    pipeline takes the recording (:func:`_tables_ready`), once its walk has read the
    mappings; else they are here (:func:`_tables_ready`). ``split``: the caller splits
    the sample-by-sample path between processes (:func:`_scalar_jobs`), which a first
    run's symbol tables are made for in a child started here (:func:`_prefetch_symbols`)."""
    from ..sources.perf_data import open_perf_data

    data = open_perf_data(path)
    unfiltered = not filters or all(value is None for value in filters.values())
    if kallsyms:
        _prefetch(data, numpy_next=unfiltered and _batched(data))
    if split and unfiltered and not _batched(data):
        _prefetch_symbols(data, binaries)
    from ..session.perf import PerfUnwinder
    from ..session.tables import GeneratedTables

    try:
        keep = _sample_filter(filters, data)
        unwinder = PerfUnwinder(data, binaries, max_stack, problems=problems,
                             merge_callchains=merge_callchains,
                             tables=GeneratedTables(progress_bar=_table_bar))
    except CommandError:
        data.close()
        raise
    except ValueError as error:
        data.close()
        raise CommandError(f"{path}: {error}", EXIT_INVALID) from None
    unwinder.keep = keep
    if not (tables_later and unfiltered and _batched(data)):
        _tables_ready(data, unwinder)
    return data, unwinder


def _table_bar(total: int) -> Any:
    """The bar of the tables generated whole (:class:`.progress.TableBar`; its module
    imported only then: most runs generate none)."""
    from .progress import TableBar

    return TableBar.start(total)


def _tables_ready(data: Any, unwinder: Any, records: Any = None) -> None:
    """First run: the tables of the binaries the recording maps first, generated in
    parallel before unwinding (only those made whole: the others are made a function at a
    time, when needed). Found in ``records`` when the walk has read them (the batch
    pipeline). Else the files of the build-id table (the binaries perf saw samples in)
    first, and the start of the records is read for the other mappings only when the
    warm-up generated tables for those files: otherwise (a warm run, tables made a
    function at a time, or one missing, made where it is needed) a file only mapped
    there gets its table when it is first needed, as a file mapped later does. That
    reading touched every record of the Lua recording (~3 ms of a warm run's ~85, before
    the fork). Read before the batch pipeline's walk, the start (64 MB of 8 KB samples)
    cost every run of the deep bench recording ~10 ms, of which the walk then saved ~4.5
    (pages it found mapped)."""
    from ..session.perf import recorded_files

    progress = sys.stderr.isatty()
    if records is None:
        named = recorded_files(data, ())
        if named and not unwinder.finder.prefetch(named, progress=progress):
            return
    unwinder.finder.prefetch(recorded_files(data, records), progress=progress)


def recorded_kernel(entries: list[Any]) -> bytes | None:
    """The build id of the kernel a recording's build-id table names, or None."""
    return next((entry.build_id for entry in entries
                 if entry.kernel and entry.filename == "[kernel.kallsyms]"), None)


def _prefetch(data: Any, numpy_next: bool = False) -> None:
    """A first run: the running kernel's symbols made in a child while the recording is
    opened (:func:`~pysframe.symbolize.kernel.prefetch`), unless the recording cannot use
    them: it names another kernel, or names the binaries its samples hit (perf's build-id
    table) but nothing of a kernel. One that names nothing (``perf record -B``) may.
    ``numpy_next``: the batch pipeline takes it (numpy is imported there, and kallsyms
    read meanwhile)."""
    from ..symbolize.kernel import prefetch

    entries = data.build_ids()
    if not entries or any(entry.kernel for entry in entries):
        prefetch(recorded_kernel(entries), numpy_next=numpy_next)


def _sample_filter(filters: Filters | None, data: Any) -> Any:
    """The filter of the options given, or None when none is (the filters' module, with
    its regular expressions, is imported only then: ``re`` costs ~2.5 ms of a start-up)."""
    if not filters or all(value is None for value in filters.values()):
        return None
    from ..session.filters import FilterError, sample_filter

    try:
        return sample_filter(**filters, span=data.sample_span)
    except FilterError as error:
        raise CommandError(str(error), EXIT_UNREADABLE) from None


#: The cyclic collector's thresholds while ``script`` runs (Python's: 700, 10, 10). It keeps
#: hundreds of thousands of live objects (indexes, rows, symbols, made functions) and
#: makes few cycles (~1,000 objects collected in a first run of a system-wide recording,
#: none by a full pass), so the default passes, a full one among them every few thousand
#: allocations, cost ~10% of a first run and ~8% of a warm one; the set-up's objects are
#: also frozen before the samples are unwound (the batch pipeline, :func:`_vector_text`).
SCRIPT_COLLECTION = (50_000, 20, 100)
#: What a run read and made, kept to the end of the process instead of freed when the run
#: returns, when the caller ends the process then without tearing anything down (the
#: ``sframe`` command: :func:`pysframe.cli.entry.main`). Freed object by object, the
#: recording's process model, tables and symbols cost ~0.5 ms of the Lua fixture's run
#: after its text was out, and the collection the restored thresholds set off 0.8-1.4.
kept_until_exit: list[object] | None = None
#: The output name that means standard output (``report -o -``).
STDOUT = "-"


def run_script(path: str, *, binaries: list[str], output: str | None, show_stops: bool,
               report: Any, jobs: int | None = None, merge_callchains: bool = True,
               max_stack: int = 127, pids: str | None = None, tids: str | None = None,
               comms: str | None = None, times: str | None = None) -> int:
    """Print a recording as ``perf script`` does (see the ``script`` command); the cyclic
    collector's passes rarer meanwhile (:data:`SCRIPT_COLLECTION`)."""
    import gc

    thresholds = gc.get_threshold()
    gc.set_threshold(*SCRIPT_COLLECTION)
    try:
        return _run_script(path, binaries=binaries, output=output, show_stops=show_stops,
                           report=report, jobs=jobs, merge_callchains=merge_callchains,
                           max_stack=max_stack, pids=pids, tids=tids, comms=comms,
                           times=times)
    finally:
        if kept_until_exit is None:  # (else the process ends now: ~1 ms of collection saved)
            gc.set_threshold(*thresholds)
            gc.unfreeze()  # (what the batch pipeline froze: collected again from now on)


def _run_script(path: str, *, binaries: list[str], output: str | None, show_stops: bool,
               report: Any, jobs: int | None = None, merge_callchains: bool = True,
               max_stack: int = 127, pids: str | None = None, tids: str | None = None,
               comms: str | None = None, times: str | None = None) -> int:
    import os
    import time

    from ..symbolize.kernel import kernel_symbols_for
    from ..symbolize.symbolizer import Symbolizer
    from .files import refuse_inputs

    start = time.perf_counter()
    if output is not None:
        refuse_inputs(output, [path])  # before any work
    problems = Problems(report)
    phases = Phases() if os.environ.get(PHASES_VARIABLE) else None
    jobs = jobs or default_jobs()
    data, unwinder = open_recording(path, binaries, problems, merge_callchains, max_stack,
                                    {"pid": pids, "tid": tids, "comms": comms, "time": times},
                                    kallsyms=True, tables_later=True,
                                    split=jobs >= 2 and not show_stops)
    with data:
        kernel = kernel_symbols_for(recorded_kernel(data.build_ids()))
        symbolizer = Symbolizer(problems, debug=unwinder.debug_files)
        if phases is not None:
            phases.setup = time.perf_counter() - start
            unwinder.unwind_seconds = 0.0
            symbolizer = phases.timed_symbolizer(symbolizer)
        statuses: list[int] = []
        with _output(output, path) as stream:
            chunks, skipped_reported = _texts(
                path, data, unwinder, symbolizer, kernel, jobs, problems,
                statuses, phases, show_stops, max_stack, report, stream)
            write = stream.write
            for chunk in chunks:
                write(chunk)
        if not skipped_reported:
            report_skipped(path, data, report)
        missing = report_missing_deferred(path, unwinder, report)
    if phases is not None:
        sys.stdout.flush()
        phases.report(time.perf_counter() - start, unwinder.unwind_seconds or 0.0)
    failed = data.skipped or problems or any(statuses) or missing
    if kept_until_exit is not None:
        kept_until_exit.append((data, unwinder, symbolizer, kernel))
    return EXIT_INVALID if failed else EXIT_OK


def _output(output: str | None, path: str) -> Any:
    """The text's stream, as a context: standard output, or the file ``output`` (replaced
    or written through at the end, see :class:`.files.Output`: a descriptor of its own, to
    which the ``-j`` workers write as to standard output)."""
    if output is None:
        return _Standard()
    from .files import Output

    return Output(output, [path], text=True)


class _Standard:
    """Standard output as a context (left open)."""

    def __enter__(self) -> Any:
        return sys.stdout

    def __exit__(self, *_: object) -> None:
        return None


def _texts(path: str, data: Any, unwinder: Any, symbolizer: Any, kernel: Any, jobs: int,
           problems: Problems, statuses: list[int], phases: Phases | None, show_stops: bool,
           max_stack: int, report: Any, stream: Any) -> tuple[Iterator[str], bool]:
    """The text in chunks, by the batch pipeline, the sample-by-sample path split between
    ``jobs`` processes or in this one; and whether the records skipped were reported
    already (by the last worker, which read every record). ``stream``: where the text
    goes (the workers' text is written or copied to it as bytes)."""
    import time

    from ..report.perf_script import name_width, perf_script_text

    arrays_start = time.perf_counter()
    chunks = _vector_text(data, unwinder, symbolizer, kernel, jobs, problems, statuses,
                          phases, show_stops, stream)
    if chunks is not None:
        if phases is not None:  # numpy's import and the array scan are the scan's
            phases.seconds["read"] += time.perf_counter() - arrays_start
            chunks = phases.timed(chunks, "read")
        return chunks, False
    if not show_stops and (chunks := _scalar_jobs(
            path, data, unwinder, symbolizer, kernel, jobs, problems, statuses, max_stack,
            report, stream)) is not None:
        return (phases.timed(chunks, "read") if phases is not None else chunks), True
    samples = _located(path, unwinder.samples())
    if phases is not None:
        samples = phases.timed(samples, "read")
    if show_stops:
        samples = _with_stops(samples)
    return perf_script_text(samples, kernel, problems, symbolizer=symbolizer,
                            max_stack=max_stack, name_width=name_width(data.attrs),
                            ahead=unwinder.frames_ahead), False


def report_skipped(path: str, data: Any, report: Any) -> None:
    """One line for each record skipped (malformed, past the data section)."""
    for offset, reason in data.skipped:
        report(f"{path}: skipped at offset {offset:#x}: {reason}")


def report_missing_deferred(path: str, unwinder: Any, report: Any) -> bool:
    """One line for the samples whose deferred user callchain never came (the task exited
    in the kernel, the record was lost); True if there are any."""
    stitcher = getattr(unwinder, "stitcher", None)
    if stitcher is None or not stitcher.missing:
        return False
    from ..sources.perf_deferred import deferred_cookie

    first = stitcher.missing[0]
    count = len(stitcher.missing)
    report(f"{path}: {count} sample{'s' if count != 1 else ''} without the deferred user "
           f"callchain they wait for (first at offset {first.offset:#x}: tid {first.tid}, "
           f"cookie {deferred_cookie(first.callchain) or 0:#x}; the task exited in the kernel "
           "or the record was lost): no user frames for them")
    return True


class Phases:
    """Where the time of one ``sframe script`` run went: setup (open, tables, kernel
    symbols), scan (records read, parsed, ordered; address spaces), unwind, symbolize
    (ELF symbols of each new frame), output (text built and written)."""

    def __init__(self) -> None:
        self.setup = 0.0
        #: read: in the records or chunks iterator (scan and unwind; the batch pipeline's
        #: text too, as "format"); symbolize: naming frames (within the text).
        self.seconds = {"read": 0.0, "symbolize": 0.0, "format": 0.0}

    def timed(self, items: Iterator[Any], name: str) -> Iterator[Any]:
        """``items``, with the time spent making each added to phase ``name``."""
        import time

        clock = time.perf_counter
        iterator = iter(items)
        while True:
            begin = clock()
            try:
                item = next(iterator)
            except StopIteration:
                self.seconds[name] += clock() - begin
                return
            self.seconds[name] += clock() - begin
            yield item

    def timed_symbolizer(self, symbolizer: Any) -> Any:
        """``symbolizer``, its lookups timed (phase "symbolize")."""
        return _TimedSymbolizer(symbolizer, self.seconds)

    def report(self, total: float, unwind: float) -> None:
        read, symbolize, form = (self.seconds[name] for name in ("read", "symbolize", "format"))
        scan = read - unwind - form
        output = total - self.setup - read + form - symbolize
        sys.stderr.write(f"phases: setup {self.setup * 1e3:.0f} ms, scan {scan * 1e3:.0f} ms, "
                         f"unwind {unwind * 1e3:.0f} ms, symbolize {symbolize * 1e3:.0f} ms, "
                         f"output {output * 1e3:.0f} ms, total {total * 1e3:.0f} ms "
                         "(after imports)\n")


class _TimedSymbolizer:
    """A symbolizer whose lookups add their time to ``seconds["symbolize"]``."""

    def __init__(self, inner: Any, seconds: dict[str, float]) -> None:
        import time

        self.inner, self.seconds, self.clock = inner, seconds, time.perf_counter

    def symbol(self, mapping: Any, pc: int) -> Any:
        begin = self.clock()
        try:
            return self.inner.symbol(mapping, pc)
        finally:
            self.seconds["symbolize"] += self.clock() - begin

    def read_tables(self, modules: Any) -> None:
        begin = self.clock()
        self.inner.read_tables(modules)
        self.seconds["symbolize"] += self.clock() - begin

    def give_table(self, modules: Any, path: str, table: Any) -> None:
        self.inner.give_table(modules, path, table)


def _located(path: str, samples: Iterator[UnwoundSample]) -> Iterator[UnwoundSample]:
    """The samples, each noted as where the command is (an internal error names it)."""
    where = WHERE
    where.at(path)
    for unwound in samples:
        where.offset = unwound.sample.offset
        yield unwound


def _with_stops(samples: Any) -> Any:
    for unwound in samples:
        sys.stderr.write(_stop_line(unwound.sample.tid, unwound.sample.time, unwound.unwind,
                                    unwound.sample.raw))
        yield unwound


def _stop_line(tid: int, time: int, unwind: Any, raw: memoryview | None = None) -> str:
    """``--show-stops``: one sample's frame count, frame methods and stop reason; for a
    sample of ``sframe record``, how the recorder walked it and why its walk ended."""
    from ..report.walk_note import parse

    note = parse(raw)
    stop = unwind.stop.value
    if note is not None and unwind.stop.name == "RECORDED":
        stop = f"{note.stop.value if note.stop else stop} ({note.describe()})"
    return (f"{tid} {time}: {len(unwind.pcs)} frames "
            f"({', '.join(method.value for method in unwind.methods)}); "
            f"stopped: {stop}\n")


def _chunk_stops(chunk: Any, session: Any) -> None:
    """``--show-stops`` for a chunk of the batch pipeline: its samples' lines, in order."""
    unwinds = {index: unwound.unwind for index, unwound in chunk.scalar.items()}
    raws = {index: unwound.sample.raw for index, unwound in chunk.scalar.items()}
    for group in chunk.groups:
        for position, index in enumerate(group.rows.tolist()):
            if index not in unwinds:
                unwinds[index] = group.result.unwind(position)
    arrays = session.arrays
    tids = arrays.tid[chunk.start:chunk.end].tolist()
    times = arrays.time[chunk.start:chunk.end].tolist()
    sys.stderr.write("".join(_stop_line(tids[index], times[index], unwinds[index],
                                        raws.get(index))
                             for index in range(chunk.end - chunk.start)))


def progress_bar(samples: Any, data: Any, description: str = "unwinding") -> Any:
    """A progress bar on stderr (by position in the data section) when it is a terminal."""
    if not sys.stderr.isatty():
        yield from samples
        return
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task(description, total=data.data_size)
        for unwound in samples:
            progress.update(task, completed=unwound.sample.offset - data.data_offset)
            yield unwound


def run_report(path: str, *, binaries: list[str], output: str, form: str, report: Any,
               max_stack: int = 4096, pids: str | None = None, tids: str | None = None,
               comms: str | None = None, times: str | None = None) -> int:
    """``sframe report``: the recording's samples aggregated into one profile ``form``,
    written to ``output`` (``-``: standard output)."""
    from ..report.profiles import Recorded, collect
    from ..symbolize.kernel import kernel_symbols_for
    from .files import refuse_inputs, write_output

    if output != STDOUT:
        refuse_inputs(output, [path])  # before any work
    problems = Problems(report)
    data, unwinder = open_recording(path, binaries, problems, max_stack=max_stack,
                                    filters={"pid": pids, "tid": tids, "comms": comms,
                                             "time": times}, kallsyms=True)
    with data:
        kernel_id = recorded_kernel(data.build_ids())
        kernel = kernel_symbols_for(kernel_id)
        recorded = Recorded(unwinder.executables, unwinder.build_ids)  # filled as it reads
        profile = collect(progress_bar(_located(path, unwinder.samples()), data), problems,
                          kernel, max_stack, recorded, unwinder.debug_files)
        written = _profile_bytes(profile, form, data, kernel_id)
        if output == STDOUT:
            sys.stdout.buffer.write(written)
            sys.stdout.flush()
        else:
            write_output(output, written, inputs=[path])
        report_skipped(path, data, report)
        missing = report_missing_deferred(path, unwinder, report)
    return EXIT_INVALID if data.skipped or problems or missing else EXIT_OK


def _profile_bytes(profile: Any, form: str, data: Any, kernel_id: bytes | None) -> bytes:
    """The bytes of ``profile`` in ``form``; titled with the recorded command line."""
    import shlex

    from ..report.profiles import folded

    title = shlex.join(data.cmdline) or data.path
    if form == "folded":
        return folded(profile.name_counts()).encode()
    if form == "speedscope":
        from ..report.speedscope import speedscope

        return speedscope(profile, title).encode()
    if form == "pprof":
        from ..report.pprof import pprof

        return pprof(profile, title, _start_nanos(data.path, profile), kernel_id)
    from ..report.flamegraph import flame_graph_svg

    return flame_graph_svg(profile.name_counts(), title).encode()


def _start_nanos(path: str, profile: Any) -> int:
    """When the recording started, in ns since the epoch (0: unknown): perf.data holds
    no wall-clock time unless recorded with --clockid, so, as perf's "captured on", the
    file's modification time (when perf finished writing), less the samples' span."""
    import os

    try:
        written = os.stat(path).st_mtime_ns
    except OSError:
        return 0
    span = (profile.last_time - profile.first_time) if profile.first_time is not None else 0
    return max(written - span, 0)

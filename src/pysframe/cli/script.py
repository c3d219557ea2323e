"""``sframe script``: perf.data samples unwound with SFrame, printed like ``perf script``."""

from __future__ import annotations

import sys
from typing import Any

from .errors import EXIT_INVALID, EXIT_OK, CommandError


def open_recording(path: str, binaries: list[str]) -> tuple[Any, Any]:
    """The opened perf.data file and its unwinder, or a one-line CommandError."""
    from ..sources.perf_data import open_perf_data
    from ..unwind.perf_session import PerfUnwinder

    data = open_perf_data(path)
    try:
        return data, PerfUnwinder(data, binaries)
    except ValueError as error:
        data.close()
        raise CommandError(f"{path}: {error}", EXIT_INVALID) from None


def run_script(path: str, *, binaries: list[str], output: str | None, show_stops: bool,
               report: Any) -> int:
    from ..report.perf_script import perf_script_text
    from ..symbolize.kernel import kernel_symbols_for
    from .files import write_output

    data, unwinder = open_recording(path, binaries)
    with data:
        kernel_ids = [entry.build_id for entry in data.build_ids() if entry.kernel
                      and entry.filename == "[kernel.kallsyms]"]
        kernel = kernel_symbols_for(kernel_ids[0] if kernel_ids else None)
        samples = unwinder.samples()
        if show_stops:
            samples = _with_stops(samples)
        chunks = perf_script_text(samples, kernel)
        if output is None:
            write = sys.stdout.write
            for chunk in chunks:
                write(chunk)
        else:
            write_output(output, "".join(chunks).encode())
        for offset, reason in data.skipped:
            report(f"{path}: skipped at offset {offset:#x}: {reason}")
    return EXIT_INVALID if data.skipped else EXIT_OK


def _with_stops(samples: Any) -> Any:
    for unwound in samples:
        sys.stderr.write(f"{unwound.sample.tid} {unwound.sample.time}: "
                         f"{len(unwound.unwind.frames)} frames "
                         f"({', '.join(f.method.value for f in unwound.unwind.frames)}); "
                         f"stopped: {unwound.unwind.stop.value}\n")
        yield unwound


def _progress(samples: Any, data: Any) -> Any:
    """A progress bar on stderr (by position in the data section) when it is a terminal."""
    if not sys.stderr.isatty():
        yield from samples
        return
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task("unwinding", total=data.data_size)
        for unwound in samples:
            progress.update(task, completed=unwound.sample.offset - data.data_offset)
            yield unwound


def run_report(path: str, *, binaries: list[str], output: str, form: str, report: Any) -> int:
    from ..report.profiles import flame_graph_svg, folded, speedscope, stack_counts
    from .files import write_output

    data, unwinder = open_recording(path, binaries)
    with data:
        counts = stack_counts(_progress(unwinder.samples(), data))
        title = " ".join(data.cmdline[-3:]) or path
        if form == "folded":
            text = folded(counts)
        elif form == "speedscope":
            text = speedscope(counts, title)
        else:
            text = flame_graph_svg(counts, title)
        write_output(output, text.encode())
        for offset, reason in data.skipped:
            report(f"{path}: skipped at offset {offset:#x}: {reason}")
    return EXIT_INVALID if data.skipped else EXIT_OK

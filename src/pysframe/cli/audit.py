"""``sframe audit PATH...``: SFrame coverage, validity and cost over files, directories,
archives and packages, on a process pool or Dask; a summary table, ``--json``, ``--html``."""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, TextIO

from .errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, CommandError
from .files import refuse_inputs


def run_audit(paths: list[str], *, jobs: int, dask: str | None, json_path: str | None,
              html_path: str | None, use_cache: bool) -> int:
    from ..audit.run import find_files, on_dask, on_pool, prune_cache
    from ..audit.summary import Totals

    for path in paths:  # a path that is not there is a mistake, not something to skip
        try:
            os.lstat(path)
        except OSError as error:
            raise CommandError(f"{path}: {(error.strerror or str(error)).lower()}",
                               EXIT_UNREADABLE) from None
    for output in (json_path, html_path):
        if output is not None:
            refuse_inputs(output, paths)
    skipped: Counter[str] = Counter()
    # Paths and results stream past; only the totals are kept (memory stays flat).
    files = _not_outputs(find_files(paths, skipped), [json_path, html_path])
    began = time.monotonic()
    try:
        results = (on_dask(files, dask, jobs, use_cache) if dask is not None
                   else on_pool(files, jobs, use_cache))
        totals = Totals()
        writer = _JsonWriter(json_path) if json_path else None
        try:
            for path, found in _progress(results):
                totals.add_file(path, found)
                if writer is not None:
                    for facts in found:
                        writer.file(facts.as_json())
            if writer is not None:
                writer.finish(totals.as_json())
        finally:
            if writer is not None:
                writer.abandon()
    except RuntimeError as error:
        raise CommandError(str(error), EXIT_UNREADABLE) from None
    elapsed = time.monotonic() - began
    if html_path is not None:
        from ..audit.html import html_report

        _write_text(html_path, html_report(totals.as_json(), paths))
    if use_cache:
        prune_cache()
    _print_table(totals, skipped, elapsed, sys.stdout)
    if totals.internal:
        return EXIT_UNREADABLE  # a bug of ours: the run is not a clean bill of health
    return EXIT_INVALID if totals.invalid or totals.damaged else EXIT_OK


def _not_outputs(files: Iterator[str], outputs: list[str | None]) -> Iterator[str]:
    """``files``, stopping with an error at one that an output would replace."""
    targets = set()
    for output in outputs:
        try:
            status = os.stat(output) if output is not None else None
        except OSError:
            continue
        if status is not None:
            targets.add((status.st_dev, status.st_ino))
    for path in files:
        if targets:
            try:
                status = os.lstat(path)
            except OSError:
                status = None
            if status is not None and (status.st_dev, status.st_ino) in targets:
                raise CommandError(f"{path}: refusing to write an output over a file being "
                                   "audited", EXIT_UNREADABLE)
        yield path


def _progress(items: Iterator[Any]) -> Iterator[Any]:
    """A progress bar on stderr (files judged so far) when it is a terminal."""
    if not sys.stderr.isatty():
        yield from items
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("auditing: {task.completed:,} files"),
                  TimeElapsedColumn(), transient=True) as progress:
        task = progress.add_task("auditing", total=None)
        for item in items:
            progress.advance(task)
            yield item


def _print_table(totals: Any, skipped: Counter[str], elapsed: float, out: TextIO) -> None:
    rows = totals.table()
    if skipped:
        rows.append(("left out", ", ".join(f"{count:,} {kind}" for kind, count in
                                           sorted(skipped.items()))))
    rows.append(("wall time", f"{elapsed:.1f} s"))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        out.write(f"{label:<{width}}  {value}\n")


class _JsonWriter:
    """The JSON report written as the results come (a temporary file beside the output,
    renamed over it at the end: a regular file is replaced whole or not at all)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            status = os.lstat(path)
            if not stat.S_ISREG(status.st_mode):
                raise CommandError(f"{path}: cannot write: not a regular file",
                                   EXIT_UNREADABLE)
        except FileNotFoundError:
            pass
        directory = os.path.dirname(os.path.abspath(path))
        try:
            fd, self.temporary = tempfile.mkstemp(prefix=".sframe-audit-", dir=directory)
        except OSError as error:
            raise CommandError(f"{path}: cannot write: {error.strerror}",
                               EXIT_UNREADABLE) from None
        self.handle = os.fdopen(fd, "w", encoding="utf-8")
        self.handle.write('{"audit": 1, "files": [')
        self.first = True
        self.done = False

    def file(self, facts: dict[str, Any]) -> None:
        self.handle.write(("\n" if self.first else ",\n") + json.dumps(facts, sort_keys=True))
        self.first = False

    def finish(self, summary: dict[str, Any]) -> None:
        self.handle.write('\n], "summary": ' + json.dumps(summary, sort_keys=True) + "}\n")
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(self.handle.fileno(), 0o666 & ~umask)  # as open() would (mkstemp: 0600)
        self.handle.close()
        os.replace(self.temporary, self.path)
        self.done = True

    def abandon(self) -> None:
        if not self.done:
            self.handle.close()
            try:
                os.unlink(self.temporary)
            except OSError:
                pass


def _write_text(path: str, text: str) -> None:
    from .files import write_output

    write_output(path, text.encode())

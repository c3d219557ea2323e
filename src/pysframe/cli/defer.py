"""``sframe defer``: the recording the kernel's deferred SFrame unwinder would have made.

From a ``--call-graph dwarf`` recording: the same samples without their user registers
and stack copies, their kernel chains followed by ``USER_DEFERRED`` and their entry's
cookie, one CALLCHAIN_DEFERRED record per kernel entry after its last sample, the
attributes marked ``defer_callchain``/``defer_output``, everything else as it was.
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import Problems
from .errors import EXIT_INVALID, EXIT_OK, CommandError

_DWARF = (1 << 5) | (1 << 12) | (1 << 13)  # CALLCHAIN, REGS_USER, STACK_USER
#: What follows from a binary's damaged own .sframe here (the line that names the fault).
DAMAGE_OUTCOME = ("the kernel drops it at its first fault (frames there: frame pointers), "
                  "as in the recording written; the report's yardstick reads its {cfi}")


def run_defer(path: str, *, output: str, binaries: list[str], assume_sframe: bool,
              show_report: bool, plot: str | None, report: Any) -> int:
    from ..deferred.what_if import WhatIf
    from ..report.defer_report import build_report, report_svg, report_text
    from ..report.perf_data_out import WriteError, defer_attr, deferred_data, rewritten
    from .files import refuse_inputs, write_output
    from .script import open_recording, progress_bar

    refuse_inputs(output, [path])
    if plot is not None:
        refuse_inputs(plot, [path, output])
    problems = Problems(report)
    data, unwinder = open_recording(path, binaries, problems)
    # The recording written keeps the kernel's semantics: a damaged table is dropped.
    unwinder.finder.damage_outcome = DAMAGE_OUTCOME
    with data:
        if not any(_dwarf(attr) for attr in data.attrs):
            raise _not_dwarf(path)
        what_if = WhatIf(unwinder, assume_sframe=assume_sframe)
        sampled: dict[int, Any] = {}  # the events the samples are of, by id()
        for unwound in progress_bar(what_if.run(), data, "what the kernel would unwind"):
            attr = unwound.sample.attr
            if attr is not None:
                sampled.setdefault(id(attr), attr)
        attr = _sampled_layout(path, data.attrs, list(sampled.values()))
        after = _deferred_records(what_if, attr.sample_type)
        cookies = {offset: outcome.cookie or None for offset, outcome in what_if.outcomes.items()}
        try:
            body, before, written = deferred_data(
                data.buffer, attr.sample_type, attr.sample_regs_user.bit_count(),
                cookies.get, after)
            result = rewritten(data.buffer, body, defer_attr)
        except WriteError as error:
            raise CommandError(f"{path}: {error}", EXIT_INVALID) from None
        write_output(output, result, inputs=[path])
        summary = build_report(what_if.outcomes.values(), len(what_if.entries), before, written,
                               assume_sframe)
        if show_report:
            sys.stdout.write(report_text(summary, f"sframe defer: {path} -> {output}"))
        if plot is not None:
            write_output(plot, report_svg(summary, f"deferred SFrame unwinding: {path}").encode(),
                         inputs=[path, output])
        for offset, reason in data.skipped:
            report(f"{path}: skipped at offset {offset:#x}: {reason}")
    return EXIT_INVALID if data.skipped or problems else EXIT_OK


def _dwarf(attr: Any) -> bool:
    return bool(attr.sample_type & _DWARF == _DWARF)


def _not_dwarf(path: str) -> CommandError:
    return CommandError(f"{path}: not a --call-graph dwarf recording (samples need a "
                        "callchain, user registers and a user stack copy)", EXIT_INVALID)


def _sampled_layout(path: str, attrs: list[Any], sampled: list[Any]) -> Any:
    """The event whose layout every sample has: the samples' events must all be dwarf
    ones of one layout. Events without samples may differ (``perf record -a`` adds a
    dummy event for the side band, without PERIOD)."""
    if any(not _dwarf(attr) for attr in sampled):
        raise _not_dwarf(path)
    if len({(attr.sample_type, attr.sample_regs_user) for attr in sampled}) > 1:
        raise CommandError(f"{path}: samples of events with different layouts are not "
                           "rewritten", EXIT_INVALID)
    return sampled[0] if sampled else next(attr for attr in attrs if _dwarf(attr))


def _deferred_records(what_if: Any, sample_type: int) -> dict[int, bytes]:
    """The CALLCHAIN_DEFERRED record of each entry, by the file offset of its last sample."""
    from ..report.perf_data_out import callchain_deferred, sample_id_trailer

    after: dict[int, bytes] = {}
    for entry in what_if.entries:
        if entry.trace is None:
            continue
        trailer = sample_id_trailer(sample_type, entry.pid, entry.tid, entry.last_time + 1,
                                    entry.cpu, entry.sample_id)
        after[entry.last_offset] = after.get(entry.last_offset, b"") + callchain_deferred(
            entry.cookie, entry.trace.entries, trailer)
    return after


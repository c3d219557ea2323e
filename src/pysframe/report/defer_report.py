"""The report of ``sframe defer --report``: what the kernel's deferred SFrame unwinder would
have given for a recording, as a text table and an SVG bar chart (drawn by hand: a dozen
rectangles do not need a plotting library)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from html import escape

from ..deferred.what_if import Outcome
from ..records import record_class

UNWOUND, CUT, DIFFERS, NO_USER = "unwound", "cut short", "differs", "no user context"


@record_class
class DeferReport:
    samples: int
    entries: int
    #: Bytes of the samples in the dwarf recording, and of samples and deferred records
    #: in the deferred one.
    dwarf_bytes: int
    deferred_bytes: int
    verdicts: Counter[str]
    #: (verdict, reason, binary) -> samples, for "cut short" and "differs".
    causes: Counter[tuple[str, str, str]]
    assume_sframe: bool

    @property
    def walks_saved(self) -> int:
        """Samples served by another sample's walk (shared cookies)."""
        return self.samples - self.verdicts[NO_USER] - self.entries


def build_report(outcomes: Iterable[Outcome], entries: int, dwarf_bytes: int,
                 deferred_bytes: int, assume_sframe: bool) -> DeferReport:
    verdicts: Counter[str] = Counter()
    causes: Counter[tuple[str, str, str]] = Counter()
    for outcome in outcomes:
        verdicts[outcome.verdict] += 1
        if outcome.verdict in (CUT, DIFFERS):
            causes[(outcome.verdict, outcome.reason, outcome.binary)] += 1
    return DeferReport(sum(verdicts.values()), entries, dwarf_bytes, deferred_bytes, verdicts,
                       causes, assume_sframe)


def report_text(report: DeferReport, title: str) -> str:
    samples = max(report.samples, 1)
    lines = [f"{title}{' (--assume-sframe: our tables for every binary)' if report.assume_sframe else ''}",
             f"  samples                     {report.samples:>10,}",
             f"  kernel entries (walks)      {report.entries:>10,}",
             f"  walks saved by shared cookies {report.walks_saved:>8,}",
             f"  bytes per sample            {report.dwarf_bytes / samples:>10,.0f} dwarf -> "
             f"{report.deferred_bytes / samples:,.0f} deferred "
             f"({report.dwarf_bytes / max(report.deferred_bytes, 1):.1f}x smaller)",
             "  user chains against our DWARF-based unwinder:"]
    for verdict in (UNWOUND, CUT, DIFFERS, NO_USER):
        count = report.verdicts[verdict]
        lines.append(f"    {verdict:26}{count:>10,}  {100 * count / samples:5.1f}%")
    if report.causes:
        width = max(len(binary) for _, _, binary in report.causes)
        lines.append("  where and why (samples):")
        for (verdict, reason, binary), count in sorted(report.causes.items(),
                                                       key=lambda item: -item[1]):
            lines.append(f"    {binary:{width}}  {verdict}: {reason:34} {count:>8,}")
    return "\n".join(lines) + "\n"


def report_svg(report: DeferReport, title: str) -> str:
    """One bar per verdict and per (cause, binary), scaled to the sample count."""
    bars = [(verdict, report.verdicts[verdict]) for verdict in (UNWOUND, CUT, DIFFERS, NO_USER)]
    bars += [(f"{verdict}: {reason} ({binary.rsplit('/', 1)[-1]})", count)
             for (verdict, reason, binary), count in report.causes.most_common(12)]
    width, left, row = 900, 420, 22
    height = 50 + row * len(bars)
    scale = (width - left - 80) / max(report.samples, 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="12">',
             f'<text x="10" y="20" font-size="14">{escape(title)}</text>']
    for index, (label, count) in enumerate(bars):
        y = 40 + row * index
        parts.append(f'<text x="{left - 8}" y="{y + 14}" text-anchor="end">{escape(label)}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{count * scale:.1f}" height="{row - 6}" '
                     f'fill="{"#4a7" if label == UNWOUND else "#c64" if index < 4 else "#888"}"/>')
        parts.append(f'<text x="{left + count * scale + 6:.1f}" y="{y + 14}">{count:,}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"

"""The audit's HTML report: one self-contained page (no network, no external file) with the
totals, a chart of coverage and size per directory (inline SVG), and a table of the
directories that sorts by any column when its header is clicked."""

from __future__ import annotations

import html
from typing import Any

from .model import shown

_STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{padding:4px 10px;border-bottom:1px solid #ddd}
th{cursor:pointer;background:#f4f4f4;text-align:left}td.n{text-align:right}
.bar{fill:#4a7bd0}.size{fill:#d08a4a}svg text{font:11px sans-serif}"""

_SCRIPT = """document.querySelectorAll('th').forEach(function(th, column) {
  th.addEventListener('click', function() {
    var body = th.closest('table').tBodies[0];
    var rows = Array.from(body.rows);
    var up = th.dataset.order !== 'up';
    th.dataset.order = up ? 'up' : 'down';
    rows.sort(function(a, b) {
      var x = a.cells[column].dataset.v, y = b.cells[column].dataset.v;
      var nx = parseFloat(x), ny = parseFloat(y);
      var r = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return up ? r : -r;
    });
    rows.forEach(function(row) { body.appendChild(row); });
  });
});"""

_COLUMNS = ("directory", "ELF files", "with SFrame", "functions", "coverage %",
            "SFrame bytes", "size % of .eh_frame")


def html_report(summary: dict[str, Any], paths: list[str]) -> str:
    """The page for an audit's JSON summary."""
    title = "SFrame audit of " + ", ".join(shown(path) for path in paths)
    rows = _rows(summary["directories"])
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             _totals(summary), _chart(rows), _table(rows),
             f"<script>{_SCRIPT}</script></body></html>"]
    return "\n".join(parts)


def _rows(directories: dict[str, dict[str, int]]) -> list[tuple[Any, ...]]:
    rows = []
    for name, values in directories.items():
        functions = values["functions"]
        coverage = 100 * (functions - values["without_sframe"]) / functions if functions else 0
        size = (100 * values["sframe_bytes"] / values["eh_frame_bytes"]
                if values["eh_frame_bytes"] else 0)
        rows.append((shown(name), values["elf"], values["with_sframe"], functions, round(coverage, 1),
                     values["sframe_bytes"], round(size, 1)))
    return rows


def _totals(summary: dict[str, Any]) -> str:
    items = [("ELF files", f"{summary['elf_files']:,}"),
             ("with .sframe", f"{summary['with_sframe']:,}"),
             ("versions", ", ".join(f"{k}: {v:,}" for k, v in summary["versions"].items())
              or "-"),
             ("the kernel would take", f"{summary['kernel_ok']:,} of "
                                       f"{summary['kernel_checked']:,} sections"),
             ("coverage", f"{summary['coverage_percent']}% of {summary['functions']:,} "
                          "CFI functions"),
             ("disagreeing with CFI", f"{summary['cfi_disagreements']:,} rows"),
             ("SFrame size", f"{summary['sframe_bytes']:,} bytes "
                             f"({summary['eh_frame_bytes']:,} of .eh_frame)")]
    items += [(f"no FDE: {reason}", f"{count:,}") for reason, count in
              list(summary["reasons"].items())[:8]]
    items += [("mixed versions", f"{shown(path)}: {', '.join(versions)}")
              for path, versions in summary["mixed_versions"].items()]
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                   for k, v in items)
    return f"<h2>Totals</h2><table id='totals'>{body}</table>"


def _chart(rows: list[tuple[Any, ...]]) -> str:
    """Coverage (blue) and SFrame size against .eh_frame (orange) per directory."""
    shown = sorted(rows, key=lambda row: -row[1])[:30]
    height = 22 * len(shown) + 30
    bars = []
    for i, row in enumerate(shown):
        y = 20 + 22 * i
        bars.append(f"<text x='0' y='{y + 12}'>{html.escape(str(row[0])[-40:])}</text>"
                    f"<rect class='bar' x='300' y='{y}' width='{2 * row[4]:.1f}' height='9'>"
                    f"<title>coverage {row[4]}%</title></rect>"
                    f"<rect class='size' x='300' y='{y + 10}' width='{2 * min(row[6], 100):.1f}'"
                    f" height='9'><title>size {row[6]}% of .eh_frame</title></rect>")
    legend = ("<text x='0' y='12'>coverage % (blue), SFrame size as % of .eh_frame "
              "(orange)</text>")
    return (f"<h2>Per directory</h2><svg id='chart' width='560' height='{height}'>{legend}"
            + "".join(bars) + "</svg>")


def _table(rows: list[tuple[Any, ...]]) -> str:
    head = "".join(f"<th>{html.escape(name)}</th>" for name in _COLUMNS)
    body = []
    for row in rows:
        cells = "".join(
            f"<td data-v='{html.escape(str(value))}'"
            + (" class='n'>" + (f"{value:,}" if isinstance(value, int) else str(value))
               if not isinstance(value, str) else f">{html.escape(value)}")
            + "</td>" for value in row)
        body.append(f"<tr>{cells}</tr>")
    return f"<table id='directories'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}" \
           "</tbody></table>"

"""A self-contained SVG flame graph (inline script and style, nothing fetched).

Like Brendan Gregg's flamegraph.pl: the title is the recorded command line (shortened
to the width if it is longer, whole in its tooltip); each frame
has a tooltip (name, samples, percentage) and shows the same in the details line when
the pointer is over it; "Search" (or Ctrl-F) asks for a regular expression and
highlights the matching frames, with the share of samples they cover ("Matched: x%",
frames nested in a match counted once); Escape or "Reset Search" clears it. Clicking a
frame zooms to it (its callers are shown faded, at full width), "Reset Zoom" or a click
on the background goes back. Frames narrower than 0.1 pixel are left out, as
flamegraph.pl does, so the file stays small.

The script's search logic is the pure function ``matchFrames`` (frames in, matches and
covered share out), so it can be checked without a browser.
"""

from __future__ import annotations

import html
import re
from collections import Counter

FRAME_HEIGHT = 16
TOP = 40  # title and controls
BOTTOM = 24  # details and "Matched:"
MIN_WIDTH_PX = 0.1
CHAR_PX = 7.0  # width of one 11 px monospace character, about
TITLE_CHAR_PX = 9.2  # and of one 15 px character
SEARCH_FILL = "rgb(230,0,230)"

# Characters XML 1.0 does not allow even escaped (controls, surrogates, U+FFFE/F).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` escaped for XML content or an attribute value; characters XML cannot
    hold at all become ``\\xNN``-style escapes (names and command lines are untrusted)."""
    text = _NOT_XML.sub(lambda match: match[0].encode("unicode_escape",
                                                      "backslashreplace").decode("ascii"),
                        text)
    return html.escape(text, quote=True)


_SCRIPT = r"""
'use strict';
// Pure search logic: frames [{n: name, x: left, w: width}] (fractions of the whole),
// a RegExp; returns the indexes that match and the share they cover, nested matches
// counted once.
function matchFrames(frames, re) {
  var hits = [], spans = [];
  for (var i = 0; i < frames.length; i++) {
    if (re.test(frames[i].n)) { hits.push(i); spans.push([frames[i].x, frames[i].x + frames[i].w]); }
  }
  spans.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
  var covered = 0, end = -1;
  for (var j = 0; j < spans.length; j++) {
    var s = Math.max(spans[j][0], end);
    if (spans[j][1] > s) { covered += spans[j][1] - s; end = spans[j][1]; }
  }
  return {hits: hits, fraction: covered};
}
if (typeof document !== 'undefined') (function () {
  var svg = document.documentElement, groups = [], frames = [], searching = null;
  var details = document.getElementById('details'), matched = document.getElementById('matched');
  var unzoom = document.getElementById('unzoom'), searchButton = document.getElementById('search');
  function label(g, width) {
    var name = g.getAttribute('data-n'), t = g.querySelector('text'), fit = Math.floor((width - 6) / CHAR_PX);
    t.textContent = fit < 3 ? '' : name.length <= fit ? name : name.slice(0, fit - 2) + '..';
  }
  function layout(x, w, depth) {
    for (var i = 0; i < groups.length; i++) {
      var g = groups[i], f = frames[i], r = g.querySelector('rect'), t = g.querySelector('text');
      if (f.x + f.w <= x + 1e-12 || f.x >= x + w - 1e-12) { g.style.display = 'none'; continue; }
      g.style.display = '';
      var left = (Math.max(f.x, x) - x) / w, right = (Math.min(f.x + f.w, x + w) - x) / w;
      var px = PAD + left * (WIDTH - 2 * PAD), pw = (right - left) * (WIDTH - 2 * PAD);
      r.setAttribute('x', px.toFixed(1)); r.setAttribute('width', Math.max(pw - 0.5, 0.1).toFixed(1));
      t.setAttribute('x', (px + 3).toFixed(1)); label(g, pw);
      g.style.opacity = f.d < depth ? '0.5' : '';
    }
  }
  function zoom(i) { var f = frames[i]; layout(f.x, f.w, f.d); unzoom.style.display = f.w < 1 ? '' : 'none'; }
  function resetZoom() { layout(0, 1, 0); unzoom.style.display = 'none'; }
  function search(term) {
    var re = new RegExp(term), result = matchFrames(frames, re);
    resetSearch();
    for (var k = 0; k < result.hits.length; k++) {
      groups[result.hits[k]].querySelector('rect').setAttribute('fill', SEARCH_FILL);
      groups[result.hits[k]].classList.add('match');
    }
    searching = term;
    matched.textContent = 'Matched: ' + (100 * result.fraction).toFixed(2) + '%';
    searchButton.textContent = 'Reset Search';
    return result;
  }
  function resetSearch() {
    for (var i = 0; i < groups.length; i++) {
      var r = groups[i].querySelector('rect');
      r.setAttribute('fill', r.getAttribute('data-fill')); groups[i].classList.remove('match');
    }
    searching = null; matched.textContent = ''; searchButton.textContent = 'Search';
  }
  function askSearch() {
    var term = window.prompt('Search for (a regular expression, e.g. ^malloc)', searching || '');
    if (term) { try { search(term); } catch (e) { window.alert('Not a regular expression: ' + e.message); } }
  }
  var all = document.querySelectorAll('g.f');
  for (var i = 0; i < all.length; i++) {
    var g = all[i];
    g.setAttribute('data-i', i); groups.push(g);
    frames.push({n: g.getAttribute('data-n'), x: +g.getAttribute('data-x'), w: +g.getAttribute('data-w'),
                 d: +g.getAttribute('data-d')});
  }
  svg.addEventListener('click', function (e) {
    var target = e.target, g = target.closest ? target.closest('g.f') : null;
    if (target === searchButton) { if (searching !== null) resetSearch(); else askSearch(); }
    else if (target === unzoom) resetZoom();
    else if (g) zoom(+g.getAttribute('data-i'));
    else resetZoom();
  });
  svg.addEventListener('mouseover', function (e) {
    var g = e.target.closest ? e.target.closest('g.f') : null;
    details.textContent = g ? g.querySelector('title').textContent : '';
  });
  window.addEventListener('keydown', function (e) {
    if ((e.ctrlKey || e.metaKey) && (e.key === 'f' || e.key === 'F') || e.key === 'F3') {
      e.preventDefault(); askSearch();
    } else if (e.key === 'Escape') { resetSearch(); }
  });
  window.flamegraph = {search: search, resetSearch: resetSearch, zoom: zoom, resetZoom: resetZoom};
})();
"""

_STYLE = ("text{font-family:monospace;font-size:11px;fill:#000}"
          "g.f text{pointer-events:none}g.f:hover rect{stroke:#000;stroke-width:0.5}"
          "#title{font-size:15px}#search,#unzoom{cursor:pointer;fill:#1a5fb4}"
          "#search:hover,#unzoom:hover{text-decoration:underline}")


class _Node:
    """A frame of the merged tree: its sample count and its callees by name."""

    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.count = 0
        self.children: dict[str, _Node] = {}


def _tree(counts: Counter[tuple[str, ...]]) -> _Node:
    root = _Node()
    for stack, count in counts.items():
        node = root
        node.count += count
        for frame in stack:
            child = node.children.get(frame)
            if child is None:
                child = node.children[frame] = _Node()
            child.count += count
            node = child
    return root


def _colour(name: str) -> str:
    """flamegraph.pl's "hot" palette (a stable hash of the name picks the shade); kernel
    frames orange, frames without a symbol grey."""
    value = 0
    for char in name:
        value = (value * 31 + ord(char)) & 0xFFFFFF
    v1, v2, v3 = (value & 0xFF) / 255, (value >> 8 & 0xFF) / 255, (value >> 16 & 0xFF) / 255
    if name.endswith("_[k]"):
        return f"rgb({200 + int(55 * v3)},{110 + int(70 * v1)},{int(40 * v2)})"
    if name == "[unknown]" or "+0x" in name:
        grey = 170 + int(40 * v1)
        return f"rgb({grey},{grey},{grey + 10})"
    return f"rgb({205 + int(50 * v3)},{int(230 * v1)},{int(55 * v2)})"


def _frames(root: _Node, width: int) -> list[tuple[float, int, float, str, int]]:
    """(x, depth, width as fractions, name, count) of every frame wide enough, root
    ("all") first, callees sorted by name (iterative: stacks can be deep)."""
    total = root.count
    out: list[tuple[float, int, float, str, int]] = []
    pending: list[tuple[str, _Node, float, int]] = [("all", root, 0.0, 0)]
    while pending:
        name, node, x, depth = pending.pop()
        w = node.count / total
        if w * width < MIN_WIDTH_PX:
            continue
        out.append((x, depth, w, name, node.count))
        children = []
        for child_name in sorted(node.children):
            child = node.children[child_name]
            children.append((child_name, child, x, depth + 1))
            x += child.count / total
        pending.extend(reversed(children))
    return out


def _fitted(title: str, width: int) -> str:
    """The title shortened to fit ``width`` pixels (the whole is its tooltip)."""
    fit = int(width // TITLE_CHAR_PX)
    return title if len(title) <= fit else title[:fit - 3] + "..."


def flame_graph_svg(counts: Counter[tuple[str, ...]], title: str, width: int = 1200) -> str:
    """The flame graph of outermost-first name stacks with their counts; see the module
    docstring."""
    root = _tree(counts)
    boxes = _frames(root, width) if root.count else []
    depth_max = max((box[1] for box in boxes), default=0) + 1
    height = TOP + depth_max * FRAME_HEIGHT + BOTTOM
    pad = 10
    inner = width - 2 * pad
    parts = [
        '<?xml version="1.0" standalone="no"?>',
        f'<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">',
        f"<style>{_STYLE}</style>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fdf8ec"/>',
        f'<text id="title" x="{width / 2}" y="24" text-anchor="middle">'
        f"{xml_text(_fitted(title, width - 2 * pad))}<title>{xml_text(title)}</title></text>",
        f'<text id="unzoom" x="{pad}" y="24" style="display:none">Reset Zoom</text>',
        f'<text id="search" x="{width - pad}" y="24" text-anchor="end">Search</text>',
        f'<text id="details" x="{pad}" y="{height - 8}"> </text>',
        f'<text id="matched" x="{width - pad}" y="{height - 8}" text-anchor="end"></text>',
    ]
    total = root.count
    for x, depth, w, name, count in boxes:
        px, pw = pad + x * inner, w * inner
        y = height - BOTTOM - (depth + 1) * FRAME_HEIGHT
        fit = int((pw - 6) // CHAR_PX)
        shown = "" if fit < 3 else name if len(name) <= fit else name[:fit - 2] + ".."
        fill = _colour(name)
        noun = "sample" if count == 1 else "samples"
        parts.append(
            f'<g class="f" data-n="{xml_text(name)}" data-x="{x!r}" data-w="{w!r}" '
            f'data-d="{depth}"><title>{xml_text(name)} ({count:,} {noun}, '
            f'{100 * count / total:.2f}%)</title><rect x="{px:.1f}" y="{y}" '
            f'width="{max(pw - 0.5, 0.1):.1f}" height="{FRAME_HEIGHT - 1}" fill="{fill}" '
            f'data-fill="{fill}" rx="2"/><text x="{px + 3:.1f}" y="{y + 11}">'
            f"{xml_text(shown)}</text></g>")
    # last, so that the frames it looks up are there when it runs
    parts.append(f"<script><![CDATA[var WIDTH={width}, PAD={pad}, CHAR_PX={CHAR_PX}, "
                 f"SEARCH_FILL='{SEARCH_FILL}';{_SCRIPT}]]></script>")
    parts.append("</svg>\n")
    return "\n".join(parts)

"""Aggregated outputs: folded stacks (FlameGraph), speedscope JSON, an SVG flame graph.

Stacks are aggregated while streaming, so memory grows with the number of
distinct stacks, not samples.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Iterable

from ..errors import Problems
from ..symbolize.symbolizer import Symbolizer
from ..unwind.perf_session import UnwoundSample
from ..unwind.unwinder import EXACT_PC

CONTEXT_MARKER_MIN = (1 << 64) - 4095


def stack_counts(samples: Iterable[UnwoundSample],
                 problems: Problems | None = None) -> Counter[tuple[str, ...]]:
    """Outermost-first stacks of function names (prefixed by comm), with their sample counts."""
    symbolizer = Symbolizer(problems)
    names: dict[tuple[int, int], str] = {}
    counts: Counter[tuple[str, ...]] = Counter()
    for unwound in samples:
        stack = []
        for index, (frame, mapping) in enumerate(zip(unwound.unwind.frames, unwound.mappings,
                                                     strict=True)):
            pc = frame.pc if index == 0 or frame.method in EXACT_PC else frame.pc - 1
            key = (id(mapping), pc)
            name = names.get(key)
            if name is None:
                name = symbolizer.function(mapping, pc)
                names[key] = name
            stack.append(name)
        kernel = [f"{address:#x}_[k]" for address in unwound.sample.callchain
                  if 1 << 63 <= address < CONTEXT_MARKER_MIN]
        counts[(unwound.comm or "[unknown]", *reversed(stack), *reversed(kernel))] += 1
    return counts


def folded(counts: Counter[tuple[str, ...]]) -> str:
    """Brendan Gregg's folded format: ``a;b;c count`` per line."""
    return "".join(f"{';'.join(stack)} {count}\n" for stack, count in sorted(counts.items()))


def speedscope(counts: Counter[tuple[str, ...]], name: str) -> str:
    """A speedscope "sampled" profile (https://www.speedscope.app/file-format-schema.json)."""
    frames: dict[str, int] = {}
    samples, weights = [], []
    for stack, count in sorted(counts.items()):
        samples.append([frames.setdefault(frame, len(frames)) for frame in stack])
        weights.append(count)
    total = sum(weights)
    document = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": "pysframe", "name": name, "activeProfileIndex": 0,
        "shared": {"frames": [{"name": frame} for frame in frames]},
        "profiles": [{"type": "sampled", "name": name, "unit": "none", "startValue": 0,
                      "endValue": total, "samples": samples, "weights": weights}],
    }
    return json.dumps(document)


_SVG_SCRIPT = """
function zoom(node) {
  var x = +node.getAttribute('data-x'), w = +node.getAttribute('data-w');
  var rects = document.querySelectorAll('g.f');
  for (var i = 0; i < rects.length; i++) {
    var g = rects[i], gx = +g.getAttribute('data-x'), gw = +g.getAttribute('data-w');
    var r = g.querySelector('rect'), t = g.querySelector('text');
    if (gx + gw <= x || gx >= x + w) { g.style.display = 'none'; continue; }
    g.style.display = '';
    var nx = (Math.max(gx, x) - x) / w * WIDTH, nw = (Math.min(gx + gw, x + w) - Math.max(gx, x)) / w * WIDTH;
    r.setAttribute('x', nx); r.setAttribute('width', Math.max(nw - 0.5, 0));
    t.setAttribute('x', nx + 3); t.textContent = nw > 40 ? t.getAttribute('data-n').slice(0, Math.floor(nw / 7)) : '';
  }
}
document.addEventListener('click', function (e) {
  var g = e.target.closest ? e.target.closest('g.f') : null;
  if (g) zoom(g); else zoom(document.querySelector('g.f'));
});
"""


def flame_graph_svg(counts: Counter[tuple[str, ...]], title: str, width: int = 1200) -> str:
    """A self-contained flame graph: hover for counts, click a frame to zoom, click the
    background to reset."""
    tree: dict[str, object] = {}
    total = sum(counts.values())
    for stack, count in counts.items():
        node = tree
        for frame in ("all", *stack):
            child = node.setdefault(frame, {"#": 0})
            assert isinstance(child, dict)
            child["#"] = int(str(child["#"])) + count
            node = child
    height = 16
    boxes: list[tuple[float, int, float, str, int]] = []

    def walk(node: dict[str, object], x: float, depth: int) -> None:
        for name, child in sorted(node.items()):
            if name == "#":
                continue
            assert isinstance(child, dict)
            count = int(child["#"])
            w = count / total
            boxes.append((x, depth, w, name, count))
            walk(child, x, depth + 1)
            x += w

    walk(tree, 0.0, 0)
    depth_max = max((b[1] for b in boxes), default=0) + 1
    svg_height = (depth_max + 2) * height + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{svg_height}" '
             f'font-family="monospace" font-size="11">',
             f"<style>g.f:hover rect{{stroke:#000;stroke-width:0.5}} text{{pointer-events:none}}"
             f"</style><script><![CDATA[var WIDTH={width};{_SVG_SCRIPT}]]></script>",
             f'<rect width="100%" height="100%" fill="#fffbf0"/>'
             f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">'
             f"{html.escape(title)}</text>"]
    for x, depth, w, name, count in boxes:
        px, pw = x * width, w * width
        y = svg_height - (depth + 1) * height - 5
        hue = (sum(map(ord, name)) * 37) % 60
        label = html.escape(name)
        shown = html.escape(name[: int(pw // 7)]) if pw > 40 else ""
        parts.append(
            f'<g class="f" data-x="{x}" data-w="{w}"><title>{label} ({count} samples, '
            f'{100 * count / total:.2f}%)</title><rect x="{px:.1f}" y="{y}" '
            f'width="{max(pw - 0.5, 0):.1f}" height="{height - 1}" fill="hsl({hue},85%,60%)"/>'
            f'<text x="{px + 3:.1f}" y="{y + 11}" data-n="{label}">{shown}</text></g>')
    parts.append("</svg>\n")
    return "\n".join(parts)

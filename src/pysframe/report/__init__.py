"""Outputs of unwound samples: the text of ``perf script --no-inline``, folded stacks,
speedscope JSON and SVG flame graphs.

The API is the names below, imported from here (loaded on first use).
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from .perf_script import format_sample, perf_script_text
    from .profiles import flame_graph_svg, folded, speedscope, stack_counts

_HOMES = {
    "format_sample": ".perf_script",
    "perf_script_text": ".perf_script",
    "flame_graph_svg": ".profiles",
    "folded": ".profiles",
    "speedscope": ".profiles",
    "stack_counts": ".profiles",
}

__all__ = [
    "flame_graph_svg",
    "folded",
    "format_sample",
    "perf_script_text",
    "speedscope",
    "stack_counts",
]

__getattr__ = lazy_exports(__name__, _HOMES)

"""Outputs of unwound samples: the text of ``perf script --no-inline``, folded stacks,
speedscope JSON, SVG flame graphs and pprof profiles.

The API is the names below, imported from here (loaded on first use).
"""

from ..exports import lazy_exports

TYPE_CHECKING = False  # typing is not imported at run time (see pysframe.records)

if TYPE_CHECKING:
    from .flamegraph import flame_graph_svg
    from .perf_script import format_sample, perf_script_text
    from .pprof import pprof
    from .profiles import Profile, collect, folded, stack_counts
    from .speedscope import speedscope

_HOMES = {
    "format_sample": ".perf_script",
    "perf_script_text": ".perf_script",
    "Profile": ".profiles",
    "collect": ".profiles",
    "flame_graph_svg": ".flamegraph",
    "folded": ".profiles",
    "pprof": ".pprof",
    "speedscope": ".speedscope",
    "stack_counts": ".profiles",
}

__all__ = [
    "Profile",
    "collect",
    "flame_graph_svg",
    "folded",
    "format_sample",
    "perf_script_text",
    "pprof",
    "speedscope",
    "stack_counts",
]

__getattr__ = lazy_exports(__name__, _HOMES)

"""Text in the format of ``perf script --no-inline`` for unwound samples."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..errors import Problems
from ..sources.perf_data import EventAttr
from ..symbolize.symbolizer import Symbolizer, symbol_text
from ..symbolize.symbols import SymbolTable
from ..unwind.perf_session import UnwoundSample
from ..unwind.unwinder import EXACT_PC

CONTEXT_MARKER_MIN = (1 << 64) - 4095
SOFTWARE_EVENTS = {0: "cpu-clock", 1: "task-clock", 2: "page-faults", 3: "context-switches",
                   4: "cpu-migrations", 5: "minor-faults", 6: "major-faults"}
HARDWARE_EVENTS = {0: "cycles", 1: "instructions", 2: "cache-references", 3: "cache-misses",
                   4: "branches", 5: "branch-misses", 6: "bus-cycles"}


def event_name(attr: EventAttr | None) -> str:
    if attr is None:
        return "unknown"
    table = SOFTWARE_EVENTS if attr.type == 1 else HARDWARE_EVENTS if attr.type == 0 else {}
    return table.get(attr.config, f"raw-{attr.type}:{attr.config:#x}")


def format_sample(unwound: UnwoundSample, symbolizer: Symbolizer,
                  lines_cache: dict[tuple[int, int], str] | None = None,
                  kernel: SymbolTable | None = None) -> str:
    sample = unwound.sample
    seconds, nanoseconds = divmod(sample.time, 10**9)
    lines = [f"{unwound.comm} {sample.tid:5d} {seconds:5d}.{nanoseconds // 1000:06d}: "
             f"{sample.period:10d} {event_name(sample.attr)}: "]
    for address in sample.callchain:
        if address >= CONTEXT_MARKER_MIN:
            continue
        if address >= 1 << 63:
            found = kernel.lookup(address) if kernel is not None else None
            name = f"{found[0]}+{found[1]:#x}" if found else "[unknown]"
            lines.append(f"\t{address:16x} {name} ([kernel.kallsyms])")
    for index, (frame, mapping) in enumerate(zip(unwound.unwind.frames, unwound.mappings,
                                                 strict=True)):
        # callers print as return address - 1; signal-interrupted frames as they are
        pc = frame.pc if index == 0 or frame.method in EXACT_PC else frame.pc - 1
        key = (id(mapping), pc)
        line = lines_cache.get(key) if lines_cache is not None else None
        if line is None:
            if mapping is None:
                line = f"\t{pc:16x} [unknown] ([unknown])"
            else:
                shown = pc - mapping.start + mapping.pgoff
                line = f"\t{shown:16x} {symbol_text(symbolizer.symbol(mapping, pc))} ({mapping.filename})"
            if lines_cache is not None:
                lines_cache[key] = line
        lines.append(line)
    return "\n".join(lines) + "\n\n"


def perf_script_text(samples: Iterable[UnwoundSample], kernel: SymbolTable | None = None,
                     problems: Problems | None = None) -> Iterator[str]:
    """The text of each sample; ``kernel``: kallsyms of the recorded kernel, when available."""
    symbolizer = Symbolizer(problems)
    # Frames repeat across samples: one formatted line per (mapping, address). Mappings
    # live as long as the run, so their ids are stable keys.
    lines: dict[tuple[int, int], str] = {}
    for unwound in samples:
        yield format_sample(unwound, symbolizer, lines, kernel)

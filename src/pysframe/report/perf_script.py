"""Text in the format of ``perf script --no-inline`` for unwound samples."""

from __future__ import annotations

from ..errors import Problems
from ..session.perf import (
    CONTEXT_MARKER_MIN,
    KERNEL_START,
    UnwoundSample,
    valid_callchain,
)
from ..sources.perf_deferred import deferred_cookie
from ..sources.perf_records import SAMPLE_CPU, EventAttr
from ..symbolize.symbolizer import Symbolizer, symbol_text
from ..symbolize.symbols import SymbolTable
from ..unwind.address_space import Mapping
from ..unwind.unwinder import EXACT_PC, Stop
from .event_names import event_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    #: A topmost frame to come: (layout, pc, mapping) (see :func:`lines_ahead`).
    Ahead = tuple[int, int, Mapping | None]

#: perf's line where a chain was cut off by the end of the stack copy: its unwinder reads
#: the missing return address as 0 and prints it minus one.
TRUNCATED = "\tffffffffffffffff [unknown] ([unknown])"
PERF_CONTEXT_KERNEL = (1 << 64) - 128


def deferred_header(unwound: UnwoundSample) -> str:
    """The first line of a deferred callchain shown apart (``--no-merge-callchains``)."""
    sample = unwound.sample
    seconds, nanoseconds = divmod(sample.time, 10**9)
    cpu = (f" [{sample.cpu:03d}]" if sample.attr is not None
           and sample.attr.sample_type & SAMPLE_CPU else "")
    return (f"{unwound.comm} {sample.tid:5d}{cpu} {seconds:5d}.{nanoseconds // 1000:06d}: "
            f"DEFERRED CALLCHAIN [cookie: {sample.deferred_record:x}]")


def header(unwound: UnwoundSample, single_line: bool, name_width: int = 0) -> str:
    """perf script's default fields for the sample type: comm (right-aligned to 16 when the
    frames follow on the same line), tid, [cpu] when the recording has PERF_SAMPLE_CPU,
    time, period, event (right-aligned to ``name_width``: perf aligns every event's name
    to the longest of the recording's, :func:`name_width`)."""
    sample = unwound.sample
    seconds, nanoseconds = divmod(sample.time, 10**9)
    comm = f"{unwound.comm:>16}" if single_line else unwound.comm
    cpu = (f" [{sample.cpu:03d}]" if sample.attr is not None
           and sample.attr.sample_type & SAMPLE_CPU else "")
    return (f"{comm} {sample.tid:5d}{cpu} {seconds:5d}.{nanoseconds // 1000:06d}: "
            f"{sample.period:10d} {event_name(sample.attr):>{name_width}}: ")


def name_width(attrs: Iterable[EventAttr]) -> int:
    """The width perf script prints event names in: the longest of the recording's events'
    names (its dummy event's too; one event: no padding)."""
    return max((len(event_name(attr)) for attr in attrs), default=0)


def kernel_line(address: int, kernel: SymbolTable | None) -> str:
    if kernel is HELD_NAMES:
        name = f"{_HELD}{address:x}{_HELD}"
    else:
        name = _kernel_name(address, kernel)
    return f"{address:16x} {name}{_KERNEL_FILE}"


def _kernel_name(address: int, kernel: SymbolTable | None) -> str:
    found = kernel.lookup(address) if kernel is not None else None
    return f"{found[0]}+{found[1]:#x}" if found else "[unknown]"


#: Where a kernel frame's name goes once the kernel's names are ready (a first run reads
#: kallsyms in a child process: :func:`~pysframe.symbolize.kernel.prefetch`); the text of
#: samples waits for them, held, while the samples after them are made. Only a kernel
#: frame's line (its name, then :data:`_KERNEL_FILE`) is named again.
_HELD = "\0"
HELD_NAMES = SymbolTable([])
_KERNEL_FILE = " ([kernel.kallsyms])"
_HELD_END = _HELD + _KERNEL_FILE
_HEX_DIGITS = "0123456789abcdef"
#: Samples made between two looks at whether the kernel's names are ready.
_LOOK_EVERY = 16


def _waiting(kernel: SymbolTable | None) -> bool:
    """Whether the kernel's names would make the caller wait (see :data:`_HELD`)."""
    ready = getattr(kernel, "ready", None)
    return ready is not None and not ready()


def _named(held: list[str], kernel: SymbolTable | None,
           lines_cache: dict[int, dict[int, str]]) -> Iterator[str]:
    """The texts ``held``, their kernel frames named; the lines kept with a place for a
    name are dropped."""
    lines_cache.pop(KERNEL_LINES, None)
    for text in held:
        if _HELD_END not in text:
            yield text
            continue
        lines = text.split("\n")
        for index, line in enumerate(lines):
            if line.endswith(_HELD_END):
                begin = line.rfind(" " + _HELD, 0, len(line) - len(_HELD_END))
                digits = line[begin + 2:len(line) - len(_HELD_END)]
                if begin >= 0 and digits and not digits.strip(_HEX_DIGITS):
                    name = _kernel_name(int(digits, 16), kernel)
                    lines[index] = f"{line[:begin + 1]}{name}{_KERNEL_FILE}"
        yield "\n".join(lines)


#: The key of the kernel's lines in a ``lines_cache`` (layouts are numbered from 1).
KERNEL_LINES = -1


def kernel_lines(callchain: tuple[int, ...], kernel: SymbolTable | None,
                 limit: int | None = None,
                 lines_cache: dict[int, dict[int, str]] | None = None) -> list[str]:
    """The kernel part of a recorded callchain (the entries after PERF_CONTEXT_KERNEL),
    at most ``limit`` of them (perf's --max-stack). ``lines_cache``: each address's line
    kept under :data:`KERNEL_LINES` (a system-wide recording repeats its kernel frames)."""
    known = lines_cache.setdefault(KERNEL_LINES, {}) if lines_cache is not None else {}
    lines = []
    in_kernel = False
    for address in callchain:
        if address >= CONTEXT_MARKER_MIN:
            in_kernel = address == PERF_CONTEXT_KERNEL
        elif in_kernel:
            line = known.get(address)
            if line is None:
                line = known[address] = "\t" + kernel_line(address, kernel)
            lines.append(line)
    return lines if limit is None else lines[:limit]


def format_sample(unwound: UnwoundSample, symbolizer: Symbolizer,
                  lines_cache: dict[int, dict[int, str]] | None = None,
                  kernel: SymbolTable | None = None, max_stack: int | None = None,
                  name_width: int = 0) -> str:
    """The text of one sample. ``lines_cache``: frame lines by layout and printed pc,
    kept across samples (a sample of layout 0, unknown, does without)."""
    sample = unwound.sample
    unwind = unwound.unwind
    if unwind.stop is Stop.NO_CALLCHAIN:
        # No callchain recorded: perf prints the sample's ip on the header line.
        if sample.ip >= KERNEL_START:
            where = kernel_line(sample.ip, kernel)
        else:
            mapping = unwind.mappings[0]
            where = (f"{sample.ip:16x} {symbol_text(symbolizer.symbol(mapping, sample.ip))} "
                     f"({mapping.filename})" if mapping is not None
                     else f"{sample.ip:16x} [unknown] ([unknown])")
        return f"{header(unwound, True, name_width)} {where}\n"
    if sample.deferred_record is not None:
        return "\n".join([deferred_header(unwound), *user_lines(unwound, symbolizer, None)]
                         ) + "\n\n"
    lines = [header(unwound, False, name_width)]
    if unwind.stop is Stop.RECORDED and not valid_callchain(sample.callchain):
        return lines[0] + "\n\n"  # perf drops a recorded chain with an unknown context
    if sample.callchain:
        lines += kernel_lines(sample.callchain, kernel, max_stack, lines_cache)
        cookie = deferred_cookie(sample.callchain)
        if cookie is not None:  # shown apart: the user part is the record that follows
            lines.append(f"\t{cookie:16x} (cookie) ([unknown])")
    lines += user_lines(unwound, symbolizer, lines_cache)
    if unwind.stop is Stop.COPY_ENDED:
        lines.append(TRUNCATED)
    return "\n".join(lines) + "\n\n"


def user_lines(unwound: UnwoundSample, symbolizer: Symbolizer,
               lines_cache: dict[int, dict[int, str]] | None) -> list[str]:
    """The lines of the user frames. Callers print as return address - 1 (inside the
    call), frame 0 and signal-interrupted frames as they are. Within one layout a pc
    decides the mapping, so lines are cached by layout and found in one pass: a caller's
    by its return address, an exact pc's by its bitwise complement (no ``pc - 1``, a
    multi-digit int, made a frame), apart from the batch engine's lines by printed pc
    (:func:`caller_lines_of`)."""
    unwind = unwound.unwind
    pcs, methods, mappings = unwind.pcs, unwind.methods, unwind.mappings
    if not pcs:
        return []
    if lines_cache is None or not unwound.layout:
        printed = [pc - 1 for pc in pcs]
        printed[0] = pcs[0]
        for index, method in enumerate(methods):
            if method in EXACT_PC:
                printed[index] = pcs[index]
        return [frame_line(symbolizer, mapping, pc)
                for pc, mapping in zip(printed, mappings, strict=True)]
    known = caller_lines_of(lines_cache, unwound.layout)
    lines = list(map(known.get, pcs))
    lines[0] = known.get(~pcs[0])
    exact = not EXACT_PC.isdisjoint(methods)
    if exact:
        for index, method in enumerate(methods):
            if method in EXACT_PC:
                lines[index] = known.get(~pcs[index])
    if None in lines:
        for index, line in enumerate(lines):
            if line is None:
                pc = pcs[index]
                if index == 0 or (exact and methods[index] in EXACT_PC):
                    lines[index] = known[~pc] = frame_line(symbolizer, mappings[index], pc)
                else:
                    lines[index] = known[pc] = frame_line(symbolizer, mappings[index], pc - 1)
    return lines  # type: ignore[return-value]  # every None was filled above


def caller_lines_of(lines_cache: dict[int, dict[int, str]], layout: int) -> dict[int, str]:
    """The scalar path's lines of ``layout`` in ``lines_cache`` (see :func:`user_lines`):
    kept under the layout's complement (layouts are numbered from 1, :data:`KERNEL_LINES`
    is -1), the layout's own number keeping lines by printed pc."""
    known = lines_cache.get(~layout)
    if known is None:
        known = lines_cache[~layout] = {}
    return known


#: How often (every this many samples, plus one) the frames planned ahead are asked for.
_LOOK_AHEAD = 63


def lines_ahead(lines_cache: dict[int, dict[int, str]], symbolizer: Symbolizer,
                frames: Iterable[Ahead]) -> None:
    """The lines of topmost frames to come ((layout, pc, mapping), as their samples will
    give them) made now, one after another, and kept where :func:`user_lines` finds them:
    made between one sample's unwind and the next's, a line took about three times as
    long (its code, symbols and names cold in the CPU's caches)."""
    for layout, pc, mapping in frames:
        if layout:  # (layout 0, unknown, keeps none)
            known = caller_lines_of(lines_cache, layout)
            if ~pc not in known:
                known[~pc] = frame_line(symbolizer, mapping, pc)


def frame_line(symbolizer: Symbolizer, mapping: Mapping | None, pc: int) -> str:
    """The line of one user frame: the pc (as a file offset when mapped), symbol, file."""
    if mapping is None:
        return f"\t{pc:16x} [unknown] ([unknown])"
    shown = pc - mapping.start + mapping.pgoff
    return f"\t{shown:16x} {symbol_text(symbolizer.symbol(mapping, pc))} ({mapping.filename})"


def perf_script_text(samples: Iterable[UnwoundSample], kernel: SymbolTable | None = None,
                     problems: Problems | None = None, *, symbolizer: Symbolizer | None = None,
                     max_stack: int | None = None, name_width: int = 0,
                     ahead: Callable[[], Iterable[Ahead]] | None = None) -> Iterator[str]:
    """The text of each sample; ``kernel``: kallsyms of the recorded kernel, when available;
    ``max_stack``: the most kernel frames (the user frames were cut when unwound);
    ``name_width``: see :func:`header`; ``ahead``: the topmost frames of the samples
    ahead planned since it was last called, called at the first sample and every 64 after
    (their lines made in a row: see :func:`lines_ahead`)."""
    if symbolizer is None:
        symbolizer = Symbolizer(problems)
    # Frames repeat across samples: one formatted line per (layout, address).
    lines: dict[int, dict[int, str]] = {}
    held: list[str] | None = [] if _waiting(kernel) else None
    for count, unwound in enumerate(samples):
        if ahead is not None and not count & _LOOK_AHEAD:
            lines_ahead(lines, symbolizer, ahead())
        if held is None:
            yield format_sample(unwound, symbolizer, lines, kernel, max_stack, name_width)
            continue
        text = format_sample(unwound, symbolizer, lines, HELD_NAMES, max_stack, name_width)
        if held or _HELD_END in text:
            held.append(text)
        else:
            yield text
        if count % _LOOK_EVERY == 0 and not _waiting(kernel):
            yield from _named(held, kernel, lines)
            held = None
    if held:
        yield from _named(held, kernel, lines)

"""The SFrame user-stack walker in eBPF, and the maps it reads.

Tables live in maps in the batch engine's flat layout (:mod:`pysframe.unwind.flat`):
``rows`` is one array of ``{u64 link-time start, u64 rule word}`` holding every loaded
binary's rows back to back; ``procs`` gives, per process, up to :data:`MAPPINGS`
executable mappings ``{u64 start, end, bias; u32 first row, rows}``. A sample's record
is built in a per-CPU scratch value and copied into the ring buffer whole.

Each frame is one ``bpf_loop`` iteration (the verifier checks the step once, not once per
frame), and the row search inside it is a nested ``bpf_loop`` of binary-search steps over
the rows of the pc's 256-byte page, which a page index after the table's rows gives
(:data:`PAGE_INDEXED`; a small table is searched whole). A per-CPU cache of recent pc ->
rule answers most frames before any search.
One step: the mapping holding the pc (the exact pc in the topmost frame, the return
address less one above it), its row; a default rule gives CFA = SP or FP + offset, RA
(and maybe FP) loaded from the CFA; no row: the frame-pointer step (FP aligned and not
below SP), except at the sigreturn trampoline, which ends the walk (the
interrupted frame's registers are in the signal frame, not where the frame pointer
points: the step would skip the interrupted frames or read junk); the outermost row
ends the walk; other rules (flexible V3 rules, and a PLT block too large to be written
out as rows: :func:`.tables.walker_rows`) end it with their reason. The CFA must move up (the topmost frame may keep SP), the
return address be non-zero, and at most ``frames`` frames are kept (default
:data:`~.sampler.USER_FRAMES`; the record is sent up to its last frame).

The stack is read a window at a time (:func:`_read_word`): one ``bpf_probe_read_user``
costs ~84 ns here whether it reads 8 bytes or 512, so reading each saved slot alone
made the reads 70 of the 90 ns a frame cost on a 300-deep stack; with windows a frame
costs ~19 ns (``bench/walker_floor.py``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from ..unwind.flat import BIAS, CFA_SHIFT, FIELD_MASK, FP_SHIFT, OUTERMOST, RA_SHIFT
from ..unwind.step import WALKER_STOPS, Stop
from .asm import (
    ADD,
    AND,
    JEQ,
    JGE,
    JGT,
    JLE,
    JLT,
    JNE,
    JSET,
    LSH,
    MUL,
    OR,
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
    RSH,
    SUB,
    XOR,
    Asm,
)
from .btf import function_btf
from .sampler import (
    COPY_BYTES,
    COPY_HEADER,
    FLAG_STACK_COPY,
    GET_CURRENT_PID_TGID,
    GET_SMP_PROCESSOR_ID,
    MAP_LOOKUP_ELEM,
    MIN_COPY_BYTES,
    MOST_COPY_BYTES,
    MOST_USER_FRAMES,
    PROBE_READ_USER,
    STOP_BACKWARDS,
    STOP_DEPTH,
    STOP_FAULT,
    STOP_ZERO,
    USER_FRAMES,
    record_size,
    sample_fields,
    user_base,
    user_offset,
)

RINGBUF_OUTPUT, BPF_LOOP = 130, 181
BPF_RB_NO_WAKEUP = 1
STOP_OUTERMOST, STOP_RARE, STOP_PLT, STOP_NO_RULE, STOP_SIGNAL = (
    Stop.OUTERMOST.code, Stop.UNSUPPORTED.code, Stop.PLT.code, Stop.NO_RULE.code,
    Stop.SIGNAL.code)
#: The text of each stop code in the walker's records (0: the walk did not end).
STOP_NAMES = {0: "", **{code: stop.value for code, stop in WALKER_STOPS.items()}}
#: x86-64 rt_sigreturn trampoline (glibc's __restore_rt): ``mov $15,%rax; syscall``, as
#: :data:`pysframe.unwind.unwinder.X86_64_SIGRETURN`; its first 8 bytes, and the last one.
SIGRETURN_HEAD = int.from_bytes(bytes.fromhex("48c7c00f0000000f"), "little")
SIGRETURN_TAIL = 0x05
#: Executable mappings per process, and the layout of one: start, end, bias, first, rows.
MAPPINGS = 64
MAPPING = struct.Struct("<QQQII")
PROCS_VALUE = 8 + MAPPINGS * MAPPING.size
ROW = struct.Struct("<QQ")
#: A mapping's rows field: the table's row count, and this bit when a page index follows
#: its rows (:func:`~.tables.page_index`): a row ``{u64 first page, u64 pages}`` (pages of
#: link-time addresses, ``address >> PAGE_INDEX_SHIFT``), then, four to a row, the u32
#: count of the table's rows that start before each page and before the page after the
#: last. The search for a pc then covers its page's rows only: a compiler's table of
#: 100k+ rows took ~17 halvings, each a cold row. Pages of 256 bytes: SFrame rows are
#: dense (libc: ~95 rows per 4 KiB), 256 bytes hold ~6 (three halvings), and the index
#: costs ~4% of the table's rows.
PAGE_INDEXED, ROWS_FIELD = 1 << 30, (1 << 30) - 1
PAGE_INDEX_SHIFT = 8
#: The walk's state, on the main program's stack (the loop callbacks' ``ctx``).
STATE = -112
(PC, SP, FP, COUNT, STOP, TGID, TOPMOST, KEY, LO, HI, RECORD_PTR, PROCS_PTR, TAG, FRESH,
 WINDOW_PTR, USER_PTR) = (0, 8, 16, 24, 28, 32, 36, 40, 48, 52, 56, 64, 72, 80, 88, 96)
#: The rule cached for a pc no mapping of the process's entry holds (kind "none" as the
#: frame-pointer fallback, told apart from a mapping's "no rule" by this bit).
UNCOVERED = 4
#: The page size of x86-64 user memory (a stack copy ends at a page boundary).
PAGE = 4096
#: The per-CPU cache of rules, after the record in each CPU's scratch value: entries of
#: (lookup pc, tag: tgid << 32 | the process entry's generation, rule word; 0: no rule),
#: direct-mapped by pc. A process's entry gets a new generation whenever it is written,
#: so an entry cached before its tables changed never matches again.
CACHE_ENTRIES = 512
CACHE_ENTRY = 24
#: The stack window, after the rule cache in each CPU's scratch value: ``{u64 start,
#: u64 bytes held (0: none)}`` then up to :data:`WINDOW` bytes read from ``start``. A
#: ``bpf_probe_read_user`` costs about the same for 8 bytes as for 512 (84 against 133 ns
#: here; 1 KiB 155 ns): reading a frame's slots one by one cost 84 ns a slot, so the
#: walker reads the stack a window at a time and takes the slots from the window.
WINDOW = 2048
FIRST_WINDOW = 1024
WINDOW_HEADER = 16
#: A window starts this far below the slot that missed, so that the slot of the saved FP
#: (below the return address's) is in the same window.
WINDOW_BELOW = 16


#: Fills the record before the walk (R6: the context, R7: the pid/tgid word, R8: the
#: record), then jumps to ``main_walk``, to ``main_output`` (no walk) or ``main_out``
#: (nothing to send). The stack below :data:`STATE` is its own.
Fill = Callable[[Asm], None]


def walker(ringbuf_fd: int, scratch_fd: int, procs_fd: int, rows_fd: int,
           fill: Fill | None = None, name: str = "sframe_sample", frames: int = USER_FRAMES,
           copy_bytes: int = COPY_BYTES) -> tuple[bytes, bytes, bytes]:
    """(instructions, BTF blob, func_info) of the sampling program with the SFrame walker;
    ``fill``: what fills the record (default: the sample's fields, then the walk);
    ``frames``: the most user frames a walk keeps; ``copy_bytes``: the most stack copied
    where it meets code no table covers. ``scratch_fd``: an array with a record per CPU
    (:func:`scratch_map`)."""
    if not 1 < frames <= MOST_USER_FRAMES:
        raise ValueError(f"a walk keeps 2 to {MOST_USER_FRAMES} frames, not {frames}")
    if not MIN_COPY_BYTES <= copy_bytes <= MOST_COPY_BYTES or copy_bytes % 8:
        raise ValueError(f"a stack copy is {MIN_COPY_BYTES} to {MOST_COPY_BYTES} bytes, a "
                         f"multiple of 8, not {copy_bytes}")
    a = Asm()
    _main(a, ringbuf_fd, scratch_fd, procs_fd,
          fill or (lambda asm: sample_fields(asm, "main_walk", "main_output")), frames,
          copy_bytes)
    a.label("frame_step")
    _frame_step(a, rows_fd, frames, cache_at(frames, copy_bytes))
    a.label("search_step")
    _search_step(a, rows_fd)
    blob, infos = function_btf(name, [("frame_step", a.offset_of("frame_step")),
                                      ("search_step", a.offset_of("search_step"))])
    return a.assemble(), blob, infos


def scratch_map(frames: int = USER_FRAMES, copy_bytes: int = COPY_BYTES
                ) -> tuple[int, int, int]:
    """(key size, value size, entries) of the walker's scratch ``BPF_MAP_TYPE_ARRAY``: a
    record and the rule cache per possible CPU, indexed by the CPU's number (a per-CPU
    array's values stop at 32 KiB: 4,096 frames do not fit)."""
    return (4, window_at(frames, copy_bytes) + WINDOW_HEADER + WINDOW + 8,
            possible_cpus())


def cache_at(frames: int, copy_bytes: int = COPY_BYTES) -> int:
    """Where the rule cache starts in a scratch value: after the record and its copy."""
    return record_size(frames) + COPY_HEADER.size + copy_bytes


def window_at(frames: int, copy_bytes: int = COPY_BYTES) -> int:
    """Where the stack window starts in a scratch value: after the rule cache."""
    return cache_at(frames, copy_bytes) + CACHE_ENTRIES * CACHE_ENTRY


def possible_cpus() -> int:
    """The CPU numbers the kernel may use (``/sys/devices/system/cpu/possible``: 0-N)."""
    try:
        with open("/sys/devices/system/cpu/possible") as possible:
            text = possible.read().strip()
        return int(text.replace(",", "-").split("-")[-1]) + 1
    except (OSError, ValueError):
        return os.cpu_count() or 1


def _scratch(a: Asm, scratch_fd: int, missing: str) -> None:
    """R8 = this CPU's record in the scratch array (R0-R5 clobbered), else to ``missing``."""
    a.call(GET_SMP_PROCESSOR_ID).stx(4, R10, -4, R0)
    a.ld_map(R1, scratch_fd).mov(R2, R10, reg=True).add(R2, -4)
    a.call(MAP_LOOKUP_ELEM).jump(JEQ, R0, 0, missing).mov(R8, R0, reg=True)


def _main(a: Asm, ringbuf_fd: int, scratch_fd: int, procs_fd: int, fill: Fill,
          frames: int, copy_bytes: int) -> None:
    a.mov(R6, R1, reg=True)
    _scratch(a, scratch_fd, "main_out")
    a.call(GET_CURRENT_PID_TGID).mov(R7, R0, reg=True)
    fill(a)
    a.label("main_walk")
    # The record, for the steps: a map value pointer spilled on this stack, which the
    # verifier lets the loop's callback read back through its ctx with its type.
    a.stx(8, R10, STATE + RECORD_PTR, R8)
    a.ldx(4, R1, R8, 8).stx(4, R10, STATE + TGID, R1).stx(4, R10, -4, R1)
    # The process's entry (0: none, every frame by frame pointer) and its cache tag.
    a.st(8, R10, STATE + PROCS_PTR, 0).st(8, R10, STATE + TAG, 0)
    a.ld_map(R1, procs_fd).mov(R2, R10, reg=True).add(R2, -4).call(MAP_LOOKUP_ELEM)
    a.jump(JEQ, R0, 0, "main_steps").stx(8, R10, STATE + PROCS_PTR, R0)
    a.ldx(4, R1, R10, STATE + TGID).alu(LSH, R1, 32).ldx(4, R2, R0, 4)
    a.alu(OR, R1, R2, reg=True).stx(8, R10, STATE + TAG, R1)
    a.label("main_steps")
    # No window yet: the last sample's may be another process's memory.
    a.mov(R1, R8, reg=True).add(R1, window_at(frames, copy_bytes)).st(8, R1, 0, 0)
    a.st(8, R1, 8, 0)
    a.stx(8, R10, STATE + WINDOW_PTR, R1)
    a.ldx(8, R1, R8, 48).stx(8, R10, STATE + SP, R1)
    a.ldx(8, R1, R8, 56).stx(8, R10, STATE + FP, R1)
    a.st(4, R10, STATE + COUNT, 1).st(4, R10, STATE + STOP, STOP_DEPTH)
    a.st(4, R10, STATE + TOPMOST, 1).st(4, R10, STATE + FRESH, 0)
    # The user frames follow the kernel's (none: a sample in user mode).
    user_base(a, R2)
    a.stx(8, R10, STATE + USER_PTR, R2)
    a.ldx(8, R1, R8, 40).stx(8, R10, STATE + PC, R1).stx(8, R2, 0, R1)
    a.mov(R1, frames - 1).ld_func(R2, "frame_step")
    a.mov(R3, R10, reg=True).add(R3, STATE).mov(R4, 0).call(BPF_LOOP)
    a.ldx(4, R1, R10, STATE + COUNT).stx(4, R8, 32, R1)
    a.ldx(4, R1, R10, STATE + STOP).stx(4, R8, 36, R1)
    _stack_copy(a, frames, ringbuf_fd, copy_bytes)
    # No wake-up per sample: the reader drains the buffer in batches (every 50 ms), so the
    # sampled CPU does not send it an interrupt 1000 times a second.
    # The record up to its last user frame (bounded for the verifier).
    a.label("main_output")
    _frames_end(a, R3, R2, frames, "main_size")
    a.ld_map(R1, ringbuf_fd).mov(R2, R8, reg=True)
    a.mov(R4, BPF_RB_NO_WAKEUP).call(RINGBUF_OUTPUT)
    a.label("main_out")
    a.mov(R0, 0).exit()


def _frame_step(a: Asm, rows_fd: int, frames: int, cache_offset: int) -> None:
    """long frame_step(u32 index, struct state *ctx): one frame; 1 ends the walk. The
    record and the process's entry come from ``ctx`` (pointers the main program found
    once per sample); the rule from the cache, else from the mapping and its rows."""
    a.mov(R9, R2, reg=True)
    a.ldx(8, R8, R9, RECORD_PTR)
    # R6: the pc to look up (exact at the top, return address - 1 above)
    a.ldx(8, R6, R9, PC).ldx(4, R1, R9, TOPMOST).jump(JNE, R1, 0, "step_exact").add(R6, -1)
    a.label("step_exact")
    a.ldx(8, R7, R9, PROCS_PTR).jump(JEQ, R7, 0, "uncovered")
    # The cache entry of R6 (R5), its rule word when it holds R6 for this tag.
    a.mov(R5, R6, reg=True).alu(RSH, R5, 9).alu(XOR, R5, R6, reg=True)
    a.alu(AND, R5, CACHE_ENTRIES - 1).alu(MUL, R5, CACHE_ENTRY).add(R5, cache_offset)
    a.add(R5, R8, reg=True).stx(8, R10, -64, R5)
    a.ldx(8, R1, R5, 0).jump(JNE, R1, R6, "scan_hint", reg=True)
    a.ldx(8, R1, R5, 8).ldx(8, R2, R9, TAG).jump(JNE, R1, R2, "scan_hint", reg=True)
    a.ldx(8, R7, R5, 16).goto("have_rule")
    # The mapping holding R6 (R3: index, R4: entry).
    a.label("scan_hint")
    a.ldx(4, R1, R7, 0).mov(R3, 0)
    a.label("scan")
    a.jump(JGE, R3, MAPPINGS, "not_mapped").jump(JGE, R3, R1, "not_mapped", reg=True)
    a.mov(R4, R3, reg=True).alu(LSH, R4, 5).add(R4, R7, reg=True)
    a.ldx(8, R5, R4, 8).jump(JLT, R6, R5, "scan_next", reg=True)
    a.ldx(8, R5, R4, 16).jump(JGE, R6, R5, "scan_next", reg=True)
    a.ldx(8, R5, R4, 24).mov(R0, R6, reg=True).alu(SUB, R0, R5, reg=True).stx(8, R9, KEY, R0)
    a.ldx(4, R5, R4, 32).stx(4, R9, LO, R5).stx(4, R10, -12, R5)
    a.ldx(4, R0, R4, 36).mov(R1, R0, reg=True).alu(AND, R0, ROWS_FIELD)
    a.alu(ADD, R0, R5, reg=True, wide=False).stx(4, R9, HI, R0)
    a.jump(JSET, R1, PAGE_INDEXED, "page_index").goto("search")
    a.label("scan_next")
    a.add(R3, 1).goto("scan")
    _page_index(a, rows_fd)
    # the last row starting at or before the pc
    a.label("search")
    a.mov(R1, 32).ld_func(R2, "search_step").mov(R3, R9, reg=True).mov(R4, 0).call(BPF_LOOP)
    a.ldx(4, R1, R9, LO).ldx(4, R2, R10, -12).jump(JGE, R2, R1, "no_rule", reg=True)
    a.add(R1, -1).stx(4, R10, -16, R1)
    a.ld_map(R1, rows_fd).mov(R2, R10, reg=True).add(R2, -16).call(MAP_LOOKUP_ELEM)
    a.jump(JEQ, R0, 0, "no_rule").ldx(8, R7, R0, 8).goto("cache_rule")
    a.label("not_mapped")
    a.mov(R7, UNCOVERED).goto("cache_rule")
    a.label("no_rule")
    a.mov(R7, 0)
    a.label("cache_rule")  # R6 -> R7 for this tag
    a.ldx(8, R5, R10, -64).stx(8, R5, 0, R6)
    a.ldx(8, R1, R9, TAG).stx(8, R5, 8, R1).stx(8, R5, 16, R7)
    a.label("have_rule")
    a.mov(R1, R7, reg=True).alu(AND, R1, 3)
    a.jump(JEQ, R7, UNCOVERED, "uncovered")
    a.jump(JEQ, R1, 0, "fp_step").jump(JEQ, R1, 3, "stop_plt")
    a.jump(JEQ, R7, OUTERMOST, "stop_outermost").jump(JEQ, R1, 2, "stop_rare")
    _default_rule(a)
    _frame_pointer_rule(a)
    _advance(a, frames)
    _uncovered(a, frames)


def _page_index(a: Asm, rows_fd: int) -> None:
    """[LO, HI) narrowed to the rows of the key's page by the table's page index (R0: the
    header's row, just after the table's rows), then the search; a key outside the
    indexed pages, or an index row out of the map, keeps the whole table. A damaged
    index costs only the rule found (the rows map is the loader's)."""
    a.label("page_index")
    a.stx(4, R10, -16, R0)
    a.ld_map(R1, rows_fd).mov(R2, R10, reg=True).add(R2, -16).call(MAP_LOOKUP_ELEM)
    a.jump(JEQ, R0, 0, "search")
    a.ldx(8, R1, R0, 0).ldx(8, R2, R0, 8)
    a.ldx(8, R3, R9, KEY).alu(RSH, R3, PAGE_INDEX_SHIFT).alu(SUB, R3, R1, reg=True)
    a.jump(JGE, R3, R2, "search", reg=True).stx(8, R10, -80, R3)
    for after, bound in ((0, LO), (1, HI)):  # the counts before the page and the next
        a.ldx(8, R1, R10, -80).add(R1, after).alu(RSH, R1, 2).add(R1, 1)
        a.ldx(4, R2, R10, -16).alu(ADD, R1, R2, reg=True, wide=False).stx(4, R10, -84, R1)
        a.ld_map(R1, rows_fd).mov(R2, R10, reg=True).add(R2, -84).call(MAP_LOOKUP_ELEM)
        a.jump(JEQ, R0, 0, "search")
        a.ldx(8, R1, R10, -80).add(R1, after).alu(AND, R1, 3).alu(LSH, R1, 2)
        a.add(R0, R1, reg=True).ldx(4, R1, R0, 0)
        a.ldx(4, R2, R10, -12).alu(ADD, R1, R2, reg=True, wide=False).stx(4, R9, bound, R1)
    a.goto("search")


def _uncovered(a: Asm, frames: int) -> None:
    """No loaded table covers this frame's pc: the first such frame's index and registers
    are noted for a stack copy (made once the walk ends), then the frame-pointer step."""
    a.label("uncovered")
    a.ldx(4, R1, R9, FRESH).jump(JNE, R1, 0, "fp_step").st(4, R9, FRESH, 1)
    a.mov(R5, R8, reg=True).add(R5, record_size(frames))
    a.ldx(4, R1, R9, COUNT).add(R1, -1).stx(4, R5, 0, R1).st(4, R5, 4, 0)
    a.ldx(8, R1, R9, PC).stx(8, R5, 8, R1)
    a.ldx(8, R1, R9, SP).stx(8, R5, 16, R1)
    a.ldx(8, R1, R9, FP).stx(8, R5, 24, R1).goto("fp_step")


def _stack_copy(a: Asm, frames: int, ringbuf_fd: int, copy_bytes: int) -> None:
    """After the walk (R8: the record): with a frame noted by :func:`_uncovered`, up to
    ``copy_bytes`` of the stack from its SP, to the end of the last readable page where
    the stack ends sooner, the record flagged and sent with its copy. The note (its
    :data:`~.sampler.COPY_HEADER`) and the copy go right after the last user frame, and
    the record is sent up to the copy's end: the ring buffer's pages are cold, and
    writing the frames' unused room and the copy's (up to 25 KiB) cost ~40 us a sample.

    A read that crosses the end of the stack fails whole, and the frames nearest the
    outermost one lie just below that end (under the arguments and environment): the
    copy ends at the first page, going up from the SP's, whose last word cannot be read
    (8-byte probes; [vvar] or [vdso] may be mapped a little above the stack, so the pages
    are tried in order). R9: the note's offset in the record; R6: the SP; R7: its offset
    in its page, then the bytes to copy."""
    noted = record_size(frames)
    a.ldx(4, R1, R10, STATE + FRESH).jump(JEQ, R1, 0, "main_output")
    _frames_end(a, R9, R1, frames, "copy_at")
    # The note moves down (or stays): word by word, upwards, never over a word unread.
    a.mov(R5, R8, reg=True).add(R5, noted).mov(R4, R8, reg=True).add(R4, R9, reg=True)
    for word in range(COPY_HEADER.size // 8):
        a.ldx(8, R1, R5, 8 * word).stx(8, R4, 8 * word, R1)
    a.ldx(8, R6, R4, 16)
    a.mov(R7, R6, reg=True).alu(AND, R7, PAGE - 1)
    pages = (copy_bytes + PAGE - 1) // PAGE + 1
    for page in range(1, pages + 1):
        a.mov(R1, R8, reg=True).add(R1, R9, reg=True).add(R1, COPY_HEADER.size).mov(R2, 8)
        a.mov(R3, R6, reg=True).alu(SUB, R3, R7, reg=True).add(R3, page * PAGE - 8)
        a.call(PROBE_READ_USER).jump(JNE, R0, 0, f"copy_pages_{page - 1}")
    a.goto(f"copy_pages_{pages}")
    for page in range(pages, 0, -1):
        a.label(f"copy_pages_{page}")
        a.mov(R1, page * PAGE).alu(SUB, R1, R7, reg=True).mov(R7, R1, reg=True)
        a.goto("copy_bounded")
    a.label("copy_pages_0")  # not even the SP's page: an empty copy
    a.mov(R7, 0).goto("copy_done")
    a.label("copy_bounded")
    a.jump(JLE, R7, copy_bytes, "copy_read").mov(R7, copy_bytes)
    a.label("copy_read")
    a.mov(R1, R8, reg=True).add(R1, R9, reg=True).add(R1, COPY_HEADER.size)
    a.mov(R2, R7, reg=True).mov(R3, R6, reg=True)
    a.call(PROBE_READ_USER).jump(JEQ, R0, 0, "copy_read_done").mov(R7, 0)
    a.label("copy_read_done")
    a.mov(R5, R8, reg=True).add(R5, R9, reg=True).stx(4, R5, 4, R7)
    a.label("copy_done")
    a.ldx(4, R1, R8, 4).alu(OR, R1, FLAG_STACK_COPY).stx(4, R8, 4, R1)
    a.ld_map(R1, ringbuf_fd).mov(R2, R8, reg=True)
    a.mov(R3, R9, reg=True).add(R3, COPY_HEADER.size).add(R3, R7, reg=True)
    a.mov(R4, BPF_RB_NO_WAKEUP).call(RINGBUF_OUTPUT).goto("main_out")


def _frames_end(a: Asm, dst: int, scratch: int, frames: int, label: str) -> None:
    """dst = where the record at R8 ends after its last user frame (its user frames, at
    most ``frames``, from :func:`~.sampler.user_offset`): where it is sent up to, or its
    stack copy's note goes. ``scratch`` is clobbered."""
    a.ldx(4, dst, R8, 32).jump(JLE, dst, frames, label).mov(dst, frames)
    a.label(label)
    user_offset(a, scratch)
    a.alu(LSH, dst, 3).add(dst, scratch, reg=True)


def _field(a: Asm, dst: int, word: int, shift: int) -> None:
    """dst = the signed offset field of rule word ``word`` at ``shift``."""
    a.mov(dst, word, reg=True).alu(RSH, dst, shift).alu(AND, dst, FIELD_MASK).add(dst, -BIAS)


def _default_rule(a: Asm) -> None:
    """CFA = SP or FP + offset; RA from CFA + offset; FP from CFA + offset when saved."""
    a.ldx(8, R6, R9, SP).jump(JSET, R7, 4, "cfa_from_fp").goto("cfa_base")
    a.label("cfa_from_fp")
    a.ldx(8, R6, R9, FP)
    a.label("cfa_base")
    _field(a, R1, R7, CFA_SHIFT)
    a.add(R6, R1, reg=True)  # R6: CFA
    _field(a, R3, R7, RA_SHIFT)
    a.add(R3, R6, reg=True)
    _read_word(a, "ra", -24, "stop_fault")
    a.ldx(8, R1, R9, FP).stx(8, R10, -32, R1)  # FP unchanged unless saved and readable
    a.jump(JSET, R7, 8, "fp_saved").goto("advance")
    a.label("fp_saved")
    _field(a, R3, R7, FP_SHIFT)
    a.add(R3, R6, reg=True)
    _read_word(a, "fp", -40, "advance")
    a.ldx(8, R1, R10, -40).stx(8, R10, -32, R1).goto("advance")


def _read_word(a: Asm, tag: str, slot: int, fault: str) -> None:
    """The user word at R3 to the stack at R10 + ``slot``, from the stack window when it
    holds it, else from a new window read from :data:`WINDOW_BELOW` under it to the end
    of its page (or :data:`WINDOW` bytes: a window never reads past the page holding the
    word, so it cannot fail at the end of the stack where the word itself did not), else
    read alone; a word that cannot be read goes to ``fault``. R0-R5 clobbered; R6-R9 kept.
    The window's pointer is in the walk's state (R9)."""
    a.label(f"{tag}_window").ldx(8, R5, R9, WINDOW_PTR)
    a.ldx(8, R1, R5, 0).mov(R2, R3, reg=True).alu(SUB, R2, R1, reg=True)
    a.ldx(8, R4, R5, 8).jump(JLT, R4, 8, f"{tag}_fill")
    a.add(R4, -8).jump(JGT, R2, R4, f"{tag}_fill", reg=True)
    # Within the window: the mask bounds the offset for the verifier (it is below WINDOW).
    a.alu(AND, R2, WINDOW - 1).add(R2, R5, reg=True)
    a.ldx(8, R1, R2, WINDOW_HEADER).stx(8, R10, slot, R1).goto(f"{tag}_done")
    a.label(f"{tag}_fill")
    a.mov(R1, R3, reg=True).add(R1, -WINDOW_BELOW)
    a.mov(R2, R3, reg=True).alu(OR, R2, PAGE - 1).add(R2, 1).alu(SUB, R2, R1, reg=True)
    # A sample's first window is smaller: a read costs more the more it reads (512 bytes
    # 133 ns, 1 KiB 155 ns, 2 KiB ~250 ns), and 1 KiB holds a 10-frame C stack (with 512
    # bytes it took two reads: 1.06 against 0.95 us a sample); deep ones go on in 2 KiB.
    a.ldx(8, R0, R5, 0).jump(JNE, R0, 0, f"{tag}_big")
    a.jump(JLE, R2, FIRST_WINDOW, f"{tag}_sized").mov(R2, FIRST_WINDOW).goto(f"{tag}_sized")
    a.label(f"{tag}_big")
    a.jump(JLE, R2, WINDOW, f"{tag}_sized").mov(R2, WINDOW)
    a.label(f"{tag}_sized")  # a word across the page's end: read alone
    a.jump(JLT, R2, WINDOW_BELOW + 8, f"{tag}_alone")
    a.stx(8, R10, -72, R3).stx(8, R5, 0, R1).stx(8, R5, 8, R2)
    a.mov(R3, R1, reg=True).mov(R1, R5, reg=True).add(R1, WINDOW_HEADER)
    a.call(PROBE_READ_USER).ldx(8, R3, R10, -72).ldx(8, R5, R9, WINDOW_PTR)
    a.jump(JNE, R0, 0, f"{tag}_unread")
    a.ldx(8, R1, R5, WINDOW_HEADER + WINDOW_BELOW).stx(8, R10, slot, R1)
    a.goto(f"{tag}_done")
    a.label(f"{tag}_unread")  # no window (its start may be below the stack's pages)
    a.st(8, R5, 8, 0)
    a.label(f"{tag}_alone")
    a.mov(R1, R10, reg=True).add(R1, slot).mov(R2, 8).call(PROBE_READ_USER)
    a.jump(JNE, R0, 0, fault)
    a.label(f"{tag}_done")


def _frame_pointer_rule(a: Asm) -> None:
    """No row: [FP] = caller's FP, [FP + 8] = RA, CFA = FP + 16 (FP aligned, not below SP).
    A frame at the sigreturn trampoline (no row: its CFI is a signal frame's; a return
    into it, or a sample taken on it) ends the walk instead."""
    a.label("fp_step")
    a.ldx(8, R3, R9, PC)
    _sigreturn_at(a, "fp_in_trampoline")
    # The topmost frame of a sample taken during the trampoline's rt_sigreturn system call:
    # its pc is just after the syscall instruction (in padding no code reaches otherwise).
    a.label("fp_in_trampoline")
    a.ldx(4, R1, R9, TOPMOST).jump(JEQ, R1, 0, "fp_guess")
    a.ldx(8, R3, R9, PC).add(R3, -9)
    _sigreturn_at(a, "fp_guess")
    a.label("fp_guess")
    a.ldx(8, R3, R9, FP).jump(JSET, R3, 7, "stop_no_rule")
    a.ldx(8, R1, R9, SP).jump(JLT, R3, R1, "stop_no_rule", reg=True)
    a.mov(R6, R3, reg=True).add(R6, 16)
    _read_word(a, "fp_chain", -32, "stop_fault")
    a.mov(R3, R6, reg=True).add(R3, -8)
    _read_word(a, "fp_return", -24, "stop_fault")


def _sigreturn_at(a: Asm, otherwise: str) -> None:
    """To ``stop_signal`` if the 9 bytes of code at R3 are the sigreturn trampoline's,
    else to ``otherwise`` (R0-R5 clobbered)."""
    a.mov(R1, R10, reg=True).add(R1, -56).mov(R2, 9).call(PROBE_READ_USER)
    a.jump(JNE, R0, 0, otherwise)
    a.ldx(8, R1, R10, -56).ld_imm64(R2, SIGRETURN_HEAD).jump(JNE, R1, R2, otherwise, reg=True)
    a.ldx(1, R1, R10, -48).jump(JEQ, R1, SIGRETURN_TAIL, "stop_signal").goto(otherwise)


def _advance(a: Asm, frames: int) -> None:
    """RA at R10-24, the caller's FP at R10-32, CFA in R6: the caller becomes the frame."""
    a.label("advance")
    a.ldx(8, R1, R10, -24).jump(JEQ, R1, 0, "stop_zero")
    a.ldx(8, R2, R9, SP).jump(JGT, R6, R2, "moved_up", reg=True)
    a.jump(JNE, R6, R2, "stop_backwards", reg=True)
    a.ldx(4, R3, R9, TOPMOST).jump(JEQ, R3, 0, "stop_backwards")
    a.label("moved_up")
    a.ldx(4, R3, R9, COUNT).jump(JGE, R3, frames, "stop_depth")
    a.ldx(8, R4, R9, USER_PTR).mov(R5, R3, reg=True).alu(LSH, R5, 3).add(R4, R5, reg=True)
    a.stx(8, R4, 0, R1)
    a.add(R3, 1).stx(4, R9, COUNT, R3)
    a.stx(8, R9, PC, R1).stx(8, R9, SP, R6)
    a.ldx(8, R1, R10, -32).stx(8, R9, FP, R1).st(4, R9, TOPMOST, 0)
    a.mov(R0, 0).exit()
    for name, code in (("stop_plt", STOP_PLT), ("stop_outermost", STOP_OUTERMOST),
                       ("stop_rare", STOP_RARE), ("stop_fault", STOP_FAULT),
                       ("stop_no_rule", STOP_NO_RULE), ("stop_zero", STOP_ZERO),
                       ("stop_backwards", STOP_BACKWARDS), ("stop_depth", STOP_DEPTH),
                       ("stop_signal", STOP_SIGNAL)):
        a.label(name).st(4, R9, STOP, code).goto("step_end")
    a.label("step_end")
    a.mov(R0, 1).exit()


def _search_step(a: Asm, rows_fd: int) -> None:
    """long search_step(u32 index, struct state *ctx): one halving of [LO, HI)."""
    a.mov(R9, R2, reg=True)
    a.ldx(4, R6, R9, LO).ldx(4, R7, R9, HI).jump(JGE, R6, R7, "search_done", reg=True)
    a.mov(R1, R6, reg=True).add(R1, R7, reg=True).alu(RSH, R1, 1).stx(4, R10, -4, R1)
    a.mov(R8, R1, reg=True)
    a.ld_map(R1, rows_fd).mov(R2, R10, reg=True).add(R2, -4).call(MAP_LOOKUP_ELEM)
    a.jump(JEQ, R0, 0, "search_done")
    a.ldx(8, R1, R0, 0).ldx(8, R2, R9, KEY).jump(JGT, R1, R2, "search_lower", reg=True)
    a.add(R8, 1).stx(4, R9, LO, R8).mov(R0, 0).exit()
    a.label("search_lower")
    a.stx(4, R9, HI, R8).mov(R0, 0).exit()
    a.label("search_done")
    a.mov(R0, 1).exit()

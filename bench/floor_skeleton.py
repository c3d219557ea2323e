"""The least a pure-Python ``script`` run can do (run by bench/script_floor.py; stdlib only).

Walks a perf.data file's records, parses each sample (the fixed fields, the callchain, the
user registers, the stack copy), prints its kernel frames from the callchain and steps its
user frames with the default SFrame rule from plans decided beforehand (a marshal file
of {lookup pc: (cfa from sp, cfa offset, ra offset, fp offset)}, the topmost pc keyed
by its complement, as the tracer caches them), each frame's line made once per pc. It
leaves out everything else a real run does: imports, table loading, symbol lookup, the
side-band records and address spaces, perf's time order, thread names, the checks of
malformed records. Its time is therefore a lower bound for a pure-Python implementation.

    python floor_skeleton.py PLANS PERF_DATA DATA_OFFSET DATA_SIZE PREFIX_WORDS TID_WORD
        TIME_WORD PERIOD_WORD REGISTERS FP_INDEX SP_INDEX IP_INDEX PROCESSES

With PROCESSES 2, the samples are split in two halves unwound by two forked processes,
their text read back in order (the best case of ``-j 2``: no side-band state to carry).
"""

import marshal
import mmap
import os
import struct
import sys

KERNEL_CONTEXT, USER_CONTEXT = 0xFFFFFFFFFFFFFF80, 0xFFFFFFFFFFFFFE00


def main() -> None:
    (plans_path, data_path, data_offset, data_size, prefix_words, tid_word, time_word,
     period_word, registers, fp_index, sp_index, ip_index, processes) = sys.argv[1:]
    with open(plans_path, "rb") as source:
        plans = marshal.load(source)
    with open(data_path, "rb") as source:
        buffer = mmap.mmap(source.fileno(), 0, prot=mmap.PROT_READ)
    offset, end = int(data_offset), int(data_offset) + int(data_size)
    header = struct.Struct("<IHH").unpack_from
    offsets = []
    while offset + 8 <= end:
        kind, _, size = header(buffer, offset)
        if kind == 9:
            offsets.append(offset)
        offset += size
    layout = (struct.Struct(f"<{prefix_words}Q").unpack_from, int(tid_word), int(time_word),
              int(period_word), struct.Struct(f"<{registers}Q").unpack_from, int(registers),
              int(fp_index), int(sp_index), int(ip_index))
    if processes == "1":
        sys.stdout.write(text(buffer, offsets, plans, layout))
        return
    half = len(offsets) // 2
    pipes = []
    for part in (offsets[:half], offsets[half:]):
        read_end, write_end = os.pipe()
        if os.fork() == 0:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as sink:
                sink.write(text(buffer, part, plans, layout).encode())
            os._exit(0)
        os.close(write_end)
        pipes.append(read_end)
    for read_end in pipes:
        with os.fdopen(read_end, "rb") as source:
            sys.stdout.buffer.write(source.read())
    for _ in pipes:
        os.wait()


def text(buffer, offsets, plans, layout):  # type: ignore[no-untyped-def]
    prefix, tid_word, time_word, period_word, regs, count, fp_at, sp_at, ip_at = layout
    word = struct.Struct("<Q").unpack_from
    lines: dict[int, str] = {}
    out: list[str] = []
    add = out.append
    for offset in offsets:
        fields = prefix(buffer, offset + 8)
        position = offset + 8 + 8 * len(fields)
        tid, when, period = fields[tid_word] >> 32, fields[time_word], fields[period_word]
        add("lua %6d %5d.%06d: %10d cpu-clock: \n"
            % (tid, when // 1000000000, when % 1000000000 // 1000, period))
        chain_length = word(buffer, position)[0]
        chain = struct.unpack_from(f"<{chain_length}Q", buffer, position + 8)
        position += 8 + 8 * chain_length
        for pc in chain:
            if pc >= USER_CONTEXT:
                if pc == USER_CONTEXT:
                    break
                continue
            line = lines.get(pc)
            if line is None:
                line = lines[pc] = "\t%16x kernel_function+0x10 ([kernel.kallsyms])\n" % pc
            add(line)
        abi = word(buffer, position)[0]
        position += 8
        if abi:
            values = regs(buffer, position)
            position += 8 * count
            copy_size = word(buffer, position)[0]
            position += 8
            if copy_size:
                copied = word(buffer, position + copy_size)[0]
                walk(buffer, position, min(copied, copy_size), values[fp_at], values[sp_at],
                     values[ip_at], plans, lines, add)
        add("\n")
    return "".join(out)


def walk(buffer, at, length, fp, sp, pc, plans, lines, add):  # type: ignore[no-untyped-def]
    word = struct.Struct("<Q").unpack_from
    base, stop = sp, sp + length
    plan = plans.get(~pc)
    depth = 0
    while plan is not None and depth < 127:
        line = lines.get(pc)
        if line is None:
            line = lines[pc] = "\t%16x function+0x%x (/path/to/module)\n" % (pc, pc & 0xFFF)
        add(line)
        from_sp, cfa_offset, ra_offset, fp_offset = plan
        cfa = (sp if from_sp else fp) + cfa_offset
        address = cfa + ra_offset
        if address < base or address + 8 > stop:
            return
        caller = word(buffer, at + address - base)[0]
        if fp_offset is not None:
            address = cfa + fp_offset
            if base <= address and address + 8 <= stop:
                fp = word(buffer, at + address - base)[0]
        if caller == 0 or cfa <= sp:
            return
        pc, sp = caller, cfa
        depth += 1
        plan = plans.get(pc - 1)


if __name__ == "__main__":
    main()

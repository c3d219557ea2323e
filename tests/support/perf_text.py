"""A recording's text held to perf's own text of it, kept beside the fixture."""

from __future__ import annotations

import lzma
from pathlib import Path


def held_to_perfs_text(path: Path, text: bytes) -> None:
    """The oracle: perf's own text of the recording (RECORD.txt: `perf script --no-inline`
    of perf.data, `perf script` of perf.fp.data), sample block by sample block, held as
    test_unwind_perf holds the one-process path (kernel frames by address: the recording
    machine's kallsyms named them)."""
    theirs = (path.parent / "perf-script.no-inline.txt").read_text() if path.name == "perf.data" \
        else lzma.open(path.parent / "perf.fp-script.txt.xz", "rt").read()
    ours, their_blocks = text.decode().split("\n\n"), theirs.split("\n\n")
    assert len(ours) == len(their_blocks)

    def without_kernel_symbols(block: str) -> list[str]:
        return [line.split(" ", 1)[0] if "[kernel.kallsyms]" in line else line
                for line in block.splitlines()]

    same = sum(without_kernel_symbols(a) == without_kernel_symbols(b)
               for a, b in zip(ours, their_blocks, strict=True))
    assert same >= 0.995 * len(their_blocks)
    assert sum(a == b for a, b in zip(ours, their_blocks, strict=True)) >= 0.99 * len(their_blocks)

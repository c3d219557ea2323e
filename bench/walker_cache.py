"""Bench: how often the walker's per-CPU rule cache would answer, replayed on a recording.

The eBPF walker (pysframe/record/walker.py) keeps, per CPU, a direct-mapped cache of
CACHE_ENTRIES rules, indexed by ``(pc >> 9 ^ pc) & (entries - 1)`` of the pc it looks up
(the sampled pc, a return address less one above it) and tagged with the process (and
its entry's generation, which this replay leaves out: an upper bound). This replays the
user chains of a recording (``sframe record``'s, or any with user callchains), sample by
sample on each CPU in file order, and prints the share of frames the cache holds, for the
walker's size and a larger one, tagged as the walker does (by process) and as a cache
shared by every process of a binary would be (by file and link-time pc, from the MMAP2
records): the rows a miss reads are the walker's cost beyond the stack reads.

    python3 bench/walker_cache.py RECORDING [--entries 512 4096]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from pysframe.record.walker import CACHE_ENTRIES
from pysframe.sources.perf_data import open_perf_data
from pysframe.sources.perf_records import Mmap, Sample

PERF_CONTEXT_USER = (1 << 64) - 512


class Mappings:
    """A process's executable mappings as its MMAP2 records gave them (the newest first
    where they overlap): pc -> (file, link-time pc)."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int, int, str]] = []

    def add(self, start: int, end: int, pgoff: int, path: str) -> None:
        self.spans.append((start, end, pgoff, path))

    def place(self, pc: int) -> tuple[str, int]:
        for start, end, pgoff, path in reversed(self.spans):
            if start <= pc < end:
                return path, pc - start + pgoff
        return "", pc


#: One sample's user frames: its CPU, its process, the pcs the walker looks up, and each
#: one's place in its binary (a hash of file and link-time pc).
Chain = tuple[int, int, list[int], list[int]]


def user_chains(path: Path) -> list[Chain]:
    """The user chains of every sample that has one, in file order."""
    data = open_perf_data(str(path))
    maps: dict[int, Mappings] = defaultdict(Mappings)
    chains: list[Chain] = []
    for record in data.records():
        if isinstance(record, Mmap) and record.executable:
            maps[record.pid].add(record.start, record.start + record.length, record.pgoff,
                                 record.filename)
        elif isinstance(record, Sample) and PERF_CONTEXT_USER in record.callchain:
            chain = record.callchain
            user = chain[chain.index(PERF_CONTEXT_USER) + 1:]
            looked = [pc if k == 0 else pc - 1 for k, pc in enumerate(user)]
            places = [hash(maps[record.pid].place(pc)) & ((1 << 63) - 1) for pc in looked]
            chains.append((record.cpu, record.pid, looked, places))
    return chains


def hit_rates(chains: list[Chain], entries: int) -> tuple[int, float, float]:
    """(frames, % held tagged by process, % held tagged by binary and link-time pc)."""
    by_process: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
    by_binary: dict[int, dict[int, int]] = defaultdict(dict)
    frames = held_process = held_binary = 0
    mask = entries - 1
    for cpu, pid, looked, places in chains:
        own, shared = by_process[cpu], by_binary[cpu]
        for pc, place in zip(looked, places, strict=True):
            frames += 1
            slot, tag = ((pc >> 9) ^ pc) & mask, (pc, pid)
            held_process += own.get(slot) == tag
            own[slot] = tag
            slot = ((place >> 9) ^ place) & mask
            held_binary += shared.get(slot) == place
            shared[slot] = place
    return frames, 100 * held_process / max(frames, 1), 100 * held_binary / max(frames, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recording", type=Path)
    parser.add_argument("--entries", type=int, nargs="+", default=[CACHE_ENTRIES, 4096])
    args = parser.parse_args()
    chains = user_chains(args.recording)
    for entries in args.entries:
        if entries & (entries - 1):
            raise SystemExit(f"bench: --entries {entries}: a power of two")
        frames, process, binary = hit_rates(chains, entries)
        print(f"{entries} entries: {frames:,} user frames of {len(chains):,} samples; held "
              f"tagged by process (the walker's) {process:.1f}%, shared by binary "
              f"{binary:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

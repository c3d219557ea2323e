"""The eBPF walker's stack copy, run in the interpreter: where the walk meets code no
loaded table covers, the copy holds the stack from that frame's SP up to where the stack
ends (or ``COPY_BYTES``), even when a read of the whole size would cross the end.

The frames nearest the outermost one lie just below the end of the stack; a copy that
falls back to a much smaller size there cuts those chains (a `make -j2` recording lost
~2% of its chains to it), and a mapping a little above the stack ([vvar], [vdso]) must
not be taken for more stack.
"""

from __future__ import annotations

import pytest
from tests.support.walker_run import WalkerRig, uncovered, walker_labels

from pysframe.record.sampler import COPY_BYTES
from pysframe.record.walker import PAGE

STACK_TOP = 0x7FFF_F000_0000
PC, SENTINEL = 0x401000, 0x5A


class Regions:
    """User memory: the stack from ``low`` to ``STACK_TOP``, and one readable page a
    page above it (as [vvar] may be)."""

    def __init__(self, low: int, above: bool = True) -> None:
        self.regions = [(low, bytes((address * 7) & 0xFF for address in range(low, STACK_TOP)))]
        if above:
            self.regions.append((STACK_TOP + PAGE, bytes([SENTINEL]) * PAGE))

    def read_bytes(self, address: int, size: int) -> bytes | None:
        for start, data in self.regions:
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        return None

    def stack(self, sp: int, size: int) -> bytes:
        start, data = self.regions[0]
        return data[sp - start:sp - start + size]


def walk(rig: WalkerRig, sp: int, memory: Regions) -> tuple[int, bytes]:
    walked = rig.walk(PC, sp, 0, memory)  # type: ignore[arg-type]
    assert walked.copy is not None, "the uncovered frame is copied"
    index, pc, copied_sp, _, data = walked.copy
    assert (index, pc, copied_sp) == (0, PC, sp)
    return len(data), data


@pytest.mark.parametrize("pages_left", [1, 2, 3, 4, 5, 9])
@pytest.mark.parametrize("in_page", [0, 0x248, PAGE - 8])
def test_the_copy_reaches_the_end_of_the_stack(pages_left: int, in_page: int) -> None:
    rig = WalkerRig([])  # no table: every pc is code no loaded table covers
    sp = STACK_TOP - pages_left * PAGE + in_page
    memory = Regions(sp - 3 * PAGE)
    length, data = walk(rig, sp, memory)
    expected = min(STACK_TOP - sp, COPY_BYTES)
    assert length == expected
    assert data == memory.stack(sp, expected)


def test_an_unreadable_stack_gives_an_empty_copy() -> None:
    rig = WalkerRig([])
    memory = Regions(STACK_TOP - PAGE)
    length, _ = walk(rig, STACK_TOP + 8 * PAGE, memory)
    assert length == 0


def test_every_page_count_of_the_copy_is_run() -> None:
    rig = WalkerRig([])
    for pages_left in range(1, COPY_BYTES // PAGE + 3):
        walk(rig, STACK_TOP - pages_left * PAGE + 0x100, Regions(STACK_TOP - 12 * PAGE))
    walk(rig, STACK_TOP + 8 * PAGE, Regions(STACK_TOP - PAGE))
    never = {name for name in uncovered(walker_labels(), rig.coverage)
             if name.startswith("copy_")}
    assert not never

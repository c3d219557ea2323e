"""The tracer's hot loop over a perf stack copy (callers whose plan is the default rule,
stepped inline) gives the chains the general loop gives, frame by frame and stop by stop:
the same memory read through a reader of its own takes the general loop at every frame."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from pysframe.format import ABI, FDE, FRE, BaseReg, Section, SFrameLookup, SFrameReader, encode
from pysframe.unwind.address_space import AddressSpace, Mapping, Module
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.unwinder import Registers, Unwind, Unwinder

#: Functions of 0x40 bytes from here, one row each.
_TEXT = 0x10000
_SIZE = 0x40


class _ReadOneByOne(StackMemory):
    """The same copy, not the hot loop's type: every frame takes the general loop (and
    an unreadable word is still told apart as past the copy's end)."""

    __slots__ = ()


def _row(kind: int, cfa: int, fp: int | None) -> FRE:
    if kind == 0:  # the outermost frame: no data words
        return FRE(0, ())
    base = BaseReg.SP if kind == 1 else BaseReg.FP
    return FRE(0, (cfa,) if fp is None else (cfa, fp), base)


_rows = st.tuples(st.sampled_from([0, 1, 1, 1, 2]), st.sampled_from([-8, 0, 8, 16, 24, 32]),
                  st.sampled_from([None, None, -16, -8, 8, -24, -32]))


def _space(rows: list[FRE]) -> AddressSpace:
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8,
                      fdes=[FDE(_TEXT + k * _SIZE, _SIZE, [row]) for k, row in enumerate(rows)])
    lookup = SFrameLookup(SFrameReader(encode(section), 0))
    space = AddressSpace()
    space.add(Mapping(_TEXT, _TEXT + len(rows) * _SIZE, 0, "/bin/t", None,
                      Module("/bin/t", None, 0, lookup, "test")))
    return space


def _chain(unwind: Unwind) -> tuple[object, ...]:
    return (unwind.stop, list(unwind.pcs), [str(m) for m in unwind.methods],
            [id(mapping) for mapping in unwind.mappings])


def _stack(rows: list[tuple[int, int, int | None]], frames: list[tuple[int, int, int]],
           base: int, fp: int) -> bytes:
    """A stack that the rows walk through ``frames`` (function, return offset into it,
    where the next frame's FP points past its CFA), as far as they can; words no frame
    wrote are zero."""
    words: dict[int, int] = {}
    sp = 0  # (offsets from the copy's start)
    for (function, _, _), (caller, back, next_fp) in pairwise(frames):
        kind, cfa_offset, fp_offset = rows[function % len(rows)]
        if kind == 0:
            break
        cfa = (sp if kind == 1 else fp) + cfa_offset
        words[cfa - 8] = _TEXT + (caller % len(rows)) * _SIZE + back
        if fp_offset is not None:
            fp = cfa + next_fp
            words[cfa + fp_offset] = base + fp
        sp = cfa
    size = max((at + 8 for at in words if at >= 0), default=0)
    stack = bytearray(size)
    for at, value in words.items():
        if at >= 0:
            stack[at:at + 8] = value.to_bytes(8, "little")
    return bytes(stack)


@settings(max_examples=500, deadline=None)
@given(rows=st.lists(_rows, min_size=1, max_size=6),
       frames=st.lists(st.tuples(st.integers(0, 5), st.integers(1, _SIZE - 1),
                                 st.sampled_from([0, 8, 16, 24])), min_size=1, max_size=30),
       base=st.sampled_from([0x7FFF0000, 0x7FFF0004, 8]), cut=st.sampled_from([0, 0, 0, 4, 8]),
       fp=st.sampled_from([0, 8, 16, -8, 4096]), above=st.sampled_from([0, 0, 8, 16]))
def test_the_hot_loop_walks_as_the_general_loop(rows: list[tuple[int, int, int | None]],
                                                frames: list[tuple[int, int, int]], base: int,
                                                cut: int, fp: int, above: int) -> None:
    """``above``: the topmost SP that far into the copy (a copy of another source may
    start below it), where a topmost frame's CFA may be its SP."""
    space = _space([_row(*row) for row in rows])
    # (below the SP: return addresses, read by a topmost CFA at or near the SP)
    stack = (_TEXT + 8).to_bytes(8, "little") * (above // 8) + _stack(rows, frames,
                                                                       base + above, fp)
    stack = stack[:max(0, len(stack) - cut)]  # (the copy may end inside a frame)
    sp = base + above
    registers = Registers(_TEXT + (frames[0][0] % len(rows)) * _SIZE + 4, sp, sp + fp)
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE)
    hot = unwinder.unwind(registers, StackMemory(base, stack), space)
    general = Unwinder(ABI.AMD64_ENDIAN_LITTLE).unwind(registers,
                                                       _ReadOneByOne(base, stack), space)
    assert _chain(hot) == _chain(general)
    again = unwinder.unwind(registers, StackMemory(base, stack), space)  # plans cached
    assert _chain(again) == _chain(hot)


def test_the_hot_loop_notes_each_callers_stack_pointer() -> None:
    """Each caller's SP (its CFA) is noted as an address, for a later frame that recovers
    a callee-saved register from the callees' CFI."""
    from pysframe.unwind.memory import pair_reader
    from pysframe.unwind.plans import DefaultPlan
    from pysframe.unwind.step import Stop
    from pysframe.unwind.unwinder import _run_defaults

    mapping = _space([_row(1, 16, None)]).mappings[0]
    base = 0x7FFF0000
    # frame at sp=base: CFA base+16, RA 0x2000 at base+8; then CFA base+48 (FP saved at
    # CFA-16 = base+32, pointing at base+64), RA 0 at base+40: the chain ends.
    stack = bytearray(48)
    stack[8:16] = (0x2000).to_bytes(8, "little")
    stack[32:40] = (base + 64).to_bytes(8, "little")
    plans = {0x1000: DefaultPlan(mapping, True, 16, -8, None, None),
             0x2000: DefaultPlan(mapping, True, 32, -8, -16, pair_reader(False, 8))}
    result = Unwind([0x1000], [], Stop.DEPTH, [])
    sps = [base]
    memory = StackMemory(base, bytes(stack))
    *_, stop = _run_defaults(plans, 0x1000, base, 0, (
        memory.data, memory.base, memory.end, memory.unpack_from), result, sps, 0, 127)
    assert stop is Stop.ZERO_PC
    assert sps == [base, base + 16] and result.pcs == [0x1000, 0x2000]
    assert result.mappings == [mapping, mapping] and [str(m) for m in result.methods] == ["sframe"]


@given(data=st.binary(min_size=64, max_size=64), at=st.integers(0, 24),
       gap=st.sampled_from([8, 16, 24, 32]), big_endian=st.booleans())
def test_a_pair_reader_reads_the_two_words_a_plan_would_read(data: bytes, at: int, gap: int,
                                                             big_endian: bool) -> None:
    """The hot loop reads a saved FP and the RA ``gap`` bytes above it in one call: the
    words two reads of the copy give, in the copy's byte order."""
    from pysframe.unwind.memory import pair_reader

    memory = StackMemory(0, data, big_endian)
    assert pair_reader(big_endian, gap)(data, at) == (memory.read(at), memory.read(at + gap))

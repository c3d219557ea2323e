"""The tracer's plan cache: bounded, and never serving a plan of an older layout."""

from __future__ import annotations

from pysframe.format import ABI, FDE, FRE, Section, SFrameLookup, SFrameReader, encode
from pysframe.unwind.address_space import AddressSpace, Mapping, Module
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.plans import DefaultPlan, FramePointerPlan, PlanCache
from pysframe.unwind.unwinder import EXACT_PC, FrameMethod, Registers, Stop, Unwinder


def _mapping(start: int, end: int, section: Section | None) -> Mapping:
    lookup = SFrameLookup(SFrameReader(encode(section), 0)) if section is not None else None
    return Mapping(start, end, 0, "/bin/t", None, Module("/bin/t", None, 0, lookup, "test"))


def test_cache_stays_within_its_limit() -> None:
    space = AddressSpace()
    mapping = _mapping(0x1000, 0x2000, None)
    space.add(mapping)
    cache = PlanCache(limit=8)
    for pc in range(0x1000, 0x1000 + 50):
        plans = cache.remember(space, pc, FramePointerPlan(mapping))
        assert plans[pc] == FramePointerPlan(mapping)
        assert len(cache) <= 8
    assert cache.plans_for(space) is plans


def test_cache_never_serves_an_older_layout() -> None:
    space = AddressSpace()
    mapping = _mapping(0x1000, 0x2000, None)
    space.add(mapping)
    cache = PlanCache()
    cache.remember(space, 0x1000, FramePointerPlan(mapping))
    assert 0x1000 in cache.plans_for(space)
    space.add(_mapping(0x3000, 0x4000, None))  # a new layout: version bumped
    assert cache.plans_for(space) == {}
    assert cache.plans_for(space.copy()) == {}  # another space, even with the same layout


def test_a_remapped_return_address_is_planned_again() -> None:
    """The same return address before and after its module is replaced: the second walk
    follows the new module's table, not the cached plan of the old one."""
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8, fdes=[
        FDE(0x1000, 0x20, [FRE(0, (8,))]),
        FDE(0x2000, 0x10, [FRE(0, (16,)), FRE(1, ())]),
    ])
    space = AddressSpace()
    space.add(_mapping(0x1000, 0x2000, section))
    space.add(_mapping(0x2000, 0x3000, section))
    sp = 0x7000
    stack = bytearray(64)
    stack[0:8] = (0x2002).to_bytes(8, "little")  # frame 0's RA at CFA-8 = sp
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE)
    first = unwinder.unwind(Registers(0x1004, sp, 0), StackMemory(sp, bytes(stack)), space)
    assert first.stop is Stop.OUTERMOST
    assert [f.method for f in first.frames] == ["ip", "sframe"]
    space.add(_mapping(0x2000, 0x3000, None))  # the caller's code, now without a table
    second = unwinder.unwind(Registers(0x1004, sp, 0), StackMemory(sp, bytes(stack)), space)
    assert second.stop is Stop.NO_RULE  # frame-pointer fallback, fp 0: no caller
    assert second.mappings[1] is space.find(0x2001)


def test_plans_and_methods_are_values() -> None:
    mapping = _mapping(0x1000, 0x2000, None)
    assert (DefaultPlan(mapping, True, 8, -8, None, None)
            == DefaultPlan(mapping, True, 8, -8, None, None))
    assert [m.value for m in FrameMethod] == ["ip", "sframe", "fp", "sigreturn", "signal",
                                            "recorded"]
    assert FrameMethod.SIGNAL == "signal" and f"{FrameMethod.SFRAME}" == "sframe"
    assert EXACT_PC == {"sigreturn", "signal", "recorded"}

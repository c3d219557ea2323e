"""pysframe.enums against the standard ``enum`` module (the oracle): the same class bodies
made both ways behave the same in every way the project uses, and so do the project's
own enum classes against standard ones of the same members."""

from __future__ import annotations

import copy
import enum
import pickle
from typing import Any

import pytest

from pysframe import enums
from pysframe.format.constants import ABI, BaseReg, FDEType, FREType, PCType
from pysframe.format.lookup import RuleKind
from pysframe.unwind.step import WALKER_STOPS, Stop
from pysframe.unwind.unwinder import FrameMethod


def _bodies(module: Any) -> tuple[type, type, type]:
    """An Enum with its own __new__ and an alias, an IntEnum with a property and an
    alias, a StrEnum: made with ``module`` (the standard enum or pysframe.enums)."""

    class Reason(module.Enum):  # type: ignore[name-defined,misc]
        _value_: str
        code: int

        def __new__(cls, text: str, code: int = 0) -> Any:
            member = object.__new__(cls)
            member._value_ = text
            member.code = code
            return member

        FIRST = "the first", 3
        SECOND = "the second"
        AGAIN = FIRST

    class Width(module.IntEnum):  # type: ignore[name-defined,misc]
        ONE = 1
        TWO = 2
        ALSO_ONE = 1
        ZERO = 0

        @property
        def double(self) -> int:
            return 2 * self

    class Word(module.StrEnum):  # type: ignore[name-defined,misc]
        IP = "ip"
        FP = "fp"

    return Reason, Width, Word


STANDARD, OURS = _bodies(enum), _bodies(enums)


def _facts(member: Any) -> tuple[object, ...]:
    """What the project reads of a member."""
    return (member.name, member.value, repr(member), str(member), f"{member}",
            f"{member:>12}" if not isinstance(member, int) else f"{member:>4d}",
            bool(member), hash(member) == hash(member.value) or not isinstance(member, int))


@pytest.mark.parametrize("index", range(3))
def test_the_same_class_body_behaves_as_the_standard_one(index: int) -> None:
    standard, ours = STANDARD[index], OURS[index]
    assert [_facts(m) for m in standard] == [_facts(m) for m in ours]
    assert len(standard) == len(ours)
    assert list(standard.__members__) == list(ours.__members__)
    assert ({name: m.name for name, m in standard.__members__.items()}
            == {name: m.name for name, m in ours.__members__.items()})
    assert repr(standard) == repr(ours)
    for member_s, member_o in zip(standard, ours, strict=True):
        assert standard(member_s.value) is member_s and ours(member_o.value) is member_o
        assert standard[member_s.name] is member_s and ours[member_o.name] is member_o
        assert (member_s in standard) and (member_o in ours)
        assert copy.copy(member_o) is member_o and copy.deepcopy(member_o) is member_o
        assert (member_s == member_s.value) == (member_o == member_o.value)
    for bad in (99, "nothing", None):
        with pytest.raises(ValueError) as raised_s:
            standard(bad)
        with pytest.raises(ValueError) as raised_o:
            ours(bad)
        assert str(raised_s.value) == str(raised_o.value)


def test_aliases_custom_values_and_properties() -> None:
    for reason, width, _ in (STANDARD, OURS):
        assert reason.AGAIN is reason.FIRST and reason.FIRST.code == 3
        assert reason.SECOND.code == 0 and reason("the second") is reason.SECOND
        assert width.ALSO_ONE is width.ONE and width.TWO.double == 4
        assert width(1) is width.ONE and not width.ZERO
        assert sorted([width.TWO, width.ONE]) == [width.ONE, width.TWO]
        assert {width.ONE: "x"}[1] == "x"


def test_members_cannot_be_reassigned_or_deleted() -> None:
    for width in (STANDARD[1], OURS[1]):
        with pytest.raises(AttributeError):
            width.ONE = 5
        with pytest.raises(AttributeError):
            del width.ONE
        width.note = "a plain attribute"  # other class attributes may be set
        assert width.note == "a plain attribute"


@pytest.mark.parametrize("ours", [ABI, FREType, PCType, FDEType, BaseReg, RuleKind, Stop,
                                  FrameMethod])
def test_the_project_classes_print_as_standard_ones(ours: Any) -> None:
    """The standard class with the same members (names and values) prints the same."""
    base = {enums.IntEnum: enum.IntEnum, enums.StrEnum: enum.StrEnum}.get(
        ours.__mro__[1], enum.Enum)
    standard = base(ours.__name__, [(m.name, m.value) for m in ours])
    assert [_facts(m)[:6] for m in ours] == [_facts(m)[:6] for m in standard]
    assert set(ours.__members__) >= {m.name for m in standard}
    for member in ours:  # what a process pool or Dask sends: the member itself comes back
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            assert pickle.loads(pickle.dumps(member, protocol)) is member


def test_stop_keeps_its_walker_codes_and_aliases() -> None:
    assert Stop.LIMIT is Stop.DEPTH and Stop.FAULT is Stop.MEMORY
    assert Stop.NO_METHOD is Stop.NO_RULE
    assert WALKER_STOPS[1] is Stop.DEPTH and Stop.NO_RULE.code == 9
    assert all(WALKER_STOPS[stop.code] is stop for stop in Stop if stop.code)
    assert Stop("depth limit") is Stop.DEPTH

"""The run-time stand-ins of pysframe.records behave as the typing classes they stand for
(typing.NamedTuple is the oracle: the same class body through both)."""

from __future__ import annotations

import pickle
import typing
from typing import Any

import pytest

from pysframe import records


def _point(base: type) -> Any:
    class Point(base):  # type: ignore[misc]
        """A point."""

        x: int
        y: int = 2
        label: str = "p"

        def total(self) -> int:
            return int(self.x + self.y)

        @property
        def twice(self) -> int:
            return 2 * int(self.x)

    return Point


def test_named_tuples_are_typing_named_tuples() -> None:
    ours, theirs = _point(records.NamedTuple), _point(typing.NamedTuple)
    assert ours.__mro__[1:] == theirs.__mro__[1:] == (tuple, object)
    for made in (ours, theirs):
        point = made(1)
        assert point == (1, 2, "p") and point.total() == 3 and point.twice == 2
        assert point._replace(y=5) == (1, 5, "p") and made._make([3, 4, "q"]).y == 4
        assert made._fields == ("x", "y", "label")
        assert made._field_defaults == {"y": 2, "label": "p"}
        assert made.__doc__ == "A point." and made.__name__ == "Point"
        assert repr(point) == "Point(x=1, y=2, label='p')"
        assert list(made.__annotations__) == ["x", "y", "label"]  # typing's: ForwardRefs
        assert hash(point) == hash((1, 2, "p")) and point._asdict()["label"] == "p"
    assert ours.__module__ == theirs.__module__ == __name__
    assert ours.__qualname__ == theirs.__qualname__


def test_named_tuples_are_made_and_refused_as_typing_makes_them() -> None:
    """Ours compiles its ``__new__`` at the first tuple made (typing's namedtuple, at the
    class): the calls before and after, by position and keyword, right and wrong, agree."""
    import copy

    for base in (records.NamedTuple, typing.NamedTuple):
        made = _point(base)

        class Sub(made):  # type: ignore[misc, valid-type]  # made first through a subclass
            __slots__ = ()

        assert Sub(7) == (7, 2, "p") and type(Sub(7)) is Sub
        assert made(x=1, label="z") == (1, 2, "z") and made(1, 2, "q") == (1, 2, "q")
        for wrong in ((), (1, 2, 3, 4)):
            with pytest.raises(TypeError):
                made(*wrong)
        with pytest.raises(TypeError):
            made(1, x=2)
        with pytest.raises(TypeError):
            made._make([1])
        with pytest.raises(ValueError, match="unexpected field names"):
            made(1)._replace(z=3)
        point = made(5, 6, "r")
        assert copy.copy(point) == copy.deepcopy(point) == point
        assert made.__new__.__defaults__ == (2, "p")
        assert point.__getnewargs__() == (5, 6, "r")


def test_a_field_without_default_after_one_with_is_refused() -> None:
    for base in (records.NamedTuple, typing.NamedTuple):
        with pytest.raises(TypeError):
            class Bad(base):  # type: ignore[misc, valid-type]
                x: int = 1
                y: int


class Pair(records.NamedTuple):
    first: int
    second: int


def test_named_tuples_pickle_by_name() -> None:
    assert pickle.loads(pickle.dumps(Pair(1, 2))) == Pair(1, 2)


def test_protocols_are_plain_classes_at_run_time() -> None:
    class Reader(records.Protocol):
        def read(self, address: int) -> int | None: ...

    class Zero(Reader):
        def read(self, address: int) -> int | None:
            return 0

    assert Zero().read(8) == 0 and Reader.__mro__ == (Reader, object)

"""The record and tuple classes' methods compiled ahead (src/pysframe/records_ahead.py,
written by tools/records_ahead.py): up to date with the classes, each the same method
the class would compile, and the one a class takes at its first record."""

from __future__ import annotations

import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pysframe
from pysframe import records
from pysframe.records_ahead import AHEAD

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "records_ahead.py"


def _every_class_made() -> list[tuple[str, dict[str, Any], list[type]]]:
    """Every method the package's classes make (not those of classes tests make)."""
    for module in pkgutil.walk_packages(pysframe.__path__, "pysframe."):
        importlib.import_module(module.name)
    return [(source, scope, owner) for source, scope, owner in records.MADE_SOURCES
            if owner and owner[0].__module__.startswith("pysframe.")]


def test_the_module_is_up_to_date() -> None:
    """Changing a record class without running the tool fails here (the run would still
    be right: a source the module lacks is compiled as before)."""
    done = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_method_made_ahead_is_the_compiled_one() -> None:
    """Same parameters, the same default objects, and the same record or tuple made from
    the same arguments (all given; only those without a default)."""
    made = _every_class_made()
    assert len(made) > 60
    for source, scope, owner in made:
        name = source.split("(", 1)[0].removeprefix("def ")
        ahead = AHEAD[source](scope)
        space = {key: value for key, value in scope.items() if not key.startswith("__")}
        exec(source, space)
        compiled = space[name]
        assert ahead.__code__.co_varnames == compiled.__code__.co_varnames, source
        assert ahead.__code__.co_argcount == compiled.__code__.co_argcount, source
        defaults = ahead.__defaults__ or ()
        assert len(defaults) == len(compiled.__defaults__ or ()), source
        assert all(a is b for a, b in zip(defaults, compiled.__defaults__ or (), strict=True))
        cls = owner[0]
        count = compiled.__code__.co_argcount - 1
        values = [object() for _ in range(count)]
        for given in (values, values[:count - len(defaults)]):
            if name == "__new__":
                assert ahead(cls, *given) == compiled(cls, *given), source
                continue
            ours, theirs = object.__new__(cls), object.__new__(cls)
            ahead(ours, *given)
            compiled(theirs, *given)
            for field in cls.__record_fields__:  # type: ignore[attr-defined]
                mine, its = getattr(ours, field), getattr(theirs, field)
                # the same argument or default; a factory's: a new one of the same kind
                assert mine is its or (type(mine) is type(its) and mine is not its), source


def test_a_class_takes_the_method_made_ahead() -> None:
    """In a fresh interpreter, a record's and a tuple's first use: no compiling."""
    program = """
import builtins
from pysframe import records
compiled = []
real = builtins.exec
builtins.exec = lambda source, *rest: (compiled.append(source), real(source, *rest))[1]
from pysframe.unwind.address_space import Mapping
from pysframe.elf.headers import ProgramHeader
Mapping(0x1000, 0x2000, 0, "a", None)
ProgramHeader(1, 5, 0, 0x1000, 0x100, 0x100)
builtins.exec = real
assert not [s for s in compiled if isinstance(s, str) and s.startswith("def ")], compiled
assert records._ahead, "the module was not read"
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.stdout.strip() == "ok", done.stderr[-800:]


def test_a_source_not_made_ahead_is_compiled(monkeypatch: Any) -> None:
    """A class the module does not know (made at run time, or the module out of date)
    still gets its method: compiled from its source."""
    monkeypatch.setattr(records, "_ahead", {})

    @records.record_class
    class Made:
        first: int
        second: list[int] = records.field(default_factory=list)

    made = Made(3)
    assert (made.first, made.second) == (3, [])
    assert Made.__init__.__code__.co_freevars == ()  # compiled (globals), not a closure
    assert importlib.util.find_spec("pysframe.records_ahead") is not None

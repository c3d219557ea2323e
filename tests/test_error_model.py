"""One error model: every exception class under ``src/pysframe`` derives from
:class:`pysframe.errors.PysframeError`.

Classes are read with ``ast`` (no import needed, so a module that needs root or an optional
dependency is checked too). A class is an exception when one of its bases is a builtin
exception, another library's (named ``...Error``, ``...Exception`` or ``error``), or a class
found to be one; each must reach ``PysframeError`` through its bases.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "pysframe"

#: The builtin exception classes, by name (``Exception``, ``ValueError``, ``OSError``, ...).
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}
BASE = "PysframeError"


def base_name(node: ast.expr) -> str:
    """The last component of a base class expression (``errors.PysframeError`` ->
    ``PysframeError``); "" for anything that is not a plain or dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return base_name(node.value)
    return ""


def classes(root: Path = SOURCE) -> dict[str, tuple[str, list[str]]]:
    """Every class under ``root``: ``module:qualified name`` -> (its simple name, its bases'
    names)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where = f"{path.relative_to(root.parent)}:{node.lineno}:{node.name}"
                found[where] = (node.name, [base_name(base) for base in node.bases])
    return found


def outside_the_model(root: Path = SOURCE) -> list[str]:
    """The exception classes under ``root`` that do not derive from ``PysframeError``.

    Names are resolved by simple name across the tree (class names of exceptions are unique
    enough here, and a clash could only make a class look like an exception, never hide
    one)."""
    found = classes(root)
    by_name: dict[str, list[list[str]]] = {}
    for name, bases in found.values():
        by_name.setdefault(name, []).append(bases)

    def reaches(name: str, goal: set[str], seen: frozenset[str] = frozenset()) -> bool:
        if name in goal:
            return True
        if name in seen:
            return False
        return any(reaches(base, goal, seen | {name})
                   for bases in by_name.get(name, []) for base in bases)

    # Another library's exception (``ELFError``, ``struct.error``) is known by its name.
    exceptions = BUILTIN_EXCEPTIONS | {BASE} | {
        base for _, bases in found.values() for base in bases
        if base.endswith(("Error", "Exception")) or base == "error"}
    return [where for where, (name, bases) in found.items()
            if name != BASE and any(reaches(base, exceptions) for base in bases)
            and not any(reaches(base, {BASE}) for base in bases)]


def test_every_exception_class_derives_from_the_one_base() -> None:
    stray = outside_the_model()
    assert not stray, (f"exception classes not derived from {BASE} "
                       f"(pysframe/errors.py): " + ", ".join(stray))


def test_the_base_is_an_exception() -> None:
    from pysframe.errors import PysframeError
    assert issubclass(PysframeError, Exception)


def test_the_check_sees_a_stray_exception(tmp_path: Path) -> None:
    """The reader is not vacuous: a direct builtin subclass, one through a local base and
    another library's exception are found; classes in the model (through a dotted base
    too) and plain classes are not."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "errors.py").write_text("class PysframeError(Exception):\n    pass\n")
    (package / "a.py").write_text(
        "import errors\n"
        "class Good(errors.PysframeError, ValueError):\n    pass\n"
        "class AlsoGood(Good):\n    pass\n"
        "class Plain:\n    pass\n"
        "class Stray(RuntimeError):\n    pass\n"
        "class Local(Exception):\n    pass\n"
        "class Inherited(Local):\n    pass\n"
        "import struct\nclass Foreign(struct.error):\n    pass\n")
    stray = {where.rpartition(":")[2] for where in outside_the_model(package)}
    assert stray == {"Stray", "Local", "Inherited", "Foreign"}

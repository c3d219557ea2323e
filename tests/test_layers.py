"""The shape of the source tree: stages import only from earlier stages, no import cycles,
and units small enough to read (files up to 800 lines, functions up to 80).

Imports are read with ``ast`` from every module under ``src/pysframe``, function-level
and ``TYPE_CHECKING`` imports included: a late import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "pysframe"

#: The data flow, earliest first. A module may import from its own stage and earlier ones.
STAGES = ["errors", "fd_io", "claims", "cpus", "c_signal", "helper_child", "blas", "heap", "records_ahead", "records", "enums", "exports", "inputs", "cachedir",
          "cache_merge", "made_exchange", "format", "elf", "cfi", "generate", "jit", "sources", "unwind", "session",
          "deferred", "symbolize", "audit", "report", "record", "demo", "cli", "__main__"]
#: What the tracer never imports (issue 24, item 5): it is given its tables (a
#: ``TableProvider``) and its samples (registers and stack words); it makes no table, reads
#: no recording and draws no progress bar. Outside packages are named by their top level.
UNWIND_NEVER_IMPORTS = ("pysframe.generate", "pysframe.sources", "pysframe.report",
                        "pysframe.record", "pysframe.cli", "rich")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str], *, outside: bool = False) -> set[str]:
    """The pysframe modules ``name`` imports (a name imported from a package that is one of
    its submodules counts as that submodule); with ``outside``, other packages' modules
    too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
                       for alias in node.names]
        else:
            continue
        found.update(target for target in targets
                     if outside or target.split(".")[0] == "pysframe")
    found.discard(name)
    return found


def stage(name: str) -> int | None:
    """The stage index of a module (``None`` for the package root, which is no stage)."""
    parts = name.split(".")
    return STAGES.index(parts[1]) if len(parts) > 1 else None


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def test_every_module_belongs_to_a_stage() -> None:
    for name in modules():
        parts = name.split(".")
        assert len(parts) == 1 or parts[1] in STAGES, f"{name} is in no stage of STAGES"


def test_no_module_imports_from_a_later_stage() -> None:
    late = []
    for name, targets in graph().items():
        own = stage(name)
        for target in sorted(targets):
            theirs = stage(target)
            if own is not None and theirs is not None and theirs > own:
                late.append(f"{name} imports {target} ({STAGES[theirs]} comes after "
                            f"{STAGES[own]})")
    assert not late, "\n".join(late)


def test_unwind_imports_no_table_maker_recording_reader_or_output() -> None:
    """``pysframe.unwind.*`` imports nothing from ``generate``, ``sources``, ``report``,
    ``record``, ``cli`` or ``rich`` (late and ``TYPE_CHECKING`` imports included)."""
    found = modules()
    known = set(found)
    bad = [f"{name} imports {target}"
           for name, path in found.items() if name.split(".")[:2] == ["pysframe", "unwind"]
           for target in sorted(imports_of(name, path, known, outside=True))
           if any(target == never or target.startswith(never + ".")
                  for never in UNWIND_NEVER_IMPORTS)]
    assert not bad, "\n".join(bad)


def test_no_import_cycles() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert not cycles, "modules that import each other: " + "; ".join(
        " <-> ".join(cycle) for cycle in cycles)


@pytest.mark.parametrize("name", sorted(modules()))
def test_units_are_small_enough_to_read(name: str) -> None:
    path = modules()[name]
    text = path.read_text()
    assert text.count("\n") <= MAX_FILE_LINES, f"{path}: {text.count(chr(10))} lines"
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


def test_the_checks_see_a_late_import_and_a_cycle(tmp_path: Path) -> None:
    """The import reader is not vacuous: it finds function-level imports and resolves
    relative ones."""
    module = tmp_path / "probe.py"
    module.write_text("def f():\n    from ..cli.main import main\n    from . import lookup\n")
    known = {"pysframe.cli.main", "pysframe.format.lookup"}
    assert imports_of("pysframe.format.probe", module, known) == {
        "pysframe.cli.main", "pysframe.format.lookup"}
    module.write_text("if TYPE_CHECKING:\n    from rich.progress import Progress\n"
                      "import numpy as np\n")
    assert imports_of("pysframe.unwind.probe", module, known, outside=True) == {
        "rich.progress", "numpy"}

"""Lazy package facades (PEP 562): a package's public names, each imported from its home
module on first use, so importing a package costs nothing until a name is used (the
start-up-bound commands import only what they touch)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def lazy_exports(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that loads ``name`` from ``homes[name]`` (a
    module path relative to the package)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(home, package), name)

    return __getattr__

"""Lazy package facades (PEP 562): a package's public names, each imported from its home
module on first use, so importing a package costs nothing until a name is used (the
start-up-bound commands import only what they touch). The home modules are imported with
``__import__``: ``importlib`` (with ``warnings``) costs ~0.7 ms of such a start-up."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def lazy_exports(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that loads ``name`` from ``homes[name]`` (a
    module path relative to the package)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = package + home  # homes are relative: ".module"
        __import__(module)
        return getattr(sys.modules[module], name)

    return __getattr__

"""What ``sframe stack``'s live and core walks share: the walked thread, paths as printed,
the code a JIT registered."""

from __future__ import annotations

from ..errors import Problems, PysframeError
from ..records import record_class

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from ..unwind.unwinder import Unwind


@record_class
class WalkedThread:
    tid: int
    name: str
    unwind: Unwind


def shown(path: str) -> str:
    """``path`` as printed: bytes that are not UTF-8 (kept as surrogates to open the file)
    shown as ``\\xNN`` escapes, so that output never fails to encode."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


#: The GDB JIT interface's descriptor (``sources.jit_interface.DESCRIPTOR_SYMBOL``, spelled
#: here so that a process without one never imports that reader: ~0.3 ms of a ``stack``).
JIT_DESCRIPTOR = "__jit_debug_descriptor"


def add_jit_objects(read_bytes: Any, space: Any, problems: Problems) -> None:
    """The code a JIT registered through the GDB JIT interface, as mappings of ``space``;
    its problems noted in ``problems`` (none when the target has no JIT descriptor)."""
    from ..unwind.jit_modules import add_jit_code, descriptor_address, jit_mappings

    descriptor = descriptor_address(space, JIT_DESCRIPTOR)
    if descriptor is None:
        return
    from ..sources.jit_interface import jit_objects

    objects, found = jit_objects(read_bytes, descriptor)
    mappings, more = jit_mappings(objects)
    add_jit_code(space, mappings)
    for problem in found + more:
        problems.add(PysframeError(problem))

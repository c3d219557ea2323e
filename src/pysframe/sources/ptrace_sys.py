"""The ``ptrace(2)`` calls of :mod:`.live`: the C library's ``ptrace`` and a register buffer.

Why by hand: ``import ctypes`` costs ~2 ms (its dozens of types and library loaders), 5%
of a warm ``sframe stack``, which is measured against gdb; a ptrace call needs one C
function, two argument types and one buffer type. Those are made here from ``_ctypes``,
the C module that ``ctypes`` itself is written over (the same classes ``ctypes`` derives
its ``c_long``, ``c_void_p``, arrays and foreign functions from), for ~1 ms less. Where
``_ctypes`` lacks something used here (another Python implementation), ``ctypes`` is
used instead; tests/test_ptrace_sys.py holds both to the same answers.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing is not imported by a `stack` otherwise)
    from collections.abc import Callable
    from typing import Any

    #: ptrace(request, tid, address, data) -> the C result.
    Ptrace = Callable[[int, int, int, Any], int]


def _from_c_module(count: int) -> tuple[Ptrace, Callable[[], Any], Callable[[], int],
                                        Callable[[int], int], Callable[[Any], Any]]:
    import _ctypes

    class Long(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "l"

    class ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "L"

    class VoidP(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "P"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Long

    class Words(_ctypes.Array):  # type: ignore[type-arg]
        _type_ = ULong
        _length_ = count

    class Library:  # what a foreign function is looked up in (ctypes.CDLL's one field)
        _handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type]  # (NULL: this process)

    function = Function(("ptrace", Library()))  # type: ignore[arg-type]
    function.argtypes = (Long, Long, VoidP, VoidP)

    def call(request: int, tid: int, address: int, data: Any) -> int:
        return int(function(request, tid, VoidP(address), data))

    return call, Words, _ctypes.get_errno, _ctypes.set_errno, _ctypes.byref


def _from_ctypes(count: int) -> tuple[Ptrace, Callable[[], Any], Callable[[], int],
                                      Callable[[int], int], Callable[[Any], Any]]:
    import ctypes

    function = ctypes.CDLL(None, use_errno=True).ptrace
    function.restype = ctypes.c_long
    function.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)

    def call(request: int, tid: int, address: int, data: Any) -> int:
        return int(function(request, tid, ctypes.c_void_p(address), data))

    return call, ctypes.c_ulong * count, ctypes.get_errno, ctypes.set_errno, ctypes.byref


class PtraceCalls:
    """``ptrace`` with its errno, a buffer of ``count`` unsigned longs (registers), and a
    pointer to such a buffer; made from ``_ctypes`` unless ``plain`` (or it cannot be)."""

    def __init__(self, count: int, *, plain: bool = False) -> None:
        made = None
        if not plain:
            try:
                made = _from_c_module(count)
            except (ImportError, AttributeError, TypeError):
                made = None
        self.from_c_module = made is not None
        call, self.words, self._get_errno, self._set_errno, self.pointer = (
            made or _from_ctypes(count))
        self._call = call

    def call(self, request: int, tid: int, address: int = 0, data: Any = None
             ) -> tuple[int, int]:
        """(result, errno: 0 unless the call set it); ``data``: None, an int (e.g. the
        signal given back at detach) or :attr:`pointer` of a buffer."""
        self._set_errno(0)
        result = self._call(request, tid, address, data)
        return result, (self._get_errno() if result == -1 else 0)


__all__ = ["PtraceCalls"]

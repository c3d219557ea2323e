"""ELF symbol names demangled as perf 6.1 and gdb 13 print them.

Both tools use libiberty's ``cplus_demangle`` in its automatic style (Rust legacy and v0
first, then C++): perf (Debian's, built without libbfd, libiberty linked in) with no
options, so C++ names lose their return type, parameter list and clone suffixes
(``thrower(int) [clone .cold]`` prints as ``thrower``) and Rust names their hash; gdb
with ``DMGL_PARAMS | DMGL_ANSI | DMGL_VERBOSE`` for a minimal symbol (a frame without
DWARF): ``thrower(int) [clone .cold]``, ``std::string`` spelled out, Rust hashes and
crate disambiguators kept. Names it cannot demangle are printed as they are, except that perf applies its own
OCaml rule then (:func:`ocaml_name`; its Java rule, for names such as
``Ljava/lang/String;hashCode()I`` that ELF files hardly have, is not followed here).

Why not a demangler written here: the text must match those tools byte for byte, and
the surest way is their own code. libiberty is GNU's maintained demangler; it is called
with ctypes through binutils' shared ``libbfd``, which exports it and is installed
wherever binutils (and so gcc) is. Checked: every function name of a g++ -O2 program,
of libstdc++ and of rustc 1.95 programs (legacy and v0) equals perf's own list
(``perf probe -F``). Without libbfd the fallback is the C++ runtime's
``__cxa_demangle`` (parameters then removed for perf's text, see
:mod:`pysframe.symbolize.cplus`) and the ``rust-demangler`` package (a dependency);
their text can differ from libiberty's in rare cases (Rust v0 crate disambiguators for
gdb, C++ names with trailing junk).

Demangling is done once per name (cached), only for the symbols frames land in.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Callable
    from typing import Any, TypeVar

    _R = TypeVar("_R")

#: libiberty's option bits (include/demangle.h).
DMGL_PARAMS = 1
DMGL_ANSI = 2
DMGL_VERBOSE = 8
PERF_OPTIONS = 0
GDB_OPTIONS = DMGL_PARAMS | DMGL_ANSI | DMGL_VERBOSE

#: Where binutils installs its shared libbfd (Debian, Fedora, Arch layouts).
LIBBFD_PATTERNS = ("/usr/lib/*-linux-gnu*/libbfd*.so*", "/usr/lib64/libbfd*.so*",
                   "/usr/lib/libbfd*.so*", "/lib/*-linux-gnu*/libbfd*.so*")
_RUST_LEGACY = r"(?s)_ZN.*17h[0-9a-f]{16}E\Z"
_RUST_HASH = r"::h[0-9a-f]{16}\Z"


def cache(function: Callable[..., _R]) -> Callable[..., _R]:
    """``function`` run once per arguments, as ``functools.cache`` does it, without importing
    ``functools`` (with ``collections``, ~3 ms of a ``sframe stack``)."""
    results: dict[tuple[Any, ...], _R] = {}

    def cached(*args: Any) -> _R:
        try:
            return results[args]
        except KeyError:
            result = results[args] = function(*args)
            return result

    cached.__doc__, cached.__name__ = function.__doc__, function.__name__
    return cached


@cache
def _pattern(text: str) -> re.Pattern[str]:
    """``text`` compiled, at its first use: ``re`` is not imported for a C program's names
    (~2 ms of a ``sframe stack``)."""
    import re

    return re.compile(text)


@cache
def libiberty() -> tuple[Any, Any] | None:
    """(``cplus_demangle``, ``free``) from binutils' shared libbfd, or None."""
    import ctypes  # here: a C program's names never get this far (ctypes: ~1.3 ms)
    import glob

    for pattern in LIBBFD_PATTERNS:
        for path in sorted(glob.glob(pattern)):
            try:
                library = ctypes.CDLL(path)
                function = library.cplus_demangle
            except (OSError, AttributeError):
                continue
            function.restype = ctypes.c_void_p
            function.argtypes = [ctypes.c_char_p, ctypes.c_int]
            free = ctypes.CDLL(None).free
            free.argtypes = [ctypes.c_void_p]
            return function, free
    return None


def _libiberty_demangle(name: str, options: int) -> str | None:
    """``cplus_demangle(name, options)``; None when it does not demangle ``name``. Raises
    LookupError without libiberty."""
    found = libiberty()
    if found is None:
        raise LookupError("no libiberty")
    function, free = found
    if "\0" in name:
        return None
    pointer = function(name.encode("utf-8", "surrogateescape"), options)
    if not pointer:
        return None
    from .cplus import take_string

    return take_string(pointer, free).decode("utf-8", "replace")


def _rust_fallback(name: str, verbose: bool) -> str | None:
    """A Rust name by the ``rust-demangler`` package (None: not Rust, or not installed)."""
    if not (name.startswith("_R") or _pattern(_RUST_LEGACY).match(name)):
        return None
    try:
        import importlib

        text = str(importlib.import_module("rust_demangler").demangle(name))
    except Exception:  # it raises its own error types for names it rejects
        return None
    return text if verbose else _pattern(_RUST_HASH).sub("", text)


def _fallback(name: str, perf: bool) -> str | None:
    from .cplus import cxa_demangle, expand_substitutions, without_parameters

    rust = _rust_fallback(name, verbose=not perf)
    if rust is not None:
        return rust
    text = cxa_demangle(name)
    if text is None:
        return None
    return without_parameters(text) if perf else expand_substitutions(text)


_OCAML_PART = r"__|\$[0-9A-Fa-f]{2}"


def ocaml_name(name: str) -> str | None:
    """perf's own OCaml rule, for a name libiberty does not demangle: ``caml`` and an
    upper-case letter, then ``__`` is ``.`` and ``$xx`` the character of code xx
    (``camlStdlib__List__map_123`` -> ``Stdlib.List.map_123``; checked with perf). No
    library does this; it is a few lines, written here."""
    if not (name.startswith("caml") and name[4:5].isascii() and name[4:5].isupper()):
        return None
    return _pattern(_OCAML_PART).sub(
        lambda match: "." if match[0] == "__" else chr(int(match[0][1:], 16)), name[4:])


#: The prefixes of the names a demangler here can demangle: libiberty's
#: ``cplus_demangle`` in its automatic style tries ``rust_demangle`` (``_R``, ``_ZN``) and
#: ``cplus_demangle_v3`` (``_Z``, ``_GLOBAL_`` constructors; types only with DMGL_TYPES,
#: never set here), the fallbacks the same or fewer. Other names (C's) are not given to
#: them, so a C program's stack never loads libbfd (~3 ms).
_DEMANGLED_PREFIXES = ("_Z", "_R", "_GLOBAL_")


def _demangle(name: str, options: int) -> str:
    if not name.startswith(_DEMANGLED_PREFIXES):
        text = None
    else:
        try:
            text = _libiberty_demangle(name, options)
        except LookupError:
            text = _fallback(name, perf=options == PERF_OPTIONS)
    if text is None and options == PERF_OPTIONS:
        text = ocaml_name(name)
    return name if text is None else text


@cache
def perf_name(name: str) -> str:
    """``name`` as perf 6.1 prints a symbol (``perf script``, ``perf report``). A PLT
    entry ``X@plt`` (made here, as perf makes it) is ``X`` demangled, then ``@plt``."""
    if name.endswith("@plt"):
        return perf_name(name[:-4]) + "@plt"
    return _demangle(name, PERF_OPTIONS)


@cache
def gdb_name(name: str) -> str:
    """``name`` as gdb 13 prints a minimal symbol (a frame without DWARF) in ``bt``."""
    if name.endswith("@plt"):
        return gdb_name(name[:-4]) + "@plt"
    if name.endswith(".cold") and _pattern(_C_COLD).match(name) and not any(
            part.isdigit() for part in name.split(".")):
        return f"{name[:-5]}[cold]"
    return _demangle(name, GDB_OPTIONS)


#: The cold part of a C function as gcc names it (``work.cold``), which gdb prints as
#: ``work[cold]``: a minimal symbol of no known language is offered to each language's
#: demangler, and the Ada one reads the suffix so (found by trying names on gdb 13:
#: ``main.cold``, ``f_x.cold``, ``x.y.cold`` become ``[cold]``; names with a capital, a
#: leading ``_``, a ``__`` or a numbered part such as ``f.part.0.cold``, which gdb
#: rewrites further, are left as they are here).
_C_COLD = r"^[a-z](?:[a-z0-9.]|_(?!_))*(?<![._])\.cold$"

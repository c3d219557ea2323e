"""C++ function names as gdb 13 prints them in a backtrace.

gdb prints a C++ function frame as its linkage name demangled (with the return type of a
template function dropped: it demangles with DMGL_RET_DROP) and then without its
parameter list and qualifiers (``cp_remove_params``), or the whole demangled name when its
C++ name parser rejects it (:func:`gdb_parses`). Demangling goes through the C++ runtime's
``__cxa_demangle`` with ctypes: the runtime's demangler and gdb's both come from
libiberty and agree, except that gdb prints the standard substitutions in full
(:data:`VERBOSE_SUBSTITUTIONS`).

Use :func:`demangle` on a linkage name, then :func:`cplus_function_name` on the result.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

_OPEN = "(<[{"
_CLOSE = ")>]}"
_QUALIFIERS = (" const", " volatile", " restrict", " &&", " &")
#: gdb's demangler prints the standard substitutions Ss, Si, So and Sd in full (as with
#: DMGL_VERBOSE); the C++ runtime's prints the typedef names. Those names can come from
#: nothing else (typedefs are never mangled), so they are expanded textually.
VERBOSE_SUBSTITUTIONS = {
    "string": "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
    "istream": "std::basic_istream<char, std::char_traits<char> >",
    "ostream": "std::basic_ostream<char, std::char_traits<char> >",
    "iostream": "std::basic_iostream<char, std::char_traits<char> >",
}
_CLONE_SUFFIXES = re.compile(r"( \[clone [^\]]*\])+\Z")
_SUBSTITUTION = re.compile(r"(?<![\w:])std::(string|istream|ostream|iostream)(?!\w)")


@cache
def _runtime() -> tuple[Any, Any, Any] | None:
    """(``__cxa_demangle``, ``free``, the ctypes module), or None without a C++ runtime."""
    try:
        import ctypes

        runtime = ctypes.CDLL("libstdc++.so.6")
        function = runtime.__cxa_demangle
        function.restype = ctypes.c_void_p
        function.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_int)]
        free = ctypes.CDLL(None).free
        free.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return function, free, ctypes


def expand_substitutions(demangled: str) -> str:
    """``demangled`` with ``std::string``, ``std::istream``, ``std::ostream`` and
    ``std::iostream`` spelled out as gdb's demangler spells them."""
    return _SUBSTITUTION.sub(lambda match: VERBOSE_SUBSTITUTIONS[match.group(1)], demangled)


def cxa_demangle(mangled: str) -> str | None:
    """``mangled`` demangled by the C++ runtime's ``__cxa_demangle`` as it prints it, or
    None when it is not a C++ name (or there is no C++ runtime)."""
    if not mangled.startswith("_Z") or "\0" in mangled:
        return None
    runtime = _runtime()
    if runtime is None:
        return None
    function, free, ctypes = runtime
    status = ctypes.c_int(0)
    pointer = function(mangled.encode("utf-8", "surrogateescape"), None, None,
                       ctypes.byref(status))
    if not pointer:
        return None
    text = take_string(pointer, free)
    if status.value != 0:
        return None
    return text.decode("utf-8", "replace")


def take_string(pointer: int, free: Any) -> bytes:
    """The C string a demangler returned at ``pointer``, which is then freed."""
    import ctypes

    try:
        return ctypes.string_at(pointer)
    finally:
        free(pointer)


def demangle(mangled: str) -> str | None:
    """``mangled`` demangled by the C++ runtime's ``__cxa_demangle`` (the demangler gdb
    also uses, from libiberty) with the standard substitutions expanded, or None when it
    is not a C++ name (or there is no C++ runtime)."""
    text = cxa_demangle(mangled)
    return None if text is None else expand_substitutions(text)


def without_parameters(demangled: str) -> str:
    """``demangled`` without clone suffixes, qualifiers, parameter list and return type:
    what libiberty prints without ``DMGL_PARAMS`` (perf's text), for names demangled with
    them."""
    text = _without_qualifiers(_CLONE_SUFFIXES.sub("", demangled))
    if text.endswith(")"):
        start = _parameters_start(text)
        if start > 0 and text[start] == "(":
            return _without_return_type(text[:start])
    return text


def gdb_parses(name: str) -> bool:
    """False for the names gdb's C++ name parser rejects, which ``bt`` then prints whole,
    parameters included. Observed with gdb 13: a bare function type as a template argument
    in the demangler's spelling, ``H<int (int)>::run(int)`` or ``std::function<void ()>``
    (``H<int (*)(int)>``, arrays, and GCC's ``H<int(int)>`` parse)."""
    depth = 0
    index = 0
    while index < len(name):
        if name.startswith("operator", index) and (index == 0 or name[index - 1] in ": "):
            index += len("operator")
            while index < len(name) and name[index] in "<>=-+*/%^&|~!,()[]":
                index += 1
            continue
        char = name[index]
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif (char == "(" and depth > 0 and index >= 2 and name[index - 1] == " "
              and (name[index - 2].isalnum() or name[index - 2] in "_>]")
              and name[index + 1:index + 2] not in ("*", "&")):
            return False
        index += 1
    return True


def _without_qualifiers(text: str) -> str:
    """``text`` without its trailing cv- and ref-qualifiers."""
    stripped = True
    while stripped:
        stripped = False
        for qualifier in _QUALIFIERS:
            if text.endswith(qualifier):
                text = text[:-len(qualifier)]
                stripped = True
    return text


def _parameters_start(text: str) -> int:
    """Where the bracketed group that ends ``text`` opens (-1 when it never does)."""
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        char = text[index]
        if char in _CLOSE:
            depth += 1
        elif char in _OPEN:
            depth -= 1
            if depth == 0:
                return index
    return -1


def _without_return_type(name: str) -> str:
    """``name`` without a return type: what follows the last space outside brackets that
    comes before any ``operator``."""
    depth = 0
    split = -1
    index = 0
    while index < len(name):
        char = name[index]
        if name.startswith("operator", index) and (index == 0 or name[index - 1] in ": "):
            break
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif char == " " and depth == 0:
            split = index
        index += 1
    return name[split + 1:] if split >= 0 else name


def cplus_function_name(demangled: str) -> str:
    """What gdb prints for a C++ function whose demangled name is ``demangled``: the
    name without its parameter list and qualifiers (gdb's ``cp_remove_params``) and
    without the return type of a template function (gdb demangles with DMGL_RET_DROP);
    the whole of ``demangled`` when gdb cannot parse it or it has no parameter list."""
    if not gdb_parses(demangled):
        return demangled
    text = _without_qualifiers(demangled)
    if not text.endswith(")"):
        return demangled
    start = _parameters_start(text)
    if start <= 0 or text[start] != "(":
        return demangled
    return _without_return_type(text[:start])

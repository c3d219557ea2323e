"""C++ names as gdb prints them: demangled by the C++ runtime, the standard substitutions
spelled out, parameters, qualifiers and template return types removed."""

from __future__ import annotations

import ctypes.util

import pytest

from pysframe.symbolize.cplus import (
    VERBOSE_SUBSTITUTIONS,
    cplus_function_name,
    demangle,
    expand_substitutions,
    gdb_parses,
)

needs_runtime = pytest.mark.skipif(ctypes.util.find_library("stdc++") is None,
                                   reason="needs the C++ runtime (libstdc++)")

STRING = VERBOSE_SUBSTITUTIONS["string"]
OSTREAM = VERBOSE_SUBSTITUTIONS["ostream"]

# (mangled, demangled, what gdb prints)
NAMES = [
    ("_ZNK8outer_ns6Widget3runEi", "outer_ns::Widget::run(int) const",
     "outer_ns::Widget::run"),
    ("_ZNK8outer_ns6WidgetplEi", "outer_ns::Widget::operator+(int) const",
     "outer_ns::Widget::operator+"),
    ("_ZN1N1SltERKS0_", "N::S::operator<(N::S const&)", "N::S::operator<"),
    ("_ZN1AcvPFivEEv", "A::operator int (*)()()", "A::operator int (*)()"),
    ("_ZNK8outer_ns6Widget5twiceIlEEiT_", "int outer_ns::Widget::twice<long>(long) const",
     "outer_ns::Widget::twice<long>"),
    ("_Z1fIiEvT_", "void f<int>(int)", "f<int>"),
    ("_ZNKR1A1fEv", "A::f() const &", "A::f"),
    ("_ZNO1A1fEv", "A::f() &&", "A::f"),
    ("_ZN12_GLOBAL__N_110block_hereEi", "(anonymous namespace)::block_here(int)",
     "(anonymous namespace)::block_here"),
    ("_ZN9__gnu_cxx13new_allocatorIcE8allocateEmPKv",
     "__gnu_cxx::new_allocator<char>::allocate(unsigned long, void const*)",
     "__gnu_cxx::new_allocator<char>::allocate"),
    # A clone suffix: no parameter list at the end, printed whole.
    ("_Z3fooi.cold", "foo(int) [clone .cold]", "foo(int) [clone .cold]"),
    ("_Z3fooi.constprop.0", "foo(int) [clone .constprop.0]",
     "foo(int) [clone .constprop.0]"),
    # A bare function type as a template argument: gdb cannot parse it, prints it whole.
    ("_ZNK8outer_ns6HolderIFiiEE5applyEi", "outer_ns::Holder<int (int)>::apply(int) const",
     "outer_ns::Holder<int (int)>::apply(int) const"),
    ("_ZNSt8functionIFvvEEclEv", "std::function<void ()>::operator()()",
     "std::function<void ()>::operator()()"),
    ("_ZN1HIPFiiEE3runEi", "H<int (*)(int)>::run(int)", "H<int (*)(int)>::run"),
    ("_ZN1HIA3_iE3runEi", "H<int [3]>::run(int)", "H<int [3]>::run"),
    # The standard substitutions, spelled out as gdb's demangler does.
    ("_Z3fooSs", f"foo({STRING})", "foo"),
    ("_Z3fooRSo", f"foo({OSTREAM}&)", "foo"),
    ("_ZNSsC1ERKSs", f"{STRING}::basic_string({STRING} const&)", f"{STRING}::basic_string"),
    # The C++11 ABI's std::string is a real template: nothing to expand.
    ("_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_appendEPKcm",
     "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >"
     "::_M_append(char const*, unsigned long)",
     "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >"
     "::_M_append"),
]


@needs_runtime
@pytest.mark.parametrize(("mangled", "demangled", "printed"), NAMES,
                         ids=[entry[0] for entry in NAMES])
def test_demangled_and_printed_as_gdb(mangled: str, demangled: str, printed: str) -> None:
    assert demangle(mangled) == demangled
    assert cplus_function_name(demangled) == printed


@pytest.mark.parametrize("name", ["main", "__libc_write", "", "Z3fooi", "_Zgarbage",
                                  "_Z"])
def test_not_cplus_names_give_none(name: str) -> None:
    assert demangle(name) is None


def test_substitutions_expanded_only_as_whole_names() -> None:
    assert expand_substitutions("f(std::string, std::istream&, std::iostream*)") == (
        f"f({STRING}, {VERBOSE_SUBSTITUTIONS['istream']}&, "
        f"{VERBOSE_SUBSTITUTIONS['iostream']}*)")
    for untouched in ("f(std::stringstream&)", "f(my::std::string)", "f(std::string_view)",
                      "f(std::__cxx11::string)"):
        assert expand_substitutions(untouched) == untouched


@pytest.mark.parametrize(("name", "parses"), [
    ("H<int (int)>::run(int)", False),
    ("std::function<void ()>", False),
    ("outer_ns::Holder<int (int)>::apply(int) const", False),
    ("H<int (*)(int)>::run(int)", True),
    ("H<int (&)(int)>::run(int)", True),
    ("H<int [3]>::run(int)", True),
    ("H<int(int)>::run(int)", True),
    ("foo(int)", True),
    ("N::S::operator<(N::S const&)", True),
    ("N::S::operator<<(int)", True),
    ("A::operator()(int) const", True),
])
def test_gdb_parses(name: str, parses: bool) -> None:
    assert gdb_parses(name) is parses


@pytest.mark.parametrize(("demangled", "printed"), [
    ("ns::f(int)", "ns::f"),
    ("ns::f(int) const volatile", "ns::f"),
    ("int ns::g<int>(int)", "ns::g<int>"),
    ("std::vector<int, std::allocator<int> > ns::h<int>(int)", "ns::h<int>"),
    ("ns::S::operator<<(int)", "ns::S::operator<<"),
    ("ns::S::operator()(int) const", "ns::S::operator()"),
    ("ns::S::operator bool() const", "ns::S::operator bool"),
    ("ns::variable", "ns::variable"),
    ("(int)", "(int)"),
])
def test_function_name_without_runtime(demangled: str, printed: str) -> None:
    assert cplus_function_name(demangled) == printed

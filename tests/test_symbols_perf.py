"""Symbols like perf (issue 12, item 7) and names of hand-made files.

perf 6.1 takes (checked with perf script on these very files): FUNC, IFUNC and OBJECT
symbols and NOTYPE labels, from the debug file under /usr/lib/debug/.build-id when there
is one; a label only in a section whose name contains "text" or "data" and only when it
is not hidden (a label in ``.mycode`` is not a symbol: its samples go to the label before
it, ``hidden_spin+0x17``). ld.so's ``_start`` is such a label, in libc6-dbg's debug file.
Also: Rust symbols (legacy and v0) in a hand-made ELF, named as perf names them, and
``sframe generate -v`` naming the functions it lists."""

from __future__ import annotations

import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_perf, unavailable

from pysframe.elf import ElfImage
from pysframe.symbolize.demangling import perf_name
from pysframe.symbolize.symbols import load_symbols

pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 assembly"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
]

LABELS = r"""
    .text
    .globl label_spin
label_spin:
    mov $40000000, %rcx
1:  dec %rcx
    jnz 1b
    ret
local_spin:
    mov $40000000, %rcx
1:  dec %rcx
    jnz 1b
    ret
    .globl call_local
    .type call_local,@function
call_local:
    jmp local_spin
    .size call_local, .-call_local
    .globl hidden_spin
    .hidden hidden_spin
hidden_spin:
    mov $40000000, %rcx
1:  dec %rcx
    jnz 1b
    ret
    .section .mycode,"ax",@progbits
    .globl other_spin
other_spin:
    mov $40000000, %rcx
1:  dec %rcx
    jnz 1b
    ret
    .section .note.GNU-stack,"",@progbits
"""
LABELS_MAIN = """
void label_spin(void); void call_local(void); void hidden_spin(void); void other_spin(void);
int main(void) { label_spin(); call_local(); hidden_spin(); other_spin(); return 0; }
"""

#: Rust symbols as rustc 1.95 writes them -> perf's text for them.
RUST = {
    "_ZN1r4leaf17h72253037243a892eE": "r::leaf",
    "_ZN1r10W$LT$T$GT$3run17h0c80ee2823153da3E": "r::W<T>::run",
    "_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17ha86af84d9cc65291E":
        "std::rt::lang_start::{{closure}}",
    "_RINvCs6GmmlP4bgsG_1r4leafINtNtCslNYArtu3iFV_5alloc3vec3VechEEB2_":
        "r::leaf::<alloc::vec::Vec<u8>>",
    "_RNvMCs6GmmlP4bgsG_1rINtB2_1WINtNtCslNYArtu3iFV_5alloc3vec3VechEE3runB2_":
        "<r::W<alloc::vec::Vec<u8>>>::run",
}


def _symbol_address(path: Path, name: str) -> int:
    text = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True).stdout
    found = re.search(r"^([0-9a-f]+) \w " + re.escape(name) + "$", text, re.M)
    assert found is not None, name
    return int(found[1], 16)


@pytest.fixture(scope="module")
def labels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("labels")
    (directory / "lab.S").write_text(LABELS)
    (directory / "main.c").write_text(LABELS_MAIN)
    subprocess.run(["gcc", "-O1", "-o", str(directory / "lab"), str(directory / "main.c"),
                    str(directory / "lab.S")], check=True, timeout=120)
    return directory / "lab"


@pytest.fixture(params=["one by one", "columns"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way of reading a symbol table (see ``symbols._load_symbols``): one by one, and
    as columns (numpy, when a batch run has it loaded)."""
    from pysframe.symbolize import symbols

    monkeypatch.setattr(symbols, "_as_columns", lambda: request.param == "columns")
    return str(request.param)


def _names_at(path: Path, addresses: dict[str, int]) -> dict[str, str | None]:
    table = load_symbols(ElfImage(str(path)), use_cache=False)
    out: dict[str, str | None] = {}
    for label, address in addresses.items():
        found = table.lookup(address)
        out[label] = None if found is None else f"{found[0]}+{found[1]:#x}"
    return out


def _spots(program: Path) -> dict[str, int]:
    """An address inside each spinning loop (the ``dec``, 5 bytes in)."""
    return {name: _symbol_address(program, name) + 5
            for name in ("label_spin", "local_spin", "hidden_spin", "other_spin")}


EXPECTED = {"label_spin": "label_spin+0x5", "local_spin": "local_spin+0x5",
            "hidden_spin": "hidden_spin+0x5", "other_spin": "hidden_spin+0x12"}


@pytest.mark.usefixtures("reading")
def test_notype_labels_as_perf_takes_them(labels: Path) -> None:
    spots = _spots(labels)
    assert _names_at(labels, spots) == EXPECTED
    names = set(load_symbols(ElfImage(str(labels)), use_cache=False).names)
    assert {"data_start", "__data_start"} & names    # a label in .data (one per address)
    assert not {"__bss_start", "_end", "other_spin"} & names   # .bss, .mycode


@pytest.mark.usefixtures("reading")
def test_hidden_label_is_not_a_symbol(labels: Path, tmp_path: Path) -> None:
    """ld makes a hidden label local and default; perf 6.1 ignores a NOTYPE label marked
    hidden (seen by patching st_other in the file perf read)."""
    patched = tmp_path / "lab-hidden"
    shutil.copy(labels, patched)
    data = bytearray(patched.read_bytes())
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize)
                for i in range(count)]
    for section in sections:
        if section[1] != 2:  # SHT_SYMTAB
            continue
        strings = sections[section[6]][4]
        for offset in range(section[4], section[4] + section[5], 24):
            name = struct.unpack_from("<I", data, offset)[0]
            if data[strings + name:data.index(0, strings + name)] == b"label_spin":
                data[offset + 5] = 2  # STV_HIDDEN
    patched.write_bytes(bytes(data))
    assert _names_at(patched, _spots(labels))["label_spin"] is None


def _split_debug(labels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[Path, Path, Path]:
    """(the program stripped, its debug file, where the debug directory the run searches
    wants it by build id: not there yet)."""
    debug = tmp_path / "lab.debug"
    stripped = tmp_path / "lab-stripped"
    subprocess.run(["objcopy", "--only-keep-debug", str(labels), str(debug)], check=True)
    subprocess.run(["strip", "--strip-all", "-o", str(stripped), str(labels)], check=True)
    build_id = ElfImage(str(labels)).build_id()
    assert build_id
    root = tmp_path / "root"
    monkeypatch.setenv("PYSFRAME_DEBUG_FILE_DIRECTORY", str(root))
    # perf's build-id cache (~/.debug, searched before the debug directories) may hold the
    # unstripped file from another test's recording: an empty home has none
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    by_id = root / ".build-id" / build_id.hex()[:2] / (build_id.hex()[2:] + ".debug")
    return stripped, debug, by_id


@pytest.mark.usefixtures("reading")
def test_labels_from_the_debug_file(labels: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A stripped file whose labels are only in its debug file (as ld.so's ``_start``
    with libc6-dbg): perf names them from the debug file, and so do we."""
    stripped, debug, by_id = _split_debug(labels, tmp_path, monkeypatch)
    spots = _spots(labels)
    assert _names_at(stripped, spots)["label_spin"] is None  # .dynsym only
    by_id.parent.mkdir(parents=True)
    shutil.copy(debug, by_id)
    assert _names_at(stripped, spots) == EXPECTED


@pytest.mark.usefixtures("reading")
def test_the_debug_file_is_read_once(labels: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A table made from a separate debug file reads that file once: the search that
    finds it, the cache's source and the symbols share one copy (libc's 4 MB debug file
    was opened three times on a first run, ld.so's read whole three times). The table
    is the one made without the cache, and a cached run reads the file once too."""
    from pysframe.elf import sections

    stripped, debug, by_id = _split_debug(labels, tmp_path, monkeypatch)
    by_id.parent.mkdir(parents=True)
    shutil.copy(debug, by_id)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    made = load_symbols(ElfImage(str(stripped)), use_cache=False)
    assert made.lookup(_spots(labels)["label_spin"]) is not None  # named from the debug file
    loaded: list[str] = []
    real = sections.load_with_status

    def counted(path: str, **options: object) -> object:
        loaded.append(path)
        return real(path, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(sections, "load_with_status", counted)
    for _ in ("made and kept", "read from the cache"):
        loaded.clear()
        table = load_symbols(ElfImage(str(stripped)))
        assert loaded.count(str(by_id)) == 1, loaded
        assert list(table.names) == list(made.names)
        assert list(table.starts) == list(made.starts)
        assert list(table.ends) == list(made.ends)


def test_sframe_script_names_labels_as_perf(labels: Path, tmp_path: Path) -> None:
    need_perf()
    data = tmp_path / "perf.data"
    record = subprocess.run(
        ["perf", "record", "-q", "--no-bpf-event", "--no-buildid-cache", "-e", "cpu-clock", "-F", "999",
         "--call-graph", "dwarf", "-o", str(data), str(labels)],
        capture_output=True, text=True, timeout=120)
    if record.returncode != 0 or not data.exists():
        unavailable(f"perf cannot record here: {record.stderr.strip()[:200]}")
    theirs = subprocess.run(["perf", "script", "--no-inline", "-i", str(data)],
                            capture_output=True, text=True, timeout=120).stdout
    ours = subprocess.run([sys.executable, "-m", "pysframe", "script", str(data)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)}).stdout
    pattern = r"^\s+([0-9a-f]+) (\S+) \(" + re.escape(str(labels)) + r"\)$"
    mine = dict(re.findall(pattern, ours, re.M))
    perfs = dict(re.findall(pattern, theirs, re.M))
    common = set(mine) & set(perfs)
    assert {mine[spot].split("+")[0] for spot in common} >= {"label_spin", "local_spin"}
    assert {spot: mine[spot] for spot in common} == {spot: perfs[spot] for spot in common}


@pytest.fixture(scope="module")
def rust_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared object with one small function per Rust symbol name."""
    directory = tmp_path_factory.mktemp("rust")
    lines = ["    .text"]
    for name in RUST:
        lines += [f"    .globl {name}", f"    .type {name},@function", f"{name}:",
                  "    ret", f"    .size {name}, .-{name}"]
    lines.append('    .section .note.GNU-stack,"",@progbits')
    (directory / "rust.s").write_text("\n".join(lines) + "\n")
    library = directory / "librust.so"
    subprocess.run(["gcc", "-shared", "-nostdlib", "-o", str(library),
                    str(directory / "rust.s")], check=True, timeout=120)
    return library


def test_rust_names_as_perf_prints_them(rust_library: Path) -> None:
    table = load_symbols(ElfImage(str(rust_library)), use_cache=False)
    named = {perf_name(name) for name in table.names}
    assert set(RUST.values()) <= named
    result = subprocess.run([need_perf(), "probe", "-x", str(rust_library), "-F",
                             "--filter=*"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert set(RUST.values()) <= set(result.stdout.splitlines())


CFI_ESCAPE = """
    .text
    .globl _Z7throweri
    .type _Z7throweri,@function
_Z7throweri:
    .cfi_startproc
    push %rbx
    .cfi_def_cfa_offset 16
    .cfi_escape 0x2e,0x10
    pop %rbx
    .cfi_def_cfa_offset 8
    ret
    .cfi_endproc
    .size _Z7throweri, .-_Z7throweri
    .section .note.GNU-stack,"",@progbits
"""


def test_generate_verbose_names_the_functions(tmp_path: Path) -> None:
    """A function gas would skip (a DW_CFA_GNU_args_size escape) is listed by name."""
    (tmp_path / "escape.s").write_text(CFI_ESCAPE)
    library = tmp_path / "libescape.so"
    subprocess.run(["gcc", "-shared", "-nostdlib", "-o", str(library),
                    str(tmp_path / "escape.s")], check=True, timeout=120)
    result = subprocess.run([sys.executable, "-m", "pysframe", "generate", "-v", str(library),
                             "-o", str(tmp_path / "out.sframe")],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert re.search(r"no SFrame FDE for 0x[0-9a-f]+ thrower\(int\) \(3 bytes\): ",
                     result.stderr), result.stderr


ALIASES = """
    .text
    .globl _Z3fooiiii
    .type _Z3fooiiii,@function
    .globl _Z4foo2v
    .type _Z4foo2v,@function
_Z3fooiiii:
_Z4foo2v:
    ret
    .size _Z3fooiiii, .-_Z3fooiiii
    .size _Z4foo2v, .-_Z4foo2v
    .section .note.GNU-stack,"",@progbits
"""


@pytest.mark.usefixtures("reading")
def test_aliases_are_chosen_by_their_demangled_names(tmp_path: Path) -> None:
    """Two symbols at one address (as g++'s identical-code folding makes): perf keeps the
    longer name as it prints it, ``foo2`` (``_Z4foo2v``), not the longer mangled one
    (``_Z3fooiiii``, printed ``foo``). Seen with perf script on this file."""
    (tmp_path / "alias.s").write_text(ALIASES)
    library = tmp_path / "libalias.so"
    subprocess.run(["gcc", "-shared", "-nostdlib", "-o", str(library),
                    str(tmp_path / "alias.s")], check=True, timeout=120)
    table = load_symbols(ElfImage(str(library)), use_cache=False)
    found = table.lookup(_symbol_address(library, "_Z4foo2v"))
    assert found is not None and perf_name(found[0]) == "foo2"


TWO_LABELS = """
    .text
    .globl x_longer_name_label
    .globl y_lab
x_longer_name_label:
y_lab:
    ret
    .section .note.GNU-stack,"",@progbits
"""


@pytest.mark.usefixtures("reading")
def test_of_empty_symbols_at_one_address_the_last_wins(tmp_path: Path) -> None:
    """perf sizes empty symbols before it removes duplicates, so of two labels at one
    address the last in the symbol table gets a size and is kept (perf script printed
    ``y_lab``, not the longer ``x_longer_name_label``)."""
    (tmp_path / "two.s").write_text(TWO_LABELS)
    library = tmp_path / "libtwo.so"
    subprocess.run(["gcc", "-shared", "-nostdlib", "-o", str(library),
                    str(tmp_path / "two.s")], check=True, timeout=120)
    order = [line.split()[-1] for line in subprocess.run(
        ["readelf", "-sW", str(library)], capture_output=True, text=True,
        check=True).stdout.splitlines() if line.endswith("_lab") or line.endswith("_label")]
    table = load_symbols(ElfImage(str(library)), use_cache=False)
    found = table.lookup(_symbol_address(library, "y_lab"))
    assert found is not None and found[0] == order[-1]


def test_kernel_aliases_as_perf_chooses_them(tmp_path: Path) -> None:
    """kallsyms' aliases have no size: the last one wins (perf printed ``__pi_memcpy`` for
    memcpy, __memcpy, __pi_memcpy at one address)."""
    from pysframe.symbolize.kernel import load_kallsyms

    path = tmp_path / "kallsyms"
    path.write_text("ffffffff821f0e00 T before\nffffffff821f0e20 T memcpy\n"
                    "ffffffff821f0e20 T __memcpy\nffffffff821f0e20 T __pi_memcpy\n"
                    "ffffffff821f0e80 t after\n")
    table = load_kallsyms(str(path))
    assert table is not None
    assert table.lookup(0xFFFFFFFF821F0E2A) == ("__pi_memcpy", 0xA)
    assert table.lookup(0xFFFFFFFF821F0E10) == ("before", 0x10)


def test_load_bias_with_lld_packed_segments() -> None:
    """lld (rustc's default linker) packs segments: the code's first file page is also
    the read-only segment's last one. The mapping of the code (pgoff 0x13000) must get
    the code segment's bias, or every frame of the file is named (and unwound) 0x1000
    off (a rustc 1.95 program: 0 of 382 frames named as perf names them before)."""
    from types import SimpleNamespace

    from pysframe.elf.headers import PT_LOAD, ProgramHeader
    from pysframe.unwind.address_space import Module
    from pysframe.unwind.modules import BinaryFinder

    segments = [ProgramHeader(PT_LOAD, 4, 0x0, 0x0, 0x13FB0, 0x13FB0),
                ProgramHeader(PT_LOAD, 5, 0x13FB0, 0x14FB0, 0x3F940, 0x3F940),
                ProgramHeader(PT_LOAD, 6, 0x538F0, 0x558F0, 0x2A48, 0x3710)]
    image = SimpleNamespace(program_headers=lambda: segments)
    module = Module("/bin/r", None, 0, None, "none", image)  # type: ignore[arg-type]
    base = 0x7F0000000000
    assert BinaryFinder._bias(module, base + 0x14000, 0x13000) == base
    assert BinaryFinder._bias(module, base, 0x0) == base
    assert BinaryFinder._bias(module, base + 0x55000, 0x53000) == base


def test_ld_so_start_is_named_from_its_debug_file() -> None:
    """ld.so's ``_start`` is a local NOTYPE label of its debug file (libc6-dbg): perf
    prints ``_start+0x7`` for the first frame of every program, we printed
    ``[unknown]``."""
    from pysframe.elf.debuginfo import debug_file

    path = "/lib64/ld-linux-x86-64.so.2"
    if not os.path.exists(path):
        pytest.skip("no x86-64 ld.so here")
    image = ElfImage(os.path.realpath(path))
    debug = debug_file(image.build_id())
    if debug is None:
        pytest.skip("needs ld.so's debug file (libc6-dbg)")
    table = load_symbols(image, use_cache=False)
    start = _symbol_address(Path(debug), "_start")
    assert table.lookup(start + 7) == ("_start", 7)

"""The two readings of a symbol table (``symbols._load_symbols``: as lists, and as
columns when a batch run has numpy loaded) give the same table: on every ELF file of the
fixtures (x86-64, AArch64 with its mapping symbols, s390x big-endian; objects, libraries
and programs), on the larger binaries of this machine, and on hostile tables (names not
UTF-8 or past the strings, sizes past 2**64, several symbols at one address).

The symbols either reading keeps are checked against binutils' readelf (each kept name at
its address, each sized function covered); which of several aliases perf keeps is held
to perf by tests/test_record_depth.py (its ``vector`` run reads the tables as columns)
and tests/test_symbols_perf.py (both readings)."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from conftest import FIXTURES
from pysframe.elf import ElfError, ElfImage
from pysframe.symbolize import symbols
from pysframe.symbolize.symbols import SymbolTable

ELF_MAGIC = b"\x7fELF"
#: Larger binaries, when this machine has them (the fixtures are small).
SYSTEM = ("/usr/lib/gcc/x86_64-linux-gnu/12/cc1", "/lib/x86_64-linux-gnu/libc.so.6",
          "/usr/bin/perf", "/usr/bin/gdb", "/usr/bin/python3")


def _table(path: Path, monkeypatch: pytest.MonkeyPatch, columns: bool
           ) -> tuple[list[int], list[int], list[str]]:
    monkeypatch.setattr(symbols, "_as_columns", lambda: columns)
    table, _ = symbols._load_symbols(ElfImage(str(path)), None, None)
    return list(table.starts), list(table.ends), list(table.names)


def _readelf_symbols(path: Path) -> tuple[set[tuple[int, str]], set[int]]:
    """binutils' reading of ``path``'s symbol tables: (value, name) of every defined
    symbol, and the values of the defined FUNC symbols with a size."""
    import subprocess

    if shutil.which("readelf") is None:
        pytest.fail("binutils' readelf is needed to check the symbols")
    listing = subprocess.run(["readelf", "-sW", str(path)], capture_output=True, check=True,
                             timeout=120).stdout.decode("utf-8", "replace")
    defined: set[tuple[int, str]] = set()
    functions: set[int] = set()
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].endswith(":") or not fields[0][:-1].isdigit():
            continue
        value, size, kind, index, name = (int(fields[1], 16), fields[2], fields[3],
                                          fields[6], fields[7])
        if index in ("UND", "ABS"):
            continue
        # .symtab names are shown as they are (``stdout@GLIBC_2.2.5``); .dynsym ones with
        # the version readelf adds
        defined |= {(value, name), (value, name.split("@", 1)[0])}
        if kind == "FUNC" and size not in ("0", "0x0"):
            functions.add(value)
    return defined, functions


def _as_readelf_reads(path: Path, table: tuple[list[int], list[int], list[str]]) -> None:
    """Each ASCII name ``table`` keeps (PLT stubs aside, which have no symbol; an empty
    one, of a name offset past the strings, readelf shows otherwise) is a symbol
    readelf lists at that address, and each sized function readelf lists is covered."""
    defined, functions = _readelf_symbols(path)
    starts, ends, names = table
    kept = [(start, name) for start, name in zip(starts, names, strict=True)
            if name and name.isascii() and not name.endswith("@plt") and name != ".plt"]
    assert kept and not [entry for entry in kept if entry not in defined], path
    uncovered = [value for value in functions
                 if not any(start <= value < end for start, end in zip(starts, ends,
                                                                       strict=True))]
    assert not uncovered, (path, [hex(value) for value in uncovered[:5]])


def _elf_files() -> list[Path]:
    found = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                if handle.read(4) == ELF_MAGIC:
                    found.append(path)
    return found


def test_both_readings_agree_on_every_fixture_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    files = _elf_files()
    assert len(files) > 300, "the fixtures' ELF files are missing"
    machines, compared, symbols_seen = set(), 0, 0
    for path in files:
        try:
            image = ElfImage(str(path))
            image.section_headers()
        except ElfError:
            continue
        one = _table(path, monkeypatch, False)
        assert _table(path, monkeypatch, True) == one, path
        machines.add(image.machine)
        compared += 1
        symbols_seen += len(one[0])
    assert {"EM_X86_64", "EM_AARCH64", "EM_S390"} <= machines
    assert compared > 300 and symbols_seen > 3000


def test_both_readings_agree_on_large_binaries(monkeypatch: pytest.MonkeyPatch) -> None:
    present = [Path(path) for path in SYSTEM if Path(path).is_file()]
    assert present, "none of the system's binaries is here"
    for path in present:
        one = _table(path, monkeypatch, False)
        assert _table(path, monkeypatch, True) == one, path
        if symbols.symbols_file(ElfImage(str(path)), None) is None:  # its own symbols
            _as_readelf_reads(path, one)


#: A linked x86-64 program with a .symtab.
PROGRAM = FIXTURES / "real" / "lua-2.46-x86_64" / "lua"


def _rewrite_symbols(path: Path, edit: dict[bytes, tuple[int | None, int | None, bytes | None]]
                     ) -> None:
    """Rewrites, in ``path``, the symbols named as the keys: (new size, new st_name, new
    bytes written over the name in the string table), None to keep each."""
    data = bytearray(path.read_bytes())
    image = ElfImage(str(path))
    table = image.section_header(".symtab")
    assert table is not None
    strings = image.section_headers()[table.link]
    for at in range(table.offset, table.offset + table.size, 24):
        name, _info, _other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, at)
        text = bytes(data[strings.offset + name:data.index(0, strings.offset + name)])
        if text in edit:
            size, new_name, new_text = edit[text]
            if size is not None:
                struct.pack_into("<Q", data, at + 16, size)
            if new_name is not None:
                struct.pack_into("<I", data, at, new_name)
            if new_text is not None:
                assert len(new_text) <= len(text)
                data[strings.offset + name:strings.offset + name + len(new_text)] = new_text
    path.write_bytes(bytes(data))


def test_both_readings_agree_on_hostile_symbols(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that is not UTF-8, one that is (not ASCII), a size past 2**64 and a name
    offset past the strings: the same table either way, and one a warm run can keep."""
    program = tmp_path / "hostile"
    shutil.copy(PROGRAM, program)
    before = _table(program, monkeypatch, False)
    functions = [name.encode() for name in before[2]
                 if name.isidentifier() and len(name) >= 5][:4]
    assert len(functions) == 4, before[2]
    _rewrite_symbols(program, {
        functions[0]: (None, None, b"\xff\xfe"),
        functions[1]: (None, None, "é".encode()),
        functions[2]: ((1 << 64) - 16, None, None),
        functions[3]: (None, 0xFFFF_FFF0, None),
    })
    one = _table(program, monkeypatch, False)
    assert _table(program, monkeypatch, True) == one
    assert any(name.startswith("\ufffd\ufffd") for name in one[2])
    assert any(name.startswith("é") for name in one[2])
    assert max(one[1]) == (1 << 64) - 1  # the end past 2**64 is the last address
    _as_readelf_reads(program, one)
    for columns in (False, True):  # kept and read back as a warm run does
        monkeypatch.setattr(symbols, "_as_columns", lambda columns=columns: columns)
        table, complete = symbols._load_symbols(ElfImage(str(program)), None, None)
        assert complete
        again = SymbolTable.from_entry(table.entry(), empty_ok=True)
        assert again is not None
        assert (list(again.starts), list(again.ends), list(again.names)) == one


def _aliases_source() -> str:
    """Aliases of every kind perf chooses among (sized or not, weak, global, local, leading
    underscores, lengths), at one address each."""
    lines = ["    .text"]
    kinds = [("globl", "func"), ("weak", "func"), ("local", "func"), ("globl", "notype"),
             ("weak", "notype")]
    for group in range(12):
        lines.append("    .p2align 4")
        for number, (binding, kind) in enumerate(kinds[group % 5:] + kinds[:group % 5]):
            name = "_" * (number % 3) + f"g{group}_" + "x" * ((group * 7 + number) % 5)
            lines += [f"    .{binding} {name}" if binding != "local" else "",
                      f"    .type {name},@{'function' if kind == 'func' else 'notype'}",
                      f"{name}:"]
            if (group + number) % 2:
                lines.append(f"    .size {name}, 4")
        lines += ["    nop", "    nop", "    nop", "    ret"]
    lines.append('    .section .note.GNU-stack,"",@progbits')
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", ["x86-64", "i386", "x32"])
def test_several_symbols_at_one_address_either_way(kind: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The aliases in a shared library of each x86 ELF class (32-bit symbol entries are
    laid out otherwise), assembled and linked by binutils."""
    import subprocess

    for tool in ("as", "ld"):
        if shutil.which(tool) is None:
            pytest.fail(f"binutils' {tool} is needed to assemble the aliases")
    (tmp_path / "aliases.s").write_text(_aliases_source())
    options = {"x86-64": ("--64", "elf_x86_64"), "i386": ("--32", "elf_i386"),
               "x32": ("--x32", "elf32_x86_64")}[kind]
    library = tmp_path / "libaliases.so"
    subprocess.run(["as", options[0], "-o", str(tmp_path / "aliases.o"),
                    str(tmp_path / "aliases.s")], check=True, timeout=120)
    subprocess.run(["ld", "-m", options[1], "-shared", "-o", str(library),
                    str(tmp_path / "aliases.o")], check=True, timeout=120)
    assert ElfImage(str(library)).elf_class == (64 if kind == "x86-64" else 32)
    one = _table(library, monkeypatch, False)
    assert _table(library, monkeypatch, True) == one
    assert sum(name.lstrip("_").startswith("g") for name in one[2]) == 12  # one per address
    _as_readelf_reads(library, one)

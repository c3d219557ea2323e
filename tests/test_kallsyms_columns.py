"""kallsyms read as numpy arrays (pysframe.symbolize.kallsyms_columns, what a process with
numpy imported uses) gives the table the reading in Python gives (the entries' bytes
differ: the arrays keep the names as spans of the text, the reading in Python joins them): on this
machine's /proc/kallsyms, and on texts made to hit each of its checks (aliases, unsorted
lines, modules, lines after them, 32-bit addresses, upper-case digits, and lines that are
not in the kernel's layout, which leave the text to the reading in Python)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("numpy")

from pysframe.symbolize import kernel
from pysframe.symbolize.symbols import SymbolTable


def _lines(seed: int, count: int, width: int = 16) -> list[bytes]:
    """Kernel-layout lines: runs of rising addresses with aliases, every type letter."""
    chooser = random.Random(seed)
    base = (0xFFFFFFFF81000000 if width == 16 else 0xC1000000)
    lines, address = [], base
    for number in range(count):
        address += chooser.choice((0, 0, 0x10, 0x40, 0x1000))
        if chooser.random() < 0.02:  # (an address out of order)
            address -= 0x2000
        kind = chooser.choice(b"TtWwDdbBrRAU")
        lines.append(b"%0*x %c sym_%d" % (width, address, kind, number))
    return lines


def _texts() -> list[tuple[str, bytes]]:
    plain = _lines(1, 400)
    modules = [b"ffffffffc%07x %c mod_%d\t[mod%d]" % (k * 0x30, b"tTdW"[k % 4], k, k % 3)
               for k in range(60)]
    after = [b"ffffffff81000000 T after_modules", b"ffffffff82000000 t after_two"]
    return [
        ("plain", b"\n".join(plain) + b"\n"),
        ("modules", b"\n".join(plain + modules) + b"\n"),
        ("lines after the modules", b"\n".join(plain + modules + after) + b"\n"),
        ("32-bit", b"\n".join(_lines(2, 300, width=8)) + b"\n"),
        ("upper-case digits", b"\n".join(plain).upper().replace(b"SYM_", b"sym_") + b"\n"),
        ("sorted, no alias", b"".join(b"%016x T f%d\n" % (0xFFFFFFFF81000000 + 16 * k, k)
                                      for k in range(200))),
        ("hidden addresses", b"".join(b"%016x T f%d\n" % (0, k) for k in range(50))),
        ("no newline at the end", b"\n".join(plain)),
        ("two spaces", b"\n".join([*plain[:50], plain[50].replace(b" ", b"  ", 1)])
         + b"\n"),
        ("a space in a name", b"\n".join([*plain[:9], plain[9] + b" x", *plain[10:]]) + b"\n"),
        ("an empty line", b"\n".join([*plain[:30], b"", *plain[30:]]) + b"\n"),
        ("a short line", b"\n".join([*plain[:30], b"ffff T", *plain[30:]]) + b"\n"),
        ("not hex", b"\n".join([*plain[:3], b"gfffffff81000050 T bad", *plain[3:]]) + b"\n"),
        ("another width", b"\n".join([*plain[:7], plain[7][8:], *plain[8:]]) + b"\n"),
        ("a carriage return", b"\r\n".join(plain) + b"\r\n"),
        ("a space in a name after the modules",
         b"\n".join([*plain, *modules, after[0], after[1] + b" y"]) + b"\n"),
        ("no text symbol", b"".join(b"%016x D d%d\n" % (0xFFFFFFFF81000000 + k, k)
                                    for k in range(20))),
        ("the last page of 64-bit addresses",
         b"ffffffff81000000 T a\nfffffffffffff010 t last\n"),
    ]


TEXTS = _texts()


@pytest.mark.parametrize(("label", "text"), TEXTS, ids=[label for label, _ in TEXTS])
def test_arrays_give_the_entry_python_gives(label: str, text: bytes) -> None:
    by_python = _joined(kernel._read_in_python(text))
    read = kernel._read_with_numpy(text)
    if read is not None:
        assert _table(_joined(read[0])) == _table(by_python)
    in_layout = not any(word in label for word in (
        "newline", "space", "empty", "short", "hex", "width", "carriage", "no text"))
    assert (read is not None) == in_layout, "read as arrays only in the kernel's layout"
    if label == "hidden addresses" or label.startswith("the last page"):
        assert by_python is None
    elif in_layout:
        assert by_python is not None
        table = SymbolTable.from_spans(by_python)
        assert table is not None and len(table.names) > 0


def _joined(parts: list[bytes | memoryview] | None) -> bytes | None:
    return b"".join(parts) if parts is not None else None


def _table(payload: bytes | None) -> tuple[list[int], list[int], list[str]] | None:
    """The starts, ends and names of an entry (None: no entry)."""
    if payload is None:
        return None
    table = SymbolTable.from_spans(payload)
    assert table is not None
    return list(table.starts), list(table.ends), list(table.names)


def test_the_running_kernels_kallsyms_reads_the_same_both_ways() -> None:
    path = Path("/proc/kallsyms")
    data = path.read_bytes()
    read = kernel._read_with_numpy(data)
    assert read is not None, "this machine's kallsyms is in the kernel's layout"
    assert _table(_joined(read[0])) == _table(_joined(kernel._read_in_python(data)))
    assert kernel.kallsyms_payload(str(path)) == _joined(read[0])  # (numpy imported here)

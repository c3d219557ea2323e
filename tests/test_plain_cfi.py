"""The one-pass reading of plain x86-64 CFI (:mod:`pysframe.generate.plain_cfi`) gives the
FDE the general translation gives (:func:`~pysframe.generate.section.translate_entry`,
as the on-demand tables call it), over every FDE of real binaries and for each kind of
instruction; it declines (None) whatever is not plain, which the general one reads.

Internal consistency: the general translation is the one held to GNU as and objdump by
the generator's oracle tests."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, needs_fixtures
from pysframe.cfi.eh_frame import FDE as CFIFDE
from pysframe.cfi.eh_frame import parse_eh_frame
from pysframe.elf import ElfImage
from pysframe.format.constants import ABI, VERSION_3, BaseReg, FDEType
from pysframe.format.model import FDE
from pysframe.generate.function_maker import header
from pysframe.generate.plain_cfi import plain_fde
from pysframe.generate.section import Generated, translate_entry

AMD64 = ABI.AMD64_ENDIAN_LITTLE


def _general(data: bytes, address: int, cfi: CFIFDE) -> FDE | None:
    return translate_entry(data, address, cfi, AMD64, False, Generated(header(AMD64)),
                           version=VERSION_3, as_gnu=False, args_size=True)


def _loaded_libc() -> str:
    """The C library this interpreter runs with (from its own mappings)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libc.so" in path or "/libc-" in path:
                return path
    raise AssertionError("no C library mapped")


def _x86_64_binaries() -> list[Path]:
    found = sorted(path for path in FIXTURES.glob("*/x86_64/*/*")
                   if path.is_file() and path.read_bytes()[:4] == b"\x7fELF")
    found.append(FIXTURES / "real" / "lua-2.46-x86_64" / "lua")
    return found


@needs_fixtures
def test_every_plain_fde_of_real_binaries_is_the_general_translation() -> None:
    """The fixtures' x86-64 programs and libraries, the Lua binary, this interpreter and
    its C library: almost every FDE is plain, and each plain one is translated alike."""
    paths = [*map(str, _x86_64_binaries()), str(Path(sys.executable).resolve()),
             _loaded_libc()]
    total = plain = 0
    for path in paths:
        image = ElfImage(path)
        found = image.section(".eh_frame", relocated=True)
        assert found is not None, path
        data, address = bytes(found[0]), found[1]
        fdes, _ = parse_eh_frame(data, address)
        for cfi in fdes:
            total += 1
            fast = plain_fde(data, cfi)
            if fast is not None:
                plain += 1
                assert fast == _general(data, address, cfi), (path, hex(cfi.pc_begin))
    assert total > 10_000 and plain >= 0.95 * total, (plain, total)


# --- hand-made CFI --------------------------------------------------------------------------

def _uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _padded(body: bytes) -> bytes:
    body += b"\0" * (-(len(body) + 4) % 4)  # DW_CFA_nop to the next 4 bytes
    return struct.pack("<I", len(body)) + body


def _eh_frame(fde_instructions: bytes, size: int = 0x40, *, cie_instructions: bytes =
              b"\x0c\x07\x08\x90\x01", code_align: int = 1, augmentation: bytes = b"zR",
              return_register: int = 16) -> tuple[bytes, CFIFDE]:
    """An .eh_frame at 0x1000 with one CIE (by default x86-64's: CFA = RSP+8, RA at
    CFA-8) and one FDE for a function of ``size`` bytes at 0x2000."""
    cie = _padded(b"\0\0\0\0\x01" + augmentation + b"\0" + _uleb(code_align) + b"\x78"
                  + _uleb(return_register) + b"\x01\x1b" + cie_instructions)
    at = len(cie)
    pc_field = 0x1000 + at + 8
    fde = _padded(struct.pack("<Iii", at + 4, 0x2000 - pc_field, size) + b"\0"
                  + fde_instructions)
    data = cie + fde + b"\0\0\0\0"
    fdes, errors = parse_eh_frame(data, 0x1000)
    assert not errors and len(fdes) == 1
    return data, fdes[0]


PUSH_RBP = b"\x41\x0e\x10\x86\x02\x43\x0d\x06"  # advance 1; CFA+16; RBP at CFA-16; ...
PLAIN = {
    "frame pointer": PUSH_RBP + b"\x54\x0c\x07\x08",
    "remembered state": PUSH_RBP + b"\x4a\x0a\x0c\x07\x08\x41\x0b\x45",
    "FP restored": b"\x41\x0e\x10\x86\x02\x44\xc6\x0e\x08",
    "wide advances": b"\x02\x10\x0e\x10\x03\x00\x01\x0e\x18\x04\x00\x00\x01\x00\x0e\x08",
    "extended forms": b"\x41\x0e\x10\x05\x06\x02\x41\x06\x06\x0e\x08",
    "args size and nops": b"\x41\x0e\x10\x2e\x10\x00\x41\x2e\x00\x0e\x08",
    "a wide CFA offset": b"\x41\x0e\xc8\x01\x42\x0e\x08",
    "rows past the end": b"\x41\x0e\x10\x7f\x0e\x08",
    "RA at CFA-8 again": b"\x41\x0e\x10\x90\x01\x41\x0e\x08",
    "an unchanged advance": b"\x41\x42\x0e\x10",
}
NOT_PLAIN = {
    "RA elsewhere": b"\x41\x0e\x10\x90\x02",
    "CFA from another register": b"\x41\x0c\x03\x10",
    "RA undefined": b"\x41\x07\x10",
    "an absolute location": b"\x01\x10\x20\x00\x00\x0e\x10",
    "a state restored never remembered": b"\x41\x0b",
    "a truncated operand": b"\x41\x41\x0e",  # (the FDE ends there: no padding)
    "an expression": b"\x41\x0f\x02\x77\x08",
    "a saved register in another": b"\x41\x09\x06\x03",
}


@pytest.mark.parametrize("name", PLAIN)
def test_each_plain_instruction_is_read_as_the_general_translation_reads_it(name: str) -> None:
    data, cfi = _eh_frame(PLAIN[name], size=0x30 if name == "rows past the end" else 0x200)
    fast = plain_fde(data, cfi)
    assert fast is not None and fast == _general(data, 0x1000, cfi)
    assert fast.fde_type == FDEType.DEFAULT and fast.fres[0].start == 0


def test_what_the_rows_say() -> None:
    """The frame-pointer prologue: CFA = RSP+8, then RSP+16 with RBP at CFA-16, then
    RBP+16 (read from the rows, not only compared)."""
    data, cfi = _eh_frame(PLAIN["frame pointer"], size=0x200)
    fast = plain_fde(data, cfi)
    assert fast is not None
    assert [(fre.start, fre.words, fre.base_reg) for fre in fast.fres] == [
        (0, (8,), BaseReg.SP), (1, (16, -16), BaseReg.SP), (4, (16, -16), BaseReg.FP),
        (0x18, (8, -16), BaseReg.SP)]


@pytest.mark.parametrize("name", NOT_PLAIN)
def test_anything_else_is_left_to_the_general_translation(name: str) -> None:
    data, cfi = _eh_frame(NOT_PLAIN[name], size=0x200)
    assert plain_fde(data, cfi) is None
    if name == "a truncated operand":
        assert cfi.instructions_end == len(data) - 4  # (before the terminator)
        assert _general(data, 0x1000, cfi) is None  # unreadable CFI: skipped


@pytest.mark.parametrize(("options", "why"), [
    ({"cie_instructions": b"\x90\x01\x0a"}, "a state remembered before any CFA rule"),
    ({"augmentation": b"zRS"}, "a signal frame"),
    ({"return_register": 30}, "another return-address column"),
    ({"cie_instructions": b""}, "no CFA rule"),
])
def test_cies_that_are_not_plain(options: dict[str, object], why: str) -> None:
    data, cfi = _eh_frame(b"\x41\x0e\x10", size=0x200, **options)  # type: ignore[arg-type]
    assert plain_fde(data, cfi) is None, why


def test_a_code_alignment_of_zero_moves_no_row() -> None:
    data, cfi = _eh_frame(b"\x41\x0e\x10\x41\x0e\x18", size=0x200, code_align=0)
    fast = plain_fde(data, cfi)
    assert fast is not None and fast == _general(data, 0x1000, cfi)
    assert [fre.start for fre in fast.fres] == [0]

"""``strip``, ``upgrade``, ``inject`` and ``generate`` on ELF files whose section and
program headers were mutated (issue 25 item 6), as ``validate`` is fuzzed in
test_robustness: each may refuse a file with an input error (one line, exit 2 on the
command line), never fail with anything else. Seeded: a failure names the case that
reproduces it."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import FIXTURES
from pysframe.elf import ElfImage
from pysframe.errors import PysframeError
from pysframe.generate.inject import inject
from pysframe.generate.section import generate
from pysframe.generate.strip import strip_sframe
from pysframe.generate.upgrade import upgrade_object

LINKED = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"
OBJECT = FIXTURES / "2.44" / "x86_64" / "O2" / "cfi.o"
pytestmark = pytest.mark.skipif(not LINKED.exists(), reason="../shared/fixtures is not present")
CASES = 300
#: Symbol tables, relocations, groups, dynamic, SFrame and unwind sections.
FAVOURED_TYPES = {2, 4, 6, 9, 11, 17, 0x6FFFFFF4, 0x70000001}
#: Hostile values for a header field, besides random ones.
EDGES = [0, 1, 3, 7, 0x40, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, (1 << 63) - 1, (1 << 64) - 1]
#: Elf64_Shdr fields: (offset in the header, width): name, type, flags, addr, offset,
#: size, link, info, addralign, entsize; Elf64_Phdr: type, flags, offset, vaddr, paddr,
#: filesz, memsz, align.
SECTION_FIELDS = [(0, 4), (4, 4), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4), (44, 4), (48, 8),
                  (56, 8)]
SEGMENT_FIELDS = [(0, 4), (4, 4), (8, 8), (16, 8), (24, 8), (32, 8), (40, 8), (48, 8)]


def mutated(data: bytes, rng: random.Random) -> bytes:
    """``data`` with 1 to 3 header fields set to a hostile value."""
    out = bytearray(data)
    shoff, = struct.unpack_from("<Q", out, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", out, 0x3A)
    phoff, = struct.unpack_from("<Q", out, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", out, 0x36)
    # Tables the commands read entry by entry are chosen more often.
    favoured = [index for index in range(shnum) if struct.unpack_from(
        "<I", out, shoff + index * shentsize + 4)[0] in FAVOURED_TYPES]
    for _ in range(rng.randint(1, 3)):
        if phnum and rng.random() < 0.2:
            base, (at, width) = phoff + rng.randrange(phnum) * phentsize, rng.choice(
                SEGMENT_FIELDS)
        else:
            index = rng.choice(favoured) if favoured and rng.random() < 0.6 else rng.randrange(
                shnum)
            base, (at, width) = shoff + index * shentsize, rng.choice(SECTION_FIELDS)
        value = rng.choice(EDGES) if rng.random() < 0.6 else rng.getrandbits(8 * width)
        if rng.random() < 0.2:  # near the end of the file
            value = max(len(out) - rng.randrange(64), 0)
        out[base + at:base + at + width] = (value & ((1 << 8 * width) - 1)).to_bytes(
            width, "little")
    return bytes(out)


def _unstripped() -> bytes:
    data, _ = strip_sframe(ElfImage(str(LINKED)))
    return data


COMMANDS: dict[str, tuple[Callable[[], bytes], Callable[[ElfImage], object]]] = {
    "strip": (LINKED.read_bytes, strip_sframe),
    "upgrade": (OBJECT.read_bytes, upgrade_object),
    "inject": (_unstripped, lambda image: inject(image, version=3)),
    "generate": (_unstripped, lambda image: generate(image, version=3)),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_mutated_headers_give_input_errors_only(command: str) -> None:
    original_of, run = COMMANDS[command]
    original = original_of()
    rng = random.Random(f"rewrite-{command}")
    for case in range(CASES):
        data = mutated(original, rng)
        try:
            run(ElfImage(f"{command}-case-{case}", data))
        except PysframeError:
            pass
        except Exception as error:  # the point of the test
            path = Path(f"/tmp/{command}-case-{case}")
            path.write_bytes(data)
            raise AssertionError(f"{command} case {case} ({path}): "
                                 f"{type(error).__name__}: {error}") from error

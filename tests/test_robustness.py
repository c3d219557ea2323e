"""Hostile input: property tests and a mutation test over every fixture section.

Random valid sections built with the encoder must decode to the same model;
random and mutated bytes may raise only SFrameError subclasses, quickly.
"""

from __future__ import annotations

import random
import struct
import time
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, manifest_entries, needs_fixtures
from pysframe.format import ABI, FDE, FRE, BaseReg, FDEType, FREType, PCType, Section
from pysframe.format.constants import F_FDE_FUNC_START_PCREL, F_FDE_SORTED
from pysframe.format.decode import decode
from pysframe.format.encode import encode
from pysframe.format.errors import SFrameError
from pysframe.format.exercise import exercise


@st.composite
def fres(draw: st.DrawFn, version: int, abi: ABI, fde_type: FDEType, size: int) -> list[FRE]:
    count = draw(st.integers(0, 6))
    limit = max(size, 1)
    starts = sorted(draw(st.sets(st.integers(1, limit - 1), max_size=count))) if limit > 1 else []
    starts = [0, *starts]
    out = []
    for start in starts:
        if fde_type == FDEType.FLEX:
            n = draw(st.sampled_from([2, 4, 5, 6]))
            words = [draw(st.integers(0, 40)) << 3 | 1, draw(st.integers(-300, 300))]
            if n == 4:
                words += [2, draw(st.integers(-64, 0))]
            elif n == 5:
                words += [0, 2, draw(st.integers(-64, 0))]
            elif n == 6:
                words += [draw(st.integers(0, 40)) << 3 | 1, 0, 2, -16]
        else:
            n_max = 2 if abi.is_amd64 else 3
            n = draw(st.integers(1 if version == 1 else 0, n_max))
            words = [draw(st.integers(-(2**31), 2**31 - 1)) for _ in range(n)]
        out.append(FRE(start, tuple(words), draw(st.sampled_from(list(BaseReg))),
                       draw(st.booleans()) and abi.is_aarch64))
    return out


@st.composite
def sections(draw: st.DrawFn) -> Section:
    version = draw(st.sampled_from([1, 2, 3]))
    abi = draw(st.sampled_from(list(ABI) if version > 1 else list(ABI)[:3]))
    address = draw(st.integers(0, 2**40))
    fdes = []
    pc = address + draw(st.integers(-(2**20), 2**20))
    for _ in range(draw(st.integers(0, 8))):
        size = draw(st.integers(1, 0x20000))
        fde_type = FDEType.FLEX if version == 3 and draw(st.booleans()) else FDEType.DEFAULT
        mask = draw(st.booleans()) and version > 1
        fdes.append(FDE(
            start=pc, size=size, fres=draw(fres(version, abi, fde_type, min(size, 16) if mask else size)),
            pc_type=PCType.MASK if mask else PCType.INC, fde_type=fde_type,
            pauth_key_b=abi.is_aarch64 and draw(st.booleans()),
            signal=version == 3 and draw(st.booleans()), rep_size=16 if mask else 0,
            fre_type=draw(st.sampled_from([None, FREType.ADDR4]))))
        pc += size + draw(st.integers(0, 64))
    flags = (F_FDE_FUNC_START_PCREL if version > 1 else 0) | draw(st.sampled_from([0, F_FDE_SORTED]))
    return Section(version=version, abi=abi, flags=flags,
                   cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0, fdes=fdes, address=address)


def normalized(section: Section) -> list[tuple[object, ...]]:
    return [(f.start, f.size, f.pc_type, f.fde_type, f.pauth_key_b, f.signal, f.rep_size,
             [(r.start, r.words, r.base_reg, r.mangled_ra) for r in f.fres]) for f in section.fdes]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections())
def test_encoded_sections_decode_to_the_same_model(section: Section) -> None:
    data = encode(section)
    back = decode(data, section.address)
    assert (back.version, back.abi, back.flags) == (section.version, section.abi, section.flags)
    assert normalized(back) == normalized(section)
    assert encode(back) == data
    exercise(data, section.address)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_sframe_errors(data: bytes) -> None:
    try:
        exercise(data)
    except SFrameError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=24, max_size=300), st.sampled_from([1, 2, 3]),
       st.sampled_from([b"\xe2\xde", b"\xde\xe2"]))
def test_random_bodies_behind_a_valid_preamble(body: bytes, version: int, magic: bytes) -> None:
    data = magic + bytes((version, body[0] & 7)) + body[1:]
    try:
        exercise(data)
    except SFrameError:
        pass


@lru_cache(maxsize=1)
def fixture_sections() -> list[tuple[str, bytes, int]]:
    """The .sframe bytes of one fixture per (toolchain, arch, kind), plus the largest."""
    from elftools.elf.elffile import ELFFile

    chosen: dict[tuple[str, str, str], str] = {}
    for entry in manifest_entries():
        chosen.setdefault((entry["toolchain"], entry["arch"], entry["kind"]), entry["path"])
    out = []
    for path in sorted(set(chosen.values())):
        with open(FIXTURES / path, "rb") as handle:
            elf = ELFFile(handle)
            section = elf.get_section_by_name(".sframe")
            out.append((path, section.data(), section["sh_addr"]))
    return out


def mutations(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    """Bit flips, byte stores, truncations, extensions and inflated counts."""
    out = []
    size = len(data)
    for _ in range(count):
        kind = rng.randrange(6)
        buf = bytearray(data)
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(size)
                buf[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            at = rng.randrange(size)
            buf[at] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif kind == 2:
            del buf[rng.randrange(size):]
        elif kind == 3:
            buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        elif kind == 4:
            field = rng.choice((8, 12, 16, 20, 24))  # num_fdes, num_fres, fre_len, fdeoff, freoff
            order = "<" if data[:2] == b"\xe2\xde" else ">"
            struct.pack_into(order + "I", buf, field,
                             rng.choice((0xFFFFFFFF, 0x7FFFFFFF, 0x10000, size, size * 2)))
        else:
            # inflate one FDE/attribute field near the start of the tables
            at = rng.randrange(28, min(size, 28 + 200))
            buf[at:at + 4] = b"\xff\xff\xff\xff"
        out.append(bytes(buf))
    return out


@needs_fixtures
def test_mutations_of_every_fixture_kind_raise_only_sframe_errors() -> None:
    rng = random.Random(20261122)
    cases = 0
    slowest = 0.0
    for path, data, address in fixture_sections():
        for mutated in mutations(data, rng, 120):
            begin = time.perf_counter()
            try:
                exercise(mutated, address)
            except SFrameError:
                pass
            except Exception as error:  # pragma: no cover - the failure report
                pytest.fail(f"{path}: {type(error).__name__}: {error} on a mutated section")
            slowest = max(slowest, time.perf_counter() - begin)
            cases += 1
    assert cases >= 3000
    assert slowest < 5.0, f"slowest mutated input took {slowest:.2f} s"


def test_inflated_num_fdes_fails_fast() -> None:
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8,
                      fdes=[FDE(0x1000, 16, [FRE(0, (8,))])])
    data = bytearray(encode(section))
    struct.pack_into("<I", data, 8, 2**32 - 1)
    begin = time.perf_counter()
    with pytest.raises(SFrameError):
        exercise(bytes(data))
    assert time.perf_counter() - begin < 0.5


def test_fdes_sharing_fre_data_cannot_blow_up() -> None:
    """Many FDEs pointing at the same large FRE block: refused, not walked num_fdes times."""
    block = FDE(0, 0xFFFF, [FRE(i, (8,)) for i in range(0, 60000, 2)])
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8,
                      fdes=[block] + [FDE(0x10000 * (i + 1), 16, [FRE(0, (8,))]) for i in range(2000)])
    data = bytearray(encode(section))
    for i in range(1, 2001):  # every FDE's fre_off -> the big block
        struct.pack_into("<I", data, 28 + 16 * i + 12, 0)
    begin = time.perf_counter()
    with pytest.raises(SFrameError):
        exercise(bytes(data))
    assert time.perf_counter() - begin < 5


@needs_fixtures
def test_mutated_elf_files_give_one_line_errors(tmp_path: Path) -> None:
    """Whole ELF files mutated in their headers, section headers and .sframe: the dump and
    validate commands' code paths raise only their own one-line errors."""
    import io
    from contextlib import redirect_stdout

    from pysframe.cli.dump import run_dump
    from pysframe.cli.validate import run_validate

    rng = random.Random(99)
    sources = [FIXTURES / "2.46" / "s390x" / "O2" / "cfi.o", FIXTURES / "2.44" / "x86_64" / "O2" / "cfi.o",
               FIXTURES / "2.46" / "aarch64" / "O0" / "prog"]
    cases = 0
    for source in sources:
        original = source.read_bytes()
        shoff = int.from_bytes(original[0x28:0x30], "big" if original[5] == 2 else "little")
        hot = [range(0, 64), range(shoff, min(len(original), shoff + 64 * 20))]
        for _ in range(150):
            data = bytearray(original)
            for _ in range(rng.randint(1, 6)):
                region = rng.choice(hot)
                at = rng.choice(region)
                data[at] = rng.randrange(256)
            if rng.random() < 0.2:
                del data[rng.randrange(len(data)):]
            path = tmp_path / "mutant"
            path.write_bytes(bytes(data))
            errors: list[str] = []
            with redirect_stdout(io.StringIO()):
                run_dump([str(path)], as_json=False, raw=False, address=0, section_name=".sframe",
                         report=errors.append)
                run_validate([str(path)], as_json=False, quiet=False, kernel=False, strict=False,
                             raw=False, address=0, report=errors.append)
            assert all("\n" not in message for message in errors)
            cases += 1
    assert cases == 450

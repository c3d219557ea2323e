"""Hostile input: property tests and a mutation test over every fixture section.

Random valid sections built with the encoder must decode to the same model;
random and mutated bytes may raise only SFrameError subclasses, after work linear in
their size. The work is counted, not timed: every FDE and FRE read of the checked
reader (:func:`tests.support.exercise.counting_work`), which every whole-section walk
goes through or is bounded by.
"""

from __future__ import annotations

import random
import struct
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.exercise import Work, counting_work, exercise
from tests.support.mutations import mutations
from tests.support.strategies import sections

from conftest import FIXTURES, manifest_entries, needs_fixtures
from pysframe.format import ABI, FDE, FRE, Section, SFrameError, decode, encode

#: Reads per byte of input allowed for one :func:`exercise` run. Each FDE (16-20 bytes)
#: and FRE (2 bytes or more) is read by a handful of walks (validate, decode, the JSON
#: dump, the lookup), which stays below this; hostile sections that made a walk repeat
#: (FDEs sharing FRE data, inflated counts) would read num_fdes x fre_len rows.
READS_PER_BYTE = 4


def reads_per_byte(work: Work, data: bytes) -> float:
    return work.reads / max(len(data), 1)


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


@needs_fixtures
def test_mutations_of_every_fixture_kind_raise_only_sframe_errors() -> None:
    rng = random.Random(20261122)
    cases = 0
    most = (0.0, "")
    for path, data, address in fixture_sections():
        for mutated in mutations(data, rng, 120):
            with counting_work() as work:
                try:
                    exercise(mutated, address)
                except SFrameError:
                    pass
                except Exception as error:  # pragma: no cover - the failure report
                    pytest.fail(f"{path}: {type(error).__name__}: {error} on a mutated section")
            most = max(most, (reads_per_byte(work, mutated), path))
            cases += 1
    assert cases >= 3000
    assert most[0] <= READS_PER_BYTE, f"a mutation of {most[1]} made {most[0]:.1f} reads per byte"


def test_inflated_num_fdes_fails_fast() -> None:
    """An FDE count far beyond the section is refused by the header check: no FDE is read."""
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8,
                      fdes=[FDE(0x1000, 16, [FRE(0, (8,))])])
    data = bytearray(encode(section))
    struct.pack_into("<I", data, 8, 2**32 - 1)
    with counting_work() as work, pytest.raises(SFrameError):
        exercise(bytes(data))
    assert work.reads == 0


def test_fdes_sharing_fre_data_cannot_blow_up() -> None:
    """Many FDEs pointing at the same large FRE block: refused, not walked num_fdes times."""
    block = FDE(0, 0xFFFF, [FRE(i, (8,)) for i in range(0, 60000, 2)])
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8,
                      fdes=[block] + [FDE(0x10000 * (i + 1), 16, [FRE(0, (8,))]) for i in range(2000)])
    data = bytearray(encode(section))
    for i in range(1, 2001):  # every FDE's fre_off -> the big block
        struct.pack_into("<I", data, 28 + 16 * i + 12, 0)
    with counting_work() as work, pytest.raises(SFrameError):
        exercise(bytes(data))
    # Walking every FDE's rows would read 2001 x 30000 FREs.
    assert reads_per_byte(work, bytes(data)) <= READS_PER_BYTE


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

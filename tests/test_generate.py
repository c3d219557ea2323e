"""Generating SFrame from CFI: per function, exactly what the GNU toolchains emitted.

For every linked fixture (2.44 -> V2, 2.46 and 2.47.50 -> V3, all arches) the
generated FDEs of the functions the toolchain covered are compared field by
field and row by row (start, size, PC type, FDE type, pauth key, signal bit,
rep_size, FRE type, and each row's start, data words, base register, mangled
bit and word size). The functions gas skipped must be skipped too, and the
only extra functions are those of the C run-time objects (crt1.o, crtbegin.o),
which were not assembled with --gsframe.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import FIXTURES, manifest_entries, needs_fixtures
from pysframe.elf import ElfImage
from pysframe.format.decode import decode
from pysframe.format.encode import encode
from pysframe.format.model import FDE
from pysframe.generate.gas import Skip, translate
from pysframe.generate.section import generate

LINKED = [e for e in manifest_entries()
          if e["elf_type"] != "REL" and e["toolchain"] in ("2.44", "2.46", "2.47.50")]


def shape(fde: FDE) -> tuple[object, ...]:
    return (fde.start, fde.size, fde.pc_type, fde.fde_type, fde.pauth_key_b, fde.signal,
            fde.rep_size, fde.fre_type,
            [(r.start, r.words, r.base_reg, r.mangled_ra, r.word_size)
             for r in fde.fres])


@needs_fixtures
@pytest.mark.parametrize("entry", LINKED, ids=lambda e: str(e["path"]))
def test_generated_functions_equal_the_toolchains(entry: dict[str, Any]) -> None:
    image = ElfImage(str(FIXTURES / entry["path"]))
    found = image.sframe_sections()[0]
    want = decode(found.raw, found.address)
    covered = {(f.start, f.size) for f in want.fdes}
    result = generate(image, version=want.version, as_gnu=True)
    got = decode(encode(result.section), result.section.address)
    assert (got.version, got.flags, got.cfa_fixed_ra_offset, got.cfa_fixed_fp_offset) == (
        want.version, want.flags, want.cfa_fixed_ra_offset, want.cfa_fixed_fp_offset)
    generated = {(f.start, f.size): f for f in got.fdes}
    for fde in want.fdes:
        assert (fde.start, fde.size) in generated, f"missing {fde.start:#x}"
        assert shape(generated[(fde.start, fde.size)]) == shape(fde)
    extra = set(generated) - covered
    crt = {"_start", "_dl_relocate_static_pie", "deregister_tm_clones", "register_tm_clones",
           "__do_global_dtors_aux", "frame_dummy", "__wrap_main"}
    symbols = _function_symbols(image)
    assert {symbols.get(start, hex(start)) for start, _ in extra} <= crt


def _function_symbols(image: ElfImage) -> dict[int, str]:
    symtab = image.elf.get_section_by_name(".symtab")
    if symtab is None:
        return {}
    return {s["st_value"]: s.name for s in symtab.iter_symbols() if s.name}


def test_gas_skips_with_its_reason() -> None:
    from pysframe.cfi.instructions import (
        DW_CFA_advance_loc,
        DW_CFA_def_cfa,
        DW_CFA_GNU_args_size,
        DW_CFA_offset,
        Instruction,
    )
    from pysframe.format.constants import ABI

    cie = [Instruction(DW_CFA_def_cfa, 7, 8), Instruction(DW_CFA_offset, 16, -8)]
    body = [Instruction(DW_CFA_advance_loc, 1), Instruction(DW_CFA_GNU_args_size, 16)]
    with pytest.raises(Skip, match="0x2e"):
        translate(cie + body, 0x1000, 8, ABI.AMD64_ENDIAN_LITTLE)
    # The unwinder's tables keep the function: the args size is for landing pads only.
    kept = translate(cie + body, 0x1000, 8, ABI.AMD64_ENDIAN_LITTLE, args_size=True)
    assert kept.fres and all(fre.words == (8,) for fre in kept.fres)
    signal = translate(cie + body, 0x1000, 8, ABI.AMD64_ENDIAN_LITTLE, signal=True)
    assert signal.signal and signal.fres == []  # V3 keeps a signal frame without rows
    assert translate(cie, 0x1000, 8, ABI.AMD64_ENDIAN_LITTLE).fres[0].words == (8,)


V3_FILES = [e for e in manifest_entries() if e["sframe_version"] == 3]


@needs_fixtures
@pytest.mark.parametrize("entry", V3_FILES, ids=lambda e: str(e["path"]))
def test_v3_sframe_agrees_with_its_cfi(entry: dict[str, Any]) -> None:
    from pysframe.generate.compare import compare_with_cfi, section_for_comparison

    image = ElfImage(str(FIXTURES / entry["path"]))
    found = image.sframe_sections()[0]
    data = section_for_comparison(image, found.raw, found.relocated)
    disagreements, notes = compare_with_cfi(image, data, found.address)
    assert notes == []
    # The one known disagreement: GNU ld's x86-64 .plt.got rule (CFA sp+16 for a bare
    # jump reached by a call; the file's own .eh_frame says sp+8).
    plt_got = image.section_ranges(".plt.got").get(".plt.got")
    expected = [] if plt_got is None or plt_got[0] == plt_got[1] else [plt_got[0]]
    assert [d.pc for d in disagreements] == expected
    assert all("GNU ld's .plt.got rule" in d.message for d in disagreements)


@needs_fixtures
def test_v2_sframe_disagreements_are_gas_2_44_limits() -> None:
    """gas 2.44 kept RA at CFA-8 where the CFI moves it to a register or makes it undefined,
    and restored the last finished row on .cfi_restore_state: real differences."""
    from pysframe.generate.compare import compare_with_cfi

    image = ElfImage(str(FIXTURES / "2.44" / "x86_64" / "O2" / "prog"))
    found = image.sframe_sections()[0]
    disagreements, _ = compare_with_cfi(image, found.raw, found.address)
    messages = [d.message for d in disagreements if "GNU ld's .plt.got rule" not in d.message]
    assert len(messages) == 4 and len(disagreements) == 5
    assert "CFI says CFA r7+8 RA r0+0 FP same" in messages[0]
    assert "CFI says RA undefined" in messages[1]


def test_cache_by_build_id(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from pysframe.cachedir import load
    from pysframe.format import SFrameLookup, SFrameReader
    from pysframe.generate.cache import cache_path, entry_kind, sframe_for, table_source

    libc = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.exists():
        pytest.skip("no x86-64 libc here")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    image = ElfImage(str(libc))
    build_id = image.build_id()
    assert build_id is not None
    data, address = sframe_for(image)
    entry = cache_path(build_id)
    assert entry is not None and str(entry).startswith(str(tmp_path))

    def cached() -> bytes | None:
        return load(entry_kind(), build_id, table_source(image))

    assert cached() == data and entry.read_bytes().endswith(data)
    entry.write_bytes(b"corrupt")
    again, _ = sframe_for(image)
    assert again == data and cached() == data  # a bad entry is regenerated
    reader = SFrameReader(data, address)
    symbol = image.elf.get_section_by_name(".dynsym").get_symbol_by_name("memcpy")[0]
    assert SFrameLookup(reader).find_fde(symbol["st_value"] + 1) is not None


def test_inject_keeps_the_program_runnable(tmp_path: Any) -> None:
    import shutil
    import subprocess
    import sys

    from pysframe.elf import ElfImage as Image
    from pysframe.format import SFrameLookup, SFrameReader

    program = shutil.which("ls")
    if program is None:
        pytest.skip("no ls")
    out = tmp_path / "ls-with-sframe"
    result = subprocess.run([sys.executable, "-m", "pysframe", "inject", program, "-o", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    original = subprocess.run([program, "--version"], capture_output=True, text=True)
    injected = subprocess.run([str(out), "--version"], capture_output=True, text=True)
    assert injected.stdout == original.stdout and injected.returncode == 0
    sections = Image(str(out)).sframe_sections()
    assert len(sections) == 1 and sections[0].found_by == "section-type"
    reader = SFrameReader(sections[0].raw, sections[0].address)
    assert reader.num_fdes > 10 and SFrameLookup(reader).sorted_verified
    again = subprocess.run([sys.executable, "-m", "pysframe", "inject", str(out), "-o",
                            str(tmp_path / "twice")], capture_output=True, text=True)
    assert again.returncode == 1 and "already has an SFrame section" in again.stderr


@needs_fixtures
def test_sections_equal_the_toolchains_byte_for_byte_but_for_fre_data_order() -> None:
    """Every linked fixture: the generated section (restricted to the functions the toolchain
    covered) is the toolchain's byte for byte once its FRE data follows the toolchain's order
    (ld writes each input object's FREs in the order it processes the objects, which the
    linked file does not record; as generated, in CFI order, none of the 59 is)."""
    identical_reordered = 0
    for entry in LINKED:
        image = ElfImage(str(FIXTURES / entry["path"]))
        found = image.sframe_sections()[0]
        want = decode(found.raw, found.address)
        covered = {(f.start, f.size) for f in want.fdes}
        result = generate(image, version=want.version,
                          include=lambda start, size, covered=covered: (start, size) in covered,
                          as_gnu=True)
        assert len(encode(result.section)) == len(found.raw)
        order = {(f.start, f.size): f.fre_off for f in want.fdes}
        for fde in result.section.fdes:
            fde.fre_off = order[(fde.start, fde.size)]
        reordered = encode(result.section)
        assert reordered == found.raw, entry["path"]
        identical_reordered += 1
    assert identical_reordered == len(LINKED) == 59


CRTI_INIT = "4883ec08" "488b05c5ffd801" "4885c0" "7402" "ffd0" "4883c408c3"


@pytest.mark.parametrize(("code", "sub_end"), [
    ("4883ec08" "4883c408c3", 4),  # .fini
    (CRTI_INIT, 4),  # .init: a call through __gmon_start__'s GOT slot
    ("f30f1efa" "4883ec08" "488b0571efac04" "4885c0" "7402" "ffd0" "e855680601" "4883c408c3",
     8),  # endbr64, and a direct call another object put there (node's)
])
def test_crt_init_and_fini_rows(code: str, sub_end: int) -> None:
    from pysframe.generate.crt import frame_of

    data = bytes.fromhex(code)
    fde = frame_of(data, 0x1000)
    assert fde is not None and (fde.start, fde.size) == (0x1000, len(data))
    assert [(fre.start, fre.words) for fre in fde.fres] == [
        (0, (8,)), (sub_end, (16,)), (len(data) - 1, (8,))]


@pytest.mark.parametrize("code", [
    "55" "4889e5" "5dc3",  # push %rbp; mov %rsp,%rbp; pop %rbp; ret: another shape
    "4883ec08" "50" "58" "4883c408c3",  # push/pop between: RSP moves
    CRTI_INIT + "90",  # padding after the ret
    "4883ec08" "488b05c5ff",  # cut short
])
def test_crt_other_shapes_get_no_rows(code: str) -> None:
    from pysframe.generate.crt import frame_of

    assert frame_of(bytes.fromhex(code), 0x1000) is None


@needs_fixtures
def test_a_merge_generates_only_the_functions_the_own_table_lacks(monkeypatch: Any) -> None:
    """A merged table takes from the CFI only the functions the file's own table does not
    start (and the linker stubs), so only those are generated; a function of the own
    table the validator leaves out gets its rows from the CFI, as with every function
    generated (the table is merged again then)."""
    from pysframe.generate import cache, section

    path = FIXTURES / "real" / "lua-2.46-x86_64" / "lua"
    image = ElfImage(str(path))
    (own_section,) = image.sframe_sections()
    own = decode(own_section.raw, own_section.address)
    translated: list[int] = []
    real_translate = section.translate_entry

    def counting(*arguments: Any, **keywords: Any) -> Any:
        translated.append(arguments[2].pc_begin)
        return real_translate(*arguments, **keywords)

    monkeypatch.setattr(section, "translate_entry", counting)
    merged = cache._valid_table(image, own_section.raw, own_section.address, own.version)
    owned = {fde.start for fde in own.fdes}
    assert merged is not None and translated and len(translated) < len(owned) // 10
    assert not owned & set(translated)
    # Every function generated, the old way: the same bytes.
    monkeypatch.setattr(cache, "_not_started_by", lambda image, own: lambda start, size: True)
    assert cache._valid_table(image, own_section.raw, own_section.address,
                              own.version) == merged
    # A function of the own table whose first row does not start at 0: left out, so its
    # rows come from the CFI (generated in a second round).
    victim = next(fde for fde in own.fdes if len(fde.fres) > 2 and fde.start not in
                  {start for start, _ in image.section_ranges(".plt", ".plt.sec").values()})
    victim.fres[0].start = 1
    damaged = encode(own)
    full = cache._valid_table(image, damaged, own_section.address, own.version)
    monkeypatch.undo()
    translated.clear()
    monkeypatch.setattr(section, "translate_entry", counting)
    assert cache._valid_table(image, damaged, own_section.address, own.version) == full
    assert victim.start in translated
    rows = {fde.start: fde for fde in decode(full, 0).fdes}
    assert rows[victim.start].fres[0].start == 0  # the CFI's rows, not the damaged ones

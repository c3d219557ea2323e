"""What a target's JIT list, a jitdump or an archive says is not trusted: a list that loops,
entries that claim huge objects, objects that are not ELF, truncated archives; each costs
its own part, reported in one line, never the run."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

from pysframe.audit.archives import Damage, members
from pysframe.sources.jit_interface import MAX_SYMFILE, jit_objects
from pysframe.unwind.jit_modules import jit_mappings


def memory(blocks: dict[int, bytes]):  # type: ignore[no-untyped-def]
    def read(address: int, size: int) -> bytes | None:
        for start, data in blocks.items():
            if start <= address < start + len(data):
                return data[address - start:address - start + size]
        return None
    return read


def test_a_looping_list_is_walked_once() -> None:
    descriptor = struct.pack("<IIQQ", 1, 0, 0, 0x2000)
    first = struct.pack("<QQQQ", 0x3000, 0, 0x5000, 4)
    second = struct.pack("<QQQQ", 0x2000, 0x2000, 0x5000, 4)  # back to the first
    read = memory({0x1000: descriptor, 0x2000: first, 0x3000: second, 0x5000: b"\x7fELF"})
    objects, problems = jit_objects(read, 0x1000)
    assert len(objects) == 2 and problems == ["JIT entry list at 0x2000: loops back"]


def test_huge_unreadable_and_bogus_objects_cost_their_own_frames() -> None:
    descriptor = struct.pack("<IIQQ", 1, 0, 0, 0x2000)
    huge = struct.pack("<QQQQ", 0x3000, 0, 0x5000, MAX_SYMFILE + 1)
    unreadable = struct.pack("<QQQQ", 0x4000, 0x2000, 0x9000, 64)
    bogus = struct.pack("<QQQQ", 0, 0x3000, 0x5000, 16)
    read = memory({0x1000: descriptor, 0x2000: huge, 0x3000: unreadable, 0x4000: bogus,
                   0x5000: b"not an elf file!"})
    objects, problems = jit_objects(read, 0x1000)
    assert len(objects) == 1 and len(problems) == 2
    assert "over the limit" in problems[0] and "unreadable" in problems[1]
    mappings, more = jit_mappings(objects)
    assert mappings == [] and len(more) == 1 and more[0].startswith("JIT object at 0x5000")
    assert jit_objects(memory({0x1000: struct.pack("<IIQQ", 7, 0, 0, 0)}), 0x1000) == (
        [], ["JIT descriptor at 0x1000: version 7, not 1"])


def test_damaged_archives_end_the_listing_not_the_run(tmp_path: Path) -> None:
    header = b"!<arch>\n" + b"a.o/".ljust(16) + b"0".ljust(32) + b"99999".ljust(10) + b"`\n"
    # the size runs past the end: the archive is damaged (reported), not empty
    [(label, damage)] = list(members(header + b"\x7fELF"))
    assert label == "" and isinstance(damage, Damage) and "runs past the end" in damage.message
    # trailing bytes too few for a member header: damaged (objdump and ar: "file format
    # not recognized"), not an empty archive
    [(label, damage)] = list(members(b"!<arch>\nshort"))
    assert label == "" and isinstance(damage, Damage) and "cut short" in damage.message
    assert list(members(b"!<arch>\n")) == []
    broken = tmp_path / "broken.a"
    broken.write_bytes(header + b"\x7fELF")
    run = subprocess.run([sys.executable, "-m", "pysframe", "upgrade", str(broken), "-o",
                          str(tmp_path / "out.a")], capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "runs past the end" in run.stderr and not (tmp_path / "out.a").exists()


def test_a_hundred_thousand_bogus_entries_are_one_line() -> None:
    """A hostile target's descriptor listing 99,999 objects that are not ELF: the objects
    are skipped and said once, with a count, not in 100,000 lines."""
    count = 99_999
    entries = b"".join(struct.pack("<QQQQ", 0x10000 + 32 * (index + 1) if index + 1 < count
                                   else 0, 0, 0x5000, 16) for index in range(count))
    read = memory({0x1000: struct.pack("<IIQQ", 1, 0, 0, 0x10000), 0x10000: entries,
                   0x5000: b"not an elf file!"})
    objects, problems = jit_objects(read, 0x1000)
    assert len(objects) == count and problems == []
    mappings, more = jit_mappings(objects)
    assert mappings == [] and len(more) == 1
    assert more[0].startswith(f"JIT objects: {count:,} problems, the first: JIT object at 0x5000")


def test_the_stack_command_looks_for_the_descriptor_the_reader_reads() -> None:
    from pysframe.cli.stack_common import JIT_DESCRIPTOR
    from pysframe.sources.jit_interface import DESCRIPTOR_SYMBOL

    assert JIT_DESCRIPTOR == DESCRIPTOR_SYMBOL == "__jit_debug_descriptor"

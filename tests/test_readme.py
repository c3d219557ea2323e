"""The README's "Library" example runs exactly as printed, on real fixture sections."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO
from pysframe.elf import ElfImage
from pysframe.format import SFrameLookup, SFrameReader


def section_code(title: str) -> list[str]:
    """The ```python blocks of the README section ``## title``."""
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end >= 0 else len(text)]
    return re.findall(r"^```python\n(.*?)^```$", body, flags=re.DOTALL | re.MULTILINE)


def test_the_library_section_has_code() -> None:
    blocks = section_code("Library")
    assert blocks and all("section_bytes" in block for block in blocks)


#: A V3 section with flexible FDEs (convert to V2 refuses) and a V2 one (converts).
PROGRAMS = ["2.46/x86_64/O2/prog", "2.44/x86_64/O2/prog"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_library_example_runs_as_printed(program: str) -> None:
    path: Path = FIXTURES / program
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared/fixtures)")
    sframe = ElfImage(str(path)).sframe_sections()[0]
    reader = SFrameReader(sframe.raw, sframe.address)
    lookup = SFrameLookup(reader)
    # A PC with rules: a few bytes into the first function that has a row there.
    pc = next(start + 4 for start in map(reader.fde_start, range(reader.num_fdes))
              if lookup.find_fre(start + 4) is not None)
    row = lookup.find_fre(pc)
    assert row is not None
    for block in section_code("Library"):
        namespace = {"section_bytes": sframe.raw, "section_address": sframe.address, "pc": pc}
        out = io.StringIO()
        with redirect_stdout(out):
            exec(compile(block, "README.md", "exec"), namespace)
        lines = out.getvalue().splitlines()
        assert lines[0] == f"{row.cfa} {row.ra} {row.fp}"
        assert lines[1].startswith("Contents of the SFrame section .sframe:")

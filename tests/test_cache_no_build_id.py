"""A binary without a build id has its generated table cached too, named by the digest of
the bytes the table is made from, and a changed binary is not served the old entry."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pysframe.elf import ElfImage
from pysframe.generate import cache


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_binary_without_build_id_is_cached(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "p.c"
    source.write_text("int f(int x) { return x * 3; }\nint main(void) { return f(1) - 3; }\n")
    binary = tmp_path / "p"
    subprocess.run(["gcc", "-O2", "-Wl,--build-id=none", "-o", str(binary), str(source)],
                   check=True)
    image = ElfImage(str(binary))
    assert image.build_id() is None
    assert cache.cached_table(image) is None
    made, _ = cache.sframe_for(image)
    assert cache.cached_table(ElfImage(str(binary))) == made  # kept, found again
    key = cache.cache_key(image, cache.table_source(image))
    assert key.startswith(b"sha:")
    # Another program (other code, other CFI) gets its own entry, not this one.
    source.write_text("int g(int x) { return x + 1; }\nint main(void) { return g(-1); }\n")
    subprocess.run(["gcc", "-O0", "-Wl,--build-id=none", "-o", str(binary), str(source)],
                   check=True)
    other = ElfImage(str(binary))
    assert cache.cache_key(other, cache.table_source(other)) != key
    assert cache.cached_table(other) is None

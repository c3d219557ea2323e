"""A cache of generated SFrame sections, keyed by build id, under the XDG cache directory.

Binaries without .sframe get their table generated once; the unwinder then
reads it from ``$XDG_CACHE_HOME/pysframe/sframe/`` (default ``~/.cache``).
Entries are written through a temporary file and a rename, so concurrent
workers never see a partial file; a corrupt entry is regenerated.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..elf import ElfImage
from ..format.decode import SFrameReader
from ..format.encode import encode
from ..format.errors import SFrameError
from .section import generate

#: Bumped whenever the generator's output changes, so old entries are not reused.
GENERATOR_VERSION = 1


def cache_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pysframe" / "sframe"


def cache_path(build_id: bytes, version: int = 3) -> Path:
    name = build_id.hex()
    return cache_directory() / name[:2] / f"{name[2:]}.g{GENERATOR_VERSION}.v{version}.sframe"


def sframe_for(image: ElfImage, *, version: int = 3, use_cache: bool = True) -> tuple[bytes, int]:
    """(section bytes, section address) for ``image``: its own .sframe if it has one,
    else a generated one (from the cache when possible). Generated sections sit at
    address 0, so their function starts are the file's link-time addresses."""
    own = image.sframe_sections()
    if own:
        return own[0].raw, own[0].address
    build_id = image.build_id() if use_cache else None
    path = cache_path(build_id, version) if build_id else None
    if path is not None and path.exists():
        data = path.read_bytes()
        try:
            SFrameReader(data, 0)
            return data, 0
        except SFrameError:
            pass  # corrupt entry: regenerate it
    data = encode(generate(image, version=version, address=0).section)
    if path is not None:
        _store(path, data)
    return data, 0


def _store(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except OSError:
        pass  # a cache that cannot be written is only slower

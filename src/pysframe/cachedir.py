"""Where pysframe keeps what it derives from binaries, by build id, and how it writes there.

``$XDG_CACHE_HOME/pysframe/<kind>/<first two hex digits>/<rest><suffix>`` (default
``~/.cache``). Entries are written through a temporary file and a rename, so concurrent
workers never see a partial file; a cache that cannot be written is skipped silently
(read-only home, full disk): it only makes the next run slower.
"""

from __future__ import annotations

import os
import tempfile


def cache_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pysframe")


def entry_path(kind: str, build_id: bytes, suffix: str) -> str:
    """The cache file of ``kind`` (``sframe``, ``symbols``, ``dwarf``) for ``build_id``."""
    name = build_id.hex()
    return os.path.join(cache_root(), kind, name[:2], name[2:] + suffix)


def store(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; give up silently when that is impossible."""
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        pass

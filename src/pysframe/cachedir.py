"""Where pysframe keeps what it derives from binaries, by build id, and how it writes files
atomically (for the cache and for the commands' outputs alike).

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


def write_atomically(path: str, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it and a rename, so no
    reader ever sees a partial file. ``mode``: the new file's permissions (default: what
    ``open`` would give, 0666 less the umask). Raises ``OSError``; the temporary file is
    removed on every failure."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".sframe-tmp-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def store(path: str, data: bytes) -> None:
    """Write a cache entry atomically; give up silently when that is impossible."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, data, mode=0o600)
    except OSError:
        pass

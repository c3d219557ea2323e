"""Where a binary's separate debug file is, by build id (``/usr/lib/debug/.build-id``)."""

from __future__ import annotations

import os

DEBUG_ROOT = "/usr/lib/debug"


def build_id_path(build_id: bytes, root: str = DEBUG_ROOT) -> str:
    """``<root>/.build-id/<first two hex digits>/<rest>.debug`` (it may not exist)."""
    text = build_id.hex()
    return os.path.join(root, ".build-id", text[:2], text[2:] + ".debug")


def debug_file(build_id: bytes | None, root: str = DEBUG_ROOT) -> str | None:
    """The separate debug file of ``build_id`` when it is installed, else ``None``."""
    if not build_id:
        return None
    path = build_id_path(build_id, root)
    return path if os.path.isfile(path) else None

"""Shared test helpers: where the fixtures live (../shared/fixtures from the repo root)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"


def manifest_entries() -> list[dict[str, Any]]:
    """Entries of the fixture manifest, or an empty list when the fixtures are absent."""
    path = FIXTURES / "manifest.json"
    if not path.exists():
        return []
    entries: list[dict[str, Any]] = json.loads(path.read_text())["files"]
    return entries


needs_fixtures = pytest.mark.skipif(not (FIXTURES / "manifest.json").exists(),
                                    reason="../shared/fixtures is not present")

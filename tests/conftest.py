"""Shared test helpers: where the fixtures live (../shared/fixtures from the repo root), and
running `sframe stack --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def stack_json(*arguments: str, cache: object) -> dict[str, Any]:
    """`sframe stack --json ARGUMENTS` (skips where ptrace is forbidden)."""
    result = subprocess.run([sys.executable, "-m", "pysframe", "stack", "--json", *arguments],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    if result.returncode == 2 and "not permitted" in result.stderr:
        pytest.skip("ptrace is not permitted here")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document

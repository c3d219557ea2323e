"""Shared test helpers: where the fixtures live (../shared/fixtures from the repo root), and
running `sframe stack --json`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# No test asks a debuginfod server it did not start itself (a machine's DEBUGINFOD_URLS,
# e.g. from /etc/profile.d, would send every stripped binary's build id out).
os.environ.pop("DEBUGINFOD_URLS", None)

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


#: Words naming the outside tools that judge our output (tests/support/oracles.py): a skip
#: whose reason names one is a missing oracle.
ORACLE_IN_REASON = re.compile(
    r"\b(perf|gdb|gcore|objdump|binutils|ld 2\.4\d|go tool|pprof|chromium|playwright|browser|speedscope|"
    r"protoc|protobuf|eu-stack|debuginfod)\b", re.IGNORECASE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """With CI=true, a skipped test fails: CI installs every oracle
    (tools/install-oracles.sh) and runs as root on x86-64 with ptrace and BPF, so a skip
    there means a check that claims to run does not (one for want of an oracle is said
    so). This also catches ``skipif`` marks and skips that do not go through
    ``oracles.py``."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or os.environ.get("CI", "").lower() != "true":
        return
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(
        report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"oracle missing in CI (skipped: {reason})"
                       if ORACLE_IN_REASON.search(reason) else f"skipped in CI: {reason}")

"""A command run in its own interpreter that must leave no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def ends_leaving_nothing(code: str, arguments: list[str], cache: Path) -> None:
    """Run ``code`` (it prints the pid of a helper it started, still at work when the code
    ends) with ``cache`` as XDG_CACHE_HOME: the command ends well within 30 s (it does
    not wait a minute for the helper), the helper is gone and reaped (not even a zombie),
    and no half-written cache entry is left."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True,
                          text=True, timeout=50, env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    try:
        assert time.monotonic() - started < 30
        assert not os.path.exists(f"/proc/{pid}")  # (reaped: not even a zombie)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)  # (the helper of a run that left it)
        except ProcessLookupError:
            pass
    assert not list(cache.rglob(".tmp-*"))

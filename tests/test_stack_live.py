"""`sframe stack PID` on a live process: the same return addresses as gdb, and the target
keeps running afterwards."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 only")


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def test_stack_of_a_sleeping_process_matches_gdb(tmp_path: object) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.3)
        result = subprocess.run([sys.executable, "-m", "pysframe", "stack", "--json",
                                 str(sleeper.pid)], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
        if result.returncode == 2 and "Operation not permitted" in result.stderr:
            pytest.skip("ptrace is not permitted here")
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        ours = [frame["pc"] for frame in document["threads"][0]["frames"]]
        assert "clock_nanosleep" in document["threads"][0]["frames"][0]["function"]
        assert state(sleeper.pid) in ("S", "R")  # detached: not left in tracing stop
        if shutil.which("gdb"):
            text = subprocess.run(["gdb", "-batch", "-ex", "bt", "-p", str(sleeper.pid)],
                                  capture_output=True, text=True, timeout=120).stdout
            theirs = [int(m[1], 16) for m in re.finditer(r"^#\d+\s+(0x[0-9a-f]+) in ", text,
                                                         re.MULTILINE)]
            assert theirs and ours[1:len(theirs) + 1] == theirs
    finally:
        sleeper.kill()
        sleeper.wait()


def test_stack_of_a_missing_process() -> None:
    result = subprocess.run([sys.executable, "-m", "pysframe", "stack", "999999999"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1

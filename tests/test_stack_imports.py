"""What a warm `sframe stack` imports: only what the walk uses (issue 29). Tables and
symbols in the cache and no JIT code in the target, so no pyelftools, numpy, generator,
CFI parser, click, rich, hashlib, dataclasses, typing or re (each costs milliseconds of a
command measured against eu-stack; typing imports re), nor contextlib, importlib (with
warnings) or zlib (~1.2 ms together), ctypes (~2 ms: ptrace is called through its C
module, :mod:`pysframe.sources.ptrace_sys`), signal (~0.7 ms of enum classes:
:mod:`pysframe.c_signal`), enum or functools (~4.5 ms with the collections functools
imports: :mod:`pysframe.enums`), collections (array imports it: the flat tables' arrays
are made when built), operator or heapq. Not a timing: the list of modules, so the diet cannot
regress unnoticed."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pysframe

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 only")

#: Modules of the table generator and of CFI parsing that the cache readers may import
#: (the cache lookups, whole and on-demand tables, and the errors they name).
ALLOWED = {"pysframe.generate", "pysframe.generate.cache", "pysframe.generate.errors",
           "pysframe.generate.on_demand", "pysframe.generate.function_index",
           "pysframe.generate.abi", "pysframe.cfi",
           "pysframe.cfi.errors"}
UNWANTED_TOP = ("elftools", "numpy", "click", "rich", "hashlib", "_hashlib", "dataclasses",
                "typing", "re", "contextlib", "importlib", "warnings", "zlib", "ctypes",
                "signal", "tempfile", "enum", "functools", "collections", "array",
                "operator", "heapq")

#: entry.main() ends the process with os._exit after running the exit functions: the
#: probe registers one that prints the unwanted modules then loaded. It runs without
#: ``site`` (``python -S``, pysframe's directory put on the path by hand): a module a
#: site-packages .pth file imports at start-up (a sandbox's certificate set-up imports
#: typing, re and operator) would otherwise hide the same import by the command.
PROBE = f"""
import atexit, sys
sys.path.insert(0, {str(Path(pysframe.__file__).resolve().parents[1])!r})
before = set(sys.modules)
def unwanted():
    found = sorted(m for m in set(sys.modules) - before
                   if m.split('.')[0] in {UNWANTED_TOP!r}
                   or (m.startswith(('pysframe.generate', 'pysframe.cfi'))
                       and m not in {sorted(ALLOWED)!r}))
    sys.stderr.write('unwanted: ' + ' '.join(found) + '\\n')
atexit.register(unwanted)
sys.argv = ['sframe', 'stack', sys.argv[1]]
from pysframe.cli.entry import main
main()
"""


def test_a_warm_stack_imports_only_what_it_uses(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "DEBUGINFOD_URLS"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.3)
        first = subprocess.run([sys.executable, "-m", "pysframe", "stack", str(sleeper.pid)],
                               capture_output=True, text=True, timeout=120, env=env,
                               check=False)  # fills the cache
        if first.returncode == 2 and "not permitted" in first.stderr:
            pytest.skip("ptrace is not permitted here")
        assert first.returncode == 0, first.stderr
        warm = subprocess.run([sys.executable, "-S", "-c", PROBE, str(sleeper.pid)],
                              capture_output=True, text=True, timeout=120, env=env,
                              check=False)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == first.stdout
    assert warm.stderr.splitlines()[-1] == "unwanted: ", warm.stderr

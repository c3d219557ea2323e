"""What `sframe script` imports: the tables a first run makes per function and the symbols
it reads use the project's record classes, not ``dataclasses`` (with ``inspect``, ``ast``,
``dis`` and ``tokenize``: ~9 ms of a run measured against perf); a warm run through the
installed ``sframe`` command imports neither ``typing`` nor ``re`` (~3 ms together; pip's
wrapper of an entry point imports ``re``), nor ``tempfile`` or ``shutil`` (~4.5 ms, for the
vDSO's copy), nor ``ctypes`` (~1.3 ms, for the demangler: the Lua program's names are C's), nor
``select`` (~0.4 ms: only a batch run's turns wait on several children). Not a timing: the list of modules, so that the imports cannot grow
unnoticed. Also: the cyclic collector is off for ``stack`` alone (internal consistency:
the probe reads ``gc.isenabled()`` at exit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import unavailable

import pysframe
from conftest import FIXTURES

LUA = FIXTURES / "real" / "lua-2.46-x86_64"
UNWANTED = ("dataclasses", "inspect", "ast", "elftools")
#: Not imported by a warm run either (a first one writes its cache entries with tempfile;
#: enum, functools, collections, array and operator cost ~6 ms together: see
#: pysframe.enums and the modules that import array where they make one).
UNWANTED_WARM = (*UNWANTED, "typing", "re", "tempfile", "shutil", "ctypes", "enum", "functools",
                 "collections", "array", "operator", "select")

#: Where pysframe is imported from: the probes run without ``site`` (``python -S``), so a
#: module that a site-packages .pth file imports at start-up (this machine's sandbox imports
#: ``operator``) cannot hide one our command imports.
SOURCE = str(Path(pysframe.__file__).resolve().parents[1])


def _probe(unwanted: tuple[str, ...], run: str) -> str:
    """A program, run with ``python -S`` (see :data:`SOURCE`), that runs ``run`` and, at
    exit, prints the ``unwanted`` modules then loaded. entry.main() ends the process with
    os._exit after running the exit functions."""
    return f"""
import atexit, sys
sys.path.insert(0, {SOURCE!r})
before = set(sys.modules)
def unwanted():
    found = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in {unwanted!r})
    sys.stderr.write('unwanted: ' + ' '.join(found) + '\\n')
atexit.register(unwanted)
{run}"""


PROBE = _probe(UNWANTED, """sys.argv = ['sframe', 'script', *sys.argv[1:]]
from pysframe.cli.entry import main
main()
""")
#: The same through the installed command (sys.argv[1]): its own imports are counted.
SCRIPT_PROBE = _probe(UNWANTED_WARM, """command = sys.argv[1]
sys.argv = [command, 'script', *sys.argv[2:]]
with open(command) as text:
    code = compile(text.read(), command, 'exec')
exec(code, {'__name__': '__main__', '__file__': command})
""")


@pytest.mark.skipif(not (LUA / "perf.data").exists(), reason="no Lua fixture")
def test_a_first_script_makes_its_tables_without_dataclasses(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "DEBUGINFOD_URLS"}
    env["XDG_CACHE_HOME"] = str(tmp_path)  # empty: every table and symbol made here
    args = [str(LUA / "perf.data"), "--binaries", str(LUA)]
    first = subprocess.run([sys.executable, "-S", "-c", PROBE, *args], capture_output=True,
                           text=True, timeout=300, env=env, check=False)
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines()[-1] == "unwanted: ", first.stderr
    assert any((tmp_path / "pysframe" / "sframe").rglob("*")), "no table was made"
    again = subprocess.run([sys.executable, "-m", "pysframe", "script", *args],
                           capture_output=True, text=True, timeout=300, env=env, check=False)
    assert again.returncode == 0 and again.stdout == first.stdout
    command = Path(sys.executable).with_name("sframe")
    if not command.is_file():
        unavailable(f"no sframe command beside {sys.executable} (pip install -e .)")
    warm = subprocess.run([sys.executable, "-S", "-c", SCRIPT_PROBE, str(command), *args],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert warm.returncode == 0, warm.stderr
    assert warm.stderr.splitlines()[-1] == "unwanted: ", warm.stderr
    assert warm.stdout == first.stdout


#: The installed command (sys.argv[1]) with its arguments; at exit, whether the cyclic
#: collector is on.
COLLECTOR_PROBE = """import atexit, gc, sys
atexit.register(lambda: sys.stderr.write(f'collector on: {gc.isenabled()}\\n'))
command = sys.argv[1]
sys.argv = [command, *sys.argv[2:]]
with open(command) as text:
    code = compile(text.read(), command, 'exec')
exec(code, {'__name__': '__main__', '__file__': command})
"""


@pytest.mark.skipif(not (LUA / "perf.data").exists(), reason="no Lua fixture")
def test_the_collector_is_off_for_stack_alone(tmp_path: Path) -> None:
    """The script starts with the cyclic collector off (its passes while modules load);
    ``stack`` keeps it off to the end, ``script`` and click's commands turn it on."""
    command = Path(sys.executable).with_name("sframe")
    if not command.is_file():
        unavailable(f"no sframe command beside {sys.executable} (pip install -e .)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    target = subprocess.Popen(["sleep", "30"])
    try:
        runs = {
            "stack": [str(target.pid)],
            "script": [str(LUA / "perf.data"), "--binaries", str(LUA)],
            "dump": [str(LUA / "lua")],
        }
        for name, args in runs.items():
            done = subprocess.run([sys.executable, "-c", COLLECTOR_PROBE, str(command), name,
                                   *args], capture_output=True, text=True, timeout=300,
                                  env=env, check=False)
            assert done.stderr.splitlines()[-1] == f"collector on: {name != 'stack'}", \
                (name, done.returncode, done.stderr[-500:])
            assert done.stdout, (name, done.stderr[-500:])
    finally:
        target.kill()
        target.wait()

"""What `sframe script` imports: the tables a first run makes per function and the symbols
it reads use the project's record classes, not ``dataclasses`` (with ``inspect``, ``ast``,
``dis`` and ``tokenize``: ~9 ms of a run measured against perf); a warm run through the
installed ``sframe`` command imports neither ``typing`` nor ``re`` (~3 ms together; pip's
wrapper of an entry point imports ``re``), nor ``tempfile`` or ``shutil`` (~4.5 ms, for the
vDSO's copy), nor ``ctypes`` (~1.3 ms, for the demangler: the Lua program's names are C's). Not a timing: the list of modules, so that the imports cannot grow
unnoticed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import unavailable

from conftest import FIXTURES

LUA = FIXTURES / "real" / "lua-2.46-x86_64"
UNWANTED = ("dataclasses", "inspect", "ast", "elftools")
#: Not imported by a warm run either (a first one writes its cache entries with tempfile).
UNWANTED_WARM = (*UNWANTED, "typing", "re", "tempfile", "shutil", "ctypes")

def _probe(unwanted: tuple[str, ...], run: str) -> str:
    """A program that runs ``run`` and, at exit, prints the ``unwanted`` modules then
    loaded. entry.main() ends the process with os._exit after running the exit functions;
    modules a site-packages .pth file imported before the probe are not counted."""
    return f"""
import atexit, sys
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
    first = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
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
    warm = subprocess.run([sys.executable, "-c", SCRIPT_PROBE, str(command), *args],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert warm.returncode == 0, warm.stderr
    assert warm.stderr.splitlines()[-1] == "unwanted: ", warm.stderr
    assert warm.stdout == first.stdout

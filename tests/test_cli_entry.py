"""The console script's own parser for ``stack`` and ``script`` gives what click gives.

For every command line below, the call :func:`pysframe.cli.entry.lean_call` makes is the
one click makes (its run_* function and keyword arguments), or the lean parser declines and
click decides (help, errors, anything unusual). And the lean path really skips click.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pysframe.cli import entry, main

SCRIPT_LINES = [
    ["script", "x.data"],
    ["script", "x.data", "--binaries", "bins"],
    ["script", "--binaries=bins", "x.data", "--binaries", "other"],
    ["script", "x.data", "-o", "out.txt"],
    ["script", "x.data", "-oout.txt", "--show-stops"],
    ["script", "x.data", "--output=out.txt", "--output", "last.txt"],
    ["script", "--", "-x.data"],
    ["script", "-", "--show-stops"],
    ["script", "x.data", "-j", "2"],
    ["script", "x.data", "-j3", "--jobs=4"],
    ["script", "--jobs", "1", "x.data"],
    ["script", "x.data", "--no-merge-callchains"],
    ["script", "--no-merge-callchains", "x.data", "--merge-callchains"],
    ["script"],  # ./perf.data, as perf
    ["script", "-i", "x.data"],
    ["script", "-ix.data", "--show-stops"],
    ["script", "--input=x.data"],
    ["script", "--input", "x.data", "-i", "y.data"],
    ["script", "x.data", "--pid", "12,13", "--tid=14"],
    ["script", "--comms", "xz,gzip", "-c", "sh", "--comm=gzip"],
    ["script", "-cxz", "x.data"],
    ["script", "--time", "1.5,2 3,", "x.data"],
    ["script", "--time=10%/2"],
    ["script", "--time", "-1,"],  # a value, whatever it looks like; run_script refuses it
    ["script", "-i", ""],
    ["script", ""],
    # click decides these (errors or help): the lean parser must decline
    ["script", "x.data", "-i", "y.data"],
    ["script", "-i", "dir"],
    ["script", "-i"],
    ["script", "x.data", "--pid"],
    ["script", "--comms=xz", "--time"],
    ["script"],
    ["script", "a", "b"],
    ["script", "x.data", "--bogus"],
    ["script", "x.data", "--binaries"],
    ["script", "x.data", "--show-stops=1"],
    ["script", "x.data", "--no-merge-callchains=0"],
    ["script", "x.data", "--help"],
    ["script", "-h"],
    ["script", "dir"],
    ["script", "x.data", "--binaries", "file.txt"],
    ["script", "x.data", "-o", "dir"],
    ["script", "x.data", "-j", "0"],
    ["script", "x.data", "-j", "x"],
    ["script", "x.data", "-j"],
    ["script", "x.data", "--jobs=999"],
]
STACK_LINES = [
    ["stack", "123"],
    ["stack", "123", "--json", "--build-id", "--modules"],
    ["stack", "--max-depth", "5", "123", "--timeout=2.5"],
    ["stack", "123", "--no-debuginfo"],
    ["stack", "123", "--no-debuginfo", "--debuginfo"],
    ["stack", "--core", "core.1"],
    ["stack", "--core", "core.1", "--exe", "file.txt"],
    ["stack", "--core=core.1", "--timeout", "0"],
    ["stack", "+42"],
    # click decides these
    ["stack"],
    ["stack", "12", "34"],
    ["stack", "12", "--core", "core.1"],
    ["stack", "12", "--exe", "file.txt"],
    ["stack", "--core", "core.1", "--exe", "missing"],
    ["stack", "--core", "core.1", "--exe", "dir"],
    ["stack", "abc"],
    ["stack", "-1"],
    ["stack", "12", "--max-depth", "0"],
    ["stack", "12", "--max-depth", "x"],
    ["stack", "12", "--timeout", "nan"],
    ["stack", "12", "--timeout", "-1"],
    ["stack", "12", "--timeout", "86401"],
    ["stack", "12", "--json=yes"],
    ["stack", "12", "-h"],
    ["stack", "--core", "dir"],
    ["--version"],
    ["dump", "x"],
    [],
]


def _click_call(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]] | None:
    """What click calls for ``argv`` (None: it stopped first, with help or an error)."""
    from pysframe.cli import script, stack

    calls: list[tuple[str, dict[str, Any]]] = []

    def fake_script(perf_data: str, **kwargs: Any) -> int:
        kwargs.pop("report")
        calls.append(("script", {"perf_data": perf_data, **kwargs}))
        return 0

    def fake_stack(pid: int | None, **kwargs: Any) -> int:
        calls.append(("stack", {"pid": pid, **kwargs}))
        return 0

    monkeypatch.setattr(script, "run_script", fake_script)
    monkeypatch.setattr(stack, "run_stack", fake_stack)
    try:
        main.cli.main(argv, standalone_mode=False)
    except BaseException:
        return calls[0] if calls else None
    return calls[0] if calls else None


@pytest.mark.parametrize("argv", SCRIPT_LINES + STACK_LINES, ids=" ".join)
def test_the_lean_parser_calls_what_click_calls_or_declines(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir").mkdir()
    (tmp_path / "bins").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "file.txt").write_text("x")
    clicked = _click_call(argv, monkeypatch)
    lean = entry.lean_call(argv)
    capsys.readouterr()
    if lean is not None:
        assert lean == clicked
    elif clicked is not None:
        # Declined though click accepts it: allowed only where click sees more than this
        # parser does (none of the lines above).
        pytest.fail(f"lean parser declined a line click accepts: {argv}")


def test_stack_and_script_do_not_import_click(tmp_path: Path) -> None:
    # entry.main() ends the process with os._exit after the exit functions: the probe's
    # prints what was loaded then.
    probe = ("import atexit, sys; sys.argv = ['sframe', 'script', 'missing.data']\n"
             "atexit.register(lambda: print(sorted(m for m in sys.modules if m.split('.')[0]"
             " in ('click', 'rich', 'numpy', 'elftools'))))\n"
             "from pysframe.cli import entry\n"
             "entry.main()\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60, check=False)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    assert done.stderr.startswith("sframe: ") and done.stderr.count("\n") == 1

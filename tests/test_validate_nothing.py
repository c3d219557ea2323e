"""What a newcomer meets first (issue 12, item 10): ``validate`` on a file without SFrame
and ``stack`` on a kernel thread or a PID that does not exist, each one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_PF_KTHREAD = 0x00200000


def sframe(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", *arguments], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def test_validate_without_sframe_has_nothing_to_validate() -> None:
    program = sys.executable  # Debian's python3: an ELF file without .sframe
    for arguments in ((), ("--against-eh-frame",)):
        result = sframe("validate", *arguments, program)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"{program}: no SFrame section, nothing to validate\n"
        assert result.stderr == ""
    quiet = sframe("validate", "-q", program)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    as_json = sframe("validate", "--json", program)
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout) == [{"file": program, "valid": True, "sframe": False,
                                           "findings": []}]


def test_validate_require_makes_a_missing_section_a_problem() -> None:
    result = sframe("validate", "--require", sys.executable)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"sframe: {sys.executable}: no SFrame section\n"


def _kernel_thread() -> tuple[int, str] | None:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        comm, _, rest = text.partition("(")[2].rpartition(")")
        fields = rest.split()
        if len(fields) > 6 and int(fields[6]) & _PF_KTHREAD:
            return int(name), comm
    return None


def test_stack_on_a_kernel_thread_says_so() -> None:
    found = _kernel_thread()
    if found is None:
        pytest.skip("no kernel thread visible here (a PID namespace)")
    pid, comm = found
    result = sframe("stack", str(pid))
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr == f"sframe: PID {pid} ({comm}) is a kernel thread: no user stack\n"


def test_stack_on_a_missing_pid_says_no_such_process() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    result = sframe("stack", str(pid_max + 1))  # no process can have it
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr == f"sframe: process {pid_max + 1}: no such process\n"

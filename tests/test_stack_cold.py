"""`sframe stack` names the `.cold` part of a function split by gcc as gdb does: with DWARF
the frame is the function's (`work`, gdb's bt), and the offset printed counts from the ELF
symbol the address lies in, under that symbol's name as gdb prints it (`work[cold]+0x11`,
gdb's `info symbol`: `work[cold] + 17`), never from the function's entry in its other
part (gdb's own `x/i` does that with DWARF: `<work-352>`). Without DWARF the frame is
the symbol's, `work[cold]` in gdb's bt as in ours."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from tests.support.oracles import missing, need_gdb

from conftest import stack_json

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 only")
SOURCE = Path(__file__).parent / "data" / "cold_part.c"


def wait_blocked(pid: int) -> None:
    """Until the process sleeps (in pause(), past its "ready")."""
    for _ in range(200):
        with open(f"/proc/{pid}/stat") as handle:
            if handle.read().rsplit(")", 1)[1].split()[0] == "S":
                return
        time.sleep(0.01)


def gdb_view(pid: int, addresses: list[int]) -> tuple[list[str], list[str]]:
    """gdb's bt frame names, and its `info symbol` answer for each address."""
    commands = ["-ex", "bt"]
    for address in addresses:
        commands += ["-ex", f"info symbol {address:#x}"]
    text = subprocess.run([need_gdb(), "-nx", "-batch", "-p", str(pid), *commands],
                          capture_output=True, text=True, timeout=120).stdout
    names = [m[1] for m in re.finditer(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(", text, re.M)]
    symbols = re.findall(r"^(\S+(?: \+ \d+)?) in section ", text, re.M)
    return names, symbols


def test_cold_part_is_named_as_gdb_names_it(tmp_path: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        missing("gcc", "apt-get install gcc")
    program = tmp_path / "cold_part"
    subprocess.run([gcc, "-O2", "-g", "-o", str(program), str(SOURCE)], check=True,
                   timeout=120)
    symbols = subprocess.run(["nm", str(program)], capture_output=True, text=True).stdout
    assert re.search(r" t work\.cold$", symbols, re.M), "gcc did not split work"
    child = subprocess.Popen([str(program), "2000"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        wait_blocked(child.pid)
        frames = stack_json(str(child.pid), cache=tmp_path)["threads"][0]["frames"]
        ours = [f for f in frames if f["path"] == str(program)]
        assert [f["names"] for f in ours][:3] == [["wait_here"], ["work"], ["main"]]
        lookups = [f["pc"] - 1 for f in ours[:3]]  # return addresses: the call's address
        names, answers = gdb_view(child.pid, lookups)
    finally:
        child.kill()
        child.wait()
    assert names[-3:] == ["wait_here", "work", "main"]
    theirs = [answer.replace(" + ", "+") for answer in answers]
    mine = [re.sub(r"\+0x([0-9a-f]+)$", lambda m: f"+{int(m[1], 16)}", f["function"])
            for f in ours[:3]]
    assert mine == theirs
    assert mine[1].startswith("work[cold]+")


def test_cold_part_without_dwarf_is_named_as_gdb_names_it(tmp_path: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        missing("gcc", "apt-get install gcc")
    program = tmp_path / "cold_part"
    subprocess.run([gcc, "-O2", "-o", str(program), str(SOURCE)], check=True, timeout=120)
    child = subprocess.Popen([str(program), "2000"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        wait_blocked(child.pid)
        frames = stack_json(str(child.pid), cache=tmp_path)["threads"][0]["frames"]
        ours = [f["names"][-1] for f in frames if f["path"] == str(program)]
        names, _ = gdb_view(child.pid, [])
    finally:
        child.kill()
        child.wait()
    assert ours[:3] == ["wait_here", "work[cold]", "main"]
    assert names[-3:] == ours[:3]

"""Deep stacks (issue 26, item 1): ``sframe record`` walks up to 1,024 user frames by
default and ``--max-stack N`` up to 4,096; ``sframe script`` and ``report`` take
``--max-stack`` as perf does (127 for script's text, whole stacks for profiles). perf
reads our files and is the oracle for what ``--max-stack`` prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_perf
from tests.support.parity import as_perf61
from tests.test_record_bpf import REASON

from conftest import FIXTURES

SFRAME = [sys.executable, "-m", "pysframe"]
needs_bpf = pytest.mark.skipif(REASON is not None, reason=REASON or "")
LUA = FIXTURES / "real" / "lua-2.46-x86_64"

DEEP = r"""
#include <stdlib.h>
__attribute__((noinline)) long spin(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long down(int depth, long n) { if (depth == 0) return spin(n); return down(depth - 1, n) + depth; }
int main(int argc, char **argv) { int depth = atoi(argv[1]); long t = 0;
  for (int r = 0; r < atoi(argv[2]); r++) t += down(depth, 1000000); return t == 42; }
"""


def run(*arguments: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(cwd / "cache"), HOME=str(cwd))
    return subprocess.run(list(arguments), capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def blocks(text: str) -> list[list[str]]:
    """Each sample's frame lines, white space squeezed."""
    return [[" ".join(line.split()) for line in block.splitlines()[1:]]
            for block in text.strip().split("\n\n") if block.strip()]


def as_perfs(ours: list[list[str]], theirs: list[list[str]]) -> list[list[str]]:
    """Our chains with the PLT names perf 6.1 gives otherwise (see as_perf61) made perf's."""
    if len(ours) != len(theirs):
        return ours
    return [as_perf61(chain, their_chain) for chain, their_chain in zip(ours, theirs, strict=True)]


def user_part(chains: list[list[str]]) -> list[list[str]]:
    return [[line for line in chain if "[kernel.kallsyms]" not in line] for chain in chains]


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("deep")
    (directory / "deep.c").write_text(DEEP)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls",
                    "-o", str(directory / "deep"), str(directory / "deep.c")], check=True)
    return directory


@needs_bpf
def test_a_300_deep_recursion_is_walked_whole(deep: Path) -> None:
    made = run(*SFRAME, "record", "-o", "deep.data", "--", "./deep", "300", "3000", cwd=deep)
    assert made.returncode == 0, made.stderr
    text = run(*SFRAME, "script", "deep.data", "--max-stack", "4096", cwd=deep).stdout
    chains = blocks(text)
    assert len(chains) > 300
    whole = [chain for chain in chains if chain and " _start+" in chain[-1]]
    assert len(whole) >= 0.99 * len(chains)
    # In spin, the whole recursion is below: spin, down x 301, main, libc x 2, _start (a
    # sample in down alone may be taken on the way down or back up, at any depth).
    in_spin = [chain for chain in whole if " spin+" in chain[0]]
    assert in_spin and min(len(chain) for chain in in_spin) >= 1 + 301 + 4
    perf = need_perf()
    for limit in ([], ["--max-stack", "127"], ["--max-stack", "400"]):
        theirs = run(perf, "script", "-i", "deep.data", *limit, cwd=deep)
        ours = run(*SFRAME, "script", "deep.data", *limit, cwd=deep)
        assert theirs.returncode == 0 and ours.returncode == 0, theirs.stderr + ours.stderr
        assert as_perfs(blocks(ours.stdout), blocks(theirs.stdout)) == blocks(theirs.stdout), limit


@needs_bpf
def test_max_stack_bounds_the_walk(deep: Path) -> None:
    made = run(*SFRAME, "record", "--max-stack", "50", "-o", "d50.data", "--", "./deep",
               "300", "1000", cwd=deep)
    assert made.returncode == 0, made.stderr
    chains = user_part(blocks(run(*SFRAME, "script", "d50.data", "--max-stack", "4096",
                                  cwd=deep).stdout))
    assert chains and max(len(chain) for chain in chains) == 50
    assert sum(len(chain) == 50 for chain in chains) >= 0.99 * len(chains)
    made = run(*SFRAME, "record", "--max-stack", "4096", "-o", "d4k.data", "--", "./deep",
               "2000", "1000", cwd=deep)
    assert made.returncode == 0, made.stderr
    chains = blocks(run(*SFRAME, "script", "d4k.data", "--max-stack", "4096", cwd=deep).stdout)
    # (The first samples, taken before the table was loaded, are finished from a stack
    # copy of 16 KiB: about 1,000 of these frames, not 2,000; a loaded machine takes a few.)
    assert len(chains) > 100
    assert sum(" _start+" in chain[-1] for chain in chains) >= 0.97 * len(chains)
    assert max(len(chain) for chain in chains) >= 2000


@pytest.mark.skipif(not (LUA / "perf.data").exists(), reason="fixtures not present")
@pytest.mark.parametrize("engine", ["scalar", "vector"])
@pytest.mark.parametrize("limit", ["4", "30"])
def test_script_max_stack_prints_what_perf_prints(tmp_path: Path, limit: str,
                                                  engine: str) -> None:
    """A dwarf recording with kernel frames: --max-stack cuts the kernel part of the
    chain and, separately, the frames unwound from the stack copy, as perf does."""
    perf = need_perf()
    # The binary by build id in a private ~/.debug (the recording names another machine's
    # path); libc and the loader are this machine's, as ours finds them.
    added = run(perf, "buildid-cache", "--add", str(LUA / "lua"), cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    theirs = run(perf, "script", "-i", str(LUA / "perf.data"), "--no-inline", "--max-stack",
                 limit, cwd=tmp_path)
    ours = subprocess.run([*SFRAME, "script", str(LUA / "perf.data"), "--binaries", str(LUA),
                           "--max-stack", limit], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
                               "PYSFRAME_ENGINE": engine})
    assert ours.returncode == 0, ours.stderr
    assert as_perfs(blocks(ours.stdout), blocks(theirs.stdout)) == blocks(theirs.stdout)


@pytest.mark.skipif(not (LUA / "perf.data").exists(), reason="fixtures not present")
def test_report_keeps_whole_stacks_and_takes_max_stack(tmp_path: Path) -> None:
    folded = {}
    for name, limit in (("whole", []), ("four", ["--max-stack", "4"])):
        made = subprocess.run([*SFRAME, "report", str(LUA / "perf.data"), "--binaries",
                               str(LUA), "-o", str(tmp_path / name), *limit],
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert made.returncode == 0, made.stderr
        folded[name] = [line.rsplit(" ", 1)[0].split(";")
                        for line in (tmp_path / name).read_text().splitlines()]
    # comm; at most 4 kernel frames; at most 4 frames unwound from the stack copy
    assert max(len(stack) for stack in folded["whole"]) > 1 + 4 + 4
    assert max(len(stack) for stack in folded["four"]) <= 1 + 4 + 4


@needs_bpf
def test_a_larger_stack_copy_finishes_deeper_first_samples(deep: Path) -> None:
    """--stack-copy 65528 (perf's largest dwarf copy): the first samples of a 2,000-deep
    recursion, taken before its table is loaded, are finished to ``_start`` too."""
    made = run(*SFRAME, "record", "--max-stack", "4096", "--stack-copy", "65528", "-o",
               "c64.data", "--", "./deep", "2000", "600", cwd=deep)
    assert made.returncode == 0, made.stderr
    chains = blocks(run(*SFRAME, "script", "c64.data", "--max-stack", "4096", cwd=deep).stdout)
    assert len(chains) > 100
    assert sum(" _start+" in chain[-1] for chain in chains) >= 0.99 * len(chains)

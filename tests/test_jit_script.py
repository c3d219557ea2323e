"""`sframe script` through JIT code: a `--call-graph dwarf` recording of the example JIT
(spinning in its innermost function, writing perf's jitdump) is unwound through the JIT
frames to the program's entry, from the jitdump directly and after `perf inject --jit`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import unavailable

from pysframe.sources.jitdump import read_jitdump
from support.parity import perf_can_record

JIT_NAMES = ["jit_call_native", "jit_apply", "jit_evaluate", "jit_interpret"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the recording, the jitdump directory)."""
    directory = tmp_path_factory.mktemp("jit-perf")
    why = perf_can_record(directory)
    if why is not None:
        unavailable(why)
    dumps = directory / "dumps"
    dumps.mkdir()
    output = directory / "jit.data"
    subprocess.run(["perf", "record", "-q", "--no-bpf-event", "-N", "-k", "mono", "-e", "cpu-clock", "-F", "999",
                    "--call-graph", "dwarf", "-o", str(output), "--", sys.executable, "-m",
                    "pysframe.jit.example", "--spin", "--jitdump", str(dumps),
                    "--lifetime", "2"], capture_output=True, timeout=120,
                   env=dict(os.environ, XDG_CACHE_HOME=str(directory / "cache")))
    assert output.exists()
    return output, dumps


def chains(path: Path) -> list[list[str]]:
    run = subprocess.run([sys.executable, "-m", "pysframe", "script", str(path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return [[line.split()[1].split("+")[0] for line in block.splitlines()[1:]]
            for block in run.stdout.strip().split("\n\n")]


def through_the_jit(found: list[list[str]]) -> None:
    in_jit = [chain for chain in found if chain and chain[0].startswith("jit_")]
    assert len(in_jit) > 500  # the example spins in JIT code for 2 s
    whole = [chain for chain in in_jit if chain[-1] == "_start"
             and all(name in chain for name in JIT_NAMES)]
    assert len(whole) >= 0.99 * len(in_jit), in_jit[:2]


def test_jitdump_is_read_and_the_jit_frames_unwound(recording: tuple[Path, Path]) -> None:
    path, dumps = recording
    (dump,) = dumps.glob("jit-*.dump")
    loads, problems = read_jitdump(str(dump))
    assert not problems
    assert [load.name for load in loads] == [f"jit_{name}" for name in
                                              ("interpret", "evaluate", "apply", "call_native")]
    assert all(load.unwinding for load in loads)
    through_the_jit(chains(path))


def test_after_perf_inject_jit_too(recording: tuple[Path, Path], tmp_path: Path) -> None:
    path, _ = recording
    injected = tmp_path / "injected.data"
    subprocess.run(["perf", "inject", "--jit", "-i", str(path), "-o", str(injected)],
                   check=True, capture_output=True, timeout=120)
    through_the_jit(chains(injected))


def test_a_damaged_jitdump_costs_its_frames_only(tmp_path: Path) -> None:
    from pysframe.jit.jitdump import HEADER, MAGIC

    dump = tmp_path / "jit-1.dump"
    dump.write_bytes(HEADER.pack(MAGIC, 1, HEADER.size, 62, 0, 1, 0, 0)
                     + (0).to_bytes(4, "little") + (9999).to_bytes(4, "little") + bytes(8))
    loads, problems = read_jitdump(str(dump))
    assert loads == [] and len(problems) == 1
    assert "offset 0x28" in problems[0] and "runs past the end" in problems[0]
    (tmp_path / "jit-2.dump").symlink_to(dump)
    loads, problems = read_jitdump(str(tmp_path / "jit-2.dump"))
    assert loads == [] and problems  # a symlink is not followed

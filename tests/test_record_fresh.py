"""Nothing lost to fresh code (issue 26, item 2): where the eBPF walker meets code that no
loaded table covers, its record carries that frame's registers and a copy of the stack
from its SP, and the recorder finishes the chain in user space with the scalar tracer.

Through the BPF interpreter: the walker's copy is the frame's and the stack's, and the
walker's frames plus the finished part equal the scalar tracer's chain over the whole
address space. In the kernel: the first samples of 20 binaries run one after the other
reach ``_start`` (they had their leaf only before)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_perf
from tests.support.walker_run import CopyAndCode, WalkerRig, walker_space
from tests.test_record_bpf import REASON

from conftest import FIXTURES
from pysframe.format.constants import ABI
from pysframe.record.completion import Pending, ProcessMaps, finish
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.step import Stop
from pysframe.unwind.unwinder import Registers, Unwinder

RECORDING = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
needs_bpf = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SFRAME = [sys.executable, "-m", "pysframe"]


def _maps_of(space, pid: int) -> ProcessMaps:  # type: ignore[no-untyped-def]
    """A ProcessMaps holding ``space``'s file mappings for ``pid`` from time 0."""
    maps = ProcessMaps()
    for mapping in space.mappings:
        if mapping.filename.startswith("/"):
            maps.events.setdefault(pid, []).append(
                (0, "map", (mapping.start, mapping.end - mapping.start, mapping.pgoff,
                            mapping.filename, mapping.build_id)))
    return maps


@pytest.mark.skipif(not RECORDING.exists(), reason="no fixture recording (../shared/fixtures)")
def test_a_copy_finishes_the_chain_as_the_tracer_walks_it(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    from tests.test_batch_unwind import collected

    from pysframe.session.tables import GeneratedTables
    from pysframe.unwind.modules import BinaryFinder

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tracer = Unwinder(ABI.AMD64_ENDIAN_LITTLE, 127)
    checked = {"no entry": 0, "a mapping missing": 0}
    with collected(RECORDING) as (_, snapshots):
        snapshot = snapshots[-1]
        space, loaded = walker_space(snapshot.space)
        full = snapshot.space
        finder = BinaryFinder([str(RECORDING.parent)], tables=GeneratedTables())
        maps = _maps_of(full, 7)
        for number, sample in enumerate(snapshot.samples[:60]):
            r = sample.registers
            memory = CopyAndCode(r.sp, bytes(sample.stack), space)
            expected = tracer.unwind(Registers(r.pc, r.sp, r.fp),
                                     StackMemory(r.sp, sample.stack), full)
            if expected.stop is not Stop.OUTERMOST or len(expected.pcs) < 4:
                continue
            if WalkerRig(loaded).walk(r.pc, r.sp, r.fp, memory).pcs != expected.pcs:
                continue  # (a rule the walker leaves: the case is another test's)
            # No process entry yet: the copy is the sample's own frame.
            rig = WalkerRig(loaded)
            rig.procs.values.clear()  # the process's entry not written yet
            walked = rig.walk(r.pc, r.sp, r.fp, memory)
            assert walked.copy is not None, number
            index, pc, sp, fp, copy = walked.copy
            assert (index, pc, sp, fp) == (0, r.pc, r.sp, r.fp)
            assert copy and copy == bytes(sample.stack)[:len(copy)]
            _assert_finished(walked.pcs, walked.copy, maps, finder, expected.pcs)
            checked["no entry"] += 1
            # A caller's binary not in the entry (mapped after it was written): the first
            # frame whose mapping none of its callees is in.
            mapped = [full.find(pc if k == 0 else pc - 1) for k, pc in enumerate(expected.pcs)]
            later = next((k for k in range(1, len(mapped)) if mapped[k] is not None
                          and all(m is not mapped[k] for m in mapped[:k])), None)
            if later is None:
                continue
            start = mapped[later].start  # type: ignore[union-attr]
            rig = WalkerRig([item for item in loaded if item[0].start != start])
            walked = rig.walk(r.pc, r.sp, r.fp, memory)
            assert walked.copy is not None and walked.copy[0] == later, number
            assert walked.copy[1] == expected.pcs[later]
            _assert_finished(walked.pcs, walked.copy, maps, finder, expected.pcs)
            checked["a mapping missing"] += 1
    assert checked["no entry"] >= 20 and checked["a mapping missing"] >= 5, checked


def _assert_finished(walked: list[int], copy: tuple[int, int, int, int, bytes],
                     maps: ProcessMaps, finder: object, expected: list[int]) -> None:
    index, pc, sp, fp, data = copy
    raw = b""  # (the record's bytes are only rewritten by the recorder)
    pending = Pending(1, raw, walked, index, (pc, sp, fp), data, 7, 1)
    chain, stop = finish([pending], maps, finder, 127)[1]  # type: ignore[arg-type]
    assert chain == expected
    assert stop is Stop.OUTERMOST


def test_process_maps_follow_exec_fork_and_time() -> None:
    maps = ProcessMaps()
    maps.events[10] = [(5, "map", (0x1000, 0x1000, 0, "/bin/a", None)),
                       (8, "exec", None),
                       (9, "map", (0x2000, 0x1000, 0, "/bin/b", None)),
                       (12, "map", (0x5000, 0x1000, 0, "/lib/c", None))]
    maps.events[11] = [(10, "fork", 10), (11, "map", (0x9000, 0x1000, 0, "/lib/d", None))]
    maps.in_order()
    assert [m[3] for m in maps.layout(10, 6)] == ["/bin/a"]
    assert [m[3] for m in maps.layout(10, 9)] == ["/bin/b"]
    assert [m[3] for m in maps.layout(10, 20)] == ["/bin/b", "/lib/c"]
    assert [m[3] for m in maps.layout(11, 20)] == ["/bin/b", "/lib/d"]  # c came after fork


FRESH = r"""
__attribute__((noinline)) long spin(long n) { volatile long s = NUMBER; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long middle(long n) { return spin(n) + 1; }
int main(void) { long t = 0; for (int r = 0; r < 30; r++) t += middle(1000000); return t == 42; }
"""


@needs_bpf
def test_the_first_samples_of_new_binaries_reach_start(tmp_path: Path) -> None:
    """20 binaries never seen before (distinct build ids), run one after the other by a
    shell: each one's table is loaded only once its exec is reported, after its first
    samples were taken; those samples are finished from their copies."""
    for number in range(20):
        (tmp_path / f"b{number}.c").write_text(FRESH.replace("NUMBER", str(number + 1)))
        subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(tmp_path / f"b{number}"),
                        str(tmp_path / f"b{number}.c")], check=True)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    script = "; ".join(f"./b{number}" for number in range(20))
    made = subprocess.run([*SFRAME, "record", "-o", "f.data", "--", "sh", "-c", script],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "finished from their stack copies" in made.stderr
    # Read by perf (the file's chains, named by perf), not by our own reader.
    shown = subprocess.run([need_perf(), "script", "-i", "f.data", "--max-stack", "4096"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env={**os.environ, "HOME": str(tmp_path)})
    assert shown.returncode == 0, shown.stderr[-500:]
    text = shown.stdout
    ours = [block for block in text.split("\n\n") if f"({tmp_path}/b" in block]
    assert len(ours) >= 100
    whole = [block for block in ours if " _start+" in block]
    assert len(whole) >= 0.99 * len(ours), len(whole) / len(ours)
    # The file says per sample which way it was walked: the chains the summary says were
    # finished from their copies are the samples whose note says so.
    finished = int(re.search(r"([\d,]+) chains met code whose table was not loaded yet",
                             made.stderr).group(1).replace(",", ""))  # type: ignore[union-attr]
    stops = subprocess.run([*SFRAME, "script", "f.data", "--show-stops", "--max-stack", "4096"],
                           capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert stops.returncode == 0, stops.stderr[-500:]
    lines = [line for line in stops.stderr.splitlines() if " frames (" in line]
    assert len(lines) == text.count("cpu-clock")
    assert all("(walked " in line for line in lines)
    from_copies = [line for line in lines if "then in user space from the stack copy" in line]
    assert len(from_copies) == finished
    # Those that stop short of the outermost row are samples in ld.so before the program's
    # _start: they end at the loader's own entry (_dl_start_user, the return address of its
    # _start, which has no CFI), the first frame of the process.
    blocks = [block for block in stops.stdout.split("\n\n") if block.strip()]
    assert len(blocks) == len(lines)
    for line, block in zip(lines, blocks, strict=True):
        if "then in user space from the stack copy" in line and "outermost frame" not in line:
            assert block.rstrip().splitlines()[-1].split()[1].startswith("_dl_start_user+"), block

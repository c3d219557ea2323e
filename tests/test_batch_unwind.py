"""The batch unwinding engine against the scalar tracer: on every sample of the fixture
recordings and of tests/data, and on the same samples with their registers and stack
copies damaged (junk frame pointers, odd or huge addresses, truncated copies, junk
return addresses, a small depth limit), every chain's frame pcs, methods, mappings and
stop reason must be the scalar tracer's."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import FIXTURES, REPO
from pysframe.format.constants import ABI
from pysframe.format.lookup import SFrameLookup
from pysframe.session.batch import CollectingSession, Snapshot
from pysframe.sources.perf_data import open_perf_data
from pysframe.unwind.batch import BatchSample, BatchUnwinder
from pysframe.unwind.flat import FP_BASED, KIND_DEFAULT, flatten
from pysframe.unwind.flat_on_demand import flatten_on_demand
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.unwinder import FrameMethod, Registers, Unwind, Unwinder

LUA = sorted(FIXTURES.glob("real/lua-*/perf.data")) + sorted(FIXTURES.glob("real/lua-*/perf.fp.data"))
SMALL = sorted((REPO / "tests" / "data").glob("*.perf.data"))
RECORDINGS = [*LUA, *SMALL]


@contextmanager
def collected(path: Path) -> Iterator[tuple[CollectingSession, list[Snapshot]]]:
    """The recording's samples, grouped by address-space snapshot (binaries: its folder)."""
    with open_perf_data(str(path)) as data:
        session = CollectingSession(data, [str(path.parent)])
        yield session, session.collect()


def chain(unwind: Unwind) -> tuple[object, ...]:
    return ([(frame.pc, frame.method) for frame in unwind.frames], unwind.stop,
            [id(mapping) for mapping in unwind.mappings])


def assert_same(scalar: Unwinder, snapshot: Snapshot, samples: list[BatchSample]) -> int:
    """Both engines on ``samples``; returns how many the batch handed to the scalar one."""
    result = BatchUnwinder(scalar).unwind(snapshot.space, samples)
    assert [chain(u) for u in result.unwinds()] == [chain(result.unwind(i))
                                                    for i in range(len(samples))]
    for i, sample in enumerate(samples):
        memory = StackMemory(sample.registers.sp, sample.stack)
        expected = scalar.unwind(sample.registers, memory, snapshot.space)
        assert chain(result.unwind(i)) == chain(expected), (i, sample.registers)
    return len(result.scalar)


@pytest.mark.skipif(not RECORDINGS, reason="no fixture recordings (../shared/fixtures) here")
@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_batch_equals_scalar(path: Path) -> None:
    with collected(path) as (session, snapshots):
        handed = total = 0
        for snapshot in snapshots:
            handed += assert_same(session.unwinder, snapshot, snapshot.samples)
            total += len(snapshot.samples)
        # The batch must do the work itself on real recordings, not hand it all back
        # (tests/data's recordings are made of the rare cases: signal frames, execve).
        if path.parent.name.startswith("lua"):
            assert handed <= max(total // 20, 1), (handed, total)
        assert handed < total or not total, (handed, total)


@pytest.mark.skipif(not LUA, reason="no fixture recordings (../shared/fixtures) here")
def test_a_pc_pending_in_a_snapshot_goes_to_made_once(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """A first run: the fixture's libc has no .sframe, so its functions are made on demand
    as the batch meets them, each step a frame deeper, in a snapshot made before. A pc is
    asked of ``made`` once in a snapshot, not at every step that meets it again; the
    chains stay the scalar tracer's, and the batch pipeline's text of a first run is
    perf's own (its `perf script --no-inline` of the recording)."""
    from tests.support.perf_text import held_to_perfs_text

    from pysframe.cli.script import ENGINE_VARIABLE, run_script

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing made yet
    asked: list[tuple[int, int]] = []
    spaces: list[Any] = []  # (kept alive: their ids are not reused)
    made = BatchUnwinder.made

    def counted(self: BatchUnwinder, space: Any, mappings: Any, pcs: Any) -> Any:
        spaces.append(space)
        asked.extend({(id(space), pc) for pc in pcs.tolist()})  # (once a call)
        return made(self, space, mappings, pcs)

    monkeypatch.setattr(BatchUnwinder, "made", counted)
    with collected(LUA[0]) as (session, snapshots):
        for snapshot in snapshots:
            assert_same(session.unwinder, snapshot, snapshot.samples)
    assert len(asked) > 100  # (libc's functions, and its pcs in many chains)
    assert len(asked) == len(set(asked))

    asked.clear()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another"))  # a first run again
    monkeypatch.setenv(ENGINE_VARIABLE, "vector")
    output = tmp_path / "first-run.txt"
    run_script(str(LUA[0]), binaries=[str(LUA[0].parent)], output=str(output),
               show_stops=False, report=lambda message: None, jobs=1)
    assert len(asked) > 100 and len(asked) == len(set(asked))
    held_to_perfs_text(LUA[0], output.read_bytes())


def fp_based_pcs(snapshot: Snapshot) -> list[int]:
    """Runtime pcs whose SFrame rule has an FP-based CFA (to aim damaged frame pointers at)."""
    pcs = []
    for mapping in snapshot.space.mappings:
        module = mapping.module
        if module is None or module.lookup is None:
            continue
        table = (flatten(module.lookup, ABI.AMD64_ENDIAN_LITTLE)
                 if isinstance(module.lookup, SFrameLookup)
                 else flatten_on_demand(module.lookup, ABI.AMD64_ENDIAN_LITTLE, {}))
        at = np.flatnonzero((table.words & np.uint64(3 | FP_BASED)) == (KIND_DEFAULT | FP_BASED))
        pcs += [start + module.bias for start in table.starts[at].tolist()
                if mapping.start <= start + module.bias < mapping.end]
    return pcs


def damaged(sample: BatchSample, rng: random.Random, fp_pcs: list[int]) -> BatchSample:
    """``sample`` with one kind of damage (chosen by ``rng``)."""
    r = sample.registers
    stack = bytearray(sample.stack)
    pc, sp, fp = r.pc, r.sp, r.fp
    choice = rng.randrange(11)
    if choice == 0:  # a frame pointer that is junk, odd, in the copy, or huge
        fp = rng.choice([rng.getrandbits(64), sp + 8 * rng.randrange(64), sp + 3,
                         (1 << 63) + 16, (1 << 62) - 8, 0])
    elif choice == 1:  # the copy taken at an odd or shifted stack pointer
        sp += rng.choice([1, 4, -8, 8, 24])
    elif choice == 2:  # a truncated copy
        del stack[rng.randrange(len(stack) + 1):]
    elif choice == 3:  # junk words (return addresses, saved frame pointers) in the copy
        for _ in range(rng.randrange(1, 6)):
            if len(stack) >= 8:
                at = rng.randrange(0, len(stack) - 7) & ~7
                word = rng.choice([0, rng.getrandbits(64), pc, sp + 64, (1 << 63) + 8,
                                   rng.getrandbits(47)])
                stack[at:at + 8] = word.to_bytes(8, "little")
    elif choice == 4:  # an unmapped or kernel-half pc
        pc = rng.choice([0x1000, (1 << 63) + 0x1000, (1 << 64) - 1, rng.getrandbits(47)])
    elif choice == 5:  # a huge stack pointer
        sp = rng.choice([(1 << 63) + 64, (1 << 62) + 8, 16])
    elif choice == 6:  # a copy not a multiple of 8 bytes
        del stack[len(stack) - rng.randrange(1, 8):]
    elif choice == 7:  # frame-pointer chains that are real: fp pointing at (fp, ra) pairs
        if len(stack) >= 64:
            at = 8 * rng.randrange(len(stack) // 8 - 2)
            fp = sp + at
            saved = sp + at + rng.choice([32, 32, -32, 0, 7])
            stack[at:at + 8] = saved.to_bytes(8, "little")
            ra = rng.choice([pc, pc, 0, rng.getrandbits(47), (1 << 63) + 8])
            stack[at + 8:at + 16] = ra.to_bytes(8, "little")
            pc = rng.getrandbits(20) + 0x1000  # unmapped: the frame-pointer fallback
    elif choice == 8:  # a frame pointer below the stack pointer (CFA below the copy)
        fp = sp - 8 * rng.randrange(1, 64)
    elif choice == 9 and fp_pcs:  # an FP-based CFA with a damaged frame pointer
        pc = rng.choice(fp_pcs)
        fp = sp + rng.choice([-64, -8, 0, 8, 16, 4096, len(stack) - 8, 1 << 40])
    return BatchSample(Registers(pc, sp, fp, r.lr, dict(r.others)), bytes(stack))


@pytest.mark.skipif(not LUA, reason="no fixture recordings (../shared/fixtures) here")
@pytest.mark.parametrize("depth", [127, 6])
def test_batch_equals_scalar_on_damaged_samples(depth: int) -> None:
    rng = random.Random(13 + depth)
    with collected(LUA[0]) as (session, snapshots):
        scalar = Unwinder(session.unwinder.abi, depth)
        for snapshot in snapshots:
            fp_pcs = fp_based_pcs(snapshot)
            samples = [damaged(sample, rng, fp_pcs) for sample in snapshot.samples[:600]]
            assert_same(scalar, snapshot, samples)


@pytest.mark.skipif(not LUA, reason="no fixture recordings (../shared/fixtures) here")
def test_batch_equals_scalar_at_and_in_the_sigreturn_trampoline() -> None:
    """Samples taken at the trampoline, and in its rt_sigreturn system call (the pc just
    after the syscall instruction): both engines step into the interrupted frame from the
    signal frame at SP (the batch hands them to the scalar tracer)."""
    from tests.test_walker_conformance import trampolines

    from pysframe.unwind.unwinder import X86_64_SIGRETURN

    with collected(LUA[0]) as (session, snapshots):
        scalar = Unwinder(session.unwinder.abi, 127)
        snapshot = snapshots[0]
        found = trampolines(snapshot.space)
        assert found
        samples = [BatchSample(Registers(start + offset, sample.registers.sp,
                                         sample.registers.fp, sample.registers.lr,
                                         dict(sample.registers.others)), sample.stack)
                   for start in found for offset in (0, len(X86_64_SIGRETURN))
                   for sample in snapshot.samples[:40]]
        assert assert_same(scalar, snapshot, samples) == len(samples)  # all handed over
        for sample in samples[40:80]:  # in the system call: the trampoline's frame
            unwound = scalar.unwind(sample.registers,
                                    StackMemory(sample.registers.sp, sample.stack),
                                    snapshot.space)
            assert unwound.methods[0] == FrameMethod.SIGRETURN, unwound.methods[:2]

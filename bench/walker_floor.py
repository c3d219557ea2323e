"""Bench: the eBPF walker's cost per frame against the floor of its user-memory reads.

One C program (built -O2 without frame pointers) recursing DEPTH calls deep in a loop is
sampled, in the same run and on the same process, by
- ``sframe record -p PID`` (the SFrame walker), and
- a floor program: per sample, the frames' reads alone (one 16-byte
  ``bpf_probe_read_user`` per frame from the sampled SP upwards, as many as the walker
  found frames), in a ``bpf_loop``, nothing else;
each for --seconds, with ``kernel.bpf_stats_enabled`` on (run_time_ns / run_cnt of each
program; the recorder's from 1.5 s on, once its tables are loaded). Prints ns per sample and per frame of both, for --depth (default 300) and for a
10-frame stack. Root.

    env -u PYTHONDONTWRITEBYTECODE python3 bench/walker_floor.py [--seconds S]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import bench_environment, venv_sframe
from pysframe.record import bpf_sys
from pysframe.record.asm import JNE, R0, R1, R2, R3, R4, R9, R10, Asm
from pysframe.record.btf import function_btf
from pysframe.record.perf_file import event_attr
from pysframe.record.sampler import PROBE_READ_USER, PT_SP
from pysframe.record.walker import BPF_LOOP

PROGRAM = r"""
#include <stdlib.h>
__attribute__((noinline)) long spin(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long down(int depth, long n) { if (depth == 0) return spin(n); return down(depth - 1, n) + depth; }
int main(int argc, char **argv) { int depth = atoi(argv[1]); long t = 0;
  for (;;) t += down(depth, 1000000); return t == 42; }
"""


def floor_program(frames: int) -> tuple[bytes, bytes, bytes]:
    """Per sample: ``frames`` 16-byte reads of user memory from the sampled SP up."""
    a = Asm()
    a.ldx(8, R1, R1, PT_SP).stx(8, R10, -8, R1)  # the loop's ctx: the address to read
    a.mov(R1, frames).ld_func(R2, "read_one").mov(R3, R10, reg=True).add(R3, -8)
    a.mov(R4, 0).call(BPF_LOOP).mov(R0, 0).exit()
    a.label("read_one")
    a.mov(R9, R2, reg=True).ldx(8, R3, R9, 0)
    a.mov(R1, R10, reg=True).add(R1, -16).mov(R2, 16).call(PROBE_READ_USER)
    a.jump(JNE, R0, 0, "read_done")
    a.ldx(8, R3, R9, 0).add(R3, 16).stx(8, R9, 0, R3).mov(R0, 0).exit()
    a.label("read_done")
    a.mov(R0, 1).exit()
    blob, infos = function_btf("floor", [("read_one", a.offset_of("read_one"))])
    return a.assemble(), blob, infos


def run_time(fd: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of the program ``fd`` (this process's)."""
    with open(f"/proc/self/fdinfo/{fd}") as info:
        fields = dict(line.split(":", 1) for line in info if ":" in line)
    return int(fields.get("run_time_ns", "0")), int(fields.get("run_cnt", "0"))


def floor(pid: int, frames: int, seconds: float) -> float:
    """ns per sample of the floor program on ``pid``'s thread for ``seconds``."""
    code, blob, infos = floor_program(frames)
    with bpf_sys.Resources() as owned:
        btf = owned.own(bpf_sys.btf_load(blob))
        program = owned.own(bpf_sys.prog_load(bpf_sys.PROG_PERF_EVENT, code, "sf_floor",
                                              btf=btf, func_info=infos))
        event = owned.own(bpf_sys.perf_event_open(event_attr(999, (1 << 10)), pid, -1))
        bpf_sys.ioctl(event, bpf_sys.PERF_EVENT_IOC_SET_BPF, int(program))
        bpf_sys.ioctl(event, bpf_sys.PERF_EVENT_IOC_ENABLE)
        time.sleep(seconds)
        bpf_sys.ioctl(event, bpf_sys.PERF_EVENT_IOC_DISABLE)
        spent, runs = run_time(int(program))
    return spent / runs if runs else 0.0


def sampling_programs(pid: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) summed over the perf-event BPF programs process ``pid``
    holds (the recorder's sampling program)."""
    spent = runs = 0
    for entry in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = entry.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("prog_type", "").strip() == str(bpf_sys.PROG_PERF_EVENT):
            spent += int(fields.get("run_time_ns", "0"))
            runs += int(fields.get("run_cnt", "0"))
    return spent, runs


def walker(pid: int, seconds: float, work: Path) -> tuple[float, float]:
    """(ns per sample, frames per sample) of ``sframe record -p`` on ``pid``, measured
    once its tables are in (the samples of the first second, walked before the tables
    were loaded and sent with stack copies, are left out)."""
    output = work / "walk.data"
    settle = 1.5
    recorder = subprocess.Popen([*venv_sframe(), "record", "-p", str(pid), "--duration",
                                 str(seconds + settle + 1), "-o", str(output)],
                                stderr=subprocess.PIPE, text=True,
                                env={**bench_environment(), "XDG_CACHE_HOME": str(work / "cache")})
    time.sleep(settle)
    spent, runs = sampling_programs(recorder.pid)
    time.sleep(seconds)
    spent_after, runs_after = sampling_programs(recorder.pid)
    _, stderr = recorder.communicate(timeout=seconds + 120)
    if recorder.returncode != 0 or runs_after <= runs:
        raise SystemExit(f"sframe record failed: {stderr.strip()[-300:]}")
    shown = subprocess.run([*venv_sframe(), "script", str(output), "--max-stack", "4096"],
                           capture_output=True, text=True, env=bench_environment(),
                           timeout=300).stdout
    chains = [block.count("\n") for block in shown.strip().split("\n\n") if block.strip()]
    return (spent_after - spent) / (runs_after - runs), sum(chains) / max(len(chains), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--depth", type=int, default=300)
    parser.add_argument("--small", type=int, default=5,
                        help="the recursion depth of the small case (5: 11 frames)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of each case (each printed)")
    arguments = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/walker_floor.py needs root (BPF)")
    with open("/proc/sys/kernel/bpf_stats_enabled") as stats:
        was = stats.read().strip()
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        (work / "deep.c").write_text(PROGRAM)
        subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls",
                        "-o", str(work / "deep"), str(work / "deep.c")], check=True)
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as stats:
            stats.write("1")
        try:
            for depth in [arguments.depth, arguments.small] * arguments.rounds:
                child = subprocess.Popen([str(work / "deep"), str(depth)])
                try:
                    time.sleep(0.5)
                    per_sample, frames = walker(child.pid, arguments.seconds, work)
                    base = floor(child.pid, round(frames), arguments.seconds)
                finally:
                    child.kill()
                    child.wait()
                print(f"{frames:.0f} frames a sample: walker {per_sample / 1000:.2f} us a "
                      f"sample, {per_sample / frames:.0f} ns a frame; floor (the reads alone) "
                      f"{base / 1000:.2f} us, {base / frames:.0f} ns a frame; walker/floor "
                      f"{per_sample / base if base else 0:.1f}x")
        finally:
            with open("/proc/sys/kernel/bpf_stats_enabled", "w") as stats:
                stats.write(was)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A corpus of AArch64 and s390x core dumps made at test time, and gdb-multiarch's reading
of them.

``tests/data/cross/cross.c`` and ``cross.cc`` are cross-compiled ``-O2`` with and without
``-Wa,--gsframe`` (gas 2.47.50 through ``-B``: the cross gcc's own binutils 2.40 emit
SFrame V1), in three code-generation variants each, and run under qemu-user until they
abort (or fault) in the frame each scenario chooses; qemu writes ``qemu_PROG_TIME_PID.core``
in the directory it runs in. The programs are linked ``-no-pie``: a qemu core keeps none
of the program's first page, from which gdb 13 would relocate a PIE (it then finds no
shared library at all), while ``sframe stack`` relocates it from AT_ENTRY.

Two things about the runs are deliberate:

* A directory named ``core`` in each run's directory: qemu, having written the guest's
  core, dies of the same signal, and the host kernel would write qemu's own core (150 MB)
  there under the default ``core_pattern``; it cannot create a file over a directory.
* AArch64 runs under ``-cpu max,sve=off,sme=off``: with SVE or SME, qemu's signal frames
  carry SVE/TPIDR2/ZA records, and gdb 13.1 never returns from ``bt`` through such a
  frame (it loops in its signal-frame reader). Pointer authentication stays on.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from .oracles import binutils, missing

SOURCES = Path(__file__).resolve().parents[1] / "data" / "cross"


class Arch(NamedTuple):
    name: str
    triplet: str
    qemu: str
    qemu_options: tuple[str, ...]
    sysroot: str
    #: A third code-generation variant, the architecture's own.
    variant: tuple[str, ...]


ARCHES = {
    "aarch64": Arch("aarch64", "aarch64-linux-gnu", "qemu-aarch64",
                    ("-cpu", "max,sve=off,sme=off"), "/usr/aarch64-linux-gnu",
                    ("-mbranch-protection=pac-ret",)),
    "s390x": Arch("s390x", "s390x-linux-gnu", "qemu-s390x", (), "/usr/s390x-linux-gnu",
                  ("-mbackchain",)),
}

#: Code-generation variants: the ABI's default, frame pointers kept, the arch's own.
VARIANTS = {"plain": (), "fp": ("-fno-omit-frame-pointer",)}
#: (source, scenario arguments) of each run of each build.
RUNS = {
    "c": (("recurse", "3"), ("recurse", "40"), ("signal",), ("segv", "2"), ("leaf", "2"),
          ("qsort",)),
    "cc": (("throw", "2"), ("cleanup", "2")),
}


class Core(NamedTuple):
    """One core of the corpus: ``name`` says build and scenario."""

    name: str
    program: Path
    core: Path
    gsframe: bool


def need_cross(arch: Arch) -> Path:
    """The directory of gas/ld 2.47.50 for ``arch`` (for gcc's ``-B``); skips (fails under
    CI=true) when a package the corpus needs is missing."""
    packages = (f"qemu-user gdb-multiarch gcc-{arch.triplet} g++-{arch.triplet} "
                f"libc6-dev-{'arm64' if arch.name == 'aarch64' else arch.name}-cross")
    for tool in (arch.qemu, "gdb-multiarch", f"{arch.triplet}-gcc", f"{arch.triplet}-g++"):
        if shutil.which(tool) is None:
            missing(tool, f"apt-get install {packages}")
    if not os.path.exists(f"{arch.sysroot}/lib/libc.so.6"):
        missing(f"{arch.name} C library", f"apt-get install {packages}")
    gas = binutils("as", "2.47.50", arch.name)
    if gas is None:
        missing(f"GNU as 2.47.50 for {arch.name}", "tools/install-oracles.sh")
    driver = Path(gas).parent.parent / "gcc-B" / "2.47.50" / arch.name
    if not (driver / "as").exists():
        missing(f"gcc -B directory of binutils 2.47.50 for {arch.name}",
                "tools/install-oracles.sh")
    return driver


def _builds(arch: Arch) -> Iterator[tuple[str, str, tuple[str, ...], bool]]:
    """(build name, source, options, gsframe) of every build."""
    for variant, options in {**VARIANTS, "own": arch.variant}.items():
        for gsframe in (False, True):
            for source in RUNS:
                name = f"{source}-{variant}-{'gas' if gsframe else 'cfi'}"
                yield name, source, (*options, *(("-Wa,--gsframe",) if gsframe else ())), gsframe


def build_corpus(arch: Arch, directory: Path, driver: Path) -> list[Core]:
    """Build every program and run every scenario; the cores found (a run that wrote none
    is an error)."""
    programs = directory / "bin"
    programs.mkdir(parents=True, exist_ok=True)
    builds = list(_builds(arch))

    def compile_one(build: tuple[str, str, tuple[str, ...], bool]) -> None:
        name, source, options, _ = build
        compiler = f"{arch.triplet}-{'g++' if source == 'cc' else 'gcc'}"
        subprocess.run([compiler, "-O2", "-no-pie", f"-B{driver}/", *options, "-o",
                        str(programs / name), str(SOURCES / f"cross.{source}")],
                       check=True, capture_output=True, timeout=120)

    def run_one(job: tuple[str, str, tuple[str, ...], bool, tuple[str, ...]]) -> Core:
        name, _, _, gsframe, arguments = job
        where = directory / f"{name}-{'-'.join(arguments)}"
        (where / "core").mkdir(parents=True, exist_ok=True)  # no core of qemu itself
        subprocess.run(["sh", "-c", 'ulimit -c unlimited && exec "$@"', "sh", arch.qemu,
                        *arch.qemu_options, "-L", arch.sysroot, str(programs / name),
                        *arguments], cwd=where, capture_output=True, timeout=60)
        found = sorted(where.glob("qemu_*.core"))
        assert found, f"{arch.qemu} {name} {' '.join(arguments)} wrote no core"
        return Core(f"{name} {' '.join(arguments)}", programs / name, found[-1], gsframe)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(compile_one, builds))
        jobs = [(*build, arguments) for build in builds for arguments in RUNS[build[1]]]
        return list(pool.map(run_one, jobs))


class GdbFrame(NamedTuple):
    pc: int | None  #: None: gdb's "<signal handler called>"
    name: str  #: "??" where gdb has no name


_GDB_FRAME = re.compile(r"^#(\d+)\s+(?:0x([0-9a-f]+) in )?(.+?)(?: \(.*?\))?(?: from \S+)?$")
_MARK = "@@core "


def gdb_frames(arch: Arch, program: Path, cores: list[Path]) -> dict[Path, list[GdbFrame]]:
    """``bt`` (past main and the entry point) of each core of ``program``, in one gdb."""
    commands = ["-iex", f"set sysroot {arch.sysroot}", "-ex", "set backtrace past-main on",
                "-ex", "set backtrace past-entry on", "-ex", "set backtrace limit 200",
                "-ex", "set width 0", "-ex", f"file {program}"]
    for core in cores:
        commands += ["-ex", f"echo {_MARK}{core}\\n", "-ex", f"core-file {core}", "-ex", "bt"]
    text = subprocess.run(["gdb-multiarch", "-nx", "-batch", *commands], capture_output=True,
                          text=True, timeout=300).stdout
    found: dict[Path, list[GdbFrame]] = {}
    current: list[GdbFrame] | None = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            current = found.setdefault(Path(line[len(_MARK):]), [])
            continue
        frame = _GDB_FRAME.match(line)
        if frame is None or current is None:
            continue
        if int(frame[1]) < len(current):  # "core-file" prints frame #0 once before bt
            del current[int(frame[1]):]
        text_name = frame[3]
        if text_name.startswith("<signal handler called>"):
            current.append(GdbFrame(None, "<signal handler called>"))
        else:
            current.append(GdbFrame(int(frame[2], 16) if frame[2] else None, text_name))
    return found

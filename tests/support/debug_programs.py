"""Stripped programs and their debug files, for the tests of where symbols and DWARF are
found (tests/test_debug_files.py, tests/test_debuginfod.py).

``build(directory)`` compiles a C and a C++ program with ``-g`` and a C program without
``-g`` (each with a build id), keeps the unstripped files under ``full/``, their debug
files (``objcopy --only-keep-debug``) under ``debug/``, and runs stripped copies from
``bin/``: ``strip --strip-all`` plus a ``.gnu_debuglink`` to ``<name>.debug`` for the
``-g`` programs (as Debian builds them), the bare ``strip`` for the other. Each program
spins in named functions (to be sampled) or, given ``wait``, prints ``ready`` and blocks
in ``pause()`` inside an inlined function (to be stacked).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

C_SOURCE = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void spin_leaf(unsigned long n)
{
    for (unsigned long i = 0; i < n; i++)
        sink += i;
}

static inline void inlined_step(unsigned long n)
{
    spin_leaf(n);
    sink ^= n;
}

__attribute__((noinline)) void middle(unsigned long n)
{
    inlined_step(n);
    sink++;
}

static inline void block_here(void)
{
    pause();
}

__attribute__((noinline)) void waiter(void)
{
    block_here();
    sink++;
}

int main(int argc, char **argv)
{
#ifdef VARIANT
    sink += VARIANT;
#endif
    if (argc > 1 && strcmp(argv[1], "wait") == 0) {
        puts("ready");
        fflush(stdout);
        waiter();
    }
    for (int i = 0; i < 400; i++)
        middle(200000);
    return 0;
}
"""

CXX_SOURCE = r"""
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace shapes {
volatile unsigned long sink;

struct Spinner {
    unsigned long rounds;
    __attribute__((noinline)) void spin() const
    {
        for (unsigned long i = 0; i < rounds; i++)
            sink += i;
    }
    inline void step() const
    {
        spin();
        sink ^= rounds;
    }
};

template <typename T> __attribute__((noinline)) void drive(const T &thing)
{
    thing.step();
    sink++;
}

inline void block_here() { pause(); }

__attribute__((noinline)) void waiter()
{
    block_here();
    sink++;
}
}  // namespace shapes

int main(int argc, char **argv)
{
    if (argc > 1 && std::strcmp(argv[1], "wait") == 0) {
        std::puts("ready");
        std::fflush(stdout);
        shapes::waiter();
    }
    shapes::Spinner spinner{200000};
    for (int i = 0; i < 400; i++)
        shapes::drive(spinner);
    return 0;
}
"""

#: name -> (compiler, source, flags); "nog" is built without -g.
PROGRAMS = {
    "prog": ("gcc", C_SOURCE, ["-O2", "-g"]),
    "cxx": ("g++", CXX_SOURCE, ["-O2", "-g"]),
    "nog": ("gcc", C_SOURCE, ["-O2", "-g0", "-DVARIANT=3"]),
}
#: Functions each program's samples must be named with.
SAMPLED = {"prog": {"spin_leaf", "middle", "main"}, "nog": {"spin_leaf", "middle", "main"},
           "cxx": {"shapes::Spinner::spin", "main"}}


@dataclass(slots=True)
class Built:
    root: Path
    build_ids: dict[str, bytes]

    def full(self, name: str) -> Path:
        return self.root / "full" / name

    def debug(self, name: str) -> Path:
        return self.root / "debug" / f"{name}.debug"

    def stripped(self, name: str) -> Path:
        return self.root / "bin" / name


def build_id(path: Path) -> bytes:
    from pysframe.elf import ElfImage

    found = ElfImage(str(path)).build_id()
    assert found, path
    return found


def build(directory: Path) -> Built:
    """The programs above under ``directory`` (see the module's docstring)."""
    for part in ("full", "debug", "bin", "src"):
        (directory / part).mkdir()
    ids = {}
    for name, (compiler, source, flags) in PROGRAMS.items():
        suffix = ".cc" if compiler == "g++" else ".c"
        (directory / "src" / (name + suffix)).write_text(source)
        full = directory / "full" / name
        subprocess.run([compiler, *flags, "-Wl,--build-id", "-o", str(full),
                        str(directory / "src" / (name + suffix))], check=True, timeout=120)
        debug = directory / "debug" / f"{name}.debug"
        subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
        stripped = directory / "bin" / name
        link = [f"--add-gnu-debuglink={name}.debug"] if "-g" in flags else []
        subprocess.run(["objcopy", "--strip-all", *link, str(full), str(stripped)],
                       check=True, cwd=directory / "debug")
        ids[name] = build_id(full)
        assert build_id(stripped) == ids[name]
    return Built(directory, ids)


def by_build_id(root: Path, debug: Path, identity: bytes) -> Path:
    """``debug`` copied to ``<root>/.build-id/<xx>/<rest>.debug``."""
    text = identity.hex()
    target = root / ".build-id" / text[:2] / f"{text[2:]}.debug"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(debug, target)
    return target


def environment(cache: Path, **extra: str) -> dict[str, str]:
    """The environment of our commands in these tests: a fresh cache and HOME (no
    ~/.debug of the machine), the default debug directory (/usr/lib/debug, which holds
    nothing of these programs) and no debuginfod server, unless ``extra`` says."""
    base = {key: value for key, value in os.environ.items()
            if key not in ("DEBUGINFOD_URLS", "PYSFRAME_DEBUG_FILE_DIRECTORY")}
    home = cache / "home"
    home.mkdir(parents=True, exist_ok=True)
    return {**base, "XDG_CACHE_HOME": str(cache), "HOME": str(home), **extra}


def sframe(*arguments: str, env: dict[str, str], timeout: float = 300
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", *arguments], capture_output=True,
                          text=True, timeout=timeout, env=env)


def frame_names(text: str, binary: Path) -> dict[str, str]:
    """file address -> symbol text of the frames in ``binary`` of perf script text."""
    pattern = r"^\s+([0-9a-f]+) (\S+) \(" + re.escape(str(binary)) + r"\)$"
    return dict(re.findall(pattern, text, re.M))


def perf_names(perf: str, recording: Path, built: Built, cache: Path) -> str:
    """``perf script`` text of ``recording`` with the unstripped programs in a build-id
    cache of its own (how perf names a stripped program's frames)."""
    buildid_dir = cache / "perf-buildid"
    for name in PROGRAMS:
        subprocess.run([perf, "--buildid-dir", str(buildid_dir), "buildid-cache", "-a",
                        str(built.full(name))], check=True, capture_output=True, timeout=60)
    return subprocess.run([perf, "--buildid-dir", str(buildid_dir), "script", "--no-inline",
                           "-i", str(recording)], capture_output=True, text=True, check=True,
                          timeout=300).stdout


def assert_named_as_perf(ours: str, theirs: str, built: Built, names: list[str]) -> None:
    """Every frame of the programs ``names`` is named, as perf names it, with at least
    the functions each program spins in."""
    for name in names:
        mine = frame_names(ours, built.stripped(name))
        perfs = frame_names(theirs, built.stripped(name))
        assert mine, f"no frame of {name}"
        assert all(text != "[unknown]" for text in mine.values()), (name, mine)
        common = set(mine) & set(perfs)
        assert len(common) >= len(mine) // 2, (name, sorted(mine), sorted(perfs))
        assert {spot: mine[spot] for spot in common} == {spot: perfs[spot] for spot in common}
        assert {text.split("+")[0] for text in mine.values()} >= SAMPLED[name], mine


def assert_unnamed(ours: str, built: Built, names: list[str]) -> None:
    for name in names:
        mine = frame_names(ours, built.stripped(name))
        assert mine and set(mine.values()) == {"[unknown]"}, (name, mine)


def record_all(perf: str, built: Built, output: Path) -> Path:
    """One recording of the three stripped programs, run one after the other."""
    command = "; ".join(str(built.stripped(name)) for name in PROGRAMS)
    subprocess.run([perf, "record", "-q", "-N", "--no-bpf-event", "-e", "cpu-clock", "-F",
                    "2000", "--call-graph", "dwarf", "-o", str(output), "--", "sh", "-c",
                    command], check=True, capture_output=True, timeout=300)
    return output


def start_waiting(program: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen([str(program), "wait"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


GDB_FRAME = re.compile(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(.+?) \(")


def gdb_names(pid: int, *arguments: str) -> list[str]:
    """gdb's frame names for ``pid`` (``arguments``: before ``-p``, e.g. the unstripped
    program or ``-iex`` settings)."""
    text = subprocess.run(
        ["gdb", "-nx", "-batch", "-ex", "set backtrace past-main on",
         "-ex", "set backtrace past-entry on", "-ex", "bt", *arguments, "-p", str(pid)],
        capture_output=True, text=True, timeout=120).stdout
    return [match[2] for match in map(GDB_FRAME.match, text.splitlines()) if match]


def stack_names(pid: int, env: dict[str, str]) -> list[str]:
    import json

    result = sframe("stack", "--json", str(pid), env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    (thread,) = document["threads"]
    return [name for frame in thread["frames"] for name in frame["names"]]


def stop(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait(timeout=30)

def require_toolchain() -> None:
    """gcc, g++ and objcopy build the test programs: skip without them, fail under
    CI=true (tests/support/oracles.py)."""
    import shutil

    from tests.support.oracles import missing

    absent = [tool for tool in ("gcc", "g++", "objcopy") if shutil.which(tool) is None]
    if absent:
        missing(", ".join(absent), "apt-get install gcc g++ binutils")

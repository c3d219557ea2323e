"""Bench (issue 28.1's count): ``sframe inject`` on 20 programs of /usr/bin and 10 shared
libraries of /usr/lib, each checked as tests/test_inject_loadable.py checks a few.

For each file: injected (in-process, timed), the copy run (a program: its ``--version``,
output and exit status as the original's; a library: preloaded by its soname into
``ls --version`` and into ``sleep``), the bytes a started process holds at the
``PT_GNU_SFRAME`` address (``/proc/PID/mem``) compared with the file's section and with
what ``sframe dump`` shows for the file (the dump of those bytes at the section's address),
the kernel's registration policy applied to them, objdump 2.47.50's dump of the copy.
Then ``sframe defer --report`` over a ``--call-graph dwarf`` recording of the injected xz
(with the injected liblzma and libc), without ``--assume-sframe``.

    python3 bench/inject_loadable.py [--out DIR] [--no-defer]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.loaded import InMemory, library_memory, program_memory

from common import OUT, find_objdump
from pysframe.elf import ElfImage, is_elf
from pysframe.format.validation import ERROR, validate
from pysframe.generate.inject import inject

PROGRAMS = ["xz", "gzip", "ls", "bash", "cat", "cp", "tar", "grep", "sed", "find", "diff",
            "make", "perl", "python3", "git", "curl", "ssh", "openssl", "readelf", "objdump",
            "strace", "zstd", "sort", "du", "stat", "env"]
ARGUMENTS = {"ssh": ["-V"], "openssl": ["version"]}
LIBRARIES = ["libz.so.1", "libc.so.6", "liblzma.so.5", "libstdc++.so.6", "libcrypto.so.3",
             "libssl.so.3", "libzstd.so.1", "libbz2.so.1.0", "libsqlite3.so.0",
             "libexpat.so.1", "libffi.so.8", "libpcre2-8.so.0", "libgmp.so.10"]
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
SFRAME = [sys.executable, "-m", "pysframe"]


def _run(command: list[str], **options: object) -> tuple[int, str]:
    run = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                         timeout=60, **options)  # type: ignore[call-overload]
    return run.returncode, run.stdout + run.stderr


def _dump_matches(path: Path, found: InMemory, address: int, work: Path) -> bool:
    raw = work / "memory.sframe"
    raw.write_bytes(found.sframe)
    memory = _run([*SFRAME, "dump", "--raw", "--address", hex(address), str(raw)])
    whole = _run([*SFRAME, "dump", str(path)])
    return memory[0] == whole[0] == 0 and whole[1].endswith(memory[1]) and bool(memory[1])


def check(name: str, original: Path, work: Path, objdump: str, library: bool) -> list[str]:
    """The row's cells: what was checked, ``ok`` or what failed."""
    target = work / name / original.name
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    image = ElfImage(str(original))
    data, size = inject(image, version=3)
    target.write_bytes(data)
    target.chmod(0o755)
    seconds = time.perf_counter() - started
    copy = ElfImage(str(target))
    (section,) = copy.sframe_sections()
    if library:
        links = work / name / "soname"  # libc.so.6 is its own file name
        links.mkdir(exist_ok=True)
        found = library_memory(target, name, links)
        env = {**os.environ, "LD_LIBRARY_PATH": str(links), "LD_PRELOAD": name}
        runs = _run(["ls", "--version"], env=env) == _run(["ls", "--version"])
    else:
        arguments = ARGUMENTS.get(name, ["--version"])
        runs = _run([name, *arguments], executable=str(target)) == _run(
            [name, *arguments], executable=str(original))  # argv[0] as sed prints it
        found = program_memory(target)
    same = found.sframe == section.raw
    kernel = not [f for f in validate(memoryview(found.sframe), found.address, kernel=True)
                  if f.severity == ERROR]
    dump = _dump_matches(target, found, section.address, work)
    objdump_run = subprocess.run([objdump, "--sframe=.sframe", str(target)],
                                 capture_output=True, text=True)
    objdump_ok = objdump_run.returncode == 0 and not objdump_run.stderr
    growth = len(data) - len(image.data)
    return [name, f"{size}", f"+{growth}", f"{seconds:.2f}s", _ok(runs), _ok(same), _ok(dump),
            _ok(kernel), _ok(objdump_ok)]


def _ok(value: bool) -> str:
    return "ok" if value else "FAIL"


def defer_check(work: Path) -> str:
    """``sframe defer --report`` of a dwarf recording of the injected xz."""
    perf = shutil.which("perf")
    if perf is None:
        return "no perf"
    libraries = work / "defer-lib"
    libraries.mkdir(exist_ok=True)
    for name in ("liblzma.so.5", "libc.so.6"):
        link = libraries / name
        link.unlink(missing_ok=True)
        link.symlink_to(work / name / (LIBDIR / name).resolve().name)
    data = work / "random.bin"
    data.write_bytes(os.urandom(8 << 20))
    home = Path(tempfile.mkdtemp(dir=work))  # perf's build-id cache would hold the originals
    env = {**os.environ, "HOME": str(home), "LD_LIBRARY_PATH": str(libraries),
           "XDG_CACHE_HOME": str(home / "cache")}
    recording = work / "xz.perf.data"
    subprocess.run([perf, "record", "-q", "--no-bpf-event", "-e", "cpu-clock", "-F", "999",
                    "--call-graph", "dwarf,8192", "-o", str(recording),
                    str(work / "xz" / "xz"), "-9", "-k", "-c", str(data)],
                   stdout=subprocess.DEVNULL, env=env, check=True)
    report = subprocess.run([*SFRAME, "defer", str(recording), "-o", str(work / "xz.defer.data"),
                             "--report"], capture_output=True, text=True, env=env)
    return report.stdout + report.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(OUT / "inject-loadable"))
    parser.add_argument("--no-defer", action="store_true")
    options = parser.parse_args()
    work = Path(options.out)
    work.mkdir(parents=True, exist_ok=True)
    objdump = find_objdump()
    rows = [["file", "sframe", "growth", "inject", "runs", "memory", "dump", "kernel",
             "objdump"]]
    wanted = [(n, Path("/usr/bin", n), False) for n in PROGRAMS
              if is_elf(Path("/usr/bin", n).read_bytes()[:4])][:20]
    wanted += [(n, (LIBDIR / n).resolve(), True) for n in LIBRARIES
               if (LIBDIR / n).exists()][:10]
    for name, original, library in wanted:
        try:
            rows.append(check(name, original, work, objdump, library))
        except Exception as error:  # a bench reports every file
            rows.append([name, f"error: {type(error).__name__}: {error}"])
        print("  ".join(rows[-1]), flush=True)
    failed = [row for row in rows[1:] if "FAIL" in row or len(row) < 9]
    programs = sum(1 for _, _, library in wanted if not library)
    print(f"\n{programs} programs, {len(wanted) - programs} libraries: "
          f"{len(rows) - 1 - len(failed)} pass every check, {len(failed)} do not")
    if not options.no_defer:
        report = defer_check(work)
        print("\nsframe defer --report (injected xz, liblzma, libc; no --assume-sframe):")
        print(report)
        unwound = re.search(r"unwound\s+[\d,]+\s+([\d.]+)%", report)
        if unwound is None or float(unwound.group(1)) < 95:
            failed.append(["defer"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

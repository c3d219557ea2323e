"""Helpers shared by the benches: locating peer tools and timing commands."""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
FIXTURES = REPO.parent / "shared" / "fixtures"
TOOLCHAIN = REPO.parent / "shared" / "toolchain"


def find_objdump(label: str = "2.47.50") -> str:
    """objdump of a binutils that dumps SFrame V3, installing it from ../shared/toolchain if needed."""
    for prefix in (Path("/opt/sframe-tc"), OUT / "sframe-tc"):
        candidate = prefix / "bin" / f"objdump-{label}"
        if candidate.exists():
            return str(candidate)
    prefix = Path("/opt/sframe-tc") if os.geteuid() == 0 else OUT / "sframe-tc"
    print(f"installing binutils {label} into {prefix} (../shared/toolchain/install.sh) ...",
          file=sys.stderr)
    subprocess.run([str(TOOLCHAIN / "install.sh"), "--prefix", str(prefix), label], check=True,
                   stdout=subprocess.DEVNULL)
    return str(prefix / "bin" / f"objdump-{label}")


def system_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        sys.exit(f"bench: {name} not found (apt-get install binutils)")
    return path


def wall_time(argv: Sequence[str], runs: int = 5, stdout_path: Path | None = None) -> float:
    """Median wall time of ``argv`` over ``runs`` runs (stdout to a file or /dev/null)."""
    times = []
    for _ in range(runs):
        with open(stdout_path or os.devnull, "wb") as out:
            start = time.perf_counter()
            subprocess.run(argv, stdout=out, check=True)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


VENV = OUT / "venv"


def bench_environment() -> dict[str, str]:
    """The environment to time our command in: bytecode caching on, as users have it (our
    sandboxes set PYTHONDONTWRITEBYTECODE=1, which makes every edited module compile at
    every start)."""
    return {key: value for key, value in os.environ.items()
            if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}


@functools.cache
def venv_sframe() -> list[str]:
    """Our console script installed (editable) in a virtual environment of the real
    interpreter, made once in bench/out/venv: what a user runs. Not the interpreter that
    runs the bench: under pyenv, ``python3`` is a bash shim (~60 ms a start) and a sandbox's
    site-packages may carry ``.pth`` hooks that import packages at every start (~35 ms)."""
    script = VENV / "bin" / "sframe"
    marker = VENV / "installed-from"
    if not script.exists() or not marker.exists() or marker.read_text() != str(REPO):
        base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        print(f"making {VENV} (python -m venv; pip install -e {REPO}) ...", file=sys.stderr)
        subprocess.run([str(base), "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "-e",
                        str(REPO)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        marker.write_text(str(REPO))
    subprocess.run([str(VENV / "bin" / "python"), "-m", "compileall", "-q",
                    str(REPO / "src" / "pysframe")], check=True, stdout=subprocess.DEVNULL,
                   env=bench_environment())
    return [str(script)]


def sframe_command() -> list[str]:
    """How to run our CLI: the console script installed beside this interpreter, else the
    module. Not the first ``sframe`` on PATH: under pyenv that is a bash shim that costs
    ~100 ms per start and would be timed as ours."""
    beside = Path(sys.executable).with_name("sframe")
    if beside.is_file():
        return [str(beside)]
    script = shutil.which("sframe")
    return [script] if script else [sys.executable, "-m", "pysframe"]


def compile_bytecode() -> None:
    """Write our modules' .pyc files. An installed package has them; a source checkout run
    with PYTHONDONTWRITEBYTECODE=1 (set on our sandboxes) compiles every module at every
    start, ~20 ms that no user pays."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "src" / "pysframe"),
                           quiet=1)

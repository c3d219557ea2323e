"""Helpers shared by the benches: locating peer tools, timing commands, and the machinery of
an honest comparison with a peer (:func:`cold_and_warm`): a cold column (each run with an
empty private ``XDG_CACHE_HOME``) and a warm one (a private cache filled by one untimed run
first), the compared commands in alternating order (ours then the peer's, the peer's then
ours), at least 5 repeats, each figure printed as median [min-max] (:func:`spread`).

"Cold" is our cache only (generated tables, symbols, DWARF answers under
``$XDG_CACHE_HOME/pysframe``): the kernel's page cache is warm in both columns, and Python's
bytecode is cached (``__pycache__``) in both, as an installed package has it."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TypeVar

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
    """Median wall time of ``argv`` over ``runs`` runs (stdout to a file or /dev/null), in
    :func:`bench_environment` (bytecode caching on; the caller's XDG_CACHE_HOME)."""
    times = []
    for _ in range(runs):
        with open(stdout_path or os.devnull, "wb") as out:
            start = time.perf_counter()
            subprocess.run(argv, stdout=out, check=True, env=bench_environment())
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measured_run(argv: Sequence[str], env: Mapping[str, str], capture: bool = False
                 ) -> tuple[float, float, bytes]:
    """(wall seconds, CPU seconds, standard output) of one run of ``argv``: CPU time is
    user + system of it and every process it waited for (``RUSAGE_CHILDREN``: our
    helpers and workers are all waited for); its output captured with ``capture``, else
    sent to /dev/null (b""). Exits the bench if the command fails (1, a problem reported
    with the output still whole, is not a failure)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(list(argv), env=dict(env), check=False,
                          stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        sys.exit(f"bench: {' '.join(argv)} failed ({done.returncode}): "
                 f"{done.stderr.decode(errors='replace').strip()[-300:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.stdout or b""


#: The fewest repeats a comparison prints a median and spread of.
MIN_REPEATS = 5
COLD, WARM = "cold", "warm"


def spread(values: Sequence[float], fmt: str = ".0f") -> str:
    """``median [min-max]`` of ``values``, each formatted with ``fmt``."""
    if not values:
        return "-"
    return (f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]")


def ratios(ours: Sequence[float], theirs: Sequence[float]) -> list[float]:
    """Run-by-run ratios of paired measurements (repeat i of each)."""
    return [a / b for a, b in zip(ours, theirs, strict=False) if b]


@contextmanager
def private_cache() -> Iterator[Path]:
    """An empty ``XDG_CACHE_HOME`` of our own (mode 0700, as the cache wants), removed after."""
    with tempfile.TemporaryDirectory(prefix="bench-cache-", dir=OUT if OUT.is_dir() else None
                                     ) as directory:
        os.chmod(directory, 0o700)
        yield Path(directory)


def with_cache(env: Mapping[str, str], cache: Path) -> dict[str, str]:
    return {**env, "XDG_CACHE_HOME": str(cache)}


def alternating(names: Sequence[str], repeat: int) -> list[str]:
    """The order of the compared runs in repeat ``repeat``: as given, then reversed, and so on
    (ours then the peer's, the peer's then ours), so that neither always runs first."""
    return list(names) if repeat % 2 == 0 else list(reversed(names))


#: What one measured run gives: seconds, or any record of figures.
T = TypeVar("T")


def cold_and_warm(runners: Mapping[str, Callable[[dict[str, str]], T]], repeats: int,
                  env: Mapping[str, str] | None = None,
                  states: Sequence[str] = (COLD, WARM)) -> dict[str, dict[str, list[T]]]:
    """Figures of every runner, ``{state: {name: [one per repeat]}}``, cold and warm. A
    runner is given the environment to run in (its XDG_CACHE_HOME set) and returns what it
    measured (seconds, or a record of figures).

    Each repeat runs the cold round then the warm round, the runners in :func:`alternating`
    order. Cold: every run gets a new, empty private XDG_CACHE_HOME. Warm: every runner has
    a private cache of its own filled by one untimed run before the first repeat. Peers
    ignore XDG_CACHE_HOME; they get the same environment all the same."""
    base = dict(env if env is not None else bench_environment())
    repeats = max(repeats, MIN_REPEATS)
    names = list(runners)
    figures: dict[str, dict[str, list[T]]] = {state: {name: [] for name in names}
                                                  for state in states}
    with ExitStack() as stack:
        warm = {name: stack.enter_context(private_cache()) for name in names}
        if WARM in states:
            for name in names:
                runners[name](with_cache(base, warm[name]))  # fills its cache, untimed
        for repeat in range(repeats):
            for name in alternating(names, repeat) if COLD in states else ():
                with private_cache() as cold:
                    figures[COLD][name].append(runners[name](with_cache(base, cold)))
            for name in alternating(names, repeat) if WARM in states else ():
                figures[WARM][name].append(runners[name](with_cache(base, warm[name])))
    return figures


def print_table(figures: Mapping[str, Mapping[str, Sequence[float]]], unit: str = "ms",
                scale: float = 1000.0, fmt: str = ".0f", indent: str = "  ",
                peer: str | None = None) -> None:
    """One row per runner, one column per cache state: median [min-max] in ``unit``; with
    ``peer``, a row per other runner of its run-by-run time ratio to the peer's."""
    states = list(figures)
    names = list(next(iter(figures.values())))
    width = max(len(name) + (len(f" / {peer}") if peer else 0) for name in names) + 2
    repeats = len(next(iter(next(iter(figures.values())).values())))
    print(f"{indent}{'':{width}}" + "".join(f"{state + ' cache, ' + unit:>26}"
                                            for state in states)
          + f"   (median [min-max] of {repeats}, alternating order)")
    for name in names:
        print(f"{indent}{name:{width}}" + "".join(
            f"{spread([v * scale for v in figures[state][name]], fmt):>26}" for state in states))
    if peer is None:
        return
    for name in names:
        if name != peer:
            print(f"{indent}{name + ' / ' + peer:{width}}" + "".join(
                f"{spread(ratios(figures[state][name], figures[state][peer]), '.2f') + 'x':>26}"
                for state in states))


VENV = OUT / "venv"
#: The interpreter our command runs on, when set: its own virtual environment,
#: bench/out/venv-<hash of its real path> (python -m venv; pip install -e), whatever runs
#: the bench. The interpreter is part of the figure: here pyenv's 3.11.7, built without
#: PGO and LTO and with a shared libpython, runs the Lua recording ~12% slower than the
#: distribution's /usr/bin/python3.11 (built with both, libpython linked in).
PYTHON_VARIABLE = "PYSFRAME_BENCH_PYTHON"


def bench_environment() -> dict[str, str]:
    """The environment to time our command in: bytecode caching on, as users have it (our
    sandboxes set PYTHONDONTWRITEBYTECODE=1, which makes every edited module compile at
    every start)."""
    return {key: value for key, value in os.environ.items()
            if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}


@functools.cache
def venv_sframe() -> list[str]:
    """Our installed console script, bytecode compiled, as a user runs it: with
    :data:`PYTHON_VARIABLE` set, the one in that interpreter's virtual environment; else
    the ``sframe`` beside this interpreter when the bench runs in a virtual environment
    that has this checkout installed (``. .venv/bin/activate``), else one made once in
    bench/out/venv (python -m venv of the real interpreter; pip install -e). Never a pyenv
    shim (a bash script, ~60-100 ms a start) or the first ``sframe`` on PATH. Which
    interpreter it is goes to stderr, with the figures."""
    beside = Path(sys.executable).with_name("sframe")
    chosen = os.environ.get(PYTHON_VARIABLE)
    if chosen:
        base = Path(chosen).resolve()
        venv = OUT / f"venv-{hashlib.sha256(str(base).encode()).hexdigest()[:12]}"
        script, python = _made_venv(venv, base)
    elif sys.prefix != sys.base_prefix and beside.is_file() and _installed_from_here(
            Path(sys.executable)):
        script, python = beside, Path(sys.executable)
    else:
        script, python = _made_venv(VENV, Path(sys.base_prefix) / "bin"
                                    / f"python{sys.version_info[0]}.{sys.version_info[1]}")
    subprocess.run([str(python), "-m", "compileall", "-q", str(REPO / "src" / "pysframe")],
                   check=True, stdout=subprocess.DEVNULL, env=bench_environment())
    version = subprocess.run([str(python), "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    print(f"sframe: {script} (Python {version}, {Path(python).resolve()})", file=sys.stderr)
    return [str(script)]


def _made_venv(venv: Path, base: Path) -> tuple[Path, Path]:
    """(script, python) of ``venv``, made from the interpreter ``base`` with this checkout
    installed, unless it was made so before."""
    script, python = venv / "bin" / "sframe", venv / "bin" / "python"
    marker = venv / "installed-from"
    made_from = f"{REPO}\n{base}"
    if not script.exists() or not marker.exists() or marker.read_text() != made_from:
        print(f"making {venv} ({base} -m venv; pip install -e {REPO}) ...", file=sys.stderr)
        subprocess.run([str(base), "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(REPO)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        marker.write_text(made_from)
    return script, python


def _installed_from_here(python: Path) -> bool:
    """Does ``python`` import pysframe from this checkout's src/?"""
    found = subprocess.run([str(python), "-c", "import pysframe; print(pysframe.__file__)"],
                           capture_output=True, text=True, env=bench_environment(), check=False)
    return found.returncode == 0 and Path(found.stdout.strip()).is_relative_to(REPO / "src")


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


#: pip's wrapper of a ``[project.scripts]`` entry point (distlib's template): how the
#: checkouts before ``scripts/sframe`` installed the command.
ENTRY_POINT_WRAPPER = """#!{python}
import re
import sys
from pysframe.cli.entry import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def baseline_sframe(sframe: list[str], source: Path) -> tuple[list[str], dict[str, str]]:
    """(command, environment additions) that run the ``sframe`` of the checkout whose
    ``src`` is ``source`` (first on PYTHONPATH, bytecode compiled) with the interpreter
    beside ``sframe`` (our installed command), launched as that checkout installs it: its
    own ``scripts/sframe`` where it has one (the garbage collector off from the first
    line, no ``re``), else an entry-point wrapper. Launched through the wrapper, a
    checkout that has the script was timed ~3-4 ms slower than it is (warm ``stack``:
    29 against 25 ms for the same code)."""
    python = str(Path(sframe[0]).with_name("python"))
    subprocess.run([python, "-m", "compileall", "-q", str(source)], check=True,
                   stdout=subprocess.DEVNULL, env=bench_environment())
    OUT.mkdir(parents=True, exist_ok=True)
    wrapper = OUT / "baseline-sframe"
    own = source.parent / "scripts" / "sframe"
    if own.is_file():
        _, _, body = own.read_text().partition("\n")
        wrapper.write_text(f"#!{python}\n{body}")
    else:
        wrapper.write_text(ENTRY_POINT_WRAPPER.format(python=python))
    wrapper.chmod(0o755)
    return [str(wrapper)], {"PYTHONPATH": str(source.resolve())}

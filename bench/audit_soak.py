"""Soak: ``sframe audit`` of a tree whose files another process truncates, replaces,
deletes and recreates throughout the run (a package upgrade, log rotation), many rounds.

Each round audits the tree with ``-j 2`` and no cache while the mutator runs; a round
fails if the command dies of a signal, prints a traceback or an internal error, or exits
with anything but 0, 1 or 2. Prints one line per 10 rounds and a summary; exits 1 if any
round failed.

    env -u PYTHONDONTWRITEBYTECODE python3 bench/audit_soak.py [--rounds 100]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCES = [Path("/usr/lib/x86_64-linux-gnu/libc.so.6"), Path("/usr/bin/python3"),
           Path(sys.executable), Path("/usr/bin/ls"), Path("/usr/bin/bash")]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import venv_sframe  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "2.46" / "x86_64" / "O2"


def _mutate(tree: Path, seed: int, stop: multiprocessing.synchronize.Event) -> None:
    """Truncate, replace, delete and recreate the tree's files until told to stop."""
    rng = random.Random(seed)
    files = sorted(tree.iterdir())
    originals = {path.name: path.read_bytes() for path in files}
    while not stop.is_set():
        path = rng.choice(files)
        action = rng.random()
        try:
            if action < 0.35:
                os.truncate(path, rng.randrange(max(path.stat().st_size, 1)))
            elif action < 0.6:
                replacement = path.with_name(path.name + ".new")
                replacement.write_bytes(originals[path.name])
                os.replace(replacement, path)
            elif action < 0.8:
                path.unlink()
            else:
                path.write_bytes(originals[path.name])
        except OSError:
            pass
        time.sleep(rng.random() * 0.002)


def _tree(directory: Path) -> Path:
    tree = directory / "tree"
    tree.mkdir()
    sources = [path for path in SOURCES if path.is_file()]
    sources += [*sorted(FIXTURES.glob("*.o"))[:10], FIXTURES / "prog"]
    for index, source in enumerate(sources):
        for copy in range(3):
            shutil.copy(source, tree / f"{index:02d}-{copy}-{source.name}")
    return tree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    arguments = parser.parse_args()
    sframe = " ".join(venv_sframe())  # ours as installed, not the first sframe on PATH
    failures, statuses = [], {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as work:
        for round_number in range(arguments.rounds):
            directory = Path(work) / str(round_number)
            directory.mkdir()
            tree = _tree(directory)
            stop = multiprocessing.Event()
            mutator = multiprocessing.Process(target=_mutate, args=(tree, round_number, stop))
            mutator.start()
            try:
                run = subprocess.run([*sframe.split(), "audit", str(tree), "-j", "2",
                                      "--no-cache", "--json", str(directory / "r.json")],
                                     capture_output=True, text=True, timeout=600,
                                     env=dict(os.environ, XDG_CACHE_HOME=str(directory / "c")))
            finally:
                stop.set()
                mutator.join()
            statuses[run.returncode] = statuses.get(run.returncode, 0) + 1
            if run.returncode not in (0, 1, 2) or "Traceback" in run.stderr or \
                    "internal error" in run.stderr + run.stdout:
                failures.append((round_number, run.returncode, run.stderr[-300:]))
            shutil.rmtree(directory)
            if round_number % 10 == 9:
                print(f"round {round_number + 1}: {len(failures)} failed so far", flush=True)
    print(f"{arguments.rounds} rounds in {time.monotonic() - started:.0f} s: "
          f"{len(failures)} crashes; exit statuses {dict(sorted(statuses.items()))}")
    for failure in failures[:5]:
        print("  failed:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

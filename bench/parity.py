"""Bench: `sframe script` against `perf script --no-inline` on recordings of the kinds the
issue names, made here (C++ with symbols and stripped, sqlite3, python3, an openssl | gzip
| xz pipeline, a -g recording, a -a recording), with the figures per recording:

    python3 bench/parity.py [--seconds 1.0]

Each line: samples, identical headers, chains equal / extended (only by return sites) /
with frames perf skipped / shorter or different, symbol text identical, perf's truncation
markers matched. The recordings stay in bench/out/parity (git-ignored).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.parity import compare, perf_script, record, sframe_script

from common import OUT, REPO

DWARF = ("-F", "999", "--call-graph", "dwarf")


def recordings(seconds: float, work: Path) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    cxx = work / "cxx"
    subprocess.run(["g++", "-O2", "-g", "-o", str(cxx),
                    str(REPO / "tests" / "data" / "parity" / "cxx.cc")], check=True)
    subprocess.run(["strip", "-o", str(work / "cxx-stripped"), str(cxx)], check=True)
    millis = str(int(seconds * 1000))
    rows = int(400000 * seconds / 0.5)
    query = (f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT {rows}) "
             "SELECT count(*) FROM (SELECT x, printf('%08d', x * 7) AS s FROM c ORDER BY s);")
    loop = (f"import json\nd = {{}}\nfor i in range({int(300000 * seconds)}): "
            "d[str(i)] = json.dumps([i, i * 2])\n")
    size = int(8000000 * seconds)
    return {
        "C++": ([str(cxx), millis], DWARF),
        "C++ stripped": ([str(work / "cxx-stripped"), millis], DWARF),
        "sqlite3": (["sqlite3", ":memory:", query], DWARF),
        "python3": (["/usr/bin/python3", "-c", loop], DWARF),
        "openssl|gzip|xz": (["sh", "-c", f"openssl rand {size} | gzip -1 | xz -1 > /dev/null"],
                            DWARF),
        "-g (C++)": ([str(cxx), millis], ("-F", "999", "-g")),
        "-a -g": (["sleep", str(seconds)], ("-a", "-F", "499", "-g")),
        "-a dwarf": (["sleep", str(seconds)], ("-a", "-F", "199", "--call-graph", "dwarf")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    arguments = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("needs perf")
    work = OUT / "parity"
    work.mkdir(parents=True, exist_ok=True)
    for index, (name, (command, options)) in enumerate(recordings(arguments.seconds,
                                                                  work).items()):
        recording = record(work / f"{index}.data", command, *options, timeout=600)
        ours = sframe_script(recording, work / "cache")
        parity = compare(ours.stdout, perf_script(recording))
        print(parity.line(name), f"(exit {ours.returncode})", flush=True)
        for problem in parity.problems[:2]:
            print("   ", problem[:300])


if __name__ == "__main__":
    main()

"""Bench check: ``sframe script`` gives byte-identical output to another checkout's on every
recording, on a first run (empty private cache) and a warm one (the same cache after it).

Recordings: the fixtures' (``../shared/fixtures/real/*/perf*.data``, each with the
binaries beside it) and bench/out's, unless paths are given. Among bench/out's, one like
a user's ``perf record -g`` of a program using many shared libraries (the sample-by-sample
path, kernel frames, ~4,600 samples in a dozen files), made as root with:

    cat > /tmp/work.py <<'EOF'
    import bz2, hashlib, lzma, zlib
    import numpy, zstandard
    a = numpy.random.rand(300, 300)
    for _ in range(60):
        numpy.linalg.inv(a); hashlib.sha256(b"x" * 10**6).digest(); zlib.compress(b"y" * 10**6)
        lzma.compress(b"z" * 200000); bz2.compress(b"w" * 300000)
        zstandard.ZstdCompressor().compress(b"v" * 2 * 10**6)
    EOF
    perf record -F 4000 -g -o bench/out/python-g.data -- .venv/bin/python /tmp/work.py

Ours is the installed console
script; the other checkout's ``src`` runs first on PYTHONPATH (bench/common.py). Prints one
line per recording and exits 1 if any output differs.

    git worktree add /tmp/before <commit>
    env -u PYTHONDONTWRITEBYTECODE python3 bench/same_output.py --baseline /tmp/before/src
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab import run
from common import (
    OUT,
    REPO,
    baseline_sframe,
    bench_environment,
    private_cache,
    venv_sframe,
    with_cache,
)

FIXTURES = REPO.parent / "shared" / "fixtures" / "real"


def _recordings(given: list[Path]) -> list[tuple[Path, list[str]]]:
    """(recording, extra arguments) of each recording to compare."""
    if given:
        return [(path, []) for path in given]
    found = [(path, ["--binaries", str(path.parent)])
             for path in sorted(FIXTURES.glob("*/perf*.data"))]
    return found + [(path, []) for path in sorted(OUT.glob("*.data"))]


def _outputs(argv: list[str], extra_env: dict[str, str]) -> tuple[bytes, bytes]:
    """(first run's, warm run's) standard output of ``argv``, in a cache of its own."""
    with private_cache() as cache:
        env = {**with_cache(bench_environment(), cache), **extra_env}
        return run(argv, env)[2], run(argv, env)[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, metavar="SRC")
    parser.add_argument("recordings", nargs="*", type=Path)
    args = parser.parse_args()
    ours = venv_sframe()
    theirs, extra = baseline_sframe(ours, args.baseline)
    differ = 0
    for recording, arguments in _recordings(args.recordings):
        command = ["script", "-i", str(recording), *arguments]
        mine, before = _outputs([*ours, *command], {}), _outputs([*theirs, *command], extra)
        same = [a == b for a, b in zip(mine, before, strict=True)]
        differ += not all(same)
        digest = hashlib.sha256(mine[1]).hexdigest()[:12]
        print(f"{recording}: first run {'identical' if same[0] else 'DIFFERS'}, warm "
              f"{'identical' if same[1] else 'DIFFERS'} ({len(mine[1]):,} bytes, sha256 "
              f"{digest}; first and warm {'alike' if mine[0] == mine[1] else 'unlike'})")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())

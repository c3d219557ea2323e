"""Coverage-guided fuzz target (atheris) for decode, dump, validate and lookup.

    python3 -m pip install atheris
    python3 -m fuzz.seed_corpus fuzz/corpus          # seed from ../shared/fixtures
    python3 -m fuzz.fuzz_sframe fuzz/corpus -runs=200000 -max_len=4096 -timeout=5

(from the repository root, so that ``tests.support`` is importable).

Any exception other than SFrameError, any hang (-timeout) and any run over
-rss_limit_mb is a finding; libFuzzer writes the input to crash-*/timeout-*.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from tests.support.exercise import exercise

    from pysframe.format.errors import SFrameError


def test_one_input(data: bytes) -> None:
    try:
        exercise(data, 0x1000)
    except SFrameError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

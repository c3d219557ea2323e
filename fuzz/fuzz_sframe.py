"""Coverage-guided fuzz target (atheris) for decode, dump, validate and lookup.

    python3 -m pip install atheris
    python3 fuzz/seed_corpus.py fuzz/corpus          # seed from ../shared/fixtures
    python3 fuzz/fuzz_sframe.py fuzz/corpus -runs=200000 -max_len=4096 -timeout=5

Any exception other than SFrameError, any hang (-timeout) and any run over
-rss_limit_mb is a finding; libFuzzer writes the input to crash-*/timeout-*.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from pysframe.format.errors import SFrameError
    from pysframe.format.exercise import exercise


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

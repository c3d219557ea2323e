"""Fuzzing the format readers, run as modules from the repository root so that they import
the shared harness as ``tests.support`` without editing ``sys.path``:

    python3 -m fuzz.mutate 100000                 # mutated fixture sections, no atheris
    python3 -m fuzz.seed_corpus fuzz/corpus       # a corpus from ../shared/fixtures
    python3 -m fuzz.fuzz_sframe fuzz/corpus -runs=150000 -max_len=8192 -timeout=10
"""

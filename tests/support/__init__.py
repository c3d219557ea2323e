"""Test and fuzz support shared by ``tests/`` and ``fuzz/``; not part of the library.

- :mod:`.exercise`: run every reader of the format over some bytes (the body of the
  robustness tests and of the fuzz targets), with a count of the work it did.
- :mod:`.strategies`: hypothesis strategies for valid SFrame sections.
- :mod:`.mutations`: hostile variants of a section (bit flips, truncations, inflated counts).
- :mod:`.hostile`: damaged copies of real binaries, a zstd bomb, running ``sframe`` with a
  hang detector and its peak memory.
- :mod:`.perf_rewrite`: hostile variants of real perf.data recordings.
- :mod:`.oracles`: the outside tools that judge our output (perf 7, binutils, go, protoc,
  Chromium), found in one place; missing ones skip, and fail under ``CI=true``.
- :mod:`.bpf_interp` (with :mod:`.bpf_compile`): an eBPF interpreter that runs the
  recorder's programs in user space and refuses what the kernel's verifier refuses;
  :mod:`.walker_run` feeds it the walker's maps and a stack, :mod:`.synthetic_stacks`
  makes stacks over a table's rows.
- :mod:`.deferred`: recordings of perf's deferred-callchain ABI built from a real one.

Imported as ``tests.support``: pytest puts the repository root on ``sys.path``
(``pythonpath = ["."]`` in pyproject.toml) and the fuzz scripts run as modules from the
repository root (``python3 -m fuzz.mutate``), so neither needs a ``sys.path`` edit.
``tests`` itself stays a directory without ``__init__.py`` (a namespace package), so that
pytest keeps importing the test files and ``conftest`` as top-level modules.
"""

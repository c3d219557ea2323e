"""The ``sframe`` command line: :mod:`.main` (options, and the one place where errors
become exit codes, decided in :mod:`.errors`) and one module per command (:mod:`.dump`,
:mod:`.validate`, :mod:`.generate`, :mod:`.script`, :mod:`.stack`, :mod:`.demo`).

No library API: the entry point is ``pysframe.cli.main:main`` (the ``sframe`` script).
"""

__all__: list[str] = []

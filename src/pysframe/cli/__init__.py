"""The ``sframe`` command line: :mod:`.main` holds the options and is the one place where
errors become exit codes (decided in :mod:`.errors`); one module per command.

No library API: the entry point is ``pysframe.cli.main:main`` (the ``sframe`` script).
"""

__all__: list[str] = []

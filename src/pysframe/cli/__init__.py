"""The ``sframe`` command line: :mod:`.main` holds the options and is the one place where
errors become exit codes (decided in :mod:`.errors`); one module per command.

No library API: the entry point is ``pysframe.cli.entry:main`` (the ``sframe`` script;
:mod:`.entry` parses ``stack`` and ``script`` itself, for start-up time, and hands the
rest to click in :mod:`.main`).
"""

__all__: list[str] = []

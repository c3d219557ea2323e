"""``python -m pysframe``: the same as the ``sframe`` command."""

from .cli.entry import main

main()

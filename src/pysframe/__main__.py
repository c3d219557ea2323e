"""``python -m pysframe``: the same as the ``sframe`` command."""

from .cli.main import main

main()

"""``python -m pysframe``: the same as the ``sframe`` command."""

from .cli.entry import main

if __name__ == "__main__":  # not when a helper process started afresh imports it
    main()

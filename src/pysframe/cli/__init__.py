"""The ``sframe`` command line."""

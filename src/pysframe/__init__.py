"""pysframe: the SFrame ("Simple Frame") stack-trace format of GNU binutils, in Python.

Stages of the data flow, one sub-package each (a module imports only from
stages before it): ``format`` (the .sframe bytes), ``elf`` (finding sections in
ELF files), ``cli`` (the ``sframe`` command).
"""

__version__ = "0.1.0"

"""pysframe: the SFrame ("Simple Frame") stack-trace format of GNU binutils, in Python.

One sub-package per stage of the data flow, earliest first (a module imports only
from its own stage and earlier ones): ``errors``, ``blas``, ``exports`` and ``cachedir``
(shared bottom), ``format`` (the .sframe bytes), ``elf`` (finding sections in ELF files), ``cfi``
(DWARF call-frame information), ``generate`` (SFrame from CFI, as GNU as and ld
make it), ``sources`` (perf.data, live processes, core dumps), ``unwind`` (the stack
tracer, given its tables and samples), ``session`` (what feeds it: generated tables, a
recording's samples), ``symbolize`` (frame names), ``report`` (outputs), ``demo`` and ``cli``
(the ``sframe`` command).

The library API is what each package exports in its ``__all__``, imported from the
package (``from pysframe.format import SFrameReader``, ``from pysframe.unwind import
Unwinder``); the names are loaded on first use (:mod:`.exports`). ``cli`` has no library
API: it is the ``sframe`` command.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

"""The ``signal`` functions and numbers, from ``_signal``, for the live-process path.

``_signal`` is the C module the standard ``signal`` module is written over; ``signal``
adds only enum classes for the numbers and handlers, which cost ~0.7 ms of a warm
``sframe stack`` (measured against gdb). The functions are the same; they take and give
plain ints. Type checkers see ``signal``'s declarations.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from signal import *  # noqa: F403
else:
    from _signal import *  # noqa: F403

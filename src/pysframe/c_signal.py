"""The few ``signal`` functions and numbers the live-process path uses, from ``_signal``.

``_signal`` is the C module the standard ``signal`` module is written over; ``signal``
adds only enum classes for the numbers and handlers, which cost ~0.7 ms of a warm
``sframe stack`` (measured against gdb). The functions are the same; they take and give
plain ints. Type checkers see ``signal``'s declarations.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from signal import (
        ITIMER_REAL,
        SIG_BLOCK,
        SIG_DFL,
        SIG_SETMASK,
        SIGALRM,
        SIGHUP,
        SIGINT,
        SIGPIPE,
        SIGTERM,
        pthread_sigmask,
        setitimer,
        signal,
    )
else:
    from _signal import (
        ITIMER_REAL,
        SIG_BLOCK,
        SIG_DFL,
        SIG_SETMASK,
        SIGALRM,
        SIGHUP,
        SIGINT,
        SIGPIPE,
        SIGTERM,
        pthread_sigmask,
        setitimer,
        signal,
    )

__all__ = ["ITIMER_REAL", "SIGALRM", "SIGHUP", "SIGINT", "SIGPIPE", "SIGTERM", "SIG_BLOCK",
           "SIG_DFL", "SIG_SETMASK", "pthread_sigmask", "setitimer", "signal"]

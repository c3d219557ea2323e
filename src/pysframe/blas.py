"""numpy's OpenBLAS kept to one thread in the ``sframe`` command, and the user's environment
for what it runs.

OpenBLAS starts a thread per CPU when numpy is imported, and that thread spins ~0.1 s of
CPU before it sleeps (here: ``python -c 'import numpy'`` takes 0.18 s of user time, 0.06 s
with one thread). Nothing here does linear algebra: numpy is used for its arrays. The
spin lands on another CPU, on the workload ``sframe record`` samples, or on the other half
of a ``script -j 2``. So the command sets ``OPENBLAS_NUM_THREADS=1`` for itself and its
helpers, unless the user set it; the command ``sframe record`` starts gets the user's
environment back (:func:`user_environment`). A library user's process is left alone.
"""

from __future__ import annotations

import os

#: Read by OpenBLAS once, when numpy loads it.
VARIABLE = "OPENBLAS_NUM_THREADS"
#: Whether this process set :data:`VARIABLE` (False: the user's value, or none).
_added = False


def one_blas_thread() -> None:
    """Set :data:`VARIABLE` to 1 for this process and what it starts, unless it is set."""
    global _added
    if VARIABLE not in os.environ:
        os.environ[VARIABLE] = "1"
        _added = True


def user_environment() -> dict[str, str]:
    """The environment as the user gave it (without what :func:`one_blas_thread` added)."""
    environment = dict(os.environ)
    if _added:
        environment.pop(VARIABLE, None)
    return environment

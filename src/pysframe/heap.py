"""glibc's allocator told to keep the memory the batch pipeline frees, in the ``sframe``
command's batch pipeline, and in the child that parses kallsyms with numpy for it
(:func:`pysframe.symbolize.kernel.prefetch`) only.

Each chunk of samples allocates arrays of megabytes (a result matrix of 4,096 samples
by the deepest chain is 4 MB) and frees them before the next. glibc serves blocks that
large with their own ``mmap`` and unmaps them when freed, raising its threshold as it
goes, and gives back the top of its heap beyond twice that threshold: the next chunk
faults every page of its arrays in again. On the deep bench recording that was ~21,000
of a run's ~75,000 page faults and ~25 ms of its ~430 (``/usr/bin/time -f %R``; with the
same settings by ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``: 54,000 faults,
peak RSS 130 MB instead of 137). The settings are only reachable through ``mallopt``
(the environment variables are read at start-up), so by ctypes; no library wraps it.
Another C library, or none found, is left as it is.
"""

from __future__ import annotations

import os

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks served from the heap up to this size (glibc's most on 64-bit: 32 MiB).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap kept up to this much.
TRIM_THRESHOLD = 256 << 20


def glibc() -> bool:
    """Whether this process runs on glibc."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError, AttributeError):
        return False


def keep_freed_memory() -> bool:
    """Tell glibc to reuse freed blocks of up to :data:`MMAP_THRESHOLD` instead of giving
    them back to the kernel; whether it took both settings (False: not glibc)."""
    if not glibc():
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # (the threshold first: setting either turns glibc's moving threshold off)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

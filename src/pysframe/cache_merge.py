"""One process at a time merging into a cache entry (:mod:`pysframe.cachedir`).

Saving what a run made into an entry is a merge: the entry is loaded, what the run made
is added, the whole is stored (by rename). Two ``-j`` workers keeping their made functions
at the same time each stored the entry it had loaded plus its own; the later store lost
the other's, and the next run made them again. :class:`Merging` puts an exclusive
``flock`` on the entry's directory around the merge (:func:`merge_into`). ``flock`` is the standard library's
(fcntl); no library is needed.
"""

from __future__ import annotations

import os
import time

from .cachedir import Source, entry_directory, load, store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: How long a merge waits for another process's merge into the same directory.
MERGE_WAIT = 2.0


class Merging:
    """``with Merging(kind, build_id):`` a merge into that entry that no other process makes
    at the same time (the lock is on a descriptor of its own of the entry's directory,
    waited for up to :data:`MERGE_WAIT` seconds; then the merge goes on without it: the
    worst is a lost merge, made again by a later run, never a hang)."""

    def __init__(self, kind: str, build_id: bytes) -> None:
        self.kind, self.build_id, self.fd = kind, build_id, -1

    def __enter__(self) -> bool:
        """Whether the lock is held."""
        import fcntl

        directory = entry_directory(self.kind, self.build_id)
        if directory is None:
            return False
        try:
            self.fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                              dir_fd=directory)
        except OSError:
            return False
        finally:
            os.close(directory)
        deadline = time.monotonic() + MERGE_WAIT
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.002)

    def __exit__(self, *_: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # (the lock goes with it)
            self.fd = -1


def merge_into(kind: str, build_id: bytes, source: Source,
               merged: Callable[[bytes | None], bytes]) -> None:
    """Store ``merged(payload)`` as the entry of ``kind`` for ``build_id``, ``payload``
    being the entry as it is (None: none that verifies), with no other process's merge
    into it in between (:class:`Merging`)."""
    with Merging(kind, build_id):
        store(kind, build_id, merged(load(kind, build_id, source)), source)

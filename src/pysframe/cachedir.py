"""The cache of what pysframe derives from binaries (generated SFrame tables, symbol tables,
DWARF answers), kept by build id; and how files are written atomically (for the cache and
for the commands' outputs alike).

Entries live at ``$XDG_CACHE_HOME/pysframe/<kind>/<first two hex digits of the build id>/
<the other digits>.<variant>`` (default ``~/.cache``). The cache is treated as hostile, as
any input is:

* Every directory from ``pysframe`` down is created 0700 and, on every use, opened one step
  at a time relative to its parent (``O_NOFOLLOW | O_DIRECTORY``) and checked to be a
  directory owned by the effective user and writable by no one else. Anything else (a
  symbolic link, another owner, group or other write permission) and the cache is not
  used: one warning line, and the run goes on without it.
* An entry is opened with ``O_NOFOLLOW | O_NONBLOCK`` and read only when it is a regular
  file of ours of plausible size (a FIFO, a link to ``/dev/zero``, a directory, a huge
  file: treated as absent, never waited on, never read without bound).
* Every entry describes itself: magic, format, kind, build id, the size and a digest of
  the bytes it was derived from (:class:`Source`), the payload's length and digest (a
  32-byte digest, :func:`digest_of`). All of
  it is checked before the payload is handed out; an entry for another file with the same
  build id (another build, a corrupt copy) is treated as absent and regenerated. The
  files an entry is derived from (a binary, its debug file) are hashed only when their
  identity (device, inode, size, times, read from the descriptor their bytes came from)
  differs from the one the entry recorded: another file, or this one changed. A large entry
  read at every run (the kernel's symbols) is mapped instead and its payload checked by
  a CRC of its own (:func:`load_mapped`), not hashed whole.
* Entries are written to a temporary file created with ``O_EXCL`` in their own directory,
  then renamed into place, so readers never see a partial entry.

A cache that cannot be used or written only makes the next run slower.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import sys
import time

from .errors import PysframeError
from .fd_io import write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import IO, Any, TypeVar


def _interpreters_blake2b() -> Any:
    """The interpreter's own BLAKE2b (for small inputs, see _digest_for), or None."""
    try:
        from _blake2 import blake2b  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return blake2b


_small_digest = _interpreters_blake2b()

#: Inputs from this size on are hashed by OpenSSL's SHA-256 (hashlib): ~2x faster than
#: the interpreter's BLAKE2b here, but importing hashlib loads OpenSSL (~3 ms of every
#: start), which ``sframe stack`` does not need for the few hundred KB it verifies. Below
#: it, BLAKE2b (~3x faster than the interpreter's own SHA-256, which cost a warm
#: ``sframe stack`` ~1.8 ms). The choice depends on the size only, so the same bytes
#: always get the same digest.
_OPENSSL_FROM = 1 << 20


def _digest_for(size: int) -> Any:
    """A hash object (32-byte digests) suited to hashing ``size`` bytes."""
    if size < _OPENSSL_FROM and _small_digest is not None:
        return _small_digest(digest_size=32)
    import hashlib

    return hashlib.sha256()


def blake2b_digest(data: bytes | bytearray | memoryview, size: int) -> bytes:
    """BLAKE2b of ``data`` in ``size`` bytes, by the interpreter's own module when it has
    one (the same digest as hashlib's, without loading OpenSSL)."""
    if _small_digest is not None:
        return bytes(_small_digest(data, digest_size=size).digest())
    import hashlib

    return hashlib.blake2b(data, digest_size=size).digest()


def digest_of(*parts: bytes | memoryview) -> Any:
    """The hash object of ``parts`` one after another (none: no bytes) whose 32-byte digest
    the cache keeps."""
    digest = _digest_for(sum(memoryview(part).nbytes for part in parts))
    for part in parts:
        digest.update(part)
    return digest


if TYPE_CHECKING:
    from mmap import mmap

#: Version of the entry layout below (each kind has its own version in its variant name).
ENTRY_FORMAT = 2  # 2: BLAKE2b digests below 1 MB
_MAGIC = b"pysfcach"
#: magic, format, kind, build id length, build id, source size, source digest, stamp of
#: the stamped files, digest of their bytes, payload length, payload digest.
_KIND_SIZE = 40
_HEADER = struct.Struct(f"<8sH{_KIND_SIZE}sB64sQ32s32s32sQ32s")
_NONE = bytes(32)
#: Larger entries are not plausible (libc's generated table is ~0.3 MB) and are not read.
MAX_ENTRY_SIZE = 1 << 28
_MAX_BUILD_ID = 64
#: A file changed less than this long ago may change again within the same tick of the
#: file system's clock without its times showing it: its stamp is not trusted.
_RACY_NS = 2_000_000_000
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ENTRY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KIND_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_")


def _hash(parts: Iterable[bytes | memoryview | mmap]) -> bytes:
    """The digest of ``parts``, each with its length (no two lists of parts collide)."""
    parts = list(parts)
    digest = _digest_for(sum(len(part) for part in parts))
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return bytes(digest.digest())


class Source:
    """What an entry was derived from.

    ``size``: the file's size; ``digest``: of the bytes at hand the entry depends on,
    compared on every use. Files this process read itself (binaries and their debug
    files, see :func:`stamped`) add ``stamp``, their identity (device, inode, size,
    modification and change times, as read from the descriptor their bytes came from), and
    the digest of their relevant bytes, computed only when the stamp differs from the
    entry's: the same file unchanged since the entry was made needs no hashing.
    """

    __slots__ = ("_late", "_late_digest", "digest", "size", "stamp")

    def __init__(self, size: int, digest: bytes, stamp: bytes = b"",
                 late: Callable[[], bytes] | None = None) -> None:
        self.size = size
        self.digest = digest
        self.stamp = stamp
        self._late = late
        self._late_digest: bytes | None = None if late is not None else _NONE

    @property
    def stamped(self) -> bool:
        """Whether part of the source is files checked by stamp, then by digest."""
        return self._late is not None

    def late_digest(self) -> bytes:
        """The digest of the stamped files' bytes (hashed on first use). Raises what
        reading them raises (:class:`~pysframe.errors.PysframeError`)."""
        if self._late_digest is None:
            assert self._late is not None
            self._late_digest = self._late()
        return self._late_digest


def describe(size: int, parts: Iterable[bytes | memoryview | mmap]) -> Source:
    """The source of a file of ``size`` bytes whose derived data depends on ``parts``."""
    return Source(size, _hash(parts))


def stamped(size: int, stamp: bytes, parts: Callable[[], Iterable[bytes | memoryview | mmap]]
            ) -> Source:
    """The source of a file whose bytes were read from a descriptor it was stamped from
    (:func:`stamp_of` its status; ``stamp``: b"" when the file is too fresh to be trusted
    by stamp) whose derived data depends on ``parts()`` (called only when the digest is
    needed)."""
    return Source(size, _hash([]), stamp, lambda: _hash(parts()))


def combine(first: Source, *others: Source) -> Source:
    """One source for data derived from several files (the first one's size is kept)."""
    sources = (first, *others)
    digest = _hash([source.size.to_bytes(8, "little") + source.digest for source in sources])
    late = [source for source in sources if source.stamped]
    if not late:
        return Source(first.size, digest)
    stamp = _hash([source.stamp for source in late]) if all(s.stamp for s in late) else b""
    return Source(first.size, digest, stamp,
                  lambda: _hash([source.late_digest() for source in late]))


def stamp_of(status: os.stat_result) -> bytes:
    """The stamp of a file whose bytes were read from a descriptor of ``status``: its
    identity (device, inode, size, modification and change times), b"" for a file changed
    in the last two seconds (see :data:`_RACY_NS`)."""
    import time

    if status.st_ctime_ns > time.time_ns() - _RACY_NS:
        return b""
    return bytes(digest_of(struct.pack(
        "<QQQqq", status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
        status.st_ctime_ns)).digest())


# --- where ---------------------------------------------------------------------------------

def cache_root() -> str:
    """``$XDG_CACHE_HOME/pysframe`` (a relative XDG_CACHE_HOME is ignored, as the XDG base
    directory specification says), else ``~/.cache/pysframe``."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pysframe")


def _split(kind: str, build_id: bytes) -> tuple[list[str], str] | None:
    """(directories below the root, file name) of an entry; None for a build id that
    cannot name one (empty, a single byte, longer than any real one)."""
    directory, _, variant = kind.partition("/")
    if not 2 <= len(build_id) <= _MAX_BUILD_ID:
        return None
    if (not directory or not variant or len(kind) > _KIND_SIZE
            or not set(kind) - {"/"} <= _KIND_CHARACTERS):
        raise ValueError(f"bad cache kind {kind!r}")
    name = build_id.hex()
    return [directory, name[:2]], f"{name[2:]}.{variant}"


def entry_path(kind: str, build_id: bytes) -> str | None:
    """Where the entry of ``kind`` (``"<directory>/<variant>"``, e.g.
    ``"sframe/generated.v3.g2"``) for ``build_id`` is kept (it may not exist)."""
    parts = _split(kind, build_id)
    if parts is None:
        return None
    directories, name = parts
    return os.path.join(cache_root(), *directories, name)


# --- the directories -----------------------------------------------------------------------

class _Unusable(PysframeError):
    """A cache directory that must not be used (the message says why)."""


def _expected_owner() -> int:
    """Whose the cache directories must be (a hook for the tests)."""
    return os.geteuid()


def _stderr(message: str) -> None:
    sys.stderr.write(f"sframe: warning: {message}\n")


#: Where warnings go (one line each, once per directory and process).
warn: Callable[[str], None] = _stderr
_warned: set[str] = set()


def _warn_once(path: str, reason: str) -> None:
    if path not in _warned:
        _warned.add(path)
        warn(f"not using the cache directory {path}: {reason}")


def _check_directory(fd: int, path: str) -> None:
    status = os.fstat(fd)
    if not stat.S_ISDIR(status.st_mode):
        raise _Unusable("not a directory")
    if status.st_uid != _expected_owner():
        raise _Unusable(f"owned by uid {status.st_uid}, not {_expected_owner()}")
    if status.st_mode & 0o022:
        raise _Unusable(f"writable by {'group' if status.st_mode & 0o020 else 'others'} "
                        f"(mode {stat.S_IMODE(status.st_mode):04o})")


def _open_directory(parent: int, name: str, path: str, create: bool) -> int | None:
    """The checked directory ``name`` under the descriptor ``parent`` (made 0700 when
    ``create``); None when it does not exist. Raises :class:`_Unusable`."""
    created = False
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
            created = True
        except FileExistsError:
            pass
    try:
        fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _Unusable("a symbolic link") from None
        if error.errno == errno.ENOTDIR:
            raise _Unusable("not a directory") from None
        raise
    try:
        if created:
            os.fchmod(fd, 0o700)  # whatever the umask
        _check_directory(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Kept:
    #: (root, directories) -> a descriptor, inside :class:`KeptDirectories`.
    directories: dict[tuple[str, ...], int] | None = None


_KEPT = _Kept()


class KeptDirectories:
    """Within ``with KeptDirectories():`` each entry directory is opened and checked once
    (a run's saves at its end write and read dozens of entries: each walk from the root
    opened, and made if need be, and checked four directories); closed at the end."""

    def __enter__(self) -> None:
        self._outer = _KEPT.directories is not None
        if not self._outer:
            _KEPT.directories = {}

    def __exit__(self, *_: object) -> None:
        if self._outer or _KEPT.directories is None:
            return
        for fd in _KEPT.directories.values():
            os.close(fd)
        _KEPT.directories = None


def entry_directory(kind: str, build_id: bytes) -> int | None:
    """A descriptor of the directory the entry of ``kind`` for ``build_id`` is kept in
    (made if need be, every step checked), or None when there is none to use."""
    parts = _split(kind, build_id)
    return _directory(parts[0], create=True) if parts is not None else None


def _directory(directories: list[str], create: bool) -> int | None:
    """A descriptor of the entry directory below the cache root, every step checked; None
    when it does not exist (and ``create`` is off) or is not to be used. Inside
    :class:`KeptDirectories`, the walk starts from the deepest directory of the way
    opened already, and keeps a copy of each one it opens."""
    root, kept = cache_root(), _KEPT.directories
    names = [os.path.basename(root), *directories]
    path, fd, first = os.path.dirname(root), None, 0
    if kept is not None:  # (names[depth] is the directory (root, *directories[:depth]))
        for depth in range(len(directories), -1, -1):
            found = kept.get((root, *directories[:depth]))
            if found is not None:
                path, fd = os.path.join(root, *directories[:depth]), os.dup(found)
                first = depth + 1
                break
    if fd is None:
        try:
            if create:
                os.makedirs(path, 0o700, exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
    for depth in range(first, len(names)):
        path = os.path.join(path, names[depth])
        try:
            child = _open_directory(fd, names[depth], path, create)
        except _Unusable as problem:
            _warn_once(path, str(problem))
            child = None
        except OSError:
            child = None
        finally:
            os.close(fd)
        if child is None:
            return None
        fd = child
        if kept is not None:
            kept[(root, *directories[:depth])] = os.dup(fd)
    return fd


def open_directory(*names: str, create: bool = False) -> int | None:
    """A descriptor of the directory ``names`` below the cache root, every step checked as
    the entries' directories are (for files kept whole, such as debuginfod downloads);
    None when it does not exist (and ``create`` is off) or is not to be used."""
    return _directory(list(names), create)


# --- entries -------------------------------------------------------------------------------

def _header(kind: str, build_id: bytes, source: Source,
            payload: Sequence[bytes | memoryview], mapped: bool = False) -> bytes:
    return _HEADER.pack(_MAGIC, ENTRY_FORMAT, kind.encode(), len(build_id), build_id,
                        source.size, source.digest, source.stamp or _NONE, source.late_digest(),
                        sum(memoryview(part).nbytes for part in payload),
                        _NONE if mapped else digest_of(*payload).digest())


def store(kind: str, build_id: bytes, payload: bytes, source: Source) -> None:
    """Keep ``payload`` as the entry of ``kind`` for ``build_id`` derived from ``source``;
    silently nothing when the cache cannot be used or written."""
    store_parts(kind, build_id, [payload], source)


def store_parts(kind: str, build_id: bytes, payload: Sequence[bytes | memoryview],
                source: Source, *, mapped: bool = False) -> None:
    """:func:`store` of the payload that is ``payload``'s buffers one after another, written
    as they are (kallsyms' entry is ~7 MB: each copy cost a first run ~2 ms). ``mapped``:
    an entry only ever read by :func:`load_mapped`, which checks the payload's own check
    (a CRC) and not the header's digest: that digest is left out (zeros, which
    :func:`load` never accepts), saving a hash of the whole payload (~4 ms for kallsyms')."""
    parts = _split(kind, build_id)
    if parts is None:
        return
    try:
        header = _header(kind, build_id, source, payload, mapped)
    except PysframeError:
        return  # a stamped file can no longer be read: nothing to vouch for
    directories, name = parts
    directory = _directory(directories, create=True)
    if directory is None:
        return
    try:
        _write_entry(directory, name, [header, *payload])
    except OSError:
        pass  # read-only, full: the next run regenerates
    finally:
        os.close(directory)


def prune(kind: str, max_bytes: int) -> int:
    """Keep the entries of ``kind``'s directory (every variant) under ``max_bytes``: the
    least recently used (read or written: see :func:`_last_used`) go first (an older
    variant's entries, left by an upgrade, are among them). Silently nothing when the cache
    cannot be used; returns the bytes freed. Every step through descriptors (``dir_fd``),
    nothing followed through a link; each subdirectory is opened and checked once."""
    top = kind.partition("/")[0]
    directory = _directory([top], create=False)
    if directory is None:
        return 0
    try:
        return _prune({top: directory}, max_bytes)
    finally:
        os.close(directory)


def _last_used(status: os.stat_result) -> float:
    """When an entry was last written or read: its access time moves on reads too (at most
    once a day under the usual ``relatime``; never under ``noatime``, where this is when
    it was written)."""
    return max(status.st_atime, status.st_mtime)


def _prune(tops: dict[str, int], max_bytes: int, keep_since: float | None = None) -> int:
    """The entries under the open kind directories ``tops`` (name -> descriptor) brought
    under ``max_bytes`` together, the least recently used first, none used at or after
    ``keep_since`` (if given); bytes freed."""
    entries: list[tuple[float, int, str, str, str]] = []  # (used, size, top, sub, name)
    try:
        for top, directory in tops.items():
            for sub in os.scandir(directory):
                if len(sub.name) == 2 and sub.is_dir(follow_symlinks=False):
                    entries += [(_last_used(status), status.st_size, top, sub.name, name)
                                for name, status in _files(directory, sub.name, top)]
        excess = sum(entry[1] for entry in entries) - max_bytes
        victims: dict[tuple[str, str], list[tuple[str, int]]] = {}
        for used, size, top, sub_name, name in sorted(entries):
            if excess <= 0 or (keep_since is not None and used >= keep_since):
                break
            victims.setdefault((top, sub_name), []).append((name, size))
            excess -= size
        return sum(_unlink_all(tops[top], sub_name, top, names)
                   for (top, sub_name), names in victims.items())
    except OSError:
        return 0


#: The whole cache is kept under this many bytes (``PYSFRAME_CACHE_MB`` sets it, 0: no
#: bound), as ccache keeps its own (perf's ~/.debug grows until removed by hand).
CACHE_BYTES = 2 << 30
#: ... looked at, at the end of a command that used it, at most this often (seconds):
#: a scan of every entry; the time of the file :data:`_STAMP` in the root says when.
PRUNE_EVERY = 24 * 3600
_STAMP = "last-pruned"


#: About when this process started (this module is imported early): what it used since
#: is not pruned (a large download that alone is over the bound is not fetched every run).
_STARTED = time.time()


def cache_budget() -> int | None:
    """The bytes the cache is kept under (None: no bound)."""
    megabytes = os.environ.get("PYSFRAME_CACHE_MB", "")
    if not megabytes.isdigit():
        return CACHE_BYTES
    return int(megabytes) << 20 or None


def prune_if_due(now: float | None = None) -> int:
    """At the end of a command that used the cache, once a :data:`PRUNE_EVERY` at most (a
    ``stat`` of the stamp otherwise): every kind's entries brought under
    :func:`cache_budget` together, the least recently used first (see :func:`prune`),
    none this process used. Never raises; returns the bytes freed. A stamp that is not a
    regular file (a link, a FIFO) turns the bound off rather than being followed."""
    budget = cache_budget()
    if budget is None:
        return 0
    root = _directory([], create=False)
    if root is None:
        return 0
    tops: dict[str, int] = {}
    try:
        now = time.time() if now is None else now
        if not _prune_due(root, now):
            return 0
        for top in os.scandir(root):
            if top.is_dir(follow_symlinks=False) and top.name[:1] != ".":
                child = _checked_child(root, top.name, "")
                if child is not None:
                    tops[top.name] = child
        freed = _prune(tops, budget, _STARTED)
        stamp = os.open(_STAMP, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                        | os.O_CLOEXEC, 0o600, dir_fd=root)
        try:
            if stat.S_ISREG(os.fstat(stamp).st_mode):
                os.utime(stamp, (now, now))
        finally:
            os.close(stamp)
        return freed
    except OSError:
        return 0
    finally:
        for fd in [root, *tops.values()]:
            os.close(fd)


def _prune_due(root: int, now: float) -> bool:
    try:
        status = os.stat(_STAMP, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return stat.S_ISREG(status.st_mode) and not 0 <= now - status.st_mtime < PRUNE_EVERY


def _checked_child(parent: int, name: str, top: str) -> int | None:
    try:
        return _open_directory(parent, name, os.path.join(cache_root(), top, name), False)
    except (_Unusable, OSError):
        return None


def _files(parent: int, name: str, top: str) -> list[tuple[str, os.stat_result]]:
    """(name, status) of the regular files in the subdirectory ``name``."""
    child = _checked_child(parent, name, top)
    if child is None:
        return []
    try:
        return [(entry.name, entry.stat(follow_symlinks=False)) for entry in os.scandir(child)
                if entry.is_file(follow_symlinks=False)]
    finally:
        os.close(child)


def _unlink_all(parent: int, name: str, top: str, victims: list[tuple[str, int]]) -> int:
    """The files ``victims`` (name, size) removed from the subdirectory; bytes freed."""
    child = _checked_child(parent, name, top)
    if child is None:
        return 0
    freed = 0
    try:
        for victim, size in victims:
            try:
                os.unlink(victim, dir_fd=child)
                freed += size
            except OSError:
                pass  # another process pruned it first
    finally:
        os.close(child)
    return freed


def _write_entry(directory: int, name: str, data: Sequence[bytes | memoryview]) -> None:
    """``data``'s buffers into a new file created with O_EXCL beside ``name``, then renamed
    over it."""
    temporary = f".tmp-{os.getpid()}-{os.urandom(6).hex()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=directory)
    try:
        try:
            os.fchmod(fd, 0o600)
            for part in data:
                write_all(fd, part)
        finally:
            os.close(fd)
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=directory)
        except OSError:
            pass
        raise


def load(kind: str, build_id: bytes, source: Source) -> bytes | None:
    """The payload of the entry of ``kind`` for ``build_id``, if there is one that was
    derived from ``source`` and verifies; None otherwise (absent, unreadable, not a
    regular file, implausibly large, another format, kind, build id or source, a payload
    that does not match its digest)."""
    data = _open_entry(kind, build_id, _read_entry)
    header = _matching_header(data, kind, build_id, source)
    if data is None or header is None:
        return None
    stamp, late, payload_digest = header
    payload = data[_HEADER.size:]
    if digest_of(payload).digest() != payload_digest:
        return None
    verified = _stamped_part_verifies(source, stamp, late)
    if verified is None:
        return None
    if verified:  # the same bytes under another stamp: keep the new one
        store(kind, build_id, payload, source)
    return payload


def load_mapped(kind: str, build_id: bytes, source: Source,
                check: Callable[[memoryview], bool]) -> memoryview | None:
    """The payload of the entry of ``kind`` for ``build_id``, mapped (not read), when its
    header matches as :func:`load` checks it and ``check`` accepts it: a large entry read
    at every run (the kernel's symbols, 5 MB) whose payload carries a check of its own,
    cheaper than hashing it whole (a CRC: it guards against damage as the digest does; a
    hand-made entry passes either). For sources without stamped files."""
    if source.stamped:
        raise ValueError("load_mapped: a source with stamped files")
    mapped = _open_entry(kind, build_id, _map_entry)
    header = _matching_header(mapped, kind, build_id, source)
    if mapped is None or header is None or header[1] != _NONE:
        return None
    payload = memoryview(mapped)[_HEADER.size:]
    return payload if check(payload) else None


if TYPE_CHECKING:
    _T = TypeVar("_T", bytes, "mmap")


def _open_entry(kind: str, build_id: bytes, read: Callable[[int, str], _T | None]
                ) -> _T | None:
    """``read(directory, name)`` of the entry of ``kind`` for ``build_id``; None when its
    directory is absent or not to be used."""
    parts = _split(kind, build_id)
    if parts is None:
        return None
    directories, name = parts
    directory = _directory(directories, create=False)
    if directory is None:
        return None
    try:
        return read(directory, name)
    finally:
        os.close(directory)


def _matching_header(data: bytes | mmap | None, kind: str, build_id: bytes, source: Source
                     ) -> tuple[bytes, bytes, bytes] | None:
    """(stamp, digest of the stamped files, payload digest) of the entry ``data`` when its
    header is one of this format, kind, build id, source and length; else None."""
    if data is None or len(data) < _HEADER.size:
        return None
    (magic, version, stored_kind, id_length, stored_id, size, digest, stamp, late, length,
     payload_digest) = _HEADER.unpack_from(data)
    if (magic != _MAGIC or version != ENTRY_FORMAT or stored_kind.rstrip(b"\0") != kind.encode()
            or stored_id[:id_length] != build_id or id_length != len(build_id)
            or size != source.size or digest != source.digest
            or length != len(data) - _HEADER.size):
        return None
    return stamp, late, payload_digest


def _stamped_part_verifies(source: Source, stamp: bytes, late: bytes) -> bool | None:
    """None when the stamped files of ``source`` differ from the entry's; else whether the
    entry should be written again with their current stamp."""
    if not source.stamped:
        return False if late == _NONE else None
    if source.stamp and stamp == source.stamp:
        return False  # the very files the entry was made from, unchanged since
    try:
        if late != source.late_digest():
            return None
    except PysframeError:
        return None
    return bool(source.stamp)


def _plausible(fd: int) -> int | None:
    """The size of the entry file open as ``fd`` when it is a regular file of ours, not
    writable by others, of plausible size; else None."""
    status = os.fstat(fd)
    if (not stat.S_ISREG(status.st_mode) or status.st_uid != _expected_owner()
            or status.st_mode & 0o022 or not _HEADER.size <= status.st_size <= MAX_ENTRY_SIZE):
        return None
    return status.st_size


def _read_entry(directory: int, name: str) -> bytes | None:
    """The bytes of the entry file ``name``: a regular file of ours, not linked, of
    plausible size, read without blocking and without reading past its size."""
    try:
        fd = os.open(name, _ENTRY_FLAGS, dir_fd=directory)
    except OSError:
        return None  # absent; a symbolic link (ELOOP); a socket (ENXIO)
    try:
        left = _plausible(fd)
        if left is None:
            return None
        chunks = []
        while left:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                return None  # shrank under us
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _map_entry(directory: int, name: str) -> mmap | None:
    """The entry file ``name`` mapped read-only, under :func:`_read_entry`'s conditions.
    Entries are replaced by rename, never written in place: the mapping keeps the file
    it was made of (a file truncated under it by hand faults at the read: SIGBUS)."""
    import mmap as mmap_module

    try:
        fd = os.open(name, _ENTRY_FLAGS, dir_fd=directory)
    except OSError:
        return None
    try:
        size = _plausible(fd)
        return None if size is None else mmap_module.mmap(fd, size,
                                                          access=mmap_module.ACCESS_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def give_owner(fd: int, owner: tuple[int, int], mode: int) -> int:
    """Give the file ``fd`` the owner (uid, gid) as far as this process may; ``mode``
    without the set-ID bits of an owner it could not give."""
    uid, gid = owner
    status = os.fstat(fd)
    if (status.st_uid, status.st_gid) == (uid, gid):
        return mode
    try:
        os.fchown(fd, uid, gid)
        return mode
    except PermissionError:
        pass
    try:  # not root: the group alone, if it is one of ours
        os.fchown(fd, -1, gid)
        return mode & ~stat.S_ISUID if uid != status.st_uid else mode
    except PermissionError:
        kept = mode & ~stat.S_ISGID
        return kept & ~stat.S_ISUID if uid != status.st_uid else kept


def write_chunks(out: IO[bytes], data: bytes | Iterable[bytes]) -> None:
    """Write ``data``, bytes or chunks of them, to ``out``."""
    if isinstance(data, bytes | bytearray | memoryview):
        out.write(data)
        return
    for chunk in data:
        out.write(chunk)

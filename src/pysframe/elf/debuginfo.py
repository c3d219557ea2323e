"""Where a binary's symbols and DWARF are: one order for every command, as perf and gdb
look for them.

For a binary (its path and build id) and what is wanted (``symbols``: a ``.symtab``;
``dwarf``: a ``.debug_info``), the first of these that has it:

1. the file itself;
2. a file with the same build id under the ``--binaries`` directories (any name);
3. perf's build-id cache: ``~/.debug/.build-id/<xx>/<rest>/debug``, then ``.../elf``;
4. in each debug directory (``PYSFRAME_DEBUG_FILE_DIRECTORY``, colon-separated, default
   ``/usr/lib/debug``: gdb's ``debug-file-directory``):
   ``<dir>/.build-id/<xx>/<rest>.debug`` (Debian's ``-dbgsym`` packages), then
   ``<dir><path>.debug``;
5. the ``.gnu_debuglink`` name beside the file, in its ``.debug`` directory, then under
   each debug directory + the file's directory; its CRC32 must match;
6. debuginfod (when ``DEBUGINFOD_URLS`` names servers, :mod:`.debuginfod`):
   ``/debuginfo``, then ``/executable`` (a binary built without ``-g`` has no debug
   file, but the server's unstripped executable has its symbols).

A candidate whose build id differs from the binary's is never used. dwz's supplementary
files (``.gnu_debugaltlink``) are found by :meth:`DebugFiles.by_build_id` (steps 2, 3, 4
and 6 for their own build id).
"""

from __future__ import annotations

import os

from ..errors import PysframeError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import Literal

if TYPE_CHECKING:
    from .debuginfod import Debuginfod
    from .sections import ElfImage

DEBUG_ROOT = "/usr/lib/debug"
#: gdb's ``debug-file-directory``: where separate debug files are installed.
DIRECTORY_VARIABLE = "PYSFRAME_DEBUG_FILE_DIRECTORY"
if TYPE_CHECKING:
    Want = Literal["symbols", "dwarf"]
#: Files read for their build id while indexing the ``--binaries`` directories, at most.
MAX_INDEXED = 100_000
_DWARF_SECTIONS = (".debug_info", ".zdebug_info")
_SHT_NOBITS = 8


def debug_roots() -> list[str]:
    """The debug directories (``PYSFRAME_DEBUG_FILE_DIRECTORY``, else /usr/lib/debug)."""
    text = os.environ.get(DIRECTORY_VARIABLE)
    if text is None:
        return [DEBUG_ROOT]
    return [root for root in text.split(":") if os.path.isabs(root)]


def build_id_path(build_id: bytes, root: str = DEBUG_ROOT) -> str:
    """``<root>/.build-id/<first two hex digits>/<rest>.debug`` (it may not exist)."""
    text = build_id.hex()
    return os.path.join(root, ".build-id", text[:2], text[2:] + ".debug")


def debug_file(build_id: bytes | None, root: str | None = None) -> str | None:
    """The installed separate debug file of ``build_id`` under ``root`` (default: the
    debug directories), else ``None``."""
    if not build_id:
        return None
    for place in [root] if root is not None else debug_roots():
        path = build_id_path(build_id, place)
        if os.path.isfile(path):
            return path
    return None


def has_wanted(image: ElfImage, want: Want) -> bool:
    """Whether ``image`` holds what is wanted (a non-empty ``.symtab``, or DWARF)."""
    names = (".symtab",) if want == "symbols" else _DWARF_SECTIONS
    return any(section.name in names and section.type != _SHT_NOBITS and section.size > 0
               for section in image.section_headers())


#: How many opened files a search keeps (see DebugFiles._image).
_IMAGES_KEPT = 16


class DebugFiles:
    """The search above, with the ``--binaries`` ``directories``, the debug directories
    ``roots``, perf's cache under ``home`` and a debuginfod client (None: none asked).
    Answers are remembered for the life of the object."""

    def __init__(self, directories: Iterable[str] = (), *, roots: Sequence[str] | None = None,
                 home: str | None = None, debuginfod: Debuginfod | None = None) -> None:
        self.directories = list(directories)
        self.roots = list(roots) if roots is not None else debug_roots()
        self.home = home if home is not None else os.path.expanduser("~")
        self.debuginfod = debuginfod
        self._by_id: dict[bytes, list[str]] | None = None
        self._found: dict[tuple[str, bytes | None, str], str | None] = {}
        #: The files opened by the search, once each (its symbols and its DWARF are looked
        #: for separately: libc's debug file was opened and checked twice per ``stack``).
        self._images: dict[str, ElfImage | None] = {}

    @classmethod
    def from_environment(cls, directories: Iterable[str] = (), *, network: bool = True
                         ) -> DebugFiles:
        """The search for a command: the environment's debug directories and, with
        ``network``, its debuginfod servers."""
        if not network or not os.environ.get("DEBUGINFOD_URLS", "").split():
            return cls(directories)  # no server named: the client is not even imported
        from .debuginfod import Debuginfod

        return cls(directories, debuginfod=Debuginfod.from_environment())

    def find(self, path: str, build_id: bytes | None, want: Want,
             image: ElfImage | None = None) -> str | None:
        """The file to read ``want`` of the binary ``path`` from (``path`` itself when it
        has it; ``image``: the binary, when already open), or None."""
        key = (path, build_id, want)
        if image is not None and path not in self._images:
            self._images[path] = image  # the binary's other lookups need not open it again
        if key not in self._found:
            self._found[key] = self._find(path, build_id, want, image)
        return self._found[key]

    def by_build_id(self, build_id: bytes, want: Want) -> str | None:
        """A file with ``build_id`` that has ``want`` (dwz's supplementary files)."""
        key = ("", build_id, want)
        if key not in self._found:
            candidates = self._by_build_id(build_id, want)
            self._found[key] = next((c for c in candidates
                                     if self._verified(c, build_id, want)), None)
        return self._found[key]

    def _find(self, path: str, build_id: bytes | None, want: Want,
              image: ElfImage | None) -> str | None:
        own = image if image is not None else self._image(path)
        try:
            if own is not None and has_wanted(own, want):
                return path
            build_id = build_id or (own.build_id() if own is not None else None)
            link = _debuglink(own) if own is not None else None
        except (PysframeError, ValueError):
            link = None  # a damaged file: its build id (when given) may still find one
        for candidate in self._local(path, build_id, want):
            if self._verified(candidate, build_id, want):
                return candidate
        if link is not None:
            for candidate in self._linked(path, link[0]):
                if self._verified(candidate, build_id, want, crc=link[1]):
                    return candidate
        for candidate in self._remote(build_id, want):
            if self._verified(candidate, build_id, want):
                return candidate
        return None

    def opened(self, path: str) -> ElfImage | None:
        """``path`` as the search opened it (None: not an ELF file): a file it found is
        read again for its symbols and cache source without opening it again."""
        return self._image(path)

    def _image(self, path: str) -> ElfImage | None:
        """``path`` opened (None: not an ELF file), the last few kept: a long search (an
        audit's thousands of binaries) must not hold every file it read."""
        if path not in self._images:
            if len(self._images) >= _IMAGES_KEPT:
                del self._images[next(iter(self._images))]
            self._images[path] = _open(path)
        return self._images[path]

    def _verified(self, path: str, build_id: bytes | None, want: Want,
                  crc: int | None = None) -> bool:
        """Whether the file ``path`` is a candidate that fits (:func:`_verified`)."""
        return os.path.isfile(path) and _verified(self._image(path), build_id, want, crc)

    def _local(self, path: str, build_id: bytes | None, want: Want) -> Iterator[str]:
        """Steps 2 to 4 (without build id: ``<dir><path>.debug`` only)."""
        if build_id:
            yield from self._by_build_id(build_id, want, remote=False)
        absolute = os.path.abspath(path)
        for root in self.roots:
            yield root + absolute + ".debug"

    def _by_build_id(self, build_id: bytes, want: Want, *, remote: bool = True
                     ) -> Iterator[str]:
        yield from self._twins(build_id)
        text = build_id.hex()
        cached = os.path.join(self.home, ".debug", ".build-id", text[:2], text[2:])
        yield os.path.join(cached, "debug")
        yield os.path.join(cached, "elf")
        for root in self.roots:
            yield build_id_path(build_id, root)
        if remote:
            yield from self._remote(build_id, want)

    def _linked(self, path: str, name: str) -> Iterator[str]:
        """Step 5: gdb's places for a debug link (``find_separate_debug_file``)."""
        directory = os.path.dirname(os.path.abspath(path))
        real = os.path.dirname(os.path.realpath(path))
        for place in dict.fromkeys((directory, real)):
            yield os.path.join(place, name)
            yield os.path.join(place, ".debug", name)
            for root in self.roots:
                yield root + os.path.join(place, name)

    def _remote(self, build_id: bytes | None, want: Want) -> Iterator[str]:
        """Step 6: the server's debug file, then (for symbols) its executable."""
        if self.debuginfod is None or not build_id:
            return
        for kind in ("debuginfo", "executable") if want == "symbols" else ("debuginfo",):
            found = self.debuginfod.fetch(build_id, kind)
            if found is not None:
                yield found

    def _twins(self, build_id: bytes) -> list[str]:
        """The files under the ``--binaries`` directories with ``build_id``."""
        if self._by_id is None:
            self._by_id = _index(self.directories)
        return self._by_id.get(build_id, [])


def _index(directories: Sequence[str]) -> dict[bytes, list[str]]:
    """Build id -> the ELF files under ``directories`` (recursively; links to directories
    are not followed)."""
    found: dict[bytes, list[str]] = {}
    read = 0
    for directory in directories:
        for root, _, names in os.walk(directory):
            for name in sorted(names):
                if read >= MAX_INDEXED:
                    return found
                path = os.path.join(root, name)
                read += 1
                build_id = _quick_build_id(path)
                if build_id:
                    found.setdefault(build_id, []).append(path)
    return found


def _quick_build_id(path: str) -> bytes | None:
    """The build id of ``path`` when it is a readable ELF file (only its magic is read
    otherwise)."""
    from ..inputs import InputError, open_regular

    try:
        fd, _ = open_regular(path)
    except InputError:
        return None
    try:
        if os.pread(fd, 4, 0) != b"\x7fELF":
            return None
    except OSError:
        return None
    finally:
        os.close(fd)
    image = _open(path)
    return image.build_id() if image is not None else None


def _open(path: str) -> ElfImage | None:
    from .sections import ElfImage

    try:
        return ElfImage(path)
    except (PysframeError, OSError, ValueError):
        return None


def _verified(image: ElfImage | None, build_id: bytes | None, want: Want,
              crc: int | None = None) -> bool:
    """Whether ``image`` (a candidate file, None when it could not be opened as ELF) has
    ``want`` and the binary's build id (when it has one; a candidate without one only with
    a matching ``crc``) and, for a debug link, the CRC32 it names."""
    if image is None:
        return False
    try:
        found = image.build_id()
        if build_id and found != build_id and not (found is None and crc is not None):
            return False
        if crc is not None and _crc32(image) != crc:
            return False
        return has_wanted(image, want)
    except (PysframeError, ValueError, OSError):  # a bad candidate is skipped
        return False


def _debuglink(image: ElfImage) -> tuple[str, int] | None:
    """(file name, CRC32) of the ``.gnu_debuglink`` section: the name (no directory part),
    padding to 4 bytes, the CRC in the file's byte order."""
    section = image.section_header(".gnu_debuglink")
    if section is None or section.type == _SHT_NOBITS or not 8 <= section.size <= 4096:
        return None
    data = bytes(image.data[section.offset:section.offset + section.size])
    end = data.find(b"\0")
    if end <= 0 or b"/" in data[:end] or len(data) < ((end + 4) & ~3) + 4:
        return None
    at = (end + 4) & ~3
    crc = int.from_bytes(data[at:at + 4], "big" if image.big_endian else "little")
    return os.fsdecode(data[:end]), crc


def _crc32(image: ElfImage) -> int:
    """The CRC32 of the whole file (``gnu_debuglink_crc32``: zlib's)."""
    import zlib  # here: only a debug link found by name is checked by CRC

    data = image.data
    value = 0
    for start in range(0, len(data), 1 << 24):
        value = zlib.crc32(data[start:start + (1 << 24)], value)
    return value

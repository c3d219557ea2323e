"""A debuginfod client: a binary's separate debug file (``/debuginfo``) or its unstripped
executable (``/executable``) by build id, from the servers ``DEBUGINFOD_URLS`` names (as
perf, gdb and eu-stack ask them), kept in our private cache (:mod:`pysframe.cachedir`).

Hand-written on ``urllib``: there is no maintained pure-Python debuginfod client, and
the ``debuginfod`` package on PyPI is a ctypes binding to elfutils' libdebuginfod, which
would make libdebuginfod and libcurl run-time dependencies, keeps its own cache
(``~/.cache/debuginfod_client``) under its own rules and verifies nothing we could not
check ourselves. The protocol is one GET per file.

Every answer is hostile, and bounded:

* only ``http://`` and ``https://`` servers, and redirects only to those (at most 5);
* ``DEBUGINFOD_TIMEOUT`` (default 90 s, as elfutils): connecting, each read, and the
  first 100 KiB of the file (elfutils skips a server slower than that);
  ``DEBUGINFOD_MAXTIME``: the whole exchange, headers included (default here 600 s;
  elfutils: unlimited); ``DEBUGINFOD_MAXSIZE``: the largest file (default here 2 GiB;
  elfutils: unlimited). A positive value replaces our default; zero, a negative or
  unreadable value (elfutils: no bound) keeps it. A ``Content-Length`` above the size
  is refused before the body is read; a body that grows past it is dropped.
* a file is streamed into a temporary file in the cache directory and kept (renamed
  into place) only when it is an ELF file whose build id is the one asked for;
* a server that cannot be reached or times out is not asked again in this run; every
  answer is remembered for the run, and a build id that no server has for 10 minutes
  (elfutils' default ``cache_miss_s``);
* a failure is one warning line on stderr naming the server, never an exception.
"""

from __future__ import annotations

import io
import os
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..cachedir import cache_root, open_directory
from ..errors import PysframeError
from ..fd_io import write_all

if TYPE_CHECKING:
    from urllib.request import OpenerDirector, Request

KINDS = ("debuginfo", "executable")
DEFAULT_TIMEOUT = 90.0
DEFAULT_MAX_TIME = 600.0
DEFAULT_MAX_SIZE = 1 << 31
#: elfutils' rule: a server must send this much within DEBUGINFOD_TIMEOUT.
FIRST_BYTES = 100 * 1024
#: How long a build id that no server has is not asked for again.
MISS_SECONDS = 600
MAX_REDIRECTS = 5
_CHUNK = 1 << 16
_DIRECTORY = "debuginfod"
_USER_AGENT = "pysframe (debuginfod client)"


def _stderr(message: str) -> None:
    sys.stderr.write(f"sframe: warning: {message}\n")


#: Where failures are said (one line each).
warn: Callable[[str], None] = _stderr


class DownloadError(PysframeError):
    """A server's answer that is not used (the message says why, in one line)."""


class _Unreachable(DownloadError):
    """The server cannot be reached or is too slow: not asked again in this run."""


class _NotFound(PysframeError):
    """The server has no such file (404)."""

    def __init__(self) -> None:
        super().__init__("not found (HTTP 404)")


@dataclass(slots=True)
class Limits:
    """The bounds of one download: seconds per read and for the first 100 KiB, seconds
    for the whole exchange, bytes."""

    timeout: float = DEFAULT_TIMEOUT
    max_time: float = DEFAULT_MAX_TIME
    max_size: int = DEFAULT_MAX_SIZE

    @classmethod
    def from_environment(cls) -> Limits:
        return cls(_positive("DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT),
                   _positive("DEBUGINFOD_MAXTIME", DEFAULT_MAX_TIME),
                   int(_positive("DEBUGINFOD_MAXSIZE", DEFAULT_MAX_SIZE)))


def _positive(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if 0 < value < float(1 << 62) else default


def server_urls(text: str) -> list[str]:
    """The http and https URLs of a ``DEBUGINFOD_URLS`` value (space-separated; anything
    else in it is ignored)."""
    return [url.rstrip("/") for url in text.split()
            if url.startswith(("http://", "https://")) and len(url) < 2048]


def download_path(build_id: bytes, kind: str) -> str:
    """Where the ``kind`` file of ``build_id`` is kept (it may not exist)."""
    text = build_id.hex()
    return os.path.join(cache_root(), _DIRECTORY, text[:2], f"{text[2:]}.{kind}")


@dataclass(slots=True)
class Debuginfod:
    """Files by build id from ``urls`` (in order), within ``limits``."""

    urls: Sequence[str]
    limits: Limits = field(default_factory=Limits)
    _answers: dict[tuple[bytes, str], str | None] = field(default_factory=dict)
    _dead: set[str] = field(default_factory=set)

    @classmethod
    def from_environment(cls) -> Debuginfod | None:
        """The client ``DEBUGINFOD_URLS`` asks for, or None when it names no server."""
        urls = server_urls(os.environ.get("DEBUGINFOD_URLS", ""))
        return cls(urls, Limits.from_environment()) if urls else None

    def fetch(self, build_id: bytes, kind: str) -> str | None:
        """The path of the ``kind`` file (``debuginfo`` or ``executable``) of
        ``build_id`` in our cache, downloaded if need be; None when no server has it or
        it cannot be had."""
        key = (build_id, kind)
        if key not in self._answers:
            self._answers[key] = self._fetch(build_id, kind)
        return self._answers[key]

    def _fetch(self, build_id: bytes, kind: str) -> str | None:
        if kind not in KINDS or not 2 <= len(build_id) <= 64:
            return None
        name = f"{build_id.hex()[2:]}.{kind}"
        directory = open_directory(_DIRECTORY, build_id.hex()[:2], create=True)
        if directory is None:
            return None  # no private place to keep a download: not asked
        try:
            if _kept(directory, name, build_id):
                return download_path(build_id, kind)
            if _recent_miss(directory, name):
                return None
            if self._ask_servers(directory, name, build_id, kind):
                return download_path(build_id, kind)
        finally:
            os.close(directory)
        return None

    def _ask_servers(self, directory: int, name: str, build_id: bytes, kind: str) -> bool:
        """Whether a server's file is now kept as ``name``; a miss everywhere is noted."""
        nowhere = True
        for url in self.urls:
            if url in self._dead:
                nowhere = False
                continue
            address = f"{url}/buildid/{build_id.hex()}/{kind}"
            try:
                _download(address, directory, name, build_id, self.limits)
                return True
            except _NotFound:
                continue
            except DownloadError as error:
                nowhere = False
                if isinstance(error, _Unreachable):
                    self._dead.add(url)
                warn(f"debuginfod {address}: {error}")
        if nowhere:
            _note_miss(directory, name)
        return False


# --- the cache --------------------------------------------------------------------------


def _kept(directory: int, name: str, build_id: bytes) -> bool:
    """Whether ``name`` is a download of ours for ``build_id`` (checked again on use: a
    regular file, not a link, ours, not writable by others, its build id)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=directory)
    except OSError:
        return False
    try:
        status = os.fstat(fd)
        if (not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid()
                or status.st_mode & 0o022):
            return False
        return _build_id_of(fd, status.st_size) == build_id
    finally:
        os.close(fd)


def _build_id_of(fd: int, size: int) -> bytes | None:
    """The build id of the ELF file open as ``fd`` (None: not ELF, none, unreadable)."""
    import mmap

    from .headers import ElfError
    from .sections import ElfImage

    if size == 0:
        return None
    try:
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            return ElfImage("download", data).build_id()
    except (ElfError, OSError, ValueError):
        return None


def _recent_miss(directory: int, name: str) -> bool:
    try:
        status = os.stat(name + ".miss", dir_fd=directory, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(status.st_mode) and 0 <= time.time() - status.st_mtime < MISS_SECONDS


def _note_miss(directory: int, name: str) -> None:
    try:
        fd = os.open(name + ".miss", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=directory)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
    except OSError:
        pass  # only the next run asks again


def _download(address: str, directory: int, name: str, build_id: bytes,
              limits: Limits) -> None:
    """The file at ``address`` as ``name`` in ``directory``: streamed into a temporary
    file there, renamed into place once verified (removed on every failure)."""
    temporary = f".tmp-{os.getpid()}-{os.urandom(6).hex()}"
    fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=directory)
    try:
        try:
            size = _receive(address, fd, limits)
            found = _build_id_of(fd, size)
        finally:
            os.close(fd)
        if found is None:
            raise DownloadError("not an ELF file with a build id: not kept")
        if found != build_id:
            raise DownloadError(f"served build id {found.hex()}, not the one asked for: "
                                f"not kept")
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=directory)
        except OSError:
            pass
        raise


# --- HTTP -------------------------------------------------------------------------------


def _receive(address: str, fd: int, limits: Limits) -> int:
    """The body at ``address`` written to ``fd``, within ``limits``; its size."""
    import http.client
    from urllib.error import HTTPError, URLError
    from urllib.request import Request

    start = time.monotonic()
    request = Request(address, headers={"User-Agent": _USER_AGENT,
                                        "Accept-Encoding": "identity"})
    try:
        response = _opener(start + limits.max_time).open(request, timeout=limits.timeout)
    except HTTPError as error:
        error.close()
        if error.code == 404:
            raise _NotFound from None
        raise DownloadError(f"HTTP status {error.code}") from None
    except (URLError, OSError, http.client.HTTPException, ValueError) as error:
        raise _Unreachable(_reason(error)) from None
    with response:
        _check_length(response.headers.get("Content-Length"), limits.max_size)
        try:
            return _copy(response, fd, start, limits)
        except (OSError, http.client.HTTPException) as error:
            raise _Unreachable(_reason(error)) from None


def _reason(error: BaseException) -> str:
    reason = getattr(error, "reason", None) or error
    text = str(reason) or type(reason).__name__
    return text.splitlines()[0] if text.strip() else type(reason).__name__


def _check_length(header: str | None, max_size: int) -> None:
    if header is None:
        return
    try:
        declared = int(header)
    except ValueError:
        raise DownloadError(f"bad Content-Length {header[:40]!r}") from None
    if declared > max_size:
        raise DownloadError(f"offers {declared} bytes, more than the {max_size} allowed "
                            f"(DEBUGINFOD_MAXSIZE)")


def _copy(response: Any, fd: int, start: float, limits: Limits) -> int:
    """The body into ``fd``, one socket read at a time, every bound checked between
    reads (the reads themselves are bounded by :class:`_DeadlineReader`)."""
    received = 0
    while True:
        elapsed = time.monotonic() - start
        if received < FIRST_BYTES and elapsed > limits.timeout:
            raise _Unreachable(f"fewer than {FIRST_BYTES} bytes in {limits.timeout:g} s "
                               f"(DEBUGINFOD_TIMEOUT)")
        chunk = response.read1(_CHUNK)
        if not chunk:
            return received
        received += len(chunk)
        if received > limits.max_size:
            raise DownloadError(f"sent more than the {limits.max_size} bytes allowed "
                                f"(DEBUGINFOD_MAXSIZE)")
        write_all(fd, chunk)


def _opener(deadline: float) -> OpenerDirector:
    """An opener for http and https only (proxies as the environment says), whose
    connections give up at ``deadline`` and whose redirects stay on http and https."""
    import urllib.request
    from urllib.parse import urljoin

    class Redirects(urllib.request.HTTPRedirectHandler):
        max_redirections = MAX_REDIRECTS

        def http_error_302(self, req: Request, fp: Any, code: int, msg: str,
                           headers: Any) -> Any:
            target = urljoin(req.full_url, headers.get("location") or headers.get("uri") or "")
            if not target.lower().startswith(("http://", "https://")):
                fp.close()
                raise DownloadError(f"redirected to {target[:80]!r}: only http and https "
                                    f"are followed")
            return super().http_error_302(req, fp, code, msg, headers)

        http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    class Plain(urllib.request.HTTPHandler):
        def http_open(self, req: Request) -> Any:
            return self.do_open(_connection_class(deadline, secure=False), req)

    class Secure(urllib.request.HTTPSHandler):
        def https_open(self, req: Request) -> Any:
            return self.do_open(_connection_class(deadline, secure=True), req,
                                context=self._context)  # type: ignore[attr-defined]

    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), Plain(), Secure(), Redirects(),
                    urllib.request.HTTPDefaultErrorHandler(),
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener


def _connection_class(deadline: float, *, secure: bool) -> Any:
    """An ``http.client`` connection class whose socket reads end at ``deadline`` (the
    status line and headers included, which ``http.client`` reads a line at a time)."""
    import http.client

    base: Any = http.client.HTTPSConnection if secure else http.client.HTTPConnection

    class Connection(base):  # type: ignore[misc]
        def connect(self) -> None:
            super().connect()
            sock: Any = getattr(self, "sock")  # noqa: B009 (set by the base class)
            setattr(self, "sock", _DeadlineSocket(sock, deadline))  # noqa: B010

    return Connection


class _DeadlineSocket:
    """A connected socket whose file reads stop at a deadline."""

    def __init__(self, sock: Any, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        raw = self._sock.makefile("rb", buffering=0)  # holds the socket open while read
        return io.BufferedReader(_DeadlineReader(self._sock, raw, self._deadline))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    """Reads of a socket's file ``raw``, each waiting at most until the deadline (and at
    most the socket's own timeout)."""

    def __init__(self, sock: Any, raw: Any, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = raw
        self._deadline = deadline
        self._timeout = sock.gettimeout()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("took longer than allowed (DEBUGINFOD_MAXTIME)")
        self._sock.settimeout(left if self._timeout is None else min(left, self._timeout))
        try:
            return int(self._raw.readinto(buffer) or 0)
        except TimeoutError:
            if time.monotonic() >= self._deadline:
                raise TimeoutError("took longer than allowed (DEBUGINFOD_MAXTIME)") from None
            raise

    def close(self) -> None:
        self._raw.close()
        super().close()

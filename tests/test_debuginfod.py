"""Symbols and DWARF from debuginfod servers (issue 27, item 3), as perf, gdb and eu-stack
get them: elfutils' own ``debuginfod`` serving a directory of unstripped programs on
127.0.0.1 (``/debuginfo`` for a ``-g`` build, ``/executable`` for a build without ``-g``),
checked against perf and gdb; and a hostile server of our own (another build, no ELF,
too large, too slow, redirects elsewhere): frames stay unnamed, one warning line, nothing
kept. No test asks any other host.
"""

from __future__ import annotations

import http.server
import os
import platform
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from tests.support.debug_programs import (
    Built,
    assert_named_as_perf,
    assert_unnamed,
    build,
    environment,
    gdb_names,
    record_all,
    require_toolchain,
    sframe,
    stack_names,
    start_waiting,
    stop,
)
from tests.support.oracles import need_debuginfod, need_gdb, unavailable
from tests.support.parity import recording_directory

from pysframe.elf import debuginfod
from pysframe.elf.debuginfod import Debuginfod, Limits, download_path, server_urls

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 programs")


@pytest.fixture(autouse=True)
def _toolchain() -> None:
    require_toolchain()

ALL = ["prog", "cxx", "nog"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("debuginfod"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def served(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, built: Built) -> Iterator[str]:
    """elfutils' debuginfod over the unstripped programs, once it serves them all."""
    program = need_debuginfod()
    directory = tmp_path_factory.mktemp("debuginfod-server")
    (directory / "files").mkdir()
    for name in ALL:
        shutil.copy(built.full(name), directory / "files" / name)
    port = free_port()
    log = open(directory / "log", "wb")
    child = subprocess.Popen([program, "-F", "-p", str(port), "-d", str(directory / "db.sqlite"),
                              "-t", "0", "-g", "0", "-c", "1", str(directory / "files")],
                             stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wanted = [f"{url}/buildid/{built.build_ids['prog'].hex()}/debuginfo",
              f"{url}/buildid/{built.build_ids['cxx'].hex()}/debuginfo",
              f"{url}/buildid/{built.build_ids['nog'].hex()}/executable"]
    try:
        deadline = time.monotonic() + 60
        while not all(served(address) for address in wanted):
            if child.poll() is not None or time.monotonic() > deadline:
                unavailable(f"debuginfod did not serve the files: "
                            f"{(directory / 'log').read_text(errors='replace')[-300:]}")
            time.sleep(0.2)
        yield url
    finally:
        child.terminate()
        child.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, built: Built) -> tuple[Path, str]:
    from tests.support.debug_programs import perf_names

    perf, directory = recording_directory(tmp_path_factory, "debuginfod-perf")
    data = record_all(perf, built, directory / "perf.data")
    return data, perf_names(perf, data, built, directory)


def kept(cache: Path) -> list[str]:
    """The files in our debuginfod cache (miss markers aside)."""
    top = cache / "pysframe" / "debuginfod"
    return sorted(str(path.relative_to(top)) for path in top.rglob("*")
                  if path.is_file() and not path.name.endswith(".miss")) if top.exists() else []


def test_named_from_debuginfo_and_executable(recorded: tuple[Path, str], built: Built,
                                             server: str, tmp_path: Path) -> None:
    """prog and cxx from their /debuginfo; nog, built without -g, has none, and is named
    from its /executable. The downloads are kept: a second run whose server is gone
    names them all the same, and asks nothing."""
    data, theirs = recorded
    cache = tmp_path / "cache"
    first = sframe("script", str(data), env=environment(cache, DEBUGINFOD_URLS=server))
    assert "Traceback" not in first.stderr
    assert_named_as_perf(first.stdout, theirs, built, ALL)
    names = {name: built.build_ids[name].hex() for name in ALL}
    files = kept(cache)
    assert f"{names['prog'][:2]}/{names['prog'][2:]}.debuginfo" in files
    assert f"{names['nog'][:2]}/{names['nog'][2:]}.executable" in files
    assert f"{names['nog'][:2]}/{names['nog'][2:]}.debuginfo" not in files
    gone = f"http://127.0.0.1:{free_port()}"
    second = sframe("script", str(data), env=environment(cache, DEBUGINFOD_URLS=gone))
    assert second.stdout == first.stdout
    assert not any(text in second.stderr for text in names.values()), second.stderr


def test_stack_names_from_debuginfod_as_gdb(built: Built, server: str, tmp_path: Path) -> None:
    need_gdb()
    child = start_waiting(built.stripped("cxx"))
    try:
        ours = stack_names(child.pid, environment(tmp_path, DEBUGINFOD_URLS=server))
        theirs = gdb_names(child.pid, str(built.full("cxx")))
    finally:
        stop(child)
    program = ours.index("shapes::block_here")
    assert ours[program:program + 3] == ["shapes::block_here", "shapes::waiter", "main"]
    assert ours[program:] == theirs[program:]


# ----------------------------------------------------------------------- a hostile server


class Hostile(http.server.BaseHTTPRequestHandler):
    """Answers by the first path segment: ``/<mode>/buildid/<hex>/<kind>``."""

    files: ClassVar[dict[str, bytes]] = {}
    asked: ClassVar[list[str]] = []

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        mode = self.path.split("/")[1]
        self.asked.append(self.path)
        try:
            getattr(self, "_" + mode.replace("-", "_"))()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, body: bytes, status: int = 200, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def _good(self) -> None:
        self._send(self.files["good"])

    def _wrong(self) -> None:
        self._send(self.files["other"])

    def _text(self) -> None:
        self._send(b"<html>not an ELF file</html>\n")

    def _missing(self) -> None:
        self._send(b"", 404)

    def _error(self) -> None:
        self._send(b"", 500)

    def _huge(self) -> None:
        self._send(self.files["good"][:64], length=1 << 40)

    def _endless(self) -> None:
        self.send_response(200)
        self.end_headers()  # no length: the body ends when the connection does
        self.wfile.write(self.files["good"])
        for _ in range(64):
            self.wfile.write(bytes(1 << 16))

    def _slow(self) -> None:
        time.sleep(4)
        self._good()

    def _trickle(self) -> None:
        self.send_response(200)
        self.end_headers()
        for byte in self.files["good"][:200]:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(0.2)

    def _stall(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.files["big"])))
        self.end_headers()
        self.wfile.write(self.files["big"][:150_000])
        self.wfile.flush()
        for byte in self.files["big"][150_000:150_100]:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(0.2)

    def _redirect_file(self) -> None:
        self.send_response(302)
        self.send_header("Location", "file:///etc/passwd")
        self.end_headers()

    def _redirect_ftp(self) -> None:
        self.send_response(302)
        self.send_header("Location", "ftp://127.0.0.1/debuginfo")
        self.end_headers()

    def _redirect_http(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.path.replace("/redirect-http/", "/good/", 1))
        self.end_headers()


@pytest.fixture(scope="module")
def hostile(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    other = tmp_path_factory.mktemp("other") / "other"
    subprocess.run(["gcc", "-xc", "-Wl,--build-id", "-o", str(other), "-"], check=True,
                   input=b"int main(void) { return 0; }\n", timeout=120)
    Hostile.files = {"good": built.full("prog").read_bytes(), "other": other.read_bytes(),
                     "big": built.full("prog").read_bytes() + bytes(200_000)}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(debuginfod, "warn", said.append)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return said


LIMITS = Limits(timeout=1.0, max_time=2.5, max_size=300_000)
REFUSED = {
    "wrong": "served build id",
    "text": "not an ELF file",
    "error": "HTTP status 500",
    "huge": "offers 1099511627776 bytes",
    "endless": "sent more than the 300000 bytes",
    "slow": "timed out",
    "trickle": "fewer than 102400 bytes in 1 s",
    "stall": "took longer than allowed",
    "redirect-file": "redirected to 'file:///etc/passwd'",
    "redirect-ftp": "redirected to 'ftp://",
}


@pytest.mark.parametrize("mode", sorted(REFUSED))
def test_a_hostile_answer_is_refused_in_one_line(built: Built, hostile: str, mode: str,
                                                 warnings: list[str], tmp_path: Path) -> None:
    client = Debuginfod([f"{hostile}/{mode}"], LIMITS)
    begin = time.monotonic()
    assert client.fetch(built.build_ids["prog"], "debuginfo") is None
    assert time.monotonic() - begin < 8
    assert len(warnings) == 1 and REFUSED[mode] in warnings[0], warnings
    assert warnings[0].startswith(f"debuginfod {hostile}/{mode}/buildid/")
    assert "\n" not in warnings[0]
    assert kept(tmp_path / "cache") == []
    assert not list((tmp_path / "cache").rglob("*.miss"))
    assert not [path for path in (tmp_path / "cache").rglob(".tmp-*")]
    # Asked once per run: the next frame of the same binary costs nothing.
    assert client.fetch(built.build_ids["prog"], "debuginfo") is None
    assert len(warnings) == 1


def test_a_server_that_times_out_is_not_asked_again(built: Built, hostile: str,
                                                    warnings: list[str]) -> None:
    client = Debuginfod([f"{hostile}/slow"], LIMITS)
    begin = time.monotonic()
    for name in ALL:
        assert client.fetch(built.build_ids[name], "debuginfo") is None
    assert time.monotonic() - begin < 4
    assert len(warnings) == 1


def test_a_verified_file_is_kept(built: Built, hostile: str, warnings: list[str]) -> None:
    """The right file, also through an http redirect, is kept whole and found again."""
    identity = built.build_ids["prog"]
    for mode in ("good", "redirect-http"):
        path = Debuginfod([f"{hostile}/{mode}"], LIMITS).fetch(identity, "debuginfo")
        assert path == download_path(identity, "debuginfo")
        assert Path(path).read_bytes() == built.full("prog").read_bytes()
        assert os.stat(path).st_mode & 0o777 == 0o600
        Path(path).unlink()
    Debuginfod([f"{hostile}/good"], LIMITS).fetch(identity, "debuginfo")
    Hostile.asked.clear()
    assert Debuginfod([f"{hostile}/error"], LIMITS).fetch(identity, "debuginfo") == path
    assert Hostile.asked == [] and warnings == []


def test_a_miss_is_remembered(built: Built, hostile: str, warnings: list[str]) -> None:
    """404 from every server: no warning, and not asked again for a while (elfutils'
    cache_miss_s), by a later run either."""
    identity = built.build_ids["nog"]
    Hostile.asked.clear()
    assert Debuginfod([f"{hostile}/missing"], LIMITS).fetch(identity, "debuginfo") is None
    assert Debuginfod([f"{hostile}/missing"], LIMITS).fetch(identity, "debuginfo") is None
    assert len(Hostile.asked) == 1 and warnings == []


def test_only_http_servers_are_asked() -> None:
    assert server_urls("https://a.example/ file:///srv ftp://b http://c:8002// ") == [
        "https://a.example", "http://c:8002"]


def test_the_environment_sets_the_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUGINFOD_TIMEOUT", "7")
    monkeypatch.setenv("DEBUGINFOD_MAXSIZE", "0")  # elfutils: no bound; ours stays
    monkeypatch.setenv("DEBUGINFOD_MAXTIME", "junk")
    assert Limits.from_environment() == Limits(7.0, debuginfod.DEFAULT_MAX_TIME,
                                               debuginfod.DEFAULT_MAX_SIZE)


def test_script_with_a_hostile_server(recorded: tuple[Path, str], built: Built, hostile: str,
                                      tmp_path: Path) -> None:
    """Through ``sframe script``: the frames stay unnamed, one line per build id (not per
    frame and kind), no traceback, nothing kept, the exit status of a run without the server."""
    data, _ = recorded
    cache = tmp_path / "cache"
    result = sframe("script", str(data), env=environment(
        cache, DEBUGINFOD_URLS=f"{hostile}/wrong", DEBUGINFOD_TIMEOUT="2"))
    assert "Traceback" not in result.stderr
    assert_unnamed(result.stdout, built, ALL)
    lines = result.stderr.splitlines()
    for name in ALL:
        said = [line for line in lines if built.build_ids[name].hex() in line]
        assert len(said) == 2, said  # /debuginfo, then /executable, once each
        assert all(line.startswith(f"sframe: warning: debuginfod {hostile}/wrong/")
                   and "served build id" in line for line in said)
    assert kept(cache) == []
    plain = sframe("script", str(data), env=environment(tmp_path / "plain"))
    assert result.returncode == plain.returncode

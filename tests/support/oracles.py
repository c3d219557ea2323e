"""The outside tools that decide what is right (perf 7, GNU binutils 2.46 and 2.47.50, go,
Chromium, speedscope, the protobuf runtime with pprof's own ``profile.proto``), found in
one place.

A test asks for an oracle with one of the ``need_*`` functions. Where the tool is missing
the test is skipped with one line saying how to install it; with ``CI=true`` in the
environment a missing oracle *fails* the test instead, because CI installs every oracle
(``tools/install-oracles.sh``, run by ``.ci/run``) and a check that silently does not run
proves nothing.

Places searched, first found wins: an environment variable naming the tool
(``PYSFRAME_PERF7``, ``SFRAME_TC``, ``PYSFRAME_CHROMIUM``, ``PYSFRAME_SPEEDSCOPE``), then ``/opt`` (where the install
script puts them as root), then beside the checkout (where a developer without root puts
them).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL = "tools/install-oracles.sh"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(message: str) -> NoReturn:
    """Skip (one line), or fail under CI=true: an oracle CI must have cannot be used."""
    if in_ci():
        pytest.fail(f"oracle missing in CI: {message}", pytrace=False)
    pytest.skip(message)


def missing(what: str, how: str) -> NoReturn:
    """An oracle is not installed: skip, or fail under CI=true."""
    unavailable(f"{what} is not installed ({how})")


# --- perf 7 (reads deferred callchains) ---------------------------------------------------

def _perf7_roots() -> list[Path]:
    roots = [Path(os.environ["PYSFRAME_PERF7"])] if os.environ.get("PYSFRAME_PERF7") else []
    return [*roots, Path("/opt/perf-new"), REPO.parent / "perf-new", REPO / "bench" / "out" / "perf-new"]


@functools.cache
def perf7() -> list[str] | None:
    """The perf 7.x that ``../shared/toolchain/install-perf.sh`` unpacks, as its own loader
    runs it; None when it is not there."""
    for place in _perf7_roots():
        root = place / "root"
        perf = root / "usr" / "bin" / "perf"
        loader = root / "usr" / "lib" / "x86_64-linux-gnu" / "ld-linux-x86-64.so.2"
        if perf.exists() and loader.exists():
            libraries = f"{root}/usr/lib/x86_64-linux-gnu:{root}/lib/x86_64-linux-gnu"
            return [str(loader), "--library-path", libraries, str(perf)]
    return None


def need_perf7() -> list[str]:
    command = perf7()
    if command is None:
        missing("perf >= 6.19 (reads deferred callchains)",
                f"{INSTALL}, or ../shared/toolchain/install-perf.sh /opt/perf-new")
    return command


def need_perf() -> str:
    """The system's perf (Debian 12's 6.1: the reference for ``perf script`` text)."""
    perf = shutil.which("perf")
    if perf is None:
        missing("perf", "apt-get install linux-perf")
    return perf


def need_gdb() -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        missing("gdb", "apt-get install gdb")
    return gdb


def need_debuginfod() -> str:
    """elfutils' debuginfod server (served on 127.0.0.1 over a directory of files)."""
    server = shutil.which("debuginfod")
    if server is None:
        missing("debuginfod", "apt-get install debuginfod")
    return server


# --- GNU binutils from ../shared/toolchain/install.sh --------------------------------------

def _toolchain_roots() -> list[Path]:
    roots = [Path(os.environ["SFRAME_TC"])] if os.environ.get("SFRAME_TC") else []
    return [*roots, Path("/opt/sframe-tc"), REPO.parent / "sframe-tc"]


def binutils(tool: str, version: str, arch: str = "x86_64") -> str | None:
    """``tool`` (as, ld, objdump, ...) of that binutils version for ``arch``, or None."""
    name = f"{tool}-{version}" if arch == "x86_64" else f"{arch}-{tool}-{version}"
    for root in _toolchain_roots():
        path = root / "bin" / name
        if path.exists():
            return str(path)
    return None


def need_binutils(tool: str, version: str, arch: str = "x86_64") -> str:
    path = binutils(tool, version, arch)
    if path is None:
        missing(f"GNU {tool} {version} for {arch}",
                f"{INSTALL}, or ../shared/toolchain/install.sh {version}")
    return path


# --- go tool pprof, protobuf and profile.proto --------------------------------------------

@functools.cache
def go() -> str | None:
    found = shutil.which("go")
    if found is None or subprocess.run([found, "tool", "-n", "pprof"], capture_output=True,
                                       timeout=60).returncode:
        return None
    return found


def need_go() -> str:
    found = go()
    if found is None:
        missing("go tool pprof", "apt-get install golang-go")
    return found


#: pprof's own schema, as Debian's golang-github-google-pprof-dev installs it.
PROFILE_PROTO = [Path("/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto")]


def need_profile_schema() -> tuple[str, Path]:
    """(protoc, profile.proto): the protobuf compiler and pprof's upstream schema."""
    protoc = shutil.which("protoc")
    if protoc is None:
        missing("protoc", "apt-get install protobuf-compiler")
    for path in PROFILE_PROTO:
        if path.is_file():
            return protoc, path
    missing("pprof's profile.proto", "apt-get install golang-github-google-pprof-dev")


def need_protobuf_runtime() -> None:
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        missing("the protobuf runtime", "pip install -e '.[test]'")


# --- a real browser ------------------------------------------------------------------------

def chromium() -> str | None:
    if os.environ.get("PYSFRAME_CHROMIUM"):
        return os.environ["PYSFRAME_CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def need_browser() -> tuple[str, str]:
    """(a Python with Playwright, a Chromium binary)."""
    python = os.environ.get("PLAYWRIGHT_PYTHON", sys.executable)
    if subprocess.run([python, "-c", "import playwright.sync_api"],
                      capture_output=True).returncode:
        missing("Playwright", "pip install -e '.[test]'")
    browser = chromium()
    if browser is None:
        missing("Chromium", "apt-get install chromium")
    return python, browser


#: The speedscope version whose app the tests open (``tools/install-oracles.sh``).
SPEEDSCOPE = "1.25.0"


def need_speedscope() -> Path:
    """The ``dist/release`` directory of the ``speedscope`` npm package: the app itself,
    as speedscope.app serves it."""
    roots = [Path(os.environ["PYSFRAME_SPEEDSCOPE"])] if os.environ.get("PYSFRAME_SPEEDSCOPE") else []
    for root in [*roots, Path("/opt/speedscope"), REPO.parent / "speedscope"]:
        app = root / "node_modules" / "speedscope" / "dist" / "release"
        if (app / "index.html").is_file():
            return app
    missing(f"speedscope {SPEEDSCOPE}",
            f"{INSTALL}, or npm install --prefix /opt/speedscope speedscope@{SPEEDSCOPE}")

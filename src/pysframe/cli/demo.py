"""``sframe demo``: start a small child process, print its stack, clean up.

The child (``data/demo-child``, built from ``data/demo-child.c`` by
``tools/build-demo-child.sh``) calls main -> outer -> middle -> inner ->
wait_for_parent and blocks in read(2) on a pipe from us. Its own functions are
unwound with its ``.sframe`` section (made by GNU as --gsframe), libc's with SFrame
generated from libc's ``.eh_frame``. Closing the pipe ends it; it also ends itself
after 60 s should we be killed first. Where no child can be traced (another
architecture, ptrace forbidden), the demo dumps the built-in demo section instead.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import resources

from .errors import EXIT_OK, EXIT_UNREADABLE, CommandError

CHILD = "demo-child"
CHILD_CHAIN = "main -> outer -> middle -> inner -> wait_for_parent -> read(2)"
JIT_CHAIN = ("Python -> ctypes -> jit_interpret -> jit_evaluate -> jit_apply -> "
             "jit_call_native -> pause(2)")


def run_demo() -> int:
    if os.uname().machine != "x86_64" or not sys.platform.startswith("linux"):
        return dump_demo(f"`sframe stack` needs x86-64 Linux (this is {os.uname().machine})")
    with tempfile.TemporaryDirectory(prefix="sframe-demo-") as directory:
        program = os.path.join(directory, CHILD)
        with resources.as_file(resources.files("pysframe").joinpath("data", CHILD)) as source:
            shutil.copyfile(source, program)
        os.chmod(program, 0o755)  # wheels and copies may drop the executable bit
        child = subprocess.Popen([program], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            if not _wait_until_blocked(child):
                return dump_demo("the demo child did not start")
            print(f"Started the demo child, PID {child.pid}: {CHILD_CHAIN}, blocked until "
                  "we close its stdin.\n")
            print(f"$ sframe stack --modules {child.pid}\n", flush=True)
            from .stack import run_stack

            try:
                return run_stack(child.pid, as_json=False, show_build_id=False, max_depth=64,
                                 modules=True)
            except CommandError as error:
                return dump_demo(f"could not read the child's stack: {error.message}")
        finally:
            _end(child)


def run_jit_demo() -> int:
    """Start the example JIT (:mod:`pysframe.jit.example`), print its stack with the JIT
    frames named, and end it."""
    if os.uname().machine != "x86_64" or not sys.platform.startswith("linux"):
        raise CommandError(f"the example JIT writes x86-64 code (this is "
                           f"{os.uname().machine})", EXIT_UNREADABLE)
    child = subprocess.Popen([sys.executable, "-m", "pysframe.jit.example", "--lifetime", "60"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stderr is not None
        ready, _, _ = select.select([child.stdout], [], [], 30)
        line = child.stdout.readline() if ready else b""
        if not line.startswith(b"ready "):
            child.kill()
            why = child.stderr.read().decode(errors="replace").strip().splitlines()
            raise CommandError("the example JIT did not start"
                               + (f": {why[-1]}" if why else ""), EXIT_UNREADABLE)
        if not _blocked(child.pid):
            raise CommandError("the example JIT did not block in pause()", EXIT_UNREADABLE)
        print(f"Started the example JIT, PID {child.pid}: {JIT_CHAIN}, its code registered "
              "through the GDB JIT interface.\n")
        print(f"$ sframe stack --modules {child.pid}\n", flush=True)
        from .stack import run_stack

        return run_stack(child.pid, as_json=False, show_build_id=False, max_depth=64,
                         modules=True)
    finally:
        child.terminate()
        child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def _blocked(pid: int, timeout: float = 10.0) -> bool:
    """True once ``pid`` sleeps (state S)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "S":
                    return True
        except OSError:
            return False
        time.sleep(0.005)
    return False


def _wait_until_blocked(child: subprocess.Popen[bytes], timeout: float = 10.0) -> bool:
    """True once the child said "ready" and sleeps in read(2)."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    if not ready or child.stdout.readline() != b"ready\n":
        return False
    return _blocked(child.pid, timeout)


def _end(child: subprocess.Popen[bytes]) -> None:
    """Close the child's stdin (it returns from read and exits); kill it if it lingers."""
    try:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=2)
    except (OSError, subprocess.TimeoutExpired):
        child.kill()
        child.wait()
    finally:
        if child.stdout is not None:
            child.stdout.close()


def dump_demo(why: str | None) -> int:
    from ..demo import DEMO_ADDRESS, demo_bytes
    from ..format.decode import SFrameReader
    from ..format.dump import dump_text

    if why:
        print(f"({why}; showing the built-in section instead)\n")
    print(f"Built-in demo: an SFrame V3 section for x86-64 at {DEMO_ADDRESS:#x}\n")
    sys.stdout.write(dump_text(SFrameReader(demo_bytes(), DEMO_ADDRESS)))
    return EXIT_OK

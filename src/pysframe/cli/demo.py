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

from .errors import EXIT_OK, CommandError

CHILD = "demo-child"
CHILD_CHAIN = "main -> outer -> middle -> inner -> wait_for_parent -> read(2)"


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


def _wait_until_blocked(child: subprocess.Popen[bytes], timeout: float = 10.0) -> bool:
    """True once the child said "ready" and sleeps in read(2)."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    if not ready or child.stdout.readline() != b"ready\n":
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child.pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "S":
                    return True
        except OSError:
            return False
        time.sleep(0.005)
    return False


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

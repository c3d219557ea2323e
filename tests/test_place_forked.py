"""A forked child moved off its parent's CPU (:func:`pysframe.cpus.place_forked`): its
CPU mask is the parent's less the CPU the parent ran on; with one CPU allowed, it is
left as it is; a child already gone is no error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from pysframe.cpus import place_forked


def _forked_sleeper() -> int:
    pid = os.fork()
    if pid == 0:  # (a child that waits to be looked at, then ends without cleanup)
        import time

        time.sleep(5)
        os._exit(0)
    return pid


def test_a_child_leaves_its_parents_cpu_to_it() -> None:
    allowed = os.sched_getaffinity(0)
    pid = _forked_sleeper()
    try:
        place_forked(pid)
        mask = os.sched_getaffinity(pid)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    if len(allowed) < 2:
        assert mask == allowed  # nowhere else to go
    else:
        assert mask < allowed and len(allowed - mask) == 1


def test_one_cpu_allowed_leaves_the_child_alone() -> None:
    code = textwrap.dedent("""
        import os
        from pysframe.cpus import place_forked
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        pid = os.fork()
        if pid == 0:
            import time; time.sleep(5); os._exit(0)
        place_forked(pid)
        print(sorted(os.sched_getaffinity(pid)) == sorted(os.sched_getaffinity(0)))
        os.kill(pid, 9); os.waitpid(pid, 0)
    """)
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    assert found.stdout.strip() == "True"


def test_a_child_already_reaped_is_no_error() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    place_forked(pid)  # (ESRCH: ignored)

"""The ``sframe`` console script: ``stack`` and ``script`` parsed without click.

Why by hand: start-up. ``sframe stack`` is measured against eu-stack and gdb, and
``sframe script`` on a small recording against ``perf script``; importing click costs
~25 ms, more than walking a whole process. :func:`lean_call` parses the command lines
of those two commands that it fully understands, and gives the same arguments click
would give; anything else (``--help``, ``--version``, an unknown or malformed option, a
missing or extra argument, a value click would refuse, every other command) goes to the
click command line in :mod:`.main`, unchanged, so its messages and exit codes stay
click's. tests/test_cli_entry.py holds the two parsers to the same answers.
"""

from __future__ import annotations

import atexit
import os
import sys

from .. import c_signal as signal
from .errors import guarded, report

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: ``script --max-stack``: perf's default (kernel.perf_event_max_stack), and the most.
SCRIPT_MAX_STACK, MOST_STACK = 127, 4096
#: The recording read when none is named (as main.DEFAULT_RECORDING, without click).
DEFAULT_RECORDING = "perf.data"
#: A command to run: its name (``script`` or ``stack``) and the keyword arguments.
if TYPE_CHECKING:
    Call = tuple[str, dict[str, Any]]

#: Options that take a value, and flags, per command: option -> argument name.
_SCRIPT_VALUES = {"--binaries": "binaries", "-o": "output", "--output": "output",
                  "-j": "jobs", "--jobs": "jobs", "--max-stack": "max_stack",
                  "-i": "input_path", "--input": "input_path", "--pid": "pids",
                  "--tid": "tids", "-c": "comms", "--comms": "comms", "--comm": "comms",
                  "--time": "times"}
_SCRIPT_FLAGS = {"--show-stops": "show_stops", "--merge-callchains": "merge_callchains",
                 "--no-merge-callchains": "merge_callchains"}
_STACK_VALUES = {"--core": "core", "--exe": "exe", "--sysroot": "sysroot",
                 "--max-depth": "max_depth", "--timeout": "timeout"}
_STACK_FLAGS = {"--json": "as_json", "--build-id": "show_build_id", "--modules": "modules",
                "--debuginfo": "debuginfo", "--no-debuginfo": "debuginfo"}


def _tokens(args: list[str], values: dict[str, str], flags: dict[str, str]
            ) -> tuple[list[tuple[str, str | bool]], list[str]] | None:
    """(option name, value) pairs and positional arguments, as click reads them; None for
    anything this parser does not handle."""
    options: list[tuple[str, str | bool]] = []
    positional: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if token == "--":
            positional += args[index:]
            break
        if not token.startswith("-") or token == "-":
            positional.append(token)
            continue
        name, equals, value = token.partition("=")
        if name in flags and not equals:
            options.append((flags[name], not name.startswith("--no-")))
        elif name in values and name.startswith("--") and equals:
            options.append((values[name], value))
        elif token in values:
            if index >= len(args):
                return None
            options.append((values[token], args[index]))
            index += 1
        elif token[1] != "-" and token[:2] in values:  # -oOUT, -j4: the value attached
            options.append((values[token[:2]], token[2:]))
        else:
            return None
    return options, positional


def _script_call(args: list[str]) -> Call | None:
    parsed = _tokens(args, _SCRIPT_VALUES, _SCRIPT_FLAGS)
    if parsed is None or len(parsed[1]) > 1:
        return None
    options, positional = parsed
    kwargs: dict[str, Any] = {"binaries": [], "output": None, "show_stops": False,
                              "jobs": None, "merge_callchains": True,
                              "max_stack": SCRIPT_MAX_STACK, "pids": None, "tids": None,
                              "comms": None, "times": None, "input_path": None}
    for name, value in options:
        if name == "binaries":
            kwargs["binaries"].append(value)
        else:
            kwargs[name] = value
    input_path = kwargs.pop("input_path")
    if positional and input_path is not None:
        return None  # named twice: click's message
    if input_path is not None and os.path.isdir(input_path):
        return None
    named = positional[0] if positional else input_path
    perf_data = DEFAULT_RECORDING if named is None else named
    if kwargs["jobs"] is not None:
        try:
            kwargs["jobs"] = int(kwargs["jobs"])
        except ValueError:
            return None
        if not 1 <= kwargs["jobs"] <= 256:
            return None
    try:
        kwargs["max_stack"] = int(kwargs["max_stack"])
    except ValueError:
        return None
    if not 1 <= kwargs["max_stack"] <= MOST_STACK:
        return None
    # click.Path(dir_okay=False) / (file_okay=False) refuse an existing path of the
    # other kind: left to click, for its message.
    if os.path.isdir(perf_data) or (kwargs["output"] is not None
                                    and os.path.isdir(kwargs["output"])):
        return None
    if any(os.path.exists(path) and not os.path.isdir(path) for path in kwargs["binaries"]):
        return None
    return "script", {"perf_data": perf_data, **kwargs}


def _stack_call(args: list[str]) -> Call | None:
    parsed = _tokens(args, _STACK_VALUES, _STACK_FLAGS)
    if parsed is None or len(parsed[1]) > 1:
        return None
    options, positional = parsed
    kwargs: dict[str, Any] = {"core": None, "exe": None, "sysroot": None, "as_json": False,
                              "show_build_id": False, "max_depth": 256, "timeout": 10.0,
                              "modules": False, "debuginfo": True}
    kwargs.update(options)
    try:
        pid = int(positional[0]) if positional else None
        kwargs["max_depth"] = int(kwargs["max_depth"])
        kwargs["timeout"] = float(kwargs["timeout"])
    except ValueError:
        return None
    if kwargs["max_depth"] < 1 or not 0 <= kwargs["timeout"] <= 86400.0:
        return None
    if (pid is None) == (kwargs["core"] is None):
        return None
    if kwargs["exe"] is not None and (kwargs["core"] is None or not os.path.exists(kwargs["exe"])
                                      or os.path.isdir(kwargs["exe"])):
        return None
    if kwargs["core"] is not None and os.path.isdir(kwargs["core"]):
        return None
    if kwargs["sysroot"] is not None and (kwargs["core"] is None
                                          or not os.path.isdir(kwargs["sysroot"])):
        return None
    return "stack", {"pid": pid, **kwargs}


def lean_call(argv: list[str]) -> Call | None:
    """The command ``argv`` (without the program name) runs, when this parser handles it."""
    if not argv:
        return None
    if argv[0] == "script":
        return _script_call(argv[1:])
    if argv[0] == "stack":
        return _stack_call(argv[1:])
    return None


def _run_call(call: Call) -> int:
    name, kwargs = call
    if name == "script":
        from .. import helper_child
        from . import script
        from .script import run_script

        script.kept_until_exit = []  # (main ends the process without a teardown)
        helper_child.REAP_AT_END = True  # (main reaps a child that has said its status)
        perf_data = kwargs.pop("perf_data")
        return run_script(perf_data, report=report, **kwargs)
    from .stack import run_stack

    pid = kwargs.pop("pid")
    return run_stack(pid, **kwargs)


def _bounded_cache() -> None:
    """The cache kept under its bound, if this run used it
    (:func:`~pysframe.cachedir.prune_if_due`; a forked worker ends without exit handlers)."""
    cachedir = sys.modules.get("pysframe.cachedir")
    if cachedir is not None:
        cachedir.prune_if_due()


def main() -> None:
    """Entry point of the ``sframe`` script (which starts with the cyclic collector off:
    ``stack`` keeps it off, every other command turns it back on here)."""
    import gc

    from ..blas import one_blas_thread

    one_blas_thread()
    # Registered first, so run last: after the exit handlers that keep what a run made.
    atexit.register(_bounded_cache)
    call = lean_call(sys.argv[1:])
    if call is None or call[0] != "stack":
        gc.enable()
    if call is None:
        from .main import main as click_main

        click_main()
        return
    # Output cut short by the reader (`| head`): end quietly, killed by SIGPIPE, as C tools
    # do (a shell reports status 141). Nothing is written while a live target is stopped.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if call[0] == "stack":
        # `stack` is measured against eu-stack: a one-shot command whose garbage is a few
        # MB, so the cyclic collector (its passes during imports and table loading, ~5 ms)
        # is off.
        gc.disable()  # (off already when started by the sframe script)
    status = guarded(lambda: _run_call(call))
    # The interpreter's teardown (freeing every module and object: for `script`, numpy's
    # and a recording's arrays, ~30 ms of a large recording's run and ~8 ms of the Lua
    # fixture's) is skipped once the output is flushed and the exit functions have run
    # (caches kept).
    atexit._run_exitfuncs()
    try:  # guarded() flushed and reported already; nothing is left but what exit handlers wrote
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        pass
    children = sys.modules.get("pysframe.helper_child")
    if children is not None:  # (the children that said their status: no zombie is left)
        children.reap_left()
    os._exit(status)

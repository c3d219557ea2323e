"""The ``sframe`` command: its options, and the one place where errors become exit codes."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .errors import EXIT_UNREADABLE, guarded, report

_F = TypeVar("_F", bound=Callable[..., Any])
#: The recording ``script`` and ``report`` read when none is named, as perf.
DEFAULT_RECORDING = "perf.data"


def _parse_address(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        address = int(value, 0)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number (use 0x... for hex)") from None
    if not 0 <= address < 1 << 64:
        raise click.BadParameter(f"{value} is not a 64-bit address")
    return address


#: The longest --timeout accepted: a day (the interval timer takes no more than it can
#: represent, and a process stopped for longer is not what anyone wants).
MAX_TIMEOUT = 86400.0


def _parse_timeout(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if not 0 <= value <= MAX_TIMEOUT:  # also false for nan
        raise click.BadParameter(f"{value} is not a number of seconds from 0 to "
                                 f"{MAX_TIMEOUT:g}")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pysframe")
def cli() -> None:
    """Read, check and use SFrame (.sframe) stack-trace sections.

    Exit status: 0 success, 1 invalid data, 2 unreadable input or bad usage.
    """


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--raw", is_flag=True, help="FILEs are bare SFrame sections, not ELF files.")
@click.option("--address", callback=_parse_address, metavar="ADDR",
              help="With --raw: the address the section sits at (default 0).")
@click.option("--section", "section_name", default=".sframe", show_default=True,
              help="Name of the section to dump.")
def dump(files: tuple[str, ...], as_json: bool, raw: bool, address: int | None,
         section_name: str) -> None:
    """Print SFrame sections exactly as `objdump --sframe` does."""
    from .dump import run_dump

    if address is not None and not raw:
        raise click.UsageError("--address needs --raw")
    status = run_dump(files, as_json=as_json, raw=raw, address=address or 0,
                      section_name=section_name, report=report)
    sys.exit(status)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable findings.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing; only the exit status tells.")
@click.option("--kernel", is_flag=True,
              help="Also apply the Linux kernel's registration policy (V3, sorted, PC-relative).")
@click.option("--strict", is_flag=True, help="Count warnings as problems.")
@click.option("--against-eh-frame", "against_cfi", is_flag=True,
              help="Instead: compare the SFrame rules with the file's CFI at every row boundary.")
@click.option("--raw", is_flag=True, help="FILEs are bare SFrame sections, not ELF files.")
@click.option("--address", callback=_parse_address, metavar="ADDR",
              help="With --raw: the address the section sits at (default 0).")
@click.option("--require", is_flag=True,
              help="A file without an SFrame section is a problem (default: nothing to "
                   "validate, exit 0).")
def validate(files: tuple[str, ...], as_json: bool, quiet: bool, kernel: bool, strict: bool,
             against_cfi: bool, raw: bool, address: int | None, require: bool) -> None:
    """Check SFrame sections; one line per problem: file, FDE, FRE, offset, what is wrong.

    Exit status: 0 valid, 1 problems found, 2 a file could not be read.
    """
    from .validate import run_validate

    if address is not None and not raw:
        raise click.UsageError("--address needs --raw")
    if against_cfi and raw:
        raise click.UsageError("--against-eh-frame needs an ELF file, not --raw")
    sys.exit(run_validate(list(files), as_json=as_json, quiet=quiet, kernel=kernel,
                          strict=strict, raw=raw, address=address or 0,
                          report=(lambda message: None) if quiet else report,
                          against_cfi=against_cfi, require=require))


def _generated_output(what: str) -> Callable[[_F], _F]:
    """FILE, ``-o OUT`` (``what`` is written there) and ``--sframe-version``: the options
    of the commands that generate SFrame."""
    def decorate(command: _F) -> _F:
        command = click.option(
            "--sframe-version", "version", type=click.Choice(["2", "3"]), default="3",
            show_default=True, help="SFrame version to write (V2 follows gas 2.41-2.45).")(command)
        command = click.option(
            "--as-gnu", is_flag=True,
            help="Reproduce GNU as and ld byte for byte, their wrong rows included (x86-64 "
                 ".plt.got CFA sp+16; V2: gas 2.41-2.45's remember_state, undefined RA and "
                 "RA-in-register rows). Default: correct rows.")(command)
        command = click.option("-o", "--output", required=True,
                               type=click.Path(dir_okay=False), help=what)(command)
        return click.argument("file", type=click.Path(dir_okay=False))(command)
    return decorate


@cli.command()
@_generated_output("Where to write the raw section bytes.")
@click.option("--at", "address", callback=_parse_address, metavar="ADDR",
              help="Address the section will sit at (default: FILE's .sframe, else 0, where "
                   "`sframe inject` puts it in a relocatable object).")
@click.option("--verbose", "-v", is_flag=True,
              help="Say which functions gas would have skipped, and why.")
def generate(file: str, output: str, version: str, address: int | None, verbose: bool,
             as_gnu: bool) -> None:
    """Build FILE's SFrame section from its .eh_frame/.debug_frame, as GNU as and ld would."""
    from .generate import run_generate

    sys.exit(run_generate(file, output, version=int(version), address=address,
                          verbose=verbose, as_gnu=as_gnu))


@cli.command()
@_generated_output("The new ELF file (FILE itself is never modified).")
def inject(file: str, output: str, version: str, as_gnu: bool) -> None:
    """Write a copy of FILE with a .sframe section generated from its CFI (in a program or
    shared library: loaded, and named by a PT_GNU_SFRAME program header)."""
    from .generate import run_inject

    sys.exit(run_inject(file, output, version=int(version), as_gnu=as_gnu))


def _recording_options(command: _F) -> _F:
    """The recording (FILE, or ``-i FILE``, default ./perf.data, as perf) and perf's sample
    filters, for ``script`` and ``report``."""
    options = [
        click.option("--time", "times", metavar="START,END",
                     help="Only samples in this time range, in seconds as perf prints them "
                          "(either side may be empty; several ranges apart by blanks), or "
                          "in percent of the recording: 10%/2 (the second tenth), 0%-10%."),
        click.option("-c", "--comms", "--comm", "comms", metavar="COMM[,COMM...]",
                     help="Only samples of threads of these names."),
        click.option("--tid", "tids", metavar="TID[,TID...]",
                     help="Only samples of these threads."),
        click.option("--pid", "pids", metavar="PID[,PID...]",
                     help="Only samples of these processes."),
        click.option("-i", "--input", "input_path", type=click.Path(dir_okay=False),
                     help="The recording (instead of FILE)."),
        click.argument("perf_data", required=False, type=click.Path(dir_okay=False)),
    ]
    for option in options:
        command = option(command)
    return command


def _recording(perf_data: str | None, input_path: str | None) -> str:
    """The recording named by FILE or -i, else ./perf.data (perf's default)."""
    if perf_data is not None and input_path is not None:
        raise click.UsageError("name the recording once: FILE or -i FILE")
    named = perf_data if perf_data is not None else input_path
    return DEFAULT_RECORDING if named is None else named


@cli.command()
@_recording_options
@click.option("--binaries", multiple=True, type=click.Path(file_okay=False),
              help="Directory to search (recursively) for the recorded binaries, matched by "
                   "build id. Repeatable.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to a file.")
@click.option("--show-stops", is_flag=True,
              help="On stderr: how each frame was unwound and why each chain stopped.")
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=256), default=None,
              help="Processes unwinding a recording (default: one per CPU; a small one, "
                   "only once the cache is warm); the output is the same, in the same order.")
@click.option("--merge-callchains/--no-merge-callchains", default=True, show_default=True,
              help="Deferred user callchains (perf >= 6.19): join each to its samples, or "
                   "print samples and deferred callchains apart, as perf does.")
@click.option("--max-stack", type=click.IntRange(1, 4096), default=127, show_default=True,
              help="Frames printed per sample (kernel and user, as perf counts them; for a "
                   "stack copy, user frames unwound), as perf script's.")
def script(perf_data: str | None, input_path: str | None, pids: str | None,
           tids: str | None, comms: str | None, times: str | None, binaries: tuple[str, ...],
           output: str | None, show_stops: bool, jobs: int | None, merge_callchains: bool,
           max_stack: int) -> None:
    """Unwind a `perf record --call-graph dwarf` file (FILE, -i FILE, or ./perf.data) with
    SFrame; print like `perf script --no-inline`."""
    from .script import run_script

    sys.exit(run_script(_recording(perf_data, input_path), binaries=list(binaries),
                        output=output, show_stops=show_stops, report=report, jobs=jobs,
                        merge_callchains=merge_callchains, max_stack=max_stack, pids=pids,
                        tids=tids, comms=comms, times=times))


@cli.command()
@click.argument("recording", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The deferred-callchain recording to write.")
@click.option("--binaries", multiple=True, type=click.Path(file_okay=False),
              help="Directory to search (recursively) for the recorded binaries, matched by "
                   "build id. Repeatable.")
@click.option("--assume-sframe", is_flag=True,
              help="Give every binary without a section the kernel takes our generated "
                   "table (what a distribution built with --gsframe would have).")
@click.option("--report", "show_report", is_flag=True,
              help="Print what the kernel's unwinder would give: bytes per sample, walks "
                   "saved by shared cookies, samples cut short by binary and why.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Also draw the report as an SVG bar chart into this file.")
def defer(recording: str, output: str, binaries: tuple[str, ...], assume_sframe: bool,
          show_report: bool, plot: str | None) -> None:
    """Write the recording the kernel's deferred SFrame unwinder would have made of a
    `perf record --call-graph dwarf` file (perf >= 6.19's deferred callchains)."""
    from .defer import run_defer

    sys.exit(run_defer(recording, output=output, binaries=list(binaries),
                       assume_sframe=assume_sframe, show_report=show_report, plot=plot,
                       report=report))


@cli.command(context_settings={"allow_interspersed_args": False})
@click.option("-p", "--pid", "pids", multiple=True, metavar="PID[,PID...]",
              help="Record these running processes (all their threads). Repeatable.")
@click.option("-t", "--tid", "tids", multiple=True, metavar="TID[,TID...]",
              help="Record these threads only (not the threads they start). Repeatable.")
@click.option("-a", "--all-cpus", "system_wide", is_flag=True,
              help="Record every process on every CPU (until --duration, Ctrl-C, or the end "
                   "of the command given).")
@click.option("-C", "--cpu", "cpus", default=None, metavar="LIST",
              help="With -a (implied): only these CPUs, e.g. 0-3,6.")
@click.option("-F", "--freq", "frequency", default=None, type=int,
              help="Samples per second per thread (default 999).")
@click.option("-c", "--count", "period", default=None, type=click.IntRange(min=1),
              help="A sample every COUNT events, instead of a frequency.")
@click.option("--duration", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds (default: when the command ends, or Ctrl-C).")
@click.option("-e", "--event", default="cpu-clock", show_default=True,
              type=click.Choice(["cpu-clock", "task-clock", "cycles", "instructions",
                                 "cache-references", "cache-misses", "branches",
                                 "branch-misses"]),
              help="The event that takes the samples.")
@click.option("-g", "call_graph_flag", is_flag=True,
              help="Accepted for perf's sake: user and kernel stacks are always recorded.")
@click.option("--call-graph", "call_graph", default=None, metavar="MODE",
              help="perf's choice of unwinder (fp, dwarf, lbr): refused, see the message.")
@click.option("--max-stack", "max_stack", default=None, type=click.IntRange(2, 4096),
              help="User frames walked per sample (default 1024; 2, the pc and its caller, "
                   "to 4096).")
@click.option("--stack-copy", "stack_copy", default=None, type=click.IntRange(512, 65528),
              metavar="BYTES",
              help="Stack copied where the walk meets code whose table is not loaded yet, "
                   "to finish the chain in user space (default 16384; a multiple of 8).")
@click.option("--defer", is_flag=True,
              help="Walk the user stack of a sample taken in a system call once, when the "
                   "thread returns to user space, shared by every sample of that entry "
                   "(the kernel's deferred unwinding; perf >= 6.19 reads the file).")
@click.option("-o", "--output", default="perf.data", show_default=True,
              type=click.Path(dir_okay=False),
              help="The file to write; one already there is kept as OUTPUT.old, as perf does.")
@click.option("-q", "--quiet", is_flag=True, help="No summary at the end; errors only.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def record(pids: tuple[str, ...], tids: tuple[str, ...], system_wide: bool, cpus: str | None,
           frequency: int | None, period: int | None, duration: float | None, event: str,
           call_graph_flag: bool, call_graph: str | None, max_stack: int | None,
           stack_copy: int | None, defer: bool, output: str, quiet: bool,
           command: tuple[str, ...]) -> None:
    """Sample a command (after --) or processes (-p, -t, -a) with stacks walked in the
    kernel by an eBPF program from SFrame tables; write perf.data (root, Linux 5.17+ with
    BTF). Exit status: the command's when one is run (128 + N if a signal N ended it);
    killed by the signal that stopped the recording (SIGINT, SIGTERM, SIGHUP) after the
    file is written, as perf; 2 for usage and refusals; 126/127 when the command cannot be
    executed or is not found."""
    from .record import RecordOptions, run_record

    del call_graph_flag  # -g: stacks are always recorded
    options = RecordOptions(pids=pids, tids=tids, system_wide=system_wide, cpus=cpus,
                            frequency=frequency, period=period, duration=duration,
                            event=event, call_graph=call_graph, max_stack=max_stack,
                            stack_copy=stack_copy, defer=defer, output=output, quiet=quiet,
                            command=list(command))
    sys.exit(run_record(options, report=report))


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1,
              show_default="one per CPU", help="Processes judging files in parallel.")
@click.option("--dask", metavar="ADDRESS",
              help="Judge the files on a Dask cluster at ADDRESS ('local': a local cluster "
                   "of -j workers) instead of the process pool; the same JSON.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write every file's facts and the totals as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Write a self-contained HTML report.")
@click.option("--no-cache", is_flag=True,
              help="Judge every file again (default: results cached by file content).")
def audit(paths: tuple[str, ...], jobs: int, dask: str | None, json_path: str | None,
          html_path: str | None, no_cache: bool) -> None:
    """SFrame over files, directories, archives and packages: which sections, the kernel's
    verdict, coverage of the CFI's functions and why not, disagreement with the CFI, size."""
    from .audit import run_audit

    sys.exit(run_audit(list(paths), jobs=jobs, dask=dask, json_path=json_path,
                       html_path=html_path, use_cache=not no_cache))


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
def upgrade(file: str, output: str) -> None:
    """Rewrite the SFrame V2 sections of a relocatable object or static archive as V3 (what
    binutils 2.46's ld links); FILE is left untouched."""
    from .upgrade import run_upgrade

    sys.exit(run_upgrade(file, output))


@cli.command(name="strip")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the result here, FILE left untouched (default: FILE is replaced).")
def strip_command(file: str, output: str | None) -> None:
    """FILE without its SFrame sections (what ld's --discard-sframe gives), as objcopy
    --remove-section: an ELF file, or a static archive member by member (its symbol index
    rewritten). The result keeps FILE's permissions and owner; without -o it replaces FILE
    (a new file renamed over it)."""
    from .upgrade import run_strip

    sys.exit(run_strip(file, output))


@cli.command(name="report")
@_recording_options
@click.option("--format", "form", type=click.Choice(["folded", "speedscope", "svg", "pprof"]),
              default="folded", show_default=True,
              help="folded: FlameGraph's folded stacks; speedscope: JSON for speedscope.app; "
                   "svg: a flame graph with search and zoom; pprof: gzipped profile.proto "
                   "for go tool pprof, Pyroscope, Parca.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="The file to write ('-': standard output).")
@click.option("--binaries", multiple=True, type=click.Path(file_okay=False),
              help="Directory to search for the recorded binaries (by build id). Repeatable.")
@click.option("--max-stack", type=click.IntRange(1, 4096), default=4096, show_default=True,
              help="Frames kept per sample (profiles keep whole stacks by default).")
def report_command(perf_data: str | None, input_path: str | None, pids: str | None,
                   tids: str | None, comms: str | None, times: str | None, form: str,
                   output: str, binaries: tuple[str, ...], max_stack: int) -> None:
    """Aggregate unwound samples of a recording (FILE, -i FILE, or ./perf.data): folded
    stacks, speedscope JSON, an SVG flame graph or a pprof profile. Frames without a
    symbol are named by their function's start where the binary's .eh_frame knows it
    (file+0xoffset), else by their file ([file])."""
    from .script import run_report

    sys.exit(run_report(_recording(perf_data, input_path), binaries=list(binaries),
                        output=output, form=form, report=report, max_stack=max_stack,
                        pids=pids, tids=tids, comms=comms, times=times))


@cli.command()
@click.argument("pid", type=int, required=False)
@click.option("--core", type=click.Path(dir_okay=False), help="Read a core dump instead.")
@click.option("--exe", type=click.Path(dir_okay=False, exists=True),
              help="With --core: the program's binary, when it is no longer at the path the "
                   "core recorded (or the core names no files, as qemu-user's cores).")
@click.option("--sysroot", type=click.Path(file_okay=False, exists=True),
              help="With --core: where the target's files are here (e.g. "
                   "/usr/aarch64-linux-gnu for a core of a program run under qemu-aarch64 "
                   "-L /usr/aarch64-linux-gnu); the core's paths are looked up under it first.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--build-id", "show_build_id", is_flag=True, help="Show each module's build id.")
@click.option("--max-depth", default=256, show_default=True, type=click.IntRange(min=1),
              help="Frames per thread at most.")
@click.option("--timeout", default=10.0, show_default=True, metavar="SECONDS",
              callback=_parse_timeout,
              help="Longest time the process may stay stopped; then it is released and the "
                   "command fails (0: no limit; at most a day, 86400).")
@click.option("--modules", is_flag=True, help="After the stacks, list each module with its "
              "build id and the SFrame table it was unwound with.")
@click.option("--debuginfo/--no-debuginfo", default=True, show_default=True,
              help="Name frames from DWARF (own or /usr/lib/debug) as gdb does, with inlined "
                   "calls as frames of their own; without it, ELF symbols only.")
def stack(pid: int | None, core: str | None, exe: str | None, sysroot: str | None,
          as_json: bool, show_build_id: bool, max_depth: int, timeout: float, modules: bool,
          debuginfo: bool) -> None:
    """Print every thread's stack of a running process (x86-64), or of a core dump with
    --core (x86-64, AArch64, s390x; SFrame, own or generated, with frame-pointer
    fallback). A live process is
    stopped only while it is read, and released with any signal that arrived meanwhile.

    Exit status: 0 success; 1 a stack went through a file that is not the one the target
    mapped (a warning names it), or the core is invalid; 2 no such process, not
    permitted, an unreadable core, or bad usage.
    """
    from .stack import run_stack

    if (pid is None) == (core is None):
        raise click.UsageError("give a PID or --core CORE")
    if exe is not None and core is None:
        raise click.UsageError("--exe goes with --core")
    if sysroot is not None and core is None:
        raise click.UsageError("--sysroot goes with --core")
    sys.exit(run_stack(pid, as_json=as_json, show_build_id=show_build_id,
                       max_depth=max_depth, core=core, timeout=timeout,
                       debuginfo=debuginfo, modules=modules, exe=exe, sysroot=sysroot))


@cli.command()
@click.option("--section", "section_only", is_flag=True,
              help="Only dump the built-in demo SFrame section (no child process).")
@click.option("--jit", is_flag=True,
              help="Start the example JIT instead: its stack, through its JIT frames.")
def demo(section_only: bool, jit: bool) -> None:
    """Start a small child process, print its stack with `sframe stack`, and end it
    (or, with --section, dump the built-in demo SFrame section)."""
    from .demo import dump_demo, run_demo, run_jit_demo

    if section_only:
        sys.exit(dump_demo(None))
    sys.exit(run_jit_demo() if jit else run_demo())


def main() -> None:
    """Run the command with click, turning stray failures into one-line errors (the
    ``sframe`` script comes here, from :mod:`.entry`, for what it does not parse itself)."""
    # Output cut short by the reader (`| head`): end quietly, killed by SIGPIPE, as C tools
    # do (a shell reports status 141). Nothing is written while a live target is stopped.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(_run())


def _run() -> int:
    return guarded(_run_click)


def _run_click() -> int:
    """click's command line, its own errors turned into exit statuses."""
    try:
        cli.main(standalone_mode=False)
        return 0
    except click.exceptions.Abort:
        raise KeyboardInterrupt from None
    except click.UsageError as error:  # one line, as every error (not click's usage block)
        where = error.ctx.command_path if error.ctx is not None else "sframe"
        sys.stderr.write(f"{where}: {error.format_message()} (see '{where} --help')\n")
        return EXIT_UNREADABLE
    except click.ClickException as error:
        error.show()
        return error.exit_code

"""A first run's symbol tables made by a helper process while `script` opens the
recording and follows it to its first sample (pysframe.symbolize.symbols_prefetch): the
helper, forked as soon as the build-id table is read, makes them into the private cache,
the process the -j workers fork from reads them back; the text is the one of a warm run
and of -j 1, held to perf's own text of the recording, a helper that makes nothing costs
only its time, and one no one takes does not outlive the command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.left_behind import ends_leaving_nothing
from tests.support.perf_text import held_to_perfs_text

from conftest import FIXTURES
from pysframe.cli.script import ENGINE_VARIABLE, run_script
from pysframe.symbolize import symbols_prefetch

RECORDING = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"
#: The files of the recording's build-id table, largest first (the helper's order).
FILES = ["libc.so.6", "ld-linux-x86-64.so.2", "lua"]


def _helpers(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The files of each helper the runs fork (an empty list: none forked)."""
    from pysframe.cli import script  # noqa: F401  (imports prefetch_symbols where used)

    made: list[list[str]] = []
    real = symbols_prefetch.prefetch_symbols

    def spied(*args: object, **kwargs: object) -> object:
        helper = real(*args, **kwargs)  # type: ignore[arg-type]
        made.append([Path(path).name for path, _ in helper.files] if helper else [])
        return helper

    monkeypatch.setattr(symbols_prefetch, "prefetch_symbols", spied)
    return made


def _texts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[bytes]:
    """The text of a first run, a warm one (both -j 2) and one with -j 1."""
    if not RECORDING.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(ENGINE_VARIABLE, "scalar")
    tmp_path.mkdir(parents=True, exist_ok=True)  # (-o opens its file before the run)
    texts = []
    for run in ("first", "warm", "one"):
        output = tmp_path / f"{run}.txt"
        assert run_script(str(RECORDING), binaries=[str(RECORDING.parent)],
                          output=str(output), show_stops=False, report=lambda message: None,
                          jobs=1 if run == "one" else 2) == 0
        texts.append(output.read_bytes())
    return texts


def _cached_all(tmp_path: Path) -> bool:
    from pysframe.sources.perf_data import open_perf_data

    with open_perf_data(str(RECORDING)) as data:
        files = [(entry.filename, entry.build_id) for entry in data.build_ids()
                 if not entry.kernel and entry.filename.startswith("/")]
    return symbols_prefetch.uncached(files) == []


def test_a_first_run_makes_the_tables_in_a_helper(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    helpers = _helpers(monkeypatch)
    first, warm, one = _texts(monkeypatch, tmp_path)
    assert helpers == [FILES, []]  # the first run's, none on the warm run
    assert first == warm == one
    held_to_perfs_text(RECORDING, first)
    assert _cached_all(tmp_path)


def test_the_helpers_tables_are_handed_over_not_read_back(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """The first run takes the tables its helper made from the helper itself, not from
    the cache (where each is checked as hostile input): it reads none of them back. They
    are the cache's tables, and the text is the warm run's and perf's."""
    from pysframe.elf import ElfImage
    from pysframe.sources.perf_data import open_perf_data
    from pysframe.symbolize import symbols

    if not RECORDING.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    helpers = _helpers(monkeypatch)
    handed: list[dict[int, tuple[str, bytes]]] = []
    real_tables = symbols_prefetch.SymbolsHelper.tables

    def spied(self: symbols_prefetch.SymbolsHelper) -> dict[int, tuple[str, object]]:
        found = real_tables(self)
        handed.append({number: (path, table.entry()) for number, (path, table)
                       in found.items()})
        return found  # type: ignore[return-value]

    read_back: list[bytes] = []
    real_read = symbols._read_cached

    def reading(build_id: bytes, *args: object) -> object:
        read_back.append(build_id)
        return real_read(build_id, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(symbols_prefetch.SymbolsHelper, "tables", spied)
    monkeypatch.setattr(symbols, "_read_cached", reading)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(ENGINE_VARIABLE, "scalar")
    texts = []
    for run in ("first", "warm"):
        output = tmp_path / f"{run}.txt"
        assert run_script(str(RECORDING), binaries=[str(RECORDING.parent)],
                          output=str(output), show_stops=False, report=lambda message: None,
                          jobs=2) == 0
        texts.append(output.read_bytes())
        if run == "first":
            first_reads = list(read_back)
    assert helpers == [FILES, []]
    assert texts[0] == texts[1]
    held_to_perfs_text(RECORDING, texts[0])
    with open_perf_data(str(RECORDING)) as data:
        ids = {Path(entry.filename).name: entry.build_id for entry in data.build_ids()}
    assert len(handed) == 1 and 0 in handed[0]  # libc's at least: the child's first
    given = {FILES[number] for number in handed[0]}  # (numbered as the helper's files)
    for name in given:
        assert ids[name] not in first_reads  # not read back from the cache ...
        assert ids[name] in read_back[len(first_reads):]  # ... as the warm run reads it
    for path, entry in handed[0].values():
        assert symbols.load_symbols(ElfImage(path)).entry() == entry  # the cache's table


def test_a_helper_that_makes_nothing_costs_only_its_time(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """The child ends without making its table (as if it failed): the parent makes it."""
    helpers = _helpers(monkeypatch)
    monkeypatch.setattr(symbols_prefetch, "_make", lambda *args: None)
    first, warm, one = _texts(monkeypatch, tmp_path)
    assert helpers[0] == FILES
    assert first == warm == one
    held_to_perfs_text(RECORDING, first)
    assert _cached_all(tmp_path)


def test_no_helper_when_the_cache_cannot_be_written(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """A cache root that is a file: what a helper made would be lost (and made again by
    the parent), so none is forked; the text is -j 1's."""
    helpers = _helpers(monkeypatch)
    if not RECORDING.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    (tmp_path / "cache").write_text("not a directory\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(ENGINE_VARIABLE, "scalar")
    tmp_path.mkdir(parents=True, exist_ok=True)  # (-o opens its file before the run)
    texts = []
    for jobs in (2, 1):
        output = tmp_path / f"j{jobs}.txt"
        run_script(str(RECORDING), binaries=[str(RECORDING.parent)], output=str(output),
                   show_stops=False, report=lambda message: None, jobs=jobs)
        texts.append(output.read_bytes())
    assert helpers == [[]]
    assert texts[0] == texts[1]
    held_to_perfs_text(RECORDING, texts[0])


def test_phase_times_of_a_first_and_a_warm_run(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """PYSFRAME_PHASE_TIMES (bench/perf_script.py's breakdown) on the -j 2 path, whose
    symbolizer is then a timed one: a first run (a helper forked) and a warm one print
    their phases and the same text as without."""
    from pysframe.cli.script import PHASES_VARIABLE

    plain = _texts(monkeypatch, tmp_path / "plain")
    monkeypatch.setenv(PHASES_VARIABLE, "1")
    capsys.readouterr()
    timed = _texts(monkeypatch, tmp_path / "timed")
    assert timed == plain
    held_to_perfs_text(RECORDING, timed[0])
    assert capsys.readouterr().err.count("phases: setup ") == 3


def test_the_helper_is_forked_before_the_unwinder_is_made(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """The child starts as soon as the recording's build-id table is read: before this
    process builds its unwinder (and imports what that needs), so that it has the time to
    make every table."""
    from pysframe.session import perf

    seen: list[bool] = []
    real = perf.PerfUnwinder.__init__

    def noted(self: perf.PerfUnwinder, *args: object, **kwargs: object) -> None:
        seen.append(symbols_prefetch._started is not None)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(perf.PerfUnwinder, "__init__", noted)
    _texts(monkeypatch, tmp_path)
    assert seen == [True, False, False]  # the first run; not the warm one nor -j 1


#: A run that starts the helper and ends without taking it, while the helper is still
#: making a table that takes a minute; it prints the helper's pid.
UNTAKEN_HELPER = """
import os, sys, time
from pysframe.cli.script import open_recording
from pysframe.errors import Problems
from pysframe.symbolize import symbols_prefetch
symbols_prefetch._make = lambda *args: time.sleep(60)
data, _ = open_recording(sys.argv[1], [os.path.dirname(sys.argv[1])], Problems(print),
                         split=True)
print(symbols_prefetch._started.child.pid, flush=True)
"""


#: A run whose split fails (the indexes made before the wait for the helper raise) while
#: the helper is still making a table that takes a minute; it prints the helper's pid.
FAILED_SPLIT = """
import os, sys, time
from pysframe.cli.script import ENGINE_VARIABLE, run_script
from pysframe.generate import on_demand
from pysframe.symbolize import symbols_prefetch
symbols_prefetch._make = lambda *args: time.sleep(60)
def failing(self):
    print(symbols_prefetch.started().child.pid, flush=True)
    raise RuntimeError("index")
on_demand.OnDemandTable.index_ranges = failing
os.environ[ENGINE_VARIABLE] = "scalar"
try:
    run_script(sys.argv[1], binaries=[os.path.dirname(sys.argv[1])], output=None,
               show_stops=False, report=lambda message: None, jobs=2)
except RuntimeError:
    pass
"""


@pytest.mark.parametrize("code", [UNTAKEN_HELPER, FAILED_SPLIT], ids=["untaken", "failed"])
def test_a_helper_no_one_takes_is_stopped_and_reaped_at_exit(tmp_path: Path,
                                                             code: str) -> None:
    """A run that ends before the split, fails in it or goes another way leaves no
    process: the helper still running is stopped (the command does not wait a minute for
    it) and reaped, its half-written entry removed."""
    if not RECORDING.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    ends_leaving_nothing(code, [str(RECORDING)], tmp_path / "cache")


def test_each_file_is_claimed_once_by_one_of_two_processes() -> None:
    """The numbers of the files to make, shared by the helper and this process: every
    number is claimed exactly once, whichever process reads it, and then both see the
    end without waiting."""
    claims = symbols_prefetch.Claims(500)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        mine = []
        while (number := claims.next()) is not None:
            mine.append(number)
        os.write(write_end, b",".join(b"%d" % k for k in mine))
        os._exit(0)
    os.close(write_end)
    ours = []
    while (number := claims.next()) is not None:
        ours.append(number)
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as child:
        theirs = [int(k) for k in child.read().split(b",") if k]
    claims.close()
    assert sorted(ours + theirs) == list(range(500))
    assert claims.next() is None


#: Where the helper notes the files it makes (the test's file, in the environment).
NOTED = "PYSFRAME_TEST_HELPER_FILES"


def test_this_process_makes_the_files_the_helper_has_not_begun(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The helper begins with the largest file (libc's) and takes its time; the process
    that waits for it meanwhile claims the two others and makes them itself. The text is
    the warm run's and -j 1's, held to perf's."""
    notes = tmp_path / "helper-files"

    def slow(finder: object, path: str, build_id: bytes, debug: object,
             kept_later: object) -> None:
        with open(os.environ[NOTED], "a") as noted:
            noted.write(Path(path).name + "\n")
        time.sleep(2)  # (makes nothing: this process makes what is left at the end)

    monkeypatch.setenv(NOTED, str(notes))
    monkeypatch.setattr(symbols_prefetch, "_make", slow)
    helpers = _helpers(monkeypatch)
    first, warm, one = _texts(monkeypatch, tmp_path / "runs")
    assert helpers[0] == FILES
    assert notes.read_text().split() == ["libc.so.6"]  # the others were made here
    assert first == warm == one
    held_to_perfs_text(RECORDING, first)
    assert _cached_all(tmp_path / "runs")


#: `sframe script` run as the command runs (entry.main), its end checked: how many
#: children said their status and were left to reap at the end, and whether any child
#: is left when the process ends.
REAPED_AT_END = """
import os, sys
from pysframe import helper_child
from pysframe.cli import entry
reap_left = helper_child.reap_left
def counted():
    os.write(2, f"left to reap: {len(helper_child._left)}\\n".encode())
    reap_left()
helper_child.reap_left = counted
real_exit = os._exit
def checked(status):
    if os.getpid() == main_pid:
        try:
            os.waitpid(-1, os.WNOHANG)
            os.write(2, b"a child is left\\n")
        except ChildProcessError:
            os.write(2, b"no child is left\\n")
    real_exit(status)
main_pid = os.getpid()
os._exit = checked
sys.argv = ["sframe", "script", sys.argv[1], "--binaries", os.path.dirname(sys.argv[1])]
entry.main()
"""


def test_a_first_runs_children_are_reaped_before_it_ends(tmp_path: Path) -> None:
    """The symbols helper and the -j worker say their status as they end; the command
    goes on without waiting for the kernel to free their memory, and reaps them at its
    end: none is left (not even a zombie where init would not reap it)."""
    if not RECORDING.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    done = subprocess.run([sys.executable, "-c", REAPED_AT_END, str(RECORDING)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-800:]
    assert "no child is left" in done.stderr, done.stderr[-800:]
    left = int(done.stderr.split("left to reap: ")[1].split()[0])
    assert left >= 2, done.stderr[-800:]  # the helper and the worker
    assert done.stdout.count("\n\n") > 3000


#: A first run's open that stops at the helper's start, printing the modules the helper
#: needs that this process has not imported by then ("all": none missing).
HELPER_IMPORTS = """
import os, sys
from pysframe.cli.script import open_recording
from pysframe.errors import Problems
from pysframe.symbolize import symbols_prefetch
WANTED = ("pysframe.session.finding", "pysframe.unwind.provider", "pysframe.generate.cache")
def start(work, then=None):
    print(" ".join(name for name in WANTED if name not in sys.modules) or "all", flush=True)
    return None
symbols_prefetch.start_helper = start
open_recording(sys.argv[1], [os.path.dirname(sys.argv[1])], Problems(print), split=True)
"""


def test_the_helper_is_forked_with_what_this_process_imports_next(tmp_path: Path) -> None:
    """The modules the helper finds its files with and keeps its tables' sources with are
    ones this process imports right after the fork: imported before it, the helper does
    not import them again (~2 ms of its work, on the first run's longest path)."""
    if not RECORDING.exists():
        pytest.skip("no fixture recordings (../shared/fixtures) here")
    probe = subprocess.run([sys.executable, "-S", "-c", HELPER_IMPORTS, str(RECORDING)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
                                "PYTHONPATH": str(Path(symbols_prefetch.__file__).parents[2])})
    assert probe.returncode == 0, probe.stderr[-500:]
    assert probe.stdout.split() == ["all"]

"""The rows ``sframe record`` loads into the walker's map (no root needed): PLT blocks
written out as plain rows give every pc the rule the batch tracer's lookup gives."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from tests.test_record_bpf import REASON, mapped

from conftest import FIXTURES
from pysframe.format.constants import ABI
from pysframe.format.lookup import SFrameLookup
from pysframe.record.tables import walker_rows
from pysframe.session.tables import GeneratedTables
from pysframe.unwind.flat import KIND_MASK, flatten
from pysframe.unwind.modules import BinaryFinder

PROGRAMS = sorted(FIXTURES.glob("2.4*/x86_64/*/prog"))
LIBC = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")


@pytest.mark.skipif(not PROGRAMS, reason="no fixture binaries (../shared/fixtures) here")
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda path: "/".join(path.parts[-4:-1]))
def test_every_pc_gets_the_batch_lookups_rule(path: Path) -> None:
    # whole tables, as the recorder's (its BPF map holds them)
    module = BinaryFinder(tables=GeneratedTables(on_demand=False)).module(str(path), None, 0, 0)
    assert module is not None and isinstance(module.lookup, SFrameLookup)
    flat = flatten(module.lookup, ABI.AMD64_ENDIAN_LITTLE)
    assert flat.masks  # the PLT blocks of these programs are PCMASK functions
    starts, words = walker_rows(flat)
    assert not np.any((words & np.uint64(3)) == KIND_MASK)  # no row left for the walker to stop at
    assert np.all(np.diff(starts.astype(np.int64)) >= 0)  # still sorted: one binary search
    pcs = np.arange(int(flat.starts[0]) - 16, int(flat.starts[-1]) + 16, dtype=np.uint64)
    index = np.searchsorted(starts, pcs, side="right").astype(np.int64) - 1
    found = np.where(index >= 0, words[np.maximum(index, 0)], np.uint64(0))
    assert np.array_equal(found, flat.lookup(pcs))


def test_the_page_index_narrows_the_search_to_the_rows_the_whole_search_finds() -> None:
    """For every row start of a large table (libc's, ~30k rows), a byte either side, and
    at each page's edges, the
    rows the walker searches after reading its page's two counts hold the row the search
    over the whole table finds; a table too small gets no index."""
    from pysframe.record.tables import INDEXED_FROM_ROWS, module_rows, table_rows
    from pysframe.record.walker import PAGE_INDEX_SHIFT, PAGE_INDEXED, ROWS_FIELD

    finder = BinaryFinder(tables=GeneratedTables(apart=True, flat_abi="AMD64_ENDIAN_LITTLE"))
    libc = finder.module(str(LIBC), None, 0, 0)
    assert libc is not None
    starts, words, _ = module_rows(libc)
    rows, field = table_rows(starts, words)
    assert field & PAGE_INDEXED and field & ROWS_FIELD == len(starts)
    assert np.array_equal(rows[:len(starts), 0], starts)
    first_page, pages = (int(value) for value in rows[len(starts)])
    counts = rows[len(starts) + 1:].astype("<u8").view("<u4").ravel()
    assert len(counts) >= pages + 1
    edges = (np.arange(first_page, first_page + pages, dtype=np.uint64)
             << np.uint64(PAGE_INDEX_SHIFT))
    keys = np.unique(np.concatenate((starts, starts - np.uint64(1), starts + np.uint64(1),
                                     edges, edges - np.uint64(1))))
    keys = keys[(keys >> np.uint64(PAGE_INDEX_SHIFT)) - np.uint64(first_page) < pages]
    whole = np.searchsorted(starts, keys, side="right")
    page = ((keys >> np.uint64(PAGE_INDEX_SHIFT)) - np.uint64(first_page)).astype(np.int64)
    low, high = counts[page].astype(np.int64), counts[page + 1].astype(np.int64)
    assert np.all((low <= whole) & (whole <= high))  # the result lies in [LO, HI]
    assert np.all(starts[low[low > 0] - 1] <= keys[low > 0])  # rows before LO: at or below
    assert np.all(starts[high[high < len(starts)]] > keys[high < len(starts)])  # from HI: above
    assert float(np.mean(high - low)) < 24  # four or five halvings, not fifteen
    small = table_rows(starts[:INDEXED_FROM_ROWS - 1], words[:INDEXED_FROM_ROWS - 1])
    assert small[1] == INDEXED_FROM_ROWS - 1 and len(small[0]) == INDEXED_FROM_ROWS - 1


def _spin(tmp_path: Path) -> Path:
    source = tmp_path / "spin.c"
    source.write_text("int main(void) { for (volatile long i = 0; ; i++) ; }\n")
    binary = tmp_path / "spin"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(source)], check=True)
    return binary


@contextmanager
def _spinning(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A looping program built in ``tmp_path``, running with libc mapped; killed at the
    end."""
    binary = _spin(tmp_path)
    child = subprocess.Popen([str(binary)])
    try:
        mapped(child.pid, "libc.so")
        yield binary, child
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_tables_are_shared_and_freed_with_their_last_process(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Two processes of one program share its rows; they are freed when the last of them
    has gone (its exit, or an exec the sweep sees with no record saying so), and a table
    loaded later takes the freed range instead of new rows."""
    from pysframe.record import bpf_sys
    from pysframe.record.tables import TableLoader
    from pysframe.record.walker import PROCS_VALUE, ROW

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    binary = _spin(tmp_path)
    children: list[subprocess.Popen[bytes]] = []

    def start(*command: str) -> subprocess.Popen[bytes]:
        children.append(subprocess.Popen(list(command)))
        mapped(children[-1].pid, "libc.so")
        return children[-1]

    def stop(child: subprocess.Popen[bytes]) -> None:
        child.kill()
        child.wait()

    try:
        with bpf_sys.Resources() as owned:
            procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 64, "t_procs"))
            rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 1 << 17,
                                                "t_rows"))
            loader = TableLoader(rows, procs, 1 << 17)
            first, second = start(str(binary)), start(str(binary))
            assert loader.load_process(first.pid) >= 2  # the program and libc
            loaded = dict(loader.tables)
            assert loader.load_process(second.pid) >= 2
            assert loader.tables == loaded  # shared, not loaded twice
            spin = loader.finder.module(str(binary), None, 0, 0)
            assert spin is not None and spin.image is not None
            spin_rows = loader.tables[("", spin.image.build_id())][1]  # keyed by build id
            stop(first)
            loader.drop_process(first.pid)
            assert loader.freed_tables == 0  # the second still maps both
            assert bpf_sys.map_lookup(procs, first.pid.to_bytes(4, "little"), PROCS_VALUE) is None
            shell = start("sh", "-c", f"sleep 0.5; exec {sys.executable} -c "
                                      "'import time; time.sleep(30)'")
            loader.load_process(shell.pid)
            stop(second)
            loader.sweep()  # the second is gone: dropped; its program's rows freed
            assert second.pid not in loader.process_tables
            assert (loader.freed_tables, loader.freed_rows) == (1, spin_rows)
            high_water = loader.used
            third = start(str(binary))  # the program again: into the freed range
            loader.load_process(third.pid)
            assert loader.used == high_water and loader.freed_rows == spin_rows
            assert not loader.retired  # its rows were still in place: taken back as they were
            time.sleep(0.8)  # the shell has become python3
            # /proc/PID/exe is the file exec'd: the real interpreter, wherever a venv's
            # python (a link to it) lives; compared as files, not as path prefixes.
            assert os.path.samefile(f"/proc/{shell.pid}/exe", sys.executable)
            loader.sweep()
            assert loader.freed_tables == 2  # sh's table: its only process exec'd
            in_use = sum(count for _, count in loader.tables.values())
            retired = sum(count for _, count in loader.retired.values())
            assert in_use + retired + sum(size for _, size in loader.free) == loader.used
    finally:
        for child in children:
            stop(child)



@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_retired_tables_keep_their_rows_until_the_room_is_needed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A table no process names is retired, not freed: asked for again, its rows are
    still there; a table that needs their room frees the oldest retired ones; one that
    fits nowhere is not remembered as having no table (asked again, it may fit)."""
    from pysframe.record import bpf_sys
    from pysframe.record.tables import TableLoader
    from pysframe.record.walker import PROCS_VALUE, ROW

    sizes = {"a": 40, "b": 40, "c": 70, "huge": 200}
    monkeypatch.setattr("pysframe.record.tables.module_rows", lambda module, build_id=None: (
        np.arange(sizes[module], dtype=np.uint64), np.zeros(sizes[module], np.uint64), None))
    with bpf_sys.Resources() as owned:
        procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 8, "t_procs"))
        rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 100, "t_rows"))
        loader = TableLoader(rows, procs, 100)
        table = loader._table  # what load_process calls per mapping
        assert table(("", b"a"), "a") == (0, 40) and table(("", b"b"), "b") == (40, 40)
        loader._release(("", b"a"))
        loader._release(("", b"b"))
        assert list(loader.retired) == [("", b"a"), ("", b"b")]
        assert table(("", b"b"), "b") == (40, 40)  # taken back in place
        loader._release(("", b"b"))
        assert table(("", b"c"), "c") == (0, 70)  # a's and b's rooms, both freed for it
        assert not loader.retired and not loader.overflowed
        assert table(("", b"huge"), "huge")[0] < 0 and loader.overflowed == {"": 200}
        assert ("", b"huge") not in loader.tables  # not remembered as tableless


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_the_finder_forgets_binaries_retired_long_ago(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorder running for hours meets thousands of binaries: the finder keeps the
    image and table of those in use and of the latest few retired ones only."""
    from pysframe.record import bpf_sys
    from pysframe.record.tables import TableLoader
    from pysframe.record.walker import PROCS_VALUE, ROW

    monkeypatch.setattr("pysframe.record.tables.KEPT_RETIRED", 2)
    monkeypatch.setattr("pysframe.record.tables.module_rows", lambda module, build_id=None: (
        np.arange(4, dtype=np.uint64), np.zeros(4, np.uint64), None))
    forgotten: list[str] = []

    class Finder:
        def forget(self, path: str, build_id: bytes | None = None) -> None:
            forgotten.append(path)

    with bpf_sys.Resources() as owned:
        procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 8, "t_procs"))
        rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 100, "t_rows"))
        loader = TableLoader(rows, procs, 100, finder=Finder())  # type: ignore[arg-type]
        for name in "abcd":
            key = ("", name.encode())
            loader._table(key, name)
            loader.finder_paths[key] = {f"/bin/{name}"}
        for name in "abc":
            loader._release(("", name.encode()))
        assert forgotten == ["/bin/a"]  # b and c: the latest two retired
        assert loader._table(("", b"b"), "b") == (4, 4)  # rows still in place
        loader.kept_retired.pop(("", b"b"), None)  # what load_process does when in use
        loader._release(("", b"d"))
        assert forgotten == ["/bin/a"]  # c and d kept
        loader._release(("", b"b"))
        assert forgotten == ["/bin/a", "/bin/c"]


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_the_recorder_generates_and_flattens_in_a_helper_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an empty cache, the recorder's loader has a binary's table generated and its
    rows flattened in a helper process (this one would keep the memory it takes), then
    loads them from the cache: neither is done here."""
    from pysframe.record import bpf_sys
    from pysframe.record.tables import TableLoader, _key
    from pysframe.record.walker import PROCS_VALUE, ROW

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    binary = _spin(tmp_path)

    def not_here(*_: object, **__: object) -> None:
        raise AssertionError("made in the recorder's own process")

    monkeypatch.setattr("pysframe.unwind.flat_cache.flatten", not_here)
    monkeypatch.setattr("pysframe.session.tables.table_for", not_here)
    with bpf_sys.Resources() as owned:
        procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 8, "t_procs"))
        rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 1 << 16,
                                            "t_rows"))
        loader = TableLoader(rows, procs, 1 << 16)
        try:
            module = loader.finder.module(str(binary), None, 0, 0)
            assert module is not None and module.lookup is not None
            first, count = loader._table(_key(module), module)
        finally:
            loader.finder.tables.close()  # type: ignore[attr-defined]
    assert first >= 0 and count > 0


def test_the_generation_helper_names_itself_apart_from_the_workload() -> None:
    """The helper a recorder starts to generate tables is named ``sframe-gen`` (not
    ``python``), so a system-wide profile tells it from the workload's Python processes."""
    from pysframe.session.background import _HELPER, HELPER_NAME

    naming = _HELPER.split("from pysframe")[0]  # the helper's first lines, then its name
    shown = subprocess.run([sys.executable, "-c",
                            naming + "print(open('/proc/self/comm').read().strip())"],
                           capture_output=True, text=True, check=True, timeout=60)
    assert shown.stdout.strip() == HELPER_NAME == "sframe-gen"


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_idle_processes_lend_their_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows map is full and a busy machine starts a compiler whose table fits nowhere:
    the tables of processes that had no sample lately lend it their rows. Their entries
    are written without them first (the walker never reads rows being replaced); a
    process starting up, or one sampled lately, keeps its tables; after LEND_S the
    lenders get theirs back where there is room."""
    from pysframe.record import bpf_sys
    from pysframe.record import tables as tables_module
    from pysframe.record.tables import TableLoader
    from pysframe.record.walker import MAPPING, PROCS_VALUE, ROW
    from pysframe.sources.live import MapEntry

    sizes = {"idle": 60, "busy": 30, "cc1": 50}
    maps = {1: ["idle"], 2: ["busy"], 3: ["cc1"]}
    monkeypatch.setattr(tables_module, "module_rows", lambda module, build_id=None: (
        np.arange(sizes[module.name], dtype=np.uint64), np.zeros(sizes[module.name], np.uint64),
        None))
    monkeypatch.setattr(tables_module, "read_maps", lambda pid, executable=False: [
        MapEntry(0x1000 * (i + 1), 0x1000 * (i + 2), "r-xp", 0, f"/bin/{name}")
        for i, name in enumerate(maps[pid])])
    clock = [1000.0]
    monkeypatch.setattr("pysframe.record.tables.time.monotonic", lambda: clock[0])

    class Image:
        def __init__(self, name: str) -> None:
            self.name = name

        def build_id(self) -> bytes:
            return self.name.encode()

    class Module:
        def __init__(self, name: str) -> None:
            self.name, self.path, self.image, self.bias = name, f"/bin/{name}", Image(name), 0

    class Finder:
        def module(self, path: str, *_: object) -> Module:
            return Module(os.path.basename(path))

        def forget(self, path: str, build_id: bytes | None = None) -> None:
            pass

    def entry_tables(procs: bpf_sys.Fd, pid: int) -> list[int]:
        value = bpf_sys.map_lookup(procs, pid.to_bytes(4, "little"), PROCS_VALUE)
        assert value is not None
        count = int.from_bytes(value[:4], "little")
        return [MAPPING.unpack_from(value, 8 + i * MAPPING.size)[4] for i in range(count)]

    sampled = {2}
    with bpf_sys.Resources() as owned:
        procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 8, "t_procs"))
        rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 100, "t_rows"))
        loader = TableLoader(rows, procs, 100, finder=Finder())  # type: ignore[arg-type]
        loader.recently_sampled = lambda pid: pid in sampled
        assert loader.load_process(1) == 1 and loader.load_process(2) == 1  # 90 rows used
        assert loader.load_process(3) == 0  # 50 rows: no room, idle is only starting up
        assert loader.lent_tables == 0 and entry_tables(procs, 1) == [60]
        clock[0] += tables_module.IDLE_S  # idle has had no sample since; busy has
        assert loader.load_process(3) == 1
        assert loader.lent == {("", b"idle"): clock[0]} and loader.lent_tables == 1
        assert entry_tables(procs, 1) == [] and entry_tables(procs, 2) == [30]
        assert entry_tables(procs, 3) == [50]
        assert loader.load_process(1) == 0  # still lent: uncovered
        clock[0] += tables_module.LEND_S
        maps[3] = []  # the compiler is done: its rows are retired, room for idle's
        loader.load_process(3)
        loader.sweep()  # gives the lent table back
        assert not loader.lent and entry_tables(procs, 1) == [60]


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_while_sampling_a_missing_table_is_generated_in_the_background(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once sampling runs, a process whose binary has no table in the cache gets its entry
    at once, without that binary (its code copies the stack), while the helper generates
    the table; when it is done the process is named as waiting, and its entry written
    again has the table. Nothing waits for the generation on the way."""
    import threading

    from pysframe.record import bpf_sys
    from pysframe.record.tables import TableLoader
    from pysframe.record.walker import PROCS_VALUE, ROW

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with _spinning(tmp_path) as (binary, spin):
        with bpf_sys.Resources() as owned:
            procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 8,
                                                 "t_procs"))
            rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 1 << 17,
                                                "t_rows"))
            loader = TableLoader(rows, procs, 1 << 17)
            generated = loader.finder.tables
            assert isinstance(generated, GeneratedTables)
            done = threading.Event()
            generated.later.on_ready = done.set
            generated.background = True
            try:
                assert loader.load_process(spin.pid) == 0  # nothing cached: none yet
                assert loader.waits_for_tables(spin.pid)
                waited_for = set(loader.generating)
                assert os.path.realpath(binary) in waited_for
                assert done.wait(120)
                ready: list[int] = []
                deadline = time.monotonic() + 300
                while loader.generating and time.monotonic() < deadline:
                    ready += loader.tables_ready()  # (each generation calls on_ready)
                    time.sleep(0.1)
                assert ready and set(ready) == {spin.pid} and not loader.generating
                assert not loader.waits_for_tables(spin.pid)
                assert loader.load_process(spin.pid) >= 2  # the program and libc now
            finally:
                generated.close()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_a_mappings_resolved_path_is_kept_by_its_file(tmp_path: Path) -> None:
    """A mapping's path is resolved once per file (path, device, inode): a link that
    comes to name another file maps another inode, and is resolved again."""
    from pysframe.record import bpf_sys
    from pysframe.record.tables import TableLoader
    from pysframe.record.walker import PROCS_VALUE, ROW
    from pysframe.sources.live import MapEntry

    first, second = tmp_path / "first", tmp_path / "second"
    first.write_bytes(b"1")
    second.write_bytes(b"2")
    link = tmp_path / "link"
    link.symlink_to(first)
    with bpf_sys.Resources() as owned:
        procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 8, "t_procs"))
        rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 100, "t_rows"))
        loader = TableLoader(rows, procs, 100)

        def entry() -> MapEntry:
            status = os.stat(link)
            return MapEntry(0x1000, 0x2000, "r-xp", 0, str(link), status.st_dev, status.st_ino)

        assert loader._real_path(entry()) == str(first)
        was = entry()
        link.unlink()
        link.symlink_to(second)
        assert loader._real_path(was) == str(first)  # the same file: kept
        assert loader._real_path(entry()) == str(second)  # another file: resolved again


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_a_mappable_rows_map_holds_what_the_batch_update_writes(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """The recorder's rows map is mappable (tables written in one copy through a mapping
    of their pages); what the kernel's lookup then reads, row by row, is what an element-
    by-element update of a plain map gives, at an offset that is not page-aligned."""
    from pysframe.record import bpf_sys
    from pysframe.record.tables import TableLoader
    from pysframe.record.walker import PROCS_VALUE, ROW

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with _spinning(tmp_path) as (_, child):
        with bpf_sys.Resources() as owned:
            loaders = []
            for flags in (0, bpf_sys.MAP_F_MMAPABLE):
                procs = owned.own(bpf_sys.map_create(bpf_sys.MAP_HASH, 4, PROCS_VALUE, 64, "t_procs"))
                rows = owned.own(bpf_sys.map_create(bpf_sys.MAP_ARRAY, 4, ROW.size, 1 << 17,
                                                    "t_rows", flags))
                loader = TableLoader(rows, procs, 1 << 17, rows_mappable=bool(flags))
                loader.used = 77  # the first table starts mid-page
                assert loader.load_process(child.pid) >= 2
                loaders.append(loader)
            batch, mapping = loaders
            assert batch.tables == mapping.tables and mapping.used > 77 + 1000
            ends = [76, 77, 78, 255, 256, 257, mapping.used - 1, mapping.used]
            for index in [*ends, *range(0, mapping.used, 61)]:
                key = index.to_bytes(4, "little")
                assert (bpf_sys.map_lookup(mapping.rows, key, ROW.size)
                        == bpf_sys.map_lookup(batch.rows, key, ROW.size)), index
            assert bpf_sys.map_lookup(mapping.rows, (77).to_bytes(4, "little"), ROW.size) != bytes(16)

"""``sframe report`` on recordings made here (a small C program, with symbols and
stripped), checked against perf and read back with readers that are not ours: pprof by
the protobuf runtime from pprof's own ``profile.proto`` (compiled by protoc here) and by
``go tool pprof``, speedscope by the schema's rules, the SVG by an XML parser, node for
the flame graph's search logic and the system's Chromium (driven by Playwright) for the
page as a person uses it. The oracles are found by ``tests/support/oracles.py``: missing,
a test skips with one line, and fails under ``CI=true``."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.support.oracles import missing, need_browser, need_go, need_perf
from tests.support.profile_readers import (
    check_speedscope_schema,
    elf_build_id,
    go_pprof,
    perf_build_ids,
    profile_message_class,
    raw_mappings,
    read_pprof,
    report_output,
)

from pysframe.report.flamegraph import flame_graph_svg
from pysframe.report.profiles import Location, Profile, StackKey
from pysframe.report.speedscope import speedscope
from pysframe.sources.perf_data import open_perf_data

REPO = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"

PROGRAM = r"""
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noipa)) static void leaf_hot(unsigned long n)
{ for (unsigned long i = 0; i < n; i++) sink += i * i; }
__attribute__((noipa)) static void middle_one(void) { leaf_hot(200000); }
__attribute__((noipa)) static void middle_two(void) { leaf_hot(100000); }
int main(int argc, char **argv)
{
  double seconds = argc > 1 ? atof(argv[1]) : 0.5, spent;
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    middle_one(); middle_two();
    clock_gettime(CLOCK_MONOTONIC, &now);
    spent = (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
  } while (spent < seconds);
  return 0;
}
"""
#: An argument that needs quoting and escaping in the title.
ODD_ARGUMENT = "a b<&>\"'"
#: The binary each recording runs.
PROGRAMS = {"symbols": "prog", "stripped": "prog_stripped"}


class Recording:
    """A perf recording of the program, perf's own text of it and our reports."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.data = directory / f"{name}.data"
        self.outputs: dict[str, bytes] = {}
        self.perf_text = ""

    def report(self, form: str) -> bytes:
        if form not in self.outputs:
            self.outputs[form] = report_output(self.data, self.directory / f"{self.name}.{form}", form)
        return self.outputs[form]

    def perf_headers(self) -> list[tuple[float, int]]:
        """(time, period) of every sample perf prints."""
        return [(float(match[1]), int(match[2])) for match in re.finditer(
            r"^\S.*? ([0-9]+\.[0-9]+): +([0-9]+) cpu-clock:", self.perf_text, re.M)]


def _record(directory: Path, name: str, binary: Path) -> Recording:
    recording = Recording(directory, name)
    # perf 6.1 aborts about one run in two (exit 134: "assertion failed at
    # util/build-id.c:1010", then "stack smashing detected") while sframe record's BPF
    # programs are loaded, --no-bpf-event or not (perf 7.2 does not): a failed recording
    # fails under CI=true, where nothing else runs and the record tests unload theirs.
    try:
        subprocess.run(["perf", "record", "-q", "-N", "--no-bpf-event", "-e", "cpu-clock",
                        "-F", "999", "--call-graph", "dwarf", "-o", str(recording.data), "--",
                        str(binary), "0.4", ODD_ARGUMENT], check=True, capture_output=True,
                       timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        missing(f"a perf that can record here ({str(error).splitlines()[0]})",
                "run as root, or sysctl kernel.perf_event_paranoid=-1")
    recording.perf_text = subprocess.run(
        ["perf", "script", "--no-inline", "-i", str(recording.data)], check=True,
        capture_output=True, text=True, timeout=120).stdout
    return recording


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Recording]:
    """The program recorded twice: built with symbols, and stripped."""
    need_perf()
    if shutil.which("gcc") is None:
        missing("gcc", "apt-get install gcc")
    directory = tmp_path_factory.mktemp("report")
    source = directory / "prog.c"
    source.write_text(PROGRAM)
    binary, stripped = directory / "prog", directory / "prog_stripped"
    subprocess.run(["gcc", "-O2", "-fno-optimize-sibling-calls", "-o", str(binary), str(source)], check=True)
    subprocess.run(["strip", "-o", str(stripped), str(binary)], check=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(directory / "cache"))
        recorded = {"symbols": _record(directory, "symbols", binary),
                    "stripped": _record(directory, "stripped", stripped)}
        for recording in recorded.values():  # while the private cache is in place
            for form in ("folded", "speedscope", "svg", "pprof"):
                recording.report(form)
    return recorded


def folded_counts(recording: Recording) -> Counter[tuple[str, ...]]:
    counts: Counter[tuple[str, ...]] = Counter()
    for line in recording.report("folded").decode().splitlines():
        stack, count = line.rsplit(" ", 1)
        counts[tuple(stack.split(";"))] += int(count)
    return counts


# --- folded: names for frames without a symbol -----------------------------------------

def function_offsets(binary: Path) -> dict[int, str]:
    """The functions of ``binary`` (before it was stripped) by the offset in the file of
    their start."""
    from elftools.elf.elffile import ELFFile

    with open(binary, "rb") as handle:
        elf = ELFFile(handle)
        segments = [segment for segment in elf.iter_segments() if segment["p_type"] == "PT_LOAD"]
        found = {}
        for symbol in elf.get_section_by_name(".symtab").iter_symbols():
            if symbol["st_info"]["type"] != "STT_FUNC" or not symbol["st_value"]:
                continue
            value = symbol["st_value"]
            segment = next(segment for segment in segments
                           if segment["p_vaddr"] <= value < segment["p_vaddr"] + segment["p_memsz"])
            found[value - segment["p_vaddr"] + segment["p_offset"]] = symbol.name
    return found


def test_frames_without_a_symbol_are_named_by_their_functions_start(
        recordings: dict[str, Recording]) -> None:
    """The stripped program's frames are named ``prog_stripped+<offset>``, the offset in the
    file where their function starts (from .eh_frame): the offsets of the functions of the
    binary before it was stripped, one name per function, however many addresses were
    sampled in it."""
    named = folded_counts(recordings["symbols"])
    assert any(stack[-3:] == ("main", "middle_one", "leaf_hot") for stack in named)
    functions = function_offsets(recordings["symbols"].directory / "prog")
    stripped = folded_counts(recordings["stripped"])
    ours = {int(frame.partition("+")[2], 16) for stack in stripped for frame in stack
            if frame.startswith("prog_stripped+0x")}
    assert set(ours) <= set(functions), sorted(set(ours) - set(functions))
    translated = {tuple(functions[int(frame.partition("+")[2], 16)]
                        if frame.startswith("prog_stripped+0x") else frame for frame in stack)
                  for stack in stripped}
    for path in (("main", "middle_one", "leaf_hot"), ("main", "middle_two", "leaf_hot")):
        assert any(stack[-3:] == path for stack in translated), path
    # perf script printed the leaves at many addresses of leaf_hot: one node here
    perf = set(re.findall(r"^\t *([0-9a-f]+) \[unknown\] \(\S*/prog_stripped\)$",
                          recordings["stripped"].perf_text, re.M))
    assert len(perf) > len(ours) >= 4  # leaf_hot, middle_one/two, main at least
    assert "[unknown]" not in {frame for stack in stripped for frame in stack
                               if stack[0].startswith("prog")}


# --- speedscope -------------------------------------------------------------------------

def test_speedscope_is_weighted_in_nanoseconds_for_cpu_clock(
        recordings: dict[str, Recording]) -> None:
    recording = recordings["symbols"]
    document = json.loads(recording.report("speedscope"))
    check_speedscope_schema(document)
    [profile] = document["profiles"]  # one thread
    [(pid, tid)] = set(re.findall(r" (\d+)/(\d+) +[0-9]+\.[0-9]+: ", subprocess.run(
        ["perf", "script", "-F", "comm,pid,tid,time,event", "-i", str(recording.data)],
        capture_output=True, text=True, check=True, timeout=120).stdout, re.M))
    assert profile["name"] == f"prog pid: {pid} tid: {tid}"
    assert profile["unit"] == "nanoseconds"
    assert profile["endValue"] == sum(period for _, period in recording.perf_headers())
    assert {"name": "leaf_hot", "file": str(recording.directory / "prog")} in \
        document["shared"]["frames"]


def test_speedscope_counts_samples_for_other_events() -> None:
    profile = Profile(locations=[Location("f", 0x1000, None), Location("g", 0x2000, None)],
                      events=["page-faults", "cpu-clock"],
                      stacks={StackKey(0, "p", 1, 2, (0, 1)): [3, 30],
                              StackKey(1, "p", 1, 2, (1,)): [2, 2_000_000]})
    document = json.loads(speedscope(profile, "title"))
    check_speedscope_schema(document)
    faults, clock = document["profiles"]
    assert (faults["unit"], faults["weights"], faults["name"]) == \
        ("none", [3], "p pid: 1 tid: 2 (page-faults)")
    assert (clock["unit"], clock["weights"]) == ("nanoseconds", [2_000_000])
    names = [frame["name"] for frame in document["shared"]["frames"]]
    assert [names[index] for index in faults["samples"][0]] == ["g", "f"]


# --- pprof, decoded by the protobuf runtime from pprof's own profile.proto --------------

@pytest.fixture(scope="module")
def profile_class(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return profile_message_class(tmp_path_factory.mktemp("schema"))


def folded_leaves(recording: Recording) -> Counter[str]:
    leaves: Counter[str] = Counter()
    for stack, count in folded_counts(recording).items():
        leaves[stack[-1].removesuffix("_[k]")] += count
    return leaves


@pytest.mark.parametrize("name", ["symbols", "stripped"])
def test_pprof_decoded_by_the_protobuf_runtime(recordings: dict[str, Recording],
                                               profile_class: Any, name: str) -> None:
    recording = recordings[name]
    profile = read_pprof(profile_class, recording.report("pprof"))
    strings = list(profile.string_table)
    assert strings[0] == "" and len(set(strings)) == len(strings)
    assert [(strings[t.type], strings[t.unit]) for t in profile.sample_type] == \
        [("samples", "count"), ("cpu", "nanoseconds")]
    assert strings[profile.default_sample_type] == "cpu"
    assert (strings[profile.period_type.type], strings[profile.period_type.unit]) == \
        ("cpu", "nanoseconds")
    # totals: perf's sample count and periods
    headers = recording.perf_headers()
    assert all(len(sample.value) == 2 for sample in profile.sample)
    assert sum(sample.value[0] for sample in profile.sample) == len(headers)
    assert sum(sample.value[1] for sample in profile.sample) == \
        sum(period for _, period in headers)
    assert profile.period == sum(period for _, period in headers) // len(headers)
    # time and duration
    span = (headers[-1][0] - headers[0][0]) * 1e9
    assert abs(profile.duration_nanos - span) <= 2000  # perf prints microseconds
    written = os.stat(recording.data).st_mtime_ns
    assert written - 60 * 10**9 < profile.time_nanos <= written
    # the title as the one comment
    assert [strings[index] for index in profile.comment] == \
        [shlex.join(open_perf_data(str(recording.data)).cmdline)]
    # labels: the command, pid and tid perf prints (perf script's default shows the tid)
    perf_tasks = set(re.findall(r"^(\S.*?) +(\d+) +[0-9]+\.[0-9]+: +[0-9]+ cpu-clock:",
                                recording.perf_text, re.M))
    ours = set()
    for sample in profile.sample:
        labels = {strings[label.key]: label for label in sample.label}
        assert set(labels) == {"comm", "pid", "tid"}
        assert labels["pid"].num == labels["tid"].num  # one thread
        ours.add((strings[labels["comm"].str], str(labels["tid"].num)))
    assert ours == perf_tasks
    # mappings: ids from 1, the program first, build ids as perf lists them
    mappings = {mapping.id: mapping for mapping in profile.mapping}
    assert sorted(mappings) == list(range(1, len(mappings) + 1))
    assert strings[mappings[1].filename].endswith(f"/{PROGRAMS[name]}")
    build_ids = perf_build_ids(recording.data)
    for mapping in profile.mapping:
        filename, build_id = strings[mapping.filename], strings[mapping.build_id]
        assert mapping.memory_start < mapping.memory_limit
        assert not mapping.has_filenames and not mapping.has_line_numbers
        if filename in build_ids:  # perf lists the files its samples' addresses are in
            assert build_id == build_ids[filename], (filename, build_id)
        else:  # a file only in callchains (libc): the file's own
            assert build_id == elf_build_id(filename), filename
    assert strings[mappings[1].build_id]  # the program's, and the kernel's when it is there
    # functions and locations: every reference resolves, every address is in its mapping
    functions = {function.id: function for function in profile.function}
    assert len(functions) == len(profile.function) and 0 not in functions
    for function in profile.function:
        assert strings[function.name] and strings[function.system_name] == strings[
            function.name]
    locations = {location.id: location for location in profile.location}
    assert sorted(locations) == list(range(1, len(locations) + 1))
    made_up: dict[int, bool] = {}  # mapping id -> whether a frame in it has a made-up name
    for location in profile.location:
        assert len(location.line) == 1 and location.line[0].function_id in functions
        if location.mapping_id:
            mapping = mappings[location.mapping_id]
            assert mapping.memory_start <= location.address < mapping.memory_limit
            function = strings[functions[location.line[0].function_id].name]
            made_up[location.mapping_id] = made_up.get(location.mapping_id, False) or (
                function.startswith("[") or re.search(r"\+0x[0-9a-f]+$", function) is not None)
    # has_functions: every frame in the mapping named from a symbol
    assert {number: mappings[number].has_functions for number in made_up} == \
        {number: not made_up[number] for number in made_up}
    assert mappings[1].has_functions == (name == "symbols")
    folded_names = {frame.removesuffix("_[k]") for stack in folded_counts(recording)
                    for frame in stack}
    used = {strings[functions[line.function_id].name] for location in profile.location
            for line in location.line}
    assert used == folded_names - {stack[0] for stack in folded_counts(recording)}
    # leaf functions as in the folded output
    leaves: Counter[str] = Counter()
    for sample in profile.sample:
        assert all(location_id in locations for location_id in sample.location_id)
        leaf = locations[sample.location_id[0]]
        leaves[strings[functions[leaf.line[0].function_id].name]] += sample.value[0]
    assert leaves == folded_leaves(recording)


@pytest.mark.parametrize("name", ["symbols", "stripped"])
def test_go_tool_pprof_reads_it(recordings: dict[str, Recording], name: str) -> None:
    go = need_go()
    recording = recordings[name]
    path = str(recording.directory / f"{name}.pprof")
    every = ("-nodecount=1000000", "-nodefraction=0", "-edgefraction=0")
    headers = recording.perf_headers()
    # totals and top functions, by sample count and by CPU time
    counts = go_pprof(go, "-top", "-sample_index=samples", *every, path)
    program = PROGRAMS[name]
    assert "Type: samples" in counts and f"File: {program}\n" in counts
    assert re.search(rf"of {len(headers)} total", counts), counts
    flat = {match[2]: int(match[1]) for match in re.finditer(
        r"^ +(\d+) +[\d.]+% +[\d.]+% +\d+ +[\d.]+% +(.+)$", counts, re.M)}
    leaves = folded_leaves(recording)
    assert {function: count for function, count in flat.items() if count} == dict(leaves)
    top = next(iter(flat))  # -top lists by flat value, largest first
    assert leaves[top] == max(leaves.values())
    if name == "symbols":
        assert top == "leaf_hot" and flat["leaf_hot"] >= 0.5 * len(headers)
    cpu = go_pprof(go, "-top", "-sample_index=cpu", "-unit=ns", *every, path)
    assert re.search(rf"of {sum(period for _, period in headers)}ns total", cpu), cpu
    # mappings with build ids, and every location inside its mapping (pprof's -raw)
    raw = go_pprof(go, "-raw", path)
    assert "samples/count cpu/nanoseconds[dflt]" in raw
    mappings = raw_mappings(raw)
    build_ids = perf_build_ids(recording.data)
    assert {filename: build_id for _, _, filename, build_id in mappings.values()} == {
        filename: build_ids.get(filename) or elf_build_id(filename)
        for _, _, filename, _ in mappings.values()}
    assert mappings[1][2].endswith(f"/{program}") and mappings[1][3] == build_ids[
        mappings[1][2]]
    located = re.findall(r"^ +\d+: 0x([0-9a-f]+) M=(\d+) ", raw, re.M)
    assert located
    for address, mapping_id in located:
        start, limit, _, _ = mappings[int(mapping_id)]
        assert start <= int(address, 16) < limit


# --- the SVG flame graph ----------------------------------------------------------------

def test_svg_title_tooltips_and_nothing_fetched(recordings: dict[str, Recording]) -> None:
    recording = recordings["symbols"]
    text = recording.report("svg").decode()
    root = ElementTree.fromstring(text)
    cmdline = open_perf_data(str(recording.data)).cmdline
    title = root.find(f"{SVG}text[@id='title']")
    assert title is not None and title.find(f"{SVG}title").text == shlex.join(cmdline)  # type: ignore[union-attr]
    assert shlex.join(cmdline).startswith((title.text or "").removesuffix("..."))
    assert cmdline[-1] == ODD_ARGUMENT and "&lt;&amp;&gt;" in text
    frames = root.findall(f"{SVG}g[@class='f']")
    total = sum(folded_counts(recording).values())
    tooltip = re.compile(r"^(.+) \(([\d,]+) samples?, ([\d.]+)%\)$")
    for frame in frames:
        match = tooltip.match(frame.find(f"{SVG}title").text or "")  # type: ignore[union-attr]
        assert match and match[1] == frame.get("data-n")
        assert float(match[3]) == pytest.approx(100 * int(match[2].replace(",", "")) / total,
                                                abs=0.006)
    assert frames[0].get("data-n") == "all"
    assert f"({total:,} samples, 100.00%)" in frames[0].find(f"{SVG}title").text  # type: ignore[union-attr, operator]
    assert any(frame.get("data-n") == "leaf_hot" for frame in frames)
    # self-contained: no link, image or stylesheet from elsewhere
    assert not re.search(r"(href|src)=|@import|url\(", text)
    assert re.findall(r"https?://[^\"' ]+", text) == ["http://www.w3.org/2000/svg"]


def test_svg_of_hostile_names_is_well_formed_xml() -> None:
    names = ("p\x01<&>\"'", "f\ud800\uffff]]>", "g\x1b[31m")
    text = flame_graph_svg(Counter({names: 3, names[:2]: 1}), "perf record -- ./x \x00 ]]>")
    root = ElementTree.fromstring(text)
    assert [frame.get("data-n") for frame in root.findall(f"{SVG}g[@class='f']")] == \
        ["all", "p\\x01<&>\"'", "f\\ud800\\uffff]]>", "g\\x1b[31m"]
    assert root.find(f"{SVG}text[@id='title']/{SVG}title").text == \
        "perf record -- ./x \\x00 ]]>"  # type: ignore[union-attr]


def expected_share(counts: Counter[tuple[str, ...]], pattern: str) -> float:
    """The share of samples with a frame matching ``pattern`` (the root is "all")."""
    regex = re.compile(pattern)
    matched = sum(count for stack, count in counts.items()
                  if any(regex.search(frame) for frame in ("all", *stack)))
    return matched / sum(counts.values())


def test_svg_search_logic_runs_in_node(recordings: dict[str, Recording]) -> None:
    node = shutil.which("node")
    if node is None:  # a JavaScript engine no one here wrote: skips, fails under CI=true
        missing("node", "apt-get install nodejs")
    recording = recordings["symbols"]
    text = recording.report("svg").decode()
    script = re.search(r"<script><!\[CDATA\[(.*)\]\]></script>", text, re.S)
    assert script is not None
    root = ElementTree.fromstring(text)
    frames = [{"n": g.get("data-n"), "x": float(g.get("data-x") or 0),
               "w": float(g.get("data-w") or 0)} for g in root.findall(f"{SVG}g[@class='f']")]
    patterns = ["^leaf_hot$", "middle", "^main$|^middle_two$", "nothing matches this"]
    harness = (script[1] + f"\nvar frames = {json.dumps(frames)};\n"
               f"console.log(JSON.stringify({json.dumps(patterns)}.map(function (p) {{"
               "var r = matchFrames(frames, new RegExp(p));"
               "return [r.hits.length, r.fraction]; })));\n")
    result = subprocess.run([node, "-e", harness], capture_output=True, text=True,
                            timeout=60, check=True)
    counts = folded_counts(recording)
    for pattern, (hits, fraction) in zip(patterns, json.loads(result.stdout), strict=True):
        regex = re.compile(pattern)
        assert hits == sum(1 for frame in frames if regex.search(str(frame["n"])))
        # frames narrower than 0.1 pixel are not drawn: a few samples' worth at most
        assert fraction == pytest.approx(expected_share(counts, pattern), abs=0.002)


def test_svg_in_a_headless_browser(recordings: dict[str, Recording], tmp_path: Path) -> None:
    """bench/flamegraph_browser.py in the system's Chromium: loads without script errors,
    draws every frame, Ctrl-F highlights the frames matching the term and shows their
    share of the samples (as the folded output counts it), a click zooms, Reset Zoom and
    Escape undo."""
    python, chromium = need_browser()
    recording = recordings["symbols"]
    result = subprocess.run(
        [python, str(REPO / "bench" / "flamegraph_browser.py"), "--browser", chromium,
         "--svg", str(recording.directory / "symbols.svg"),
         "--folded", str(recording.directory / "symbols.folded"),
         "--term", "^middle_one$", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    if result.returncode == 2:
        missing(f"a Chromium that starts ({result.stdout.strip()})", "apt-get install chromium")
    assert result.returncode in (0, 1) and result.stdout.startswith("{"), \
        result.stdout + result.stderr
    results = json.loads(result.stdout)
    assert result.returncode == 0 and results["failures"] == [], result.stdout + result.stderr
    assert results["browser"].startswith("chromium ")
    assert results["highlighted"] == 1 and (tmp_path / "flamegraph-search.png").stat().st_size
    share = expected_share(folded_counts(recording), "^middle_one$")
    assert 0.3 < share < 0.9 and results["expected_share"] == pytest.approx(share)


def test_the_command_writes_pprof(recordings: dict[str, Recording], tmp_path: Path) -> None:
    """Through the command line: ``--format pprof`` is accepted and writes what
    run_report writes."""
    recording = recordings["symbols"]
    target = tmp_path / "out.pprof"
    result = subprocess.run(
        [sys.executable, "-m", "pysframe", "report", str(recording.data), "--format", "pprof",
         "-o", str(target)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "XDG_CACHE_HOME": str(recording.directory / "cache")})
    assert result.returncode == 0, result.stderr
    assert target.read_bytes() == recording.report("pprof")

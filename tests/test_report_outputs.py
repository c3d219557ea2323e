"""``sframe report`` on recordings made here (a small C program, with symbols and
stripped), checked against perf and read back with readers that are not ours: a
protobuf wire decoder written here for pprof (and ``go tool pprof`` when installed), the
speedscope schema's rules, an XML parser, node for the flame graph's search logic and a
headless Chromium (when Playwright and a Chromium are available)."""

from __future__ import annotations

import gzip
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

from pysframe.cli.script import run_report
from pysframe.report.flamegraph import flame_graph_svg
from pysframe.report.profiles import Location, Profile
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
            target = self.directory / f"{self.name}.{form}"
            messages: list[str] = []
            status = run_report(str(self.data), binaries=[], output=str(target), form=form,
                                report=messages.append)
            assert status == 0, messages
            self.outputs[form] = target.read_bytes()
        return self.outputs[form]

    def perf_headers(self) -> list[tuple[float, int]]:
        """(time, period) of every sample perf prints."""
        return [(float(match[1]), int(match[2])) for match in re.finditer(
            r"^\S.*? ([0-9]+\.[0-9]+): +([0-9]+) cpu-clock:", self.perf_text, re.M)]


def _record(directory: Path, name: str, binary: Path) -> Recording:
    recording = Recording(directory, name)
    try:
        subprocess.run(["perf", "record", "-q", "-N", "-e", "cpu-clock", "-F", "999",
                        "--call-graph", "dwarf", "-o", str(recording.data), "--", str(binary),
                        "0.4", ODD_ARGUMENT], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        pytest.skip(f"perf cannot record here: {str(error).splitlines()[0]}")
    recording.perf_text = subprocess.run(
        ["perf", "script", "--no-inline", "-i", str(recording.data)], check=True,
        capture_output=True, text=True, timeout=120).stdout
    return recording


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Recording]:
    """The program recorded twice: built with symbols, and stripped."""
    if shutil.which("perf") is None or shutil.which("gcc") is None:
        pytest.skip("perf or gcc is not installed")
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

def test_frames_without_a_symbol_are_named_by_file_and_offset(
        recordings: dict[str, Recording]) -> None:
    named = folded_counts(recordings["symbols"])
    assert any(stack[-3:] == ("main", "middle_one", "leaf_hot") for stack in named)
    stripped = folded_counts(recordings["stripped"])
    ours = {frame for stack in stripped for frame in stack
            if frame.startswith("prog_stripped+0x")}
    # perf script prints such a frame as "<offset in the file> [unknown] (<file>)"
    perf = {f"prog_stripped+{int(address, 16):#x}" for address in re.findall(
        r"^\t *([0-9a-f]+) \[unknown\] \(\S*/prog_stripped\)$", recordings["stripped"].perf_text,
        re.M)}
    assert len(ours) >= 3  # leaf_hot, middle_one/two, main at least
    assert len(ours & perf) >= 0.9 * len(ours), (sorted(ours - perf), sorted(perf))
    # leaves are the sample IPs: exactly perf's
    leaves = {stack[-1] for stack in stripped if stack[-1].startswith("prog_stripped+")}
    assert leaves <= perf
    assert "[unknown]" not in {frame for stack in stripped for frame in stack
                               if stack[0].startswith("prog")}


# --- speedscope -------------------------------------------------------------------------

#: The rules of https://www.speedscope.app/file-format-schema.json for what we write
#: (a File with shared.frames and "sampled" profiles).
UNITS = {"bytes", "microseconds", "milliseconds", "nanoseconds", "none", "seconds"}


def check_speedscope_schema(document: dict[str, Any]) -> None:
    assert document["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert isinstance(document["name"], str) and isinstance(document["exporter"], str)
    assert isinstance(document["activeProfileIndex"], int)
    frames = document["shared"]["frames"]
    for frame in frames:
        assert isinstance(frame["name"], str) and set(frame) <= {"name", "file", "line", "col"}
        assert isinstance(frame.get("file", ""), str)
    for profile in document["profiles"]:
        assert set(profile) == {"type", "name", "unit", "startValue", "endValue", "samples",
                                "weights"}
        assert profile["type"] == "sampled" and profile["unit"] in UNITS
        assert isinstance(profile["name"], str)
        assert len(profile["samples"]) == len(profile["weights"])
        assert all(0 <= index < len(frames) for stack in profile["samples"] for index in stack)
        assert all(isinstance(weight, int) and weight > 0 for weight in profile["weights"])
        assert profile["startValue"] == 0 <= profile["endValue"] == sum(profile["weights"])


def test_speedscope_is_weighted_in_nanoseconds_for_cpu_clock(
        recordings: dict[str, Recording]) -> None:
    recording = recordings["symbols"]
    document = json.loads(recording.report("speedscope"))
    check_speedscope_schema(document)
    [profile] = document["profiles"]
    assert profile["unit"] == "nanoseconds"
    assert profile["endValue"] == sum(period for _, period in recording.perf_headers())
    assert {"name": "leaf_hot", "file": str(recording.directory / "prog")} in \
        document["shared"]["frames"]


def test_speedscope_counts_samples_for_other_events() -> None:
    profile = Profile(locations=[Location("f", 0x1000, None), Location("g", 0x2000, None)],
                      events=["page-faults", "cpu-clock"],
                      stacks={(0, "p", 1, (0, 1)): [3, 30], (1, "p", 1, (1,)): [2, 2_000_000]})
    document = json.loads(speedscope(profile, "title"))
    check_speedscope_schema(document)
    faults, clock = document["profiles"]
    assert (faults["unit"], faults["weights"], faults["name"]) == \
        ("none", [3], "title (page-faults)")
    assert (clock["unit"], clock["weights"]) == ("nanoseconds", [2_000_000])
    names = [frame["name"] for frame in document["shared"]["frames"]]
    assert [names[index] for index in faults["samples"][0]] == ["p", "g", "f"]


# --- pprof, read back with a protobuf wire decoder written here --------------------------

def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, position


def decode(data: bytes) -> dict[int, list[Any]]:
    """A message's fields by number: varints as ints, length-delimited as bytes."""
    fields: dict[int, list[Any]] = {}
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        if key & 7 == 0:
            value, position = _varint(data, position)
        elif key & 7 == 2:
            size, position = _varint(data, position)
            value, position = data[position:position + size], position + size
        else:
            raise AssertionError(f"wire type {key & 7} is not used by profile.proto's writer")
        fields.setdefault(key >> 3, []).append(value)
    return fields


def ints(fields: dict[int, list[Any]], number: int) -> list[int]:
    """A repeated integer field, packed or not."""
    out: list[int] = []
    for value in fields.get(number, []):
        if isinstance(value, int):
            out.append(value)
        else:
            position = 0
            while position < len(value):
                item, position = _varint(value, position)
                out.append(item)
    return out


def one(fields: dict[int, list[Any]], number: int) -> int:
    return int(fields.get(number, [0])[-1])


def read_pprof(data: bytes) -> dict[str, Any]:
    profile = decode(gzip.decompress(data))
    strings = [value.decode() for value in profile[6]]
    functions = {one(f, 1): strings[one(f, 2)] for f in map(decode, profile.get(5, []))}
    mappings = {one(m, 1): m for m in map(decode, profile[3])}
    locations = {}
    for location in map(decode, profile[4]):
        lines = [decode(line) for line in location.get(4, [])]
        locations[one(location, 1)] = (one(location, 2), one(location, 3),
                                        [functions[one(line, 1)] for line in lines])
    return {"profile": profile, "strings": strings, "mappings": mappings,
            "locations": locations, "samples": [decode(s) for s in profile[2]],
            "types": [(strings[one(t, 1)], strings[one(t, 2)]) for t in map(decode, profile[1])]}


def test_pprof_reads_back(recordings: dict[str, Recording]) -> None:
    recording = recordings["stripped"]
    read = read_pprof(recording.report("pprof"))
    profile, strings = read["profile"], read["strings"]
    assert strings[0] == ""
    assert read["types"] == [("samples", "count"), ("cpu", "nanoseconds")]
    assert strings[one(profile, 14)] == "cpu"
    period_type = decode(profile[11][0])
    assert (strings[one(period_type, 1)], strings[one(period_type, 2)]) == ("cpu", "nanoseconds")
    headers = recording.perf_headers()
    values = [ints(sample, 2) for sample in read["samples"]]
    assert sum(value[0] for value in values) == len(headers)
    assert sum(value[1] for value in values) == sum(period for _, period in headers)
    assert one(profile, 12) == sum(period for _, period in headers) // len(headers)
    span = (headers[-1][0] - headers[0][0]) * 1e9
    assert abs(one(profile, 10) - span) <= 2000  # perf prints microseconds
    written = os.stat(recording.data).st_mtime_ns
    assert written - 60 * 10**9 < one(profile, 9) <= written
    assert strings[ints(profile, 13)[0]] == shlex.join(open_perf_data(
        str(recording.data)).cmdline)
    # the first mapping is the program, with its build id; every address is in its mapping
    first = read["mappings"][1]
    assert strings[one(first, 5)].endswith("/prog_stripped")
    build_ids = subprocess.run(["perf", "buildid-list", "-i", str(recording.data)],
                               capture_output=True, text=True, check=True).stdout
    assert f"{strings[one(first, 6)]} {strings[one(first, 5)]}" in build_ids
    for mapping_id, address, _ in read["locations"].values():
        if mapping_id:
            mapping = read["mappings"][mapping_id]
            assert one(mapping, 2) <= address < one(mapping, 3) and one(mapping, 7) == 1
    # leaf functions as in the folded output
    leaves: Counter[str] = Counter()
    for sample, value in zip(read["samples"], values, strict=True):
        leaf = read["locations"][ints(sample, 1)[0]]
        leaves[leaf[2][0]] += value[0]
    folded_leaves: Counter[str] = Counter()
    for stack, count in folded_counts(recording).items():
        folded_leaves[stack[-1].removesuffix("_[k]")] += count
    assert leaves == folded_leaves


def _go() -> str | None:
    go = shutil.which("go")
    if go is None or subprocess.run([go, "tool", "-n", "pprof"], capture_output=True,
                                    timeout=60).returncode:
        return None
    return go


@pytest.mark.skipif(_go() is None, reason="go tool pprof is not installed "
                                          "(apt-get install golang-go)")
def test_go_tool_pprof_reads_it(recordings: dict[str, Recording]) -> None:
    recording = recordings["symbols"]
    path = recording.directory / "symbols.pprof"
    top = subprocess.run([str(_go()), "tool", "pprof", "-top", "-sample_index=samples",
                          "-nodecount=100000", "-nodefraction=0", "-edgefraction=0",
                          str(path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PPROF_BINARY_PATH": "/nonexistent"})
    assert top.returncode == 0, top.stderr
    assert "Type: samples" in top.stdout and "File: prog" in top.stdout
    flat = {match[2]: int(match[1]) for match in re.finditer(
        r"^ +(\d+) +[\d.]+% +[\d.]+% +\d+ +[\d.]+% +(.+)$", top.stdout, re.M)}
    folded_leaves: Counter[str] = Counter()
    for stack, count in folded_counts(recording).items():
        folded_leaves[stack[-1].removesuffix("_[k]")] += count
    assert {name: count for name, count in flat.items() if count} == dict(folded_leaves)
    assert flat["leaf_hot"] >= 0.5 * sum(folded_leaves.values())


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


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_svg_search_logic_runs_in_node(recordings: dict[str, Recording]) -> None:
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
    result = subprocess.run(["node", "-e", harness], capture_output=True, text=True,
                            timeout=60, check=True)
    counts = folded_counts(recording)
    for pattern, (hits, fraction) in zip(patterns, json.loads(result.stdout), strict=True):
        regex = re.compile(pattern)
        assert hits == sum(1 for frame in frames if regex.search(str(frame["n"])))
        # frames narrower than 0.1 pixel are not drawn: a few samples' worth at most
        assert fraction == pytest.approx(expected_share(counts, pattern), abs=0.002)


def _browser_python() -> str | None:
    """A Python with Playwright (``$PLAYWRIGHT_PYTHON`` or this one)."""
    python = os.environ.get("PLAYWRIGHT_PYTHON", sys.executable)
    found = subprocess.run([python, "-c", "import playwright.sync_api"], capture_output=True)
    return python if found.returncode == 0 else None


@pytest.mark.skipif(_browser_python() is None,
                    reason="Playwright is not installed (set PLAYWRIGHT_PYTHON to a Python "
                           "that has it)")
def test_svg_in_a_headless_browser(recordings: dict[str, Recording], tmp_path: Path) -> None:
    recording = recordings["symbols"]
    result = subprocess.run(
        [str(_browser_python()), str(REPO / "bench" / "flamegraph_browser.py"),
         "--svg", str(recording.directory / "symbols.svg"),
         "--folded", str(recording.directory / "symbols.folded"),
         "--term", "^middle_", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    if result.returncode == 2:
        pytest.skip(f"no headless browser: {result.stdout.strip()}")
    results = json.loads(result.stdout)
    assert result.returncode == 0 and results["failures"] == [], result.stdout + result.stderr
    assert results["highlighted"] == 2 and (tmp_path / "flamegraph-search.png").stat().st_size


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

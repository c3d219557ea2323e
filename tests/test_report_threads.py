"""``sframe report`` of recordings of several threads and processes, as Go, Pyroscope and
speedscope expect them, checked against perf and read back with their own readers:

- pprof: the first mapping is the program of the busiest process (``File:`` in ``go tool
  pprof``), not a library its stacks start in; every mapping carries the build id perf
  lists for its file (``perf buildid-list``), or, for a file perf did not list (only in
  callchains), the file's own (readelf); every sample is labelled with its thread, and
  the samples per thread are perf's;
- speedscope: one profile per thread, named as speedscope's own import of ``perf script``
  names threads, each weighing what perf's samples of that thread weigh, the busiest one
  open first; and the app itself (the ``speedscope`` npm package's) in Chromium shows
  them so.

Recorded here with ``perf record -g``: a program whose three threads spin in functions of
their own, and a shell pipeline of five processes (sh, three gzip, wc) where gzip, stripped
in Debian, is named by module (``gzip+0x...``, ``[gzip]``).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.support.oracles import missing, need_browser, need_go, need_speedscope
from tests.support.parity import recording_directory
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

SUPPORT = Path(__file__).resolve().parent / "support"

PROGRAM = r"""
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
static double seconds = 0.3;
static double elapsed(const struct timespec *start)
{
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - start->tv_sec) + (now.tv_nsec - start->tv_nsec) / 1e9;
}
#define SPINNER(name, step) \
  __attribute__((noipa)) static void name(void) { \
    struct timespec start; clock_gettime(CLOCK_MONOTONIC, &start); \
    do { for (unsigned long i = 0; i < 100000; i++) sink += i * step; } \
    while (elapsed(&start) < seconds); }
SPINNER(spin_alpha, 3)
SPINNER(spin_beta, 5)
SPINNER(spin_gamma, 7)
static void *run(void *work) { ((void (*)(void))work)(); return NULL; }
int main(int argc, char **argv)
{
  pthread_t threads[3];
  void (*work[3])(void) = {spin_alpha, spin_beta, spin_gamma};
  if (argc > 1) seconds = atof(argv[1]);
  for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, run, (void *)work[i]);
  for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
  return 0;
}
"""
GZIP = "/usr/bin/gzip"


@dataclass
class Thread:
    """What perf script shows of one thread's samples."""

    samples: int = 0
    period: int = 0
    comms: Counter[str] = field(default_factory=Counter)
    leaves: Counter[str] = field(default_factory=Counter)


@dataclass
class Recording:
    """A perf recording, its main program (the path perf recorded), perf's view of its
    threads, and our reports of it."""

    data: Path
    program: str
    threads: dict[tuple[int, int], Thread]
    outputs: dict[str, bytes] = field(default_factory=dict)

    def report(self, form: str) -> bytes:
        if form not in self.outputs:
            self.outputs[form] = report_output(self.data, self.data.with_suffix(f".{form}"), form)
        return self.outputs[form]

    def busiest(self) -> set[tuple[int, int]]:
        """The threads with the most samples (more than one when they tie)."""
        most = max(thread.samples for thread in self.threads.values())
        return {key for key, thread in self.threads.items() if thread.samples == most}


def perf_threads(data: Path) -> dict[tuple[int, int], Thread]:
    """(pid, tid) -> the thread's samples as ``perf script`` prints them: count, summed
    period, commands, leaf functions."""
    text = subprocess.run(["perf", "script", "-F", "comm,pid,tid,period,ip,sym", "-i",
                           str(data)], capture_output=True, text=True, check=True,
                          timeout=300).stdout
    threads: dict[tuple[int, int], Thread] = defaultdict(Thread)
    for block in text.split("\n\n"):
        lines = block.strip("\n").splitlines()
        header = re.match(r"^ *(\S.*?) +(\d+)/(\d+) +(\d+) *$", lines[0]) if lines else None
        if header is None:
            continue
        thread = threads[int(header[2]), int(header[3])]
        thread.samples += 1
        thread.period += int(header[4])
        thread.comms[header[1]] += 1
        leaf = re.match(r"^\s+[0-9a-f]+ (.*)$", lines[1]) if len(lines) > 1 else None
        thread.leaves[leaf[1] if leaf else ""] += 1
    return dict(threads)


def _record(directory: Path, name: str, command: list[str], program: str) -> Recording:
    data = directory / f"{name}.data"
    try:  # perf 6.1 can abort while BPF programs are loaded (see test_report_outputs)
        subprocess.run(["perf", "record", "-q", "-N", "--no-bpf-event", "-e", "cpu-clock",
                        "-F", "999", "-g", "-o", str(data), "--", *command], check=True,
                       capture_output=True, timeout=120, cwd=directory)
    except (OSError, subprocess.SubprocessError) as error:
        missing(f"a perf that can record here ({str(error).splitlines()[0]})",
                "run as root, or sysctl kernel.perf_event_paranoid=-1")
    return Recording(data, program, perf_threads(data))


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Recording]:
    _, directory = recording_directory(tmp_path_factory, "threads")
    if shutil.which("gcc") is None:
        missing("gcc", "apt-get install gcc")
    if not Path(GZIP).is_file():
        missing("gzip", "apt-get install gzip")
    (directory / "threads.c").write_text(PROGRAM)
    binary = directory / "threads"
    subprocess.run(["gcc", "-O2", "-fno-omit-frame-pointer", "-pthread", "-o", str(binary),
                    str(directory / "threads.c")], check=True)
    words = random.Random(27).choices([b"stack", b"frame", b"unwind", b"sframe", b"\n"],
                                      k=1_000_000)
    (directory / "input.txt").write_bytes(b" ".join(words))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(directory / "cache"))
        recorded = {
            "threads": _record(directory, "threads", [str(binary), "0.3"], str(binary)),
            "pipeline": _record(directory, "pipeline", [
                "sh", "-c", "gzip -9 -c input.txt | gzip -d -c | gzip -1 -c | wc -c"], GZIP),
        }
        for recording in recorded.values():  # while the private cache is in place
            for form in ("pprof", "speedscope"):
                recording.report(form)
    return recorded


def test_the_recordings_are_what_the_tests_need(recordings: dict[str, Recording]) -> None:
    """Three busy threads in one process; five processes in the pipeline, gzip -9 the
    busiest (so the first program exec'd, sh, is not the main one). (With four, gzip -d
    and wc had so little work that one CI run sampled only two of them.)"""
    threads = recordings["threads"].threads
    busy = [thread for thread in threads.values() if thread.samples >= 20]
    assert len(busy) == 3 and len({pid for pid, _ in threads}) == 1, threads
    assert {thread.leaves.most_common(1)[0][0] for thread in busy} == \
        {"spin_alpha", "spin_beta", "spin_gamma"}
    pipeline = recordings["pipeline"]
    assert len({pid for pid, _ in pipeline.threads}) >= 3, pipeline.threads
    assert {pipeline.threads[thread].comms.most_common(1)[0][0]
            for thread in pipeline.busiest()} == {"gzip"}


# --- pprof ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def profile_class(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return profile_message_class(tmp_path_factory.mktemp("schema"))


def made_up(name: str) -> bool:
    """A name for a frame without a symbol: ``[file]`` or ``file+0xoffset``."""
    return name.startswith("[") or re.search(r"\+0x[0-9a-f]+$", name) is not None


@pytest.mark.parametrize("name", ["threads", "pipeline"])
def test_go_tool_pprof_names_the_program(recordings: dict[str, Recording], name: str) -> None:
    """``File:`` is the busiest process's program; mapping 1 is its file with perf's build
    id; every mapping's build id is perf's (or the file's own); locations lie in their
    mappings, and the program's functions (named or not) in mapping 1."""
    go = need_go()
    recording = recordings[name]
    path = str(recording.data.with_suffix(".pprof"))
    top = go_pprof(go, "-top", "-sample_index=samples", path)
    assert f"File: {Path(recording.program).name}\n" in top, top
    build_ids = perf_build_ids(recording.data)
    assert f"Build ID: {build_ids[recording.program]}\n" in top, top
    raw = go_pprof(go, "-raw", path)
    mappings = raw_mappings(raw)
    assert mappings[1][2:] == (recording.program, build_ids[recording.program])
    for _, _, filename, build_id in mappings.values():
        assert build_id == (build_ids.get(filename) or elf_build_id(filename)), filename
    located = re.findall(r"^ +\d+: 0x([0-9a-f]+) M=(\d+) (\S+)", raw, re.M)
    assert located
    program = Path(recording.program).name
    for address, mapping_id, function in located:
        start, limit, filename, _ = mappings[int(mapping_id)]
        assert start <= int(address, 16) < limit
        if function.startswith(("spin_", f"{program}+0x", f"[{program}]")):
            assert mapping_id == "1", (function, filename)


@pytest.mark.parametrize("name", ["threads", "pipeline"])
def test_pprof_mappings_and_threads(recordings: dict[str, Recording], profile_class: Any,
                                    name: str) -> None:
    """Decoded by the protobuf runtime: mapping 1 is the program; has_functions says
    whether every frame in a mapping was named from a symbol (gzip's are not: item 5's
    names per module); no mapping claims file names or line numbers; the samples per
    thread (label ``tid``) are perf's."""
    recording = recordings[name]
    profile = read_pprof(profile_class, recording.report("pprof"))
    strings = list(profile.string_table)
    mappings = {mapping.id: mapping for mapping in profile.mapping}
    assert profile.mapping[0].id == 1 and strings[mappings[1].filename] == recording.program
    functions = {function.id: strings[function.name] for function in profile.function}
    named: dict[int, bool] = {}
    for location in profile.location:
        if location.mapping_id:
            function = functions[location.line[0].function_id]
            named[location.mapping_id] = named.get(location.mapping_id, True) and \
                not made_up(function)
    for number, mapping in mappings.items():
        assert not mapping.has_filenames and not mapping.has_line_numbers
        assert mapping.has_functions == named.get(number, False), strings[mapping.filename]
    if name == "pipeline":  # stripped: named by module, never by address alone
        gzip_names = {functions[location.line[0].function_id] for location in profile.location
                      if location.mapping_id == 1}
        assert gzip_names and all(re.fullmatch(r"gzip\+0x[0-9a-f]+|\[gzip\]", function)
                                  for function in gzip_names), gzip_names
        assert not mappings[1].has_functions
    per_thread: Counter[tuple[int, int]] = Counter()
    for sample in profile.sample:
        labels = {strings[label.key]: label.num for label in sample.label if label.num}
        per_thread[labels["pid"], labels["tid"]] += sample.value[0]
    assert per_thread == {thread: perf.samples for thread, perf in recording.threads.items()}


# --- speedscope -------------------------------------------------------------------------

def thread_names(recording: Recording) -> dict[tuple[int, int], str]:
    """Each thread's profile name, as speedscope names the threads of perf script text
    (the command the thread ran the most samples as)."""
    return {(pid, tid): f"{thread.comms.most_common(1)[0][0]} pid: {pid} tid: {tid}"
            for (pid, tid), thread in recording.threads.items()}


@pytest.mark.parametrize("name", ["threads", "pipeline"])
def test_speedscope_has_a_profile_per_thread(recordings: dict[str, Recording],
                                             name: str) -> None:
    recording = recordings[name]
    document = json.loads(recording.report("speedscope"))
    check_speedscope_schema(document)
    assert document["exporter"] == "pysframe"
    names = thread_names(recording)
    profiles = {profile["name"]: profile for profile in document["profiles"]}
    assert len(profiles) == len(document["profiles"]) and set(profiles) == set(names.values())
    for thread, perf in recording.threads.items():
        profile = profiles[names[thread]]
        assert (profile["unit"], profile["endValue"]) == ("nanoseconds", perf.period)
    active = document["profiles"][document["activeProfileIndex"]]
    assert active["name"] in {names[thread] for thread in recording.busiest()}


def shown_nanoseconds(text: str) -> float:
    """A duration as speedscope shows it (``248.25ms``) in nanoseconds."""
    found = re.fullmatch(r"([0-9.]+)(ns|µs|ms|s)", text)
    assert found, text
    return float(found[1]) * {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[found[2]]


def test_speedscope_shows_the_threads_in_chromium(recordings: dict[str, Recording]) -> None:
    """The speedscope app (npm's) in Chromium opens the file without errors, lists one
    profile per thread with perf's time for it, opens the busiest thread first, and its
    Sandwich view puts that thread's spinning function at the top."""
    python, chromium = need_browser()
    app = need_speedscope()
    recording = recordings["threads"]
    recording.report("speedscope")
    result = subprocess.run(
        [python, str(SUPPORT / "speedscope_browser.py"), "--app", str(app), "--browser",
         chromium, str(recording.data.with_suffix(".speedscope"))],
        capture_output=True, text=True, timeout=300)
    if result.returncode == 2:
        missing(f"a Chromium that starts ({result.stdout.strip()})", "apt-get install chromium")
    assert result.returncode == 0, result.stdout + result.stderr
    shown = json.loads(result.stdout)
    assert shown["errors"] == []
    names = thread_names(recording)
    listed = {profile: shown_nanoseconds(total) for profile, total in shown["profiles"]}
    assert set(listed) == set(names.values()), shown["profiles"]
    for thread, perf in recording.threads.items():
        # speedscope rounds to 2 decimals of its unit (ms here)
        assert listed[names[thread]] == pytest.approx(perf.period, abs=10_000)
    opened = {names[thread]: thread for thread in recording.busiest()}
    title = re.fullmatch(rf"(.*) \(\d+/{len(names)}\)", shown["title"])
    assert title and title[1] in opened, shown["title"]
    top = max(shown["sandwich"], key=lambda row: shown_nanoseconds(row[1].split(" ")[0]))
    assert top[2] == recording.threads[opened[title[1]]].leaves.most_common(1)[0][0]

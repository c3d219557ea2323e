"""The event name in a sample's header, as perf prints it: the name the recording's
EVENT_DESC feature holds (``cpu-clock:u``), else the name and modifiers perf 6.1 derives from
the attribute. The expected strings are perf 6.1's own, printed for recordings whose
EVENT_DESC was taken out and whose attribute bits were set (the oracle tests below do it
again here)."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_perf
from tests.support.parity import as_perf61, recording_directory

from pysframe.report import perf_data_out as out
from pysframe.report.event_names import event_name, modifiers
from pysframe.sources.perf_data import open_perf_data
from pysframe.sources.perf_records import EventAttr

EU, EK, EH, EIDLE, EHOST, EGUEST = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 19, 1 << 20
P1, P3 = 1 << 15, 3 << 15

#: attr flags -> perf 6.1's suffix (EVENT_DESC taken out of a `perf record` file).
SUFFIXES = [
    (0, ":HG"), (EU, ":kh"), (EK, ":uh"), (EH, ":ku"), (EIDLE, ":HG"), (EHOST, ":G"),
    (EGUEST, ""), (EK | EH, ":u"), (EK | EH | EGUEST, ":uH"), (EU | EH, ":k"),
    (EU | EH | EGUEST, ":kH"), (P1, ":p"), (P3, ":ppp"), (P3 | EGUEST, ":pppH"),
    (EK | EGUEST, ":uhH"), (EHOST | EGUEST, ""), (EU | EK | EH, ""), (EK | EIDLE, ":uh"),
    (EU | EK, ":h"), (EK | EH | EHOST, ":uG"), (EK | P1, ":uhp"),
]
#: (type, config) -> perf 6.1's name for an attribute with exclude_kernel, exclude_hv and
#: exclude_guest (``:uH``).
NAMES = [
    ((1, 0), "cpu-clock:uH"), ((1, 1), "task-clock:uH"), ((1, 7), "alignment-faults:uH"),
    ((1, 12), "unknown-software:uH"), ((0, 0), "cycles:uH"), ((0, 9), "ref-cycles:uH"),
    ((0, 11), "unknown-hardware:uH"), ((4, 0x1A8), "raw 0x1a8:uH"),
    ((3, 0), "L1-dcache-loads:uH"), ((3, 0x10001), "L1-icache-load-misses:uH"),
    ((3, 0x202), "LLC-prefetches:uH"), ((3, 0x101), "invalid-cache:uH"),
    ((3, 0x20000), "unknown-ext-hardware-cache-result:uH"),
    ((3, 0x300), "unknown-ext-hardware-cache-op:uH"),
    ((3, 0x7777), "unknown-ext-hardware-cache-type:uH"), ((6, 5), "unknown attr type: 6"),
]


@pytest.mark.parametrize(("flags", "suffix"), SUFFIXES)
def test_modifiers_derived_as_perf_6_1_derives_them(flags: int, suffix: str) -> None:
    assert modifiers(flags) == suffix
    assert event_name(EventAttr(1, 0, 0, 0, flags, 0, 0)) == "cpu-clock" + suffix


@pytest.mark.parametrize(("event", "name"), NAMES)
def test_names_derived_from_type_and_config(event: tuple[int, int], name: str) -> None:
    assert event_name(EventAttr(*event, 0, 0, EK | EH | EGUEST, 0, 0)) == name


def recording(path: Path, flags: int, names: list[str] | None) -> Path:
    """One sample (IP, TID, TIME, PERIOD) of cpu-clock with ``flags``; EVENT_DESC naming
    the event ``names`` (None: no EVENT_DESC)."""
    sample_type = 1 | 2 | 4 | 256
    attr = out.event_attr(1, 0, 999, sample_type, (1 << 10) | (1 << 18) | flags)
    data = out.sample(sample_type, 2, ip=0x401000, pid=7, tid=7, time=5 * 10**9, cpu=0,
                      period=1000, chain=())
    features = {out.FEATURE_EVENT_DESC: out.event_desc((attr, name) for name in names)
                } if names is not None else {}
    path.write_bytes(out.perf_data([attr], data, features))
    return path


def test_the_name_perf_recorded_wins(tmp_path: Path) -> None:
    path = recording(tmp_path / "u.data", EK | EH | EGUEST, ["cpu-clock:u"])
    with open_perf_data(str(path)) as data:
        assert data.attrs[0].name == "cpu-clock:u"
        assert event_name(data.attrs[0]) == "cpu-clock:u"  # derived, it would be :uH
    with open_perf_data(str(recording(tmp_path / "none.data", EK | EH | EGUEST, None))) as data:
        assert data.attrs[0].name is None and event_name(data.attrs[0]) == "cpu-clock:uH"


def test_a_description_cut_short_names_nothing(tmp_path: Path) -> None:
    path = recording(tmp_path / "cut.data", EK | EH, ["cpu-clock:u"])
    raw = bytearray(path.read_bytes())
    start, size = struct.unpack_from("<QQ", raw, 40)
    desc_at, _ = struct.unpack_from("<QQ", raw, start + size)  # the only feature
    # the name's length made to run past the feature section
    struct.pack_into("<I", raw, desc_at + 8 + 128 + 4, 1 << 20)
    path.write_bytes(bytes(raw))
    with open_perf_data(str(path)) as data:
        assert data.skipped == [] and data.attrs[0].name is None
        assert event_name(data.attrs[0]) == "cpu-clock:u"


# --- against perf itself ------------------------------------------------------------------

#: A shell loop (user time), then 512 MiB of /dev/zero copied (kernel time: a recording
#: of kernel samples only must have some).
LOOP = ["sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; "
        "dd if=/dev/zero of=/dev/null bs=64k count=8192 2>/dev/null"]


def _headers(text: str) -> list[str]:
    """The sample lines (a leaf's symbol on each)."""
    return [line for line in text.splitlines() if line and not line.startswith("\t")]


def _ours(path: Path) -> str:
    run = subprocess.run([sys.executable, "-m", "pysframe", "script", str(path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _theirs(perf: str, path: Path) -> str:
    return subprocess.run([perf, "script", "--no-inline", "-i", str(path)], capture_output=True,
                          text=True, check=True, timeout=300).stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`perf record -e EVENT` of a shell loop, for a few events (no callchains)."""
    perf, directory = recording_directory(tmp_path_factory, "events")
    found = {}
    for event in ("cpu-clock:u", "task-clock:k", "cpu-clock:H", "cpu-clock"):
        path = directory / (event.replace(":", "_") + ".data")
        subprocess.run([perf, "record", "-q", "-N", "--no-bpf-event", "-e", event, "-o",
                        str(path), "--", *LOOP], check=True, capture_output=True, timeout=120)
        found[event] = path
    return found


@pytest.mark.parametrize("event", ["cpu-clock:u", "task-clock:k", "cpu-clock:H"])
def test_headers_are_perfs_for_events_with_modifiers(recorded: dict[str, Path],
                                                     event: str) -> None:
    path = recorded[event]
    theirs = _headers(_theirs(need_perf(), path))
    assert theirs and all(f" {event}: " in line for line in theirs)
    assert as_perf61(_headers(_ours(path)), theirs) == theirs


def without_event_desc(raw: bytes, flags: int) -> bytes:
    """The recording without its EVENT_DESC feature (its table entry removed, the bodies
    after it moved back), its attributes' exclude and precise bits set to ``flags``."""
    bits = int.from_bytes(raw[72:104], "little")
    start, size = struct.unpack_from("<QQ", raw, 40)
    present = [bit for bit in range(256) if bits >> bit & 1]
    table = start + size
    entries = [struct.unpack_from("<QQ", raw, table + 16 * i) for i in range(len(present))]
    kept = b"".join(struct.pack("<QQ", at - 16, length)
                    for bit, (at, length) in zip(present, entries, strict=True)
                    if bit != out.FEATURE_EVENT_DESC)
    changed = bytearray(raw[:table] + kept + raw[table + 16 * len(present):])
    changed[72:104] = (bits & ~(1 << out.FEATURE_EVENT_DESC)).to_bytes(32, "little")
    attr_size, attrs_at, attrs_size = struct.unpack_from("<QQQ", raw, 16)
    mask = EU | EK | EH | EIDLE | P3 | EHOST | EGUEST
    for at in range(attrs_at, attrs_at + attrs_size, attr_size):
        old, = struct.unpack_from("<Q", changed, at + 40)
        struct.pack_into("<Q", changed, at + 40, old & ~mask | flags)
    return bytes(changed)


@pytest.mark.parametrize("flags", [0, EGUEST, EHOST, EK | EH | EGUEST, EU | EH, P3 | EGUEST,
                                   EK | P1])
def test_without_event_desc_the_names_are_perfs(recorded: dict[str, Path], tmp_path: Path,
                                                flags: int) -> None:
    path = tmp_path / "stripped.data"
    path.write_bytes(without_event_desc(recorded["cpu-clock"].read_bytes(), flags))
    theirs = _headers(_theirs(need_perf(), path))
    assert theirs and as_perf61(_headers(_ours(path)), theirs) == theirs

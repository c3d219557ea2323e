"""pprof output: a gzipped ``profile.proto`` (github.com/google/pprof, proto/profile.proto),
as ``go tool pprof``, Pyroscope and Parca read it.

What is written:

- sample types: ``samples``/``count`` (one per sample), then one column per recorded
  event: for cpu-clock ``cpu``/``nanoseconds`` (the name Go and Pyroscope use for CPU
  time), for task-clock ``task-clock``/``nanoseconds`` (whatever their modifiers; a second
  event of the same clock keeps its printed name), for other events the event's printed
  name (``cycles:u``) with unit ``count``; a sample's value in its event's column is its period, 0 in
  the others. The first event is the default sample type and the ``period_type``; the
  ``period`` is its mean period (perf records at a frequency, so periods vary).
- one location per distinct frame, leaf first in each sample, with the address perf
  shows (a caller's return address minus one, which profile.proto allows: "a non-leaf
  address may be in the middle of a call instruction"), its mapping and one line naming
  its function.
- one mapping per mapped file region: file, build id (hex, as ``perf buildid-list``
  prints it), start, limit and file offset. The first is the profiled program (``File:``
  in ``go tool pprof``): the program of the process with the most samples
  (:attr:`Profile.main`). ``has_functions`` is set when every frame in the mapping was
  named from a symbol, so readers symbolize only mappings with made-up names (``[file]``,
  ``file+0x...``), from the binary they find by build id; ``has_filenames`` and
  ``has_line_numbers`` are not (no source lines are written). Kernel frames get one
  ``[kernel.kallsyms]`` mapping spanning the kernel addresses seen, with the kernel's
  recorded build id, last.
- labels ``comm`` (the command), ``pid`` and ``tid`` on each sample; the title (the recorded
  command line) as a comment; ``time_nanos`` as given (the caller derives it) and
  ``duration_nanos`` from the first to the last sample.

The protobuf is written by hand: profile.proto needs three wire types (varint, packed
varints, length-delimited), which take a few lines, while the ``protobuf`` package would
add a compiled dependency (and generated code, or protoc at build time) to a tool that
otherwise needs none. The output is deterministic (gzip without a timestamp).
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Iterable

from .event_names import base_event
from .profiles import KERNEL_FILE, Location, Profile, ProfileMapping

#: Events whose period is time in nanoseconds, and the sample type each gets.
_CLOCKS = {"cpu-clock": "cpu", "task-clock": "task-clock"}


def _varint(value: int) -> bytes:
    """A base-128 varint; negative int64 values as their two's complement (10 bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Message:
    """A protobuf message being written: fields appended in order."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def number(self, number: int, value: int) -> Message:
        """A varint field (int64, uint64, bool), left out when 0 as proto3 does."""
        if value:
            self.parts.append(_varint(number << 3) + _varint(value))
        return self

    def blob(self, number: int, data: bytes) -> Message:
        """A length-delimited field (string, bytes, embedded message)."""
        self.parts.append(_varint(number << 3 | 2) + _varint(len(data)) + data)
        return self

    def packed(self, number: int, values: Iterable[int]) -> Message:
        """A packed repeated varint field."""
        data = b"".join(_varint(value) for value in values)
        if data:
            self.blob(number, data)
        return self

    def encode(self) -> bytes:
        return b"".join(self.parts)


class _Strings:
    """The string table: index 0 is the empty string, as profile.proto requires."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        return self.index.setdefault(text, len(self.index))


def _value_type(strings: _Strings, kind: str, unit: str) -> bytes:
    return Message().number(1, strings(kind)).number(2, strings(unit)).encode()


def _sample_types(profile: Profile) -> list[tuple[str, str]]:
    columns = [("samples", "count")]
    for event in profile.events:
        clock = _CLOCKS.get(base_event(event))
        taken = any(kind == clock for kind, _ in columns)  # cpu-clock:u and cpu-clock:k
        columns.append((clock, "nanoseconds") if clock and not taken else
                       (event, "nanoseconds" if clock else "count"))
    return columns


def pprof(profile: Profile, title: str = "", time_nanos: int = 0,
          kernel_build_id: bytes | None = None) -> bytes:
    """The gzipped profile.proto of ``profile``; ``title`` becomes a comment,
    ``kernel_build_id`` the build id of the kernel's mapping."""
    strings = _Strings()
    out = Message()
    columns = _sample_types(profile)
    for kind, unit in columns:
        out.blob(1, _value_type(strings, kind, unit))
    _write_samples(out, strings, profile)
    mapping_ids = _write_mappings(out, strings, profile, kernel_build_id)
    functions = _write_locations(out, profile.locations, mapping_ids)
    for (name, _), number in functions.items():
        # Function.filename is a source file, which we do not know (the mapped binary
        # is the location's mapping).
        out.blob(5, Message().number(1, number).number(2, strings(name))
                 .number(3, strings(name)).encode())
    tail = Message().number(9, time_nanos)
    if profile.first_time is not None and profile.last_time is not None:
        tail.number(10, profile.last_time - profile.first_time)
    if len(columns) > 1:
        count = sum(value[0] for key, value in profile.stacks.items() if key.event == 0)
        period = sum(value[1] for key, value in profile.stacks.items() if key.event == 0)
        tail.blob(11, _value_type(strings, *columns[1]))
        tail.number(12, period // count if count else 0)
    if title:
        tail.packed(13, [strings(title)])
    if len(columns) > 1:
        tail.number(14, strings(columns[1][0]))
    for text in strings.index:  # the table is complete only now (dicts keep order)
        out.blob(6, text.encode("utf-8", "backslashreplace"))
    return gzip.compress(out.encode() + tail.encode(), mtime=0)


def _write_samples(out: Message, strings: _Strings, profile: Profile) -> None:
    """One Sample per stack, values [count, period in its event's column]."""
    for key, (count, period) in sorted(profile.stacks.items()):
        values = [count] + [0] * len(profile.events)
        values[1 + key.event] = period
        sample = Message().packed(1, (index + 1 for index in key.stack)).packed(2, values)
        sample.blob(3, Message().number(1, strings("comm")).number(2, strings(key.comm))
                    .encode())
        sample.blob(3, Message().number(1, strings("pid")).number(3, key.pid).encode())
        sample.blob(3, Message().number(1, strings("tid")).number(3, key.tid).encode())
        out.blob(2, sample.encode())


def _write_mappings(out: Message, strings: _Strings, profile: Profile,
                    kernel_build_id: bytes | None) -> dict[ProfileMapping | None, int]:
    """Write one Mapping per mapped file region, the program's first (see the module's
    docstring), the kernel's last (key ``None``)."""
    locations = profile.locations
    named: dict[ProfileMapping, bool] = {}
    for location in locations:
        if location.mapping is not None:
            named[location.mapping] = named.get(location.mapping, True) and location.symbolized
    main = profile.main or _outermost(profile)
    ids: dict[ProfileMapping | None, int] = {}
    for mapping in [main, *named] if main is not None else named:
        if mapping not in ids:
            ids[mapping] = len(ids) + 1
            _write_mapping(out, strings, ids[mapping], mapping, named.get(mapping, False))
    kernel = [location for location in locations if location.kernel]
    if kernel:
        ids[None] = len(ids) + 1
        addresses = [location.address for location in kernel]
        _write_mapping(out, strings, ids[None], ProfileMapping(
            KERNEL_FILE, kernel_build_id, min(addresses), max(addresses) + 1, 0),
            all(location.symbolized for location in kernel))
    return ids


def _outermost(profile: Profile) -> ProfileMapping | None:
    """For a profile that does not know its program: the mapping most samples start in
    (the program's ``_start``, when the stacks are whole)."""
    starts: Counter[ProfileMapping] = Counter()
    for key, (count, _) in profile.stacks.items():
        outermost = next((profile.locations[index].mapping for index in reversed(key.stack)
                          if profile.locations[index].mapping is not None), None)
        if outermost is not None:
            starts[outermost] += count
    return next((mapping for mapping, _ in starts.most_common(1)), None)


def _write_mapping(out: Message, strings: _Strings, number: int,
                   mapping: ProfileMapping, has_functions: bool) -> None:
    build_id = mapping.build_id.hex() if mapping.build_id else ""
    out.blob(3, Message().number(1, number).number(2, mapping.start).number(3, mapping.end)
             .number(4, mapping.pgoff).number(5, strings(mapping.filename))
             .number(6, strings(build_id)).number(7, has_functions).encode())


def _write_locations(out: Message, locations: list[Location],
                     mapping_ids: dict[ProfileMapping | None, int]
                     ) -> dict[tuple[str, str], int]:
    """Write one Location per frame (ids from 1, in order); return the functions'
    ids by (name, file): equal names in different files are different functions."""
    functions: dict[tuple[str, str], int] = {}
    for number, location in enumerate(locations, 1):
        if location.kernel:
            mapping_id, filename = mapping_ids[None], KERNEL_FILE
        elif location.mapping is not None:
            mapping_id, filename = mapping_ids[location.mapping], location.mapping.filename
        else:
            mapping_id, filename = 0, ""
        function = functions.setdefault((location.name, filename), len(functions) + 1)
        line = Message().number(1, function).encode()
        out.blob(4, Message().number(1, number).number(2, mapping_id).number(3, location.address)
                  .blob(4, line).encode())
    return functions

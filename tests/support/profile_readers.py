"""Reading ``sframe report``'s profiles with readers that are not ours, for the report
tests: pprof by the protobuf runtime from pprof's own ``profile.proto`` (compiled by
protoc) and by ``go tool pprof``; speedscope by the rules of its file-format schema; and
what perf and readelf say about the same recording."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.support.oracles import need_profile_schema, need_protobuf_runtime

# --- pprof ------------------------------------------------------------------------------


def profile_message_class(directory: Path) -> Any:
    """``perftools.profiles.Profile`` as the protobuf runtime builds it from pprof's
    upstream ``profile.proto`` (compiled by protoc into ``directory``): nothing of our
    encoder's."""
    protoc, schema = need_profile_schema()
    need_protobuf_runtime()
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    compiled = directory / "profile.desc"
    subprocess.run([protoc, f"--proto_path={schema.parent}", "--include_imports",
                    f"--descriptor_set_out={compiled}", str(schema)], check=True,
                   capture_output=True, timeout=120)
    files = descriptor_pb2.FileDescriptorSet.FromString(compiled.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("perftools.profiles.Profile"))


def unknown_fields(message: Any, where: str = "Profile") -> list[str]:
    """Fields the schema does not know, anywhere in ``message`` (a wrong field number
    lands here instead of failing the parse)."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    found = [f"{where}: field {field.field_number} (wire type {field.wire_type})"
             for field in UnknownFieldSet(message)]
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        children = value if descriptor.is_repeated else [value]
        for index, child in enumerate(children):
            found += unknown_fields(child, f"{where}.{descriptor.name}[{index}]")
    return found


def read_pprof(profile_class: Any, data: bytes) -> Any:
    profile = profile_class()
    profile.ParseFromString(gzip.decompress(data))
    assert unknown_fields(profile) == []
    return profile


def go_pprof(go: str, *args: str) -> str:
    # PPROF_BINARY_PATH leads nowhere: pprof must use our names, not symbolize again
    result = subprocess.run([go, "tool", "pprof", *args], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PPROF_BINARY_PATH": "/nonexistent"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def raw_mappings(raw: str) -> dict[int, tuple[int, int, str, str]]:
    """``go tool pprof -raw``'s mappings: id -> (start, limit, file, build id)."""
    mappings = {int(match[1]): (int(match[2], 16), int(match[3], 16), match[4], match[5] or "")
                for match in re.finditer(r"^(\d+): 0x([0-9a-f]+)/0x([0-9a-f]+)/0x[0-9a-f]+ "
                                         r"(\S+) ([0-9a-f]*) *(?:\[FN\])?$", raw, re.M)}
    assert len(mappings) == raw.split("\nMappings\n", 1)[1].count("\n"), raw
    return mappings


def perf_build_ids(recording: Path) -> dict[str, str]:
    """File name -> build id, as ``perf buildid-list`` prints them."""
    listed = subprocess.run(["perf", "buildid-list", "-i", str(recording)],
                            capture_output=True, text=True, check=True, timeout=120).stdout
    return {name: build_id for build_id, name in
            (line.split(" ", 1) for line in listed.splitlines() if " " in line)}


def elf_build_id(path: str) -> str:
    """The build id of an ELF file, as readelf prints it."""
    notes = subprocess.run(["readelf", "-n", path], capture_output=True, text=True,
                           check=True, timeout=60).stdout
    found = re.search(r"Build ID: ([0-9a-f]+)", notes)
    assert found, path
    return found[1]


# --- speedscope -------------------------------------------------------------------------

#: The rules of https://www.speedscope.app/file-format-schema.json for what we write
#: (a File with shared.frames and "sampled" profiles).
UNITS = {"bytes", "microseconds", "milliseconds", "nanoseconds", "none", "seconds"}


def check_speedscope_schema(document: dict[str, Any]) -> None:
    assert document["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert isinstance(document["name"], str) and isinstance(document["exporter"], str)
    assert isinstance(document["activeProfileIndex"], int)
    assert 0 <= document["activeProfileIndex"] < max(len(document["profiles"]), 1)
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


def report_output(data: Path, target: Path, form: str) -> bytes:
    """``sframe report``'s ``form`` output of the recording ``data``, written to
    ``target`` (in process: run_report, as the command runs it)."""
    from pysframe.cli.script import run_report

    messages: list[str] = []
    status = run_report(str(data), binaries=[], output=str(target), form=form,
                        report=messages.append)
    assert status == 0, messages
    return target.read_bytes()

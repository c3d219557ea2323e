"""``sframe dump``: the text of ``objdump --sframe``, or JSON, for ELF files or bare sections."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import PysframeError
from ..format.constants import F_FDE_FUNC_START_PCREL
from ..format.decode import SFrameReader, read_header
from ..format.dump import dump_bytes
from ..format.errors import SFrameError
from .errors import EXIT_INVALID, EXIT_OK, WHERE, CommandError, exit_code_for
from .files import read_file


@dataclass(slots=True)
class LoadedSection:
    """One SFrame section ready to print, with what error messages need to name it."""

    path: str
    name: str
    reader: SFrameReader
    file_offset: int


def sframe_error(path: str, error: SFrameError, file_offset: int, name: str) -> CommandError:
    """A one-line error naming the file and the byte offset in the file."""
    if error.offset is None:
        where = f"in section {name}"
    else:
        where = f"at file offset {file_offset + error.offset:#x} ({name}+{error.offset:#x})"
    return CommandError(f"{path}: invalid SFrame data: {error.message} {where}", EXIT_INVALID)


def load_raw(path: str, address: int) -> LoadedSection:
    """A bare section (from memory, a JIT buffer or ``objcopy -O binary``) at ``address``."""
    data = read_file(path)
    try:
        reader = SFrameReader(memoryview(data), address)
    except SFrameError as error:
        raise sframe_error(path, error, 0, "section") from None
    return LoadedSection(path, ".sframe", reader, 0)


def relocation_applies(raw: bytes) -> bool:
    """Whether objdump's dump of this section shows relocated start fields.

    objdump up to 2.44 (SFrame V1 and V2 without the PCREL flag) printed the
    start fields of relocatable objects unrelocated; 2.45 and later apply the
    relocations, which only make sense with SFRAME_F_FDE_FUNC_START_PCREL.
    """
    try:
        return bool(read_header(raw).flags & F_FDE_FUNC_START_PCREL)
    except SFrameError:
        return False


def load_elf(path: str, section_name: str) -> tuple[str, list[LoadedSection]]:
    """The BFD target name of an ELF file and its SFrame sections (possibly none)."""
    from ..elf.quick import quick_sframe_sections

    data = read_file(path)
    quick = quick_sframe_sections(data, section_name)
    if quick is not None:
        target, quick_found = quick
        loaded = []
        for quick_section in quick_found:
            try:
                reader = SFrameReader(quick_section.raw, quick_section.address)
            except SFrameError as error:
                raise sframe_error(path, error, quick_section.file_offset,
                                   quick_section.name) from None
            loaded.append(LoadedSection(path, quick_section.name, reader,
                                        quick_section.file_offset))
        return target, loaded
    from ..elf import ElfImage

    image = ElfImage(path, data)
    target = image.target_name
    found = image.sframe_sections(section_name)
    sections = []
    for section in found:
        contents = section.relocated if relocation_applies(section.raw) else section.raw
        try:
            reader = SFrameReader(contents, section.address)
        except SFrameError as error:
            raise sframe_error(path, error, section.file_offset, section.name) from None
        sections.append(LoadedSection(path, section.name, reader, section.file_offset))
    return target, sections


def section_text(section: LoadedSection) -> bytes:
    try:
        return dump_bytes(section.reader, section.name)
    except SFrameError as error:
        raise sframe_error(section.path, error, section.file_offset, section.name) from None


def section_data(section: LoadedSection) -> dict[str, Any]:
    from ..format.jsondump import section_json

    try:
        return section_json(section.reader, section.name)
    except SFrameError as error:
        raise sframe_error(section.path, error, section.file_offset, section.name) from None


def run_dump(paths: Iterable[str], *, as_json: bool, raw: bool, address: int,
             section_name: str, report: Any) -> int:
    """Print every file's dump; return the exit status (the worst over all files)."""
    status = EXIT_OK
    out = sys.stdout
    binary = getattr(out, "buffer", None)
    documents: list[dict[str, Any]] = []
    for path in paths:
        WHERE.at(path)
        try:
            if raw:
                target = "binary"
                sections = [load_raw(path, address)]
            else:
                target, sections = load_elf(path, section_name)
            if as_json:
                documents.append({"file": path, "format": target,
                                  "sections": [section_data(s) for s in sections]})
                continue
            texts = [section_text(s) for s in sections]
        except PysframeError as error:
            report(str(error))
            status = max(status, exit_code_for(error))
            continue
        if not raw:
            out.write(f"\n{path}:     file format {target}\n\n")
            if not texts:
                out.write(f"No {section_name} section present\n\n")
        if texts:
            if binary is not None:
                out.flush()
                binary.write(b"".join(texts))
            else:
                out.write(b"".join(texts).decode("ascii"))
    if as_json:
        json.dump(documents if len(documents) != 1 else documents[0], out, indent=1)
        out.write("\n")
    return status

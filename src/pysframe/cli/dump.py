"""``sframe dump``: the text of ``objdump --sframe``, or JSON, for ELF files or bare sections."""

from __future__ import annotations

import json
import mmap
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import PysframeError
from ..format.constants import F_FDE_FUNC_START_PCREL
from ..format.decode import SFrameReader, read_header
from ..format.dump import dump_bytes
from ..format.errors import SFrameError
from .archives import Input, each_input
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


def load_elf(path: str, section_name: str, data: bytes | mmap.mmap | None = None
             ) -> tuple[str, list[LoadedSection]]:
    """The BFD target name of an ELF file and its SFrame sections (possibly none);
    ``data``: its bytes, when read already (``path`` then only names it)."""
    from ..elf.quick import quick_sframe_sections

    if data is None:
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
    """Print every file's dump (an archive's: ``In archive`` and each member's, as
    objdump); return the exit status (the worst over all files)."""
    from ..elf.archive import is_archive

    status = EXIT_OK
    out = _Output()
    documents: list[dict[str, Any]] = []
    for path in paths:
        WHERE.at(path)
        try:
            if raw:
                _dump_raw(load_raw(path, address), out, documents, as_json)
                continue
            data = read_file(path)
        except PysframeError as error:
            report(str(error))
            status = max(status, exit_code_for(error))
            continue
        if is_archive(data) and not as_json:
            out.write(f"In archive {path}:\n")
        for item in each_input(path, data):
            try:
                if isinstance(item, PysframeError):
                    raise item
                _dump_file(item, path, out, documents, as_json, section_name)
            except PysframeError as error:
                report(str(error))
                status = max(status, exit_code_for(error))
    if as_json:
        json.dump(documents if len(documents) != 1 else documents[0], sys.stdout, indent=1)
        sys.stdout.write("\n")
    return status


def _dump_raw(section: LoadedSection, out: _Output, documents: list[dict[str, Any]],
              as_json: bool) -> None:
    if as_json:
        documents.append({"file": section.path, "format": "binary",
                          "sections": [section_data(section)]})
    else:
        out.text(section_text(section))


def _dump_file(item: Input, path: str, out: _Output, documents: list[dict[str, Any]],
               as_json: bool, section_name: str) -> None:
    """One ELF file's dump (or JSON document); an archive member's names the archive."""
    target, sections = load_elf(item.label, section_name, item.data)
    if as_json:
        document = {"file": item.label, "format": target,
                    "sections": [section_data(s) for s in sections]}
        if item.label != path:
            document.update(archive=path, member=item.label[len(path) + 1:-1])
        documents.append(document)
        return
    texts = [section_text(s) for s in sections]
    out.write(f"\n{item.shown}:     file format {target}\n\n")
    if not texts:
        out.write(f"No {section_name} section present\n\n")
    out.text(b"".join(texts))


class _Output:
    """Standard output, text and the dump's bytes in order."""

    def __init__(self) -> None:
        self._out = sys.stdout
        self._binary = getattr(self._out, "buffer", None)

    def write(self, text: str) -> None:
        self._out.write(text)

    def text(self, data: bytes) -> None:
        if not data:
            return
        if self._binary is not None:
            self._out.flush()
            self._binary.write(data)
        else:
            self._out.write(data.decode("ascii"))

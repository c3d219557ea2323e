"""``sframe validate``: check SFrame sections and report each problem on one line."""

from __future__ import annotations

import json
import mmap
import sys
from typing import Any, NamedTuple

from ..errors import PysframeError
from ..format.validation import ERROR, WARNING, Finding, validate
from .archives import Input, each_input
from .errors import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    WHERE,
    CommandError,
    exit_code_for,
    naming,
)
from .files import read_file


class NothingToValidate(PysframeError):
    """The ELF file has no SFrame section."""

    def __init__(self) -> None:
        super().__init__("no SFrame section")


def _findings_for_file(path: str, data: bytes | mmap.mmap, *, raw: bool, address: int,
                       kernel: bool) -> list[tuple[str, int, Finding]]:
    """(section name, file offset of the section, finding) for every finding in a file
    (:class:`NothingToValidate` for an ELF file without SFrame)."""
    if raw:
        return [(".sframe", 0, f) for f in validate(memoryview(data), address, kernel=kernel)]
    from ..elf import ElfImage

    image = ElfImage(path, data)
    sections = image.sframe_sections()
    relocatable = image.elf_type == "REL"
    text = None if relocatable else image.executable_ranges()
    if not sections:
        raise NothingToValidate
    out = []
    for section in sections:
        contents = section.relocated if relocatable else section.raw
        for finding in validate(contents, section.address, text, kernel=kernel,
                                relocatable=relocatable):
            out.append((section.name, section.file_offset, finding))
        if relocatable:
            out += [(section.name, section.file_offset, finding)
                    for finding in _relocation_findings(image, section.name,
                                                        section.file_offset)]
    return out


def _relocation_findings(image: Any, name: str, file_offset: int) -> list[Finding]:
    """The start-field relocations of a relocatable object's SFrame section, checked."""
    from ..elf.relocations import sframe_relocation_findings

    header = next((h for h in image.section_headers()
                   if h.offset == file_offset and h.name == name and h.has_contents), None)
    return [] if header is None else sframe_relocation_findings(image, header)


def _against_cfi(path: str, data: bytes | mmap.mmap) -> list[tuple[str, int, Finding]]:
    """Findings where the file's SFrame and its CFI disagree (see generate/compare.py)."""
    from ..elf import ElfImage
    from ..format.errors import SFrameError
    from ..generate.compare import compare_with_cfi, section_for_comparison

    image = ElfImage(path, data)
    sections = image.sframe_sections()
    if not sections:
        raise NothingToValidate
    out = []
    for section in sections:
        data = section_for_comparison(image, section.raw, section.relocated)
        try:
            disagreements, notes = compare_with_cfi(image, data, section.address)
        except SFrameError as error:
            raise CommandError(
                f"{path}: cannot compare: {error} (a relocatable link made before binutils "
                "2.45 has start addresses that cannot be recovered, PR ld/32666)"
                if image.elf_type == "REL" else f"{path}: cannot compare: {error}",
                EXIT_INVALID) from None
        for item in disagreements:
            out.append((section.name, section.file_offset, Finding(
                "against-eh-frame", f"at {item.pc:#x}: {item.message}", None, item.fde)))
        for note in notes:
            out.append((section.name, section.file_offset,
                        Finding("against-eh-frame", note, severity=WARNING)))
    return out


def format_finding(path: str, name: str, file_offset: int, finding: Finding) -> str:
    where = ", ".join(filter(None, (path, finding.location(file_offset, name))))
    level = "" if finding.severity == ERROR else "warning: "
    return f"{where}: {level}{finding.message} [{finding.check}]"


def run_validate(paths: list[str], *, as_json: bool, quiet: bool, kernel: bool, strict: bool,
                 raw: bool, address: int, report: Any, against_cfi: bool = False,
                 require: bool = False) -> int:
    """Validate every file (an archive: each member, named ``lib.a(member.o)``); return
    the exit status, the worst over all files and members."""
    options = _Options(as_json, quiet, kernel, strict, raw, address, report, against_cfi,
                       require)
    status = EXIT_OK
    documents: list[dict[str, Any]] = []
    for path in paths:
        WHERE.at(path)
        try:
            data = read_file(path)
        except PysframeError as error:
            status = max(status, _failed(str(naming(path, error)), error, options, documents,
                                         path))
            continue
        for item in ([Input(path, path, data)] if raw else each_input(path, data)):
            if isinstance(item, PysframeError):
                status = max(status, _failed(str(item), item, options, documents, item.path))
            else:
                status = max(status, _validate_one(item.label, item.data, options, documents))
    if as_json:
        json.dump(documents, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return status if status != EXIT_OK or not paths else EXIT_OK


class _Options(NamedTuple):
    as_json: bool
    quiet: bool
    kernel: bool
    strict: bool
    raw: bool
    address: int
    report: Any
    against_cfi: bool
    require: bool


def _failed(message: str, error: PysframeError, options: _Options,
            documents: list[dict[str, Any]], label: str | None) -> int:
    options.report(message)
    documents.append({"file": label, "error": message})
    return exit_code_for(error)


def _validate_one(path: str, data: bytes | mmap.mmap, options: _Options,
                  documents: list[dict[str, Any]]) -> int:
    """Validate one file (or archive member, ``path`` naming it); its exit status."""
    try:
        findings = (_against_cfi(path, data) if options.against_cfi else
                    _findings_for_file(path, data, raw=options.raw, address=options.address,
                                       kernel=options.kernel))
    except NothingToValidate:
        # Most files have no SFrame (yet): that is no error, unless asked for one.
        message = f"{path}: no SFrame section" + (
            "" if options.require else ", nothing to validate")
        documents.append({"file": path, "valid": not options.require, "sframe": False,
                          "findings": []})
        if options.require:
            options.report(message)
            return EXIT_INVALID
        if not options.as_json and not options.quiet:
            sys.stdout.write(message + "\n")
        return EXIT_OK
    except PysframeError as error:
        return _failed(str(naming(path, error)), error, options, documents, path)
    problems = [f for _, _, f in findings if options.strict or f.severity == ERROR]
    if options.as_json:
        documents.append({"file": path, "valid": not problems, "findings": [
            {"section": name, "check": f.check, "severity": f.severity, "message": f.message,
             "fde": f.fde, "fre": f.fre, "section_offset": f.offset,
             "file_offset": None if f.offset is None else offset + f.offset}
            for name, offset, f in findings]})
    elif not options.quiet:
        for name, offset, finding in findings:
            sys.stdout.write(format_finding(path, name, offset, finding) + "\n")
    return EXIT_INVALID if problems else EXIT_OK


__all__ = ["EXIT_UNREADABLE", "run_validate"]

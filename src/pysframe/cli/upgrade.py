"""``sframe upgrade`` (V2 SFrame sections of objects and archives as V3) and ``sframe strip``
(SFrame sections dropped), each writing a new file."""

from __future__ import annotations

import os
import stat
import sys

from .errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, CommandError
from .files import read_file, write_output


def run_upgrade(path: str, output: str) -> int:
    from ..elf import ElfError, ElfImage
    from ..elf.archive import AR_MAGIC
    from ..errors import PysframeError
    from ..generate.errors import GenerateError
    from ..generate.upgrade import upgrade_archive, upgrade_object

    data = bytes(read_file(path))
    try:
        if data.startswith(AR_MAGIC):
            out, changed = upgrade_archive(data)
            what = f"{changed} member{'s' if changed != 1 else ''} upgraded to SFrame V3"
        else:
            upgraded = upgrade_object(ElfImage(path, data))
            if upgraded is None:
                sys.stderr.write(f"sframe upgrade: {path}: no SFrame V2 section, nothing to "
                                 "upgrade\n")
                return EXIT_INVALID
            out, what = upgraded, "upgraded to SFrame V3"
    except (GenerateError, ElfError, PysframeError, ValueError) as error:
        raise CommandError(_about(path, error), EXIT_UNREADABLE) from None
    write_output(output, out, [path])
    sys.stderr.write(f"sframe upgrade: {path}: {what}, written to {output}\n")
    return EXIT_OK


def run_strip(path: str, output: str | None) -> int:
    """Strip ``path`` (an ELF file or a static archive) to ``output``, or in place."""
    from ..elf import ElfError, ElfImage
    from ..elf.archive import is_archive
    from ..errors import PysframeError
    from ..generate.errors import GenerateError
    from ..generate.strip import strip_archive, strip_sframe

    data = bytes(read_file(path))
    status = _status_of(path)
    try:
        if is_archive(data):
            out, changed = strip_archive(data)
            what = f"{changed} member{'s' if changed != 1 else ''} stripped"
        else:
            out, changed = strip_sframe(ElfImage(path, data))
            what = f"{changed} section{'s' if changed != 1 else ''} dropped"
    except (GenerateError, ElfError, PysframeError, ValueError) as error:
        raise CommandError(_about(path, error), EXIT_UNREADABLE) from None
    if not changed:
        sys.stderr.write(f"sframe strip: {path}: no SFrame section, nothing to strip\n")
        return EXIT_INVALID
    if output is None:
        _replace(path, out, status)
    else:
        write_output(output, out, [path], mode=stat.S_IMODE(status.st_mode),
                     owner=(status.st_uid, status.st_gid))
    sys.stderr.write(f"sframe strip: {path}: {what}, written to "
                     f"{output if output is not None else path}\n")
    return EXIT_OK


def _status_of(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as error:
        raise CommandError(f"{path}: cannot read: {error.strerror or error}",
                           EXIT_UNREADABLE) from None


def _replace(path: str, data: bytes, status: os.stat_result) -> None:
    """``path`` replaced by ``data`` (a new file beside it, renamed over it), with the
    old one's permissions and owner; a symbolic link is not replaced by a file."""
    if os.path.islink(path):
        raise CommandError(f"{path}: is a symbolic link: name the file itself, or write "
                           "elsewhere with -o", EXIT_UNREADABLE)
    write_output(path, data, mode=stat.S_IMODE(status.st_mode),
                 owner=(status.st_uid, status.st_gid))


def _about(path: str, error: Exception) -> str:
    """The error's line, naming ``path`` once (an archive member's as ``lib.a(x.o)``)."""
    text = str(error)
    if text.startswith(f"{path}:"):
        return text
    return f"{path}{text}" if text.startswith("(") else f"{path}: {text}"

"""``sframe upgrade`` (V2 SFrame sections of objects and archives as V3) and ``sframe strip``
(SFrame sections dropped), each writing a new file."""

from __future__ import annotations

import os
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


def run_strip(path: str, output: str) -> int:
    from ..elf import ElfError, ElfImage
    from ..errors import PysframeError
    from ..generate.errors import GenerateError
    from ..generate.strip import strip_sframe

    data = bytes(read_file(path))
    try:
        out, dropped = strip_sframe(ElfImage(path, data))
    except (GenerateError, ElfError, PysframeError, ValueError) as error:
        raise CommandError(_about(path, error), EXIT_UNREADABLE) from None
    if not dropped:
        sys.stderr.write(f"sframe strip: {path}: no SFrame section, nothing to strip\n")
        return EXIT_INVALID
    # The input's permissions: a stripped program still runs.
    write_output(output, out, [path], mode=os.stat(path).st_mode & 0o777)
    sys.stderr.write(f"sframe strip: {path}: {dropped} section{'s' if dropped != 1 else ''} "
                     f"dropped, written to {output}\n")
    return EXIT_OK


def _about(path: str, error: Exception) -> str:
    """The error's line, naming ``path`` once."""
    text = str(error)
    return text if text.startswith(f"{path}:") else f"{path}: {text}"

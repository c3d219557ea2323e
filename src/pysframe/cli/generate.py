"""``sframe generate``: an SFrame section for an ELF file, made from its DWARF CFI."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from ..format.encode import encode
from ..format.errors import SFrameError
from .dump import read_file
from .errors import EXIT_INVALID, EXIT_OK, CommandError


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (no partial output)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(prefix=".sframe-", dir=directory)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600; give the usual mode
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as error:
        raise CommandError(f"{path}: cannot write: {error.strerror or error}", 2) from None


def run_generate(path: str, output: str, *, version: int, address: int | None, verbose: bool,
                 report: Any) -> int:
    from ..elf import ElfError, ElfImage
    from ..generate.section import GenerateError, generate

    try:
        image = ElfImage(path, read_file(path))
        result = generate(image, version=version, address=address)
        data = encode(result.section)
    except ElfError as error:
        raise CommandError(str(error), error.exit_code) from None
    except (GenerateError, SFrameError) as error:
        raise CommandError(f"{path}: {error}", EXIT_INVALID) from None
    write_atomically(output, data)
    if verbose:
        for start, size, reason in result.skipped:
            sys.stderr.write(f"{path}: no SFrame FDE for {start:#x} ({size} bytes): {reason}\n")
        for message in result.cfi_errors:
            sys.stderr.write(f"{path}: unreadable CFI entry: {message}\n")
        section = result.section
        sys.stderr.write(f"{path}: {len(section.fdes)} FDEs, {section.num_fres} FREs, "
                         f"{len(data)} bytes at {section.address:#x} (SFrame V{version}); "
                         f"{len(result.skipped)} functions skipped as gas would\n")
    return EXIT_OK


def run_inject(path: str, output: str, *, version: int, report: Any) -> int:
    from ..elf import ElfError, ElfImage
    from ..generate.inject import inject
    from ..generate.section import GenerateError

    if os.path.abspath(path) == os.path.abspath(output):
        raise CommandError(f"{output}: refusing to overwrite the input file", 2)
    try:
        image = ElfImage(path, read_file(path))
        data, _ = inject(image, version=version)
    except ElfError as error:
        raise CommandError(str(error), error.exit_code) from None
    except (GenerateError, SFrameError) as error:
        raise CommandError(f"{path}: {error}", EXIT_INVALID) from None
    write_atomically(output, data)
    mode = os.stat(path).st_mode & 0o777
    os.chmod(output, mode)
    return EXIT_OK

"""``sframe generate`` and ``sframe inject``: an SFrame section for an ELF file, made from
its DWARF CFI."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import PysframeError
from ..format.encode import encode
from .errors import EXIT_OK, WHERE, naming
from .files import read_file, refuse_inputs, write_output

if TYPE_CHECKING:
    from ..elf import ElfImage


def run_generate(path: str, output: str, *, version: int, address: int | None,
                 verbose: bool, as_gnu: bool = False) -> int:
    from ..elf import ElfImage
    from ..generate.section import generate

    WHERE.at(path)
    refuse_inputs(output, [path])  # before any work
    try:
        image = ElfImage(path, read_file(path))
        result = generate(image, version=version, address=address, as_gnu=as_gnu)
        data = encode(result.section)
    except PysframeError as error:
        raise naming(path, error) from None
    write_output(output, data, inputs=[path])
    if verbose:
        name = _namer(image)
        for start, size, reason in result.skipped:
            sys.stderr.write(f"{path}: no SFrame FDE for {start:#x}{name(start)} ({size} bytes): "
                             f"{reason}\n")
        for start, size, what in result.trimmed:
            sys.stderr.write(f"{path}: SFrame FDE for {start:#x}{name(start)} ({size} bytes): "
                             f"{what}\n")
        for problem in result.cfi_errors:
            sys.stderr.write(f"{path}: unreadable CFI entry: {problem}\n")
        section = result.section
        sys.stderr.write(f"{path}: {len(section.fdes)} FDEs, {section.num_fres} FREs, "
                         f"{len(data)} bytes at {section.address:#x} (SFrame V{version}); "
                         f"{len(result.skipped)} functions skipped as gas would\n")
    return EXIT_OK


def _namer(image: ElfImage) -> Callable[[int], str]:
    """`` <function>`` for a function's start address (its ELF symbol, demangled as
    c++filt and gdb print it), or nothing when no symbol starts there or the symbols
    cannot be read."""
    from ..symbolize.demangling import gdb_name
    from ..symbolize.symbols import load_symbols

    try:
        table = load_symbols(image)
    except PysframeError:
        return lambda _: ""

    def name(start: int) -> str:
        found = table.lookup(start)
        return f" {gdb_name(found[0])}" if found is not None and found[1] == 0 else ""

    return name


def run_inject(path: str, output: str, *, version: int, as_gnu: bool = False) -> int:
    from ..elf import ElfImage
    from ..generate.inject import appended_signature, inject

    WHERE.at(path)
    refuse_inputs(output, [path])  # before any work
    try:
        image = ElfImage(path, read_file(path))
        data, _ = inject(image, version=version, as_gnu=as_gnu)
    except PysframeError as error:
        raise naming(path, error) from None
    if appended_signature(memoryview(image.data)):
        sys.stderr.write(f"sframe: {path}: its appended signature is kept at the end of "
                         f"{output} but no longer matches it: sign {output} again\n")
    # The input's permissions (an injected program still runs), set on the temporary file
    # before the rename: nothing is changed through a symbolic link at ``output``.
    write_output(output, data, inputs=[path], mode=os.stat(path).st_mode & 0o777)
    return EXIT_OK

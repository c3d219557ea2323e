"""The runtime side of the GDB JIT interface, for a Python process that writes code.

gdb (and our tools) find JIT code through two global symbols that must be defined by some
ELF image the process has loaded: ``__jit_debug_descriptor`` (the head of a list of
in-memory object files) and ``__jit_debug_register_code`` (a function gdb stops in to
hear of changes). A Python process has no such image, so a six-line C library defining
them is built once with the system's C compiler (cached by its source's hash under the
user's cache directory) and loaded with ctypes; :class:`JitRegistry` then links and
unlinks ``jit_code_entry`` records as the interface says, keeping every buffer alive while
it is registered.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

from ..cachedir import cache_root
from ..errors import PysframeError

SOURCE = b"""#include <stdint.h>
struct jit_code_entry { struct jit_code_entry *next_entry, *prev_entry;
                        const char *symfile_addr; uint64_t symfile_size; };
struct jit_descriptor { uint32_t version, action_flag;
                        struct jit_code_entry *relevant_entry, *first_entry; };
struct jit_descriptor __jit_debug_descriptor = { 1, 0, 0, 0 };
void __attribute__((noinline, used)) __jit_debug_register_code(void) { __asm__ volatile(""); }
"""
JIT_NOACTION, JIT_REGISTER_FN, JIT_UNREGISTER_FN = 0, 1, 2


class JitRuntimeError(PysframeError):
    """The registration library could not be built or loaded."""


class CodeEntry(ctypes.Structure):
    pass


CodeEntry._fields_ = [("next_entry", ctypes.POINTER(CodeEntry)),
                      ("prev_entry", ctypes.POINTER(CodeEntry)),
                      ("symfile_addr", ctypes.c_void_p), ("symfile_size", ctypes.c_uint64)]


class Descriptor(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("action_flag", ctypes.c_uint32),
                ("relevant_entry", ctypes.POINTER(CodeEntry)),
                ("first_entry", ctypes.POINTER(CodeEntry))]


def registration_library() -> str:
    """The path of the library defining the interface's symbols (built on first use)."""
    digest = hashlib.sha256(SOURCE).hexdigest()[:16]
    directory = os.path.join(cache_root(), "jit")
    path = os.path.join(directory, f"libsframe-jit-{digest}.so")
    if os.path.isfile(path) and not os.path.islink(path):
        return path
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise JitRuntimeError("no C compiler (cc) to build the GDB JIT interface's library")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as work:
        source = os.path.join(work, "jit.c")
        with open(source, "wb") as handle:
            handle.write(SOURCE)
        built = os.path.join(work, "lib.so")
        run = subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", built, source],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise JitRuntimeError(f"{compiler} failed: {run.stderr.strip()[-200:]}")
        os.replace(built, path)
    return path


class JitRegistry:
    """Registers in-memory object files with debuggers (the GDB JIT interface)."""

    def __init__(self) -> None:
        try:
            self.library = ctypes.CDLL(registration_library())
        except OSError as error:
            raise JitRuntimeError(f"loading the GDB JIT interface's library: {error}") from None
        self.descriptor = Descriptor.in_dll(self.library, "__jit_debug_descriptor")
        self._notify = self.library["__jit_debug_register_code"]  # (no name mangling)
        self._notify.restype = None
        #: Registered entries, with the buffers they point at, by handle.
        self._entries: dict[int, tuple[CodeEntry, ctypes.Array[ctypes.c_char]]] = {}

    def register(self, symfile: bytes) -> int:
        """Link a new entry for ``symfile`` at the head of the list; returns its handle."""
        buffer = ctypes.create_string_buffer(symfile, len(symfile))
        entry = CodeEntry()
        entry.symfile_addr = ctypes.addressof(buffer)
        entry.symfile_size = len(symfile)
        head = self.descriptor.first_entry
        if head:
            entry.next_entry = head
            head.contents.prev_entry = ctypes.pointer(entry)
        self.descriptor.first_entry = ctypes.pointer(entry)
        self._entries[ctypes.addressof(entry)] = (entry, buffer)
        self._announce(entry, JIT_REGISTER_FN)
        return ctypes.addressof(entry)

    def unregister(self, handle: int) -> None:
        """Unlink the entry ``handle`` and tell the debugger."""
        entry, _ = self._entries[handle]
        if entry.prev_entry:
            entry.prev_entry.contents.next_entry = entry.next_entry
        else:
            self.descriptor.first_entry = entry.next_entry
        if entry.next_entry:
            entry.next_entry.contents.prev_entry = entry.prev_entry
        self._announce(entry, JIT_UNREGISTER_FN)
        del self._entries[handle]

    def _announce(self, entry: CodeEntry, action: int) -> None:
        self.descriptor.relevant_entry = ctypes.pointer(entry)
        self.descriptor.action_flag = action
        self._notify()
        self.descriptor.action_flag = JIT_NOACTION

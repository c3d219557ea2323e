"""A memo of DWARF answers per build id, kept in the cache of derived data
(:mod:`pysframe.cachedir`).

Reading DWARF (pyelftools' import alone is ~30 ms, libc's first names ~60 ms) would be
most of a ``sframe stack`` run; the questions a run asks (names at a pc, call-site
targets, tail-call chains) are few and the same from one run to the next on the same
binaries. So every answer is remembered by build id, and the DWARF is opened only for
a question not seen before. A memo is used only when its entry verifies against the
bytes the answers come from (:func:`memo_source`: the file's DWARF sections and symbol
tables, and those of the file its DWARF is read from) and every question and answer in it has
the shape this class gives them; anything else is treated as absent and rewritten.
"""

from __future__ import annotations

import marshal

from ..cachedir import Source, combine, entry_path, load, store
from ..elf.debuginfo import DebugFiles
from ..errors import PysframeError
from .symbols import cache_entry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

if TYPE_CHECKING:
    from ..elf import ElfImage
    from .dwarf import DwarfNames

#: Bumped whenever the answers of DwarfNames change, so old memos are not reused.
MEMO_FORMAT = 4
#: Besides the DWARF sections: the symbol tables (names of call-site targets, tail-call
#: frames), the build id (a debug file of another build is not used), the debug link
#: (where a separate debug file is looked for) and the dwz link (which supplementary
#: file, by name and build id, holds shared DWARF).
_ALSO_MADE_FROM = (".symtab", ".strtab", ".dynsym", ".dynstr", ".note.gnu.build-id",
                   ".gnu_debuglink", ".gnu_debugaltlink")


def memo_kind(separate: str | None) -> str:
    """The cache kind of the memo of a file whose DWARF is in ``separate`` (None: in
    itself, or nowhere)."""
    return cache_entry("dwarf", separate is not None, f"m{MEMO_FORMAT}")


def dwarf_file(path: str, build_id: bytes | None, debug: DebugFiles | None = None
               ) -> str | None:
    """The separate file the DWARF of ``path`` is read from (None: the file itself, or
    none is found); ``debug``: the search (None: the local one)."""
    if debug is None:
        debug = DebugFiles.from_environment(network=False)
    found = debug.find(path, build_id, "dwarf")
    return found if found is not None and found != path else None


def memo_source(path: str, separate: str | None) -> Source | None:
    """What the answers for the ELF file ``path`` come from: its DWARF sections, symbol
    tables and debug link, and those of the ``separate`` file its DWARF is read from
    (:func:`dwarf_file`). Both are checked by stamp, hashed only when that differs
    (libc's debug file is 4 MB). None when a file cannot be read (no memo is used then)."""
    from ..generate.cache import file_source

    try:
        source = file_source(path, _made_from)
        if separate is not None:
            source = combine(source, file_source(separate, _made_from))
    except PysframeError:
        return None
    return source


def _made_from(image: ElfImage) -> tuple[str, ...]:
    names = tuple(section.name for section in image.section_headers()
                  if section.name.startswith((".debug_", ".zdebug_")))
    return names + _ALSO_MADE_FROM


class CachedDwarfNames:
    """The questions of :class:`~pysframe.symbolize.dwarf.DwarfNames`, answered from
    the memo when possible; the DWARF is opened on the first new question."""

    def __init__(self, path: str, build_id: bytes | None, *, use_cache: bool = True,
                 debug: DebugFiles | None = None) -> None:
        self.path = path
        self.build_id = build_id
        self._debug = debug if debug is not None else DebugFiles.from_environment(
            network=False)
        self._real: DwarfNames | None = None
        self._opened = False
        self._dirty = False
        self._memo: dict[tuple[Any, ...], Any] = {}
        self._separate = dwarf_file(path, build_id, self._debug)
        self._source = memo_source(path, self._separate) if build_id and use_cache else None
        if build_id and self._source is not None:
            self._memo = _load(build_id, self._source, self._separate)

    @property
    def memo_path(self) -> str | None:
        """Where this build id's memo is kept (None without a build id or a cache)."""
        if not self.build_id or self._source is None:
            return None
        return entry_path(memo_kind(self._separate), self.build_id)

    @property
    def dwarf_opened(self) -> bool:
        """Whether some question had to be answered from the DWARF itself."""
        return self._opened

    def _ask(self, question: tuple[Any, ...], answer: Callable[[DwarfNames], Any]) -> Any:
        """The memo's answer to ``question``, else ``answer`` of the real DWARF names."""
        if question in self._memo:
            return self._memo[question]
        if not self._opened:
            from .dwarf import DwarfNames

            self._real = DwarfNames.open(self.path, self.build_id, self._debug)
            self._opened = True
        result = answer(self._real) if self._real is not None else None
        self._memo[question] = result
        self._dirty = True
        return result

    def frames_at(self, address: int) -> list[str] | None:
        answer = self._ask(("frames_at", address), lambda real: real.frames_at(address))
        return list(answer) if answer is not None else None

    def function_entry(self, address: int) -> int | None:
        answer = self._ask(("function_entry", address),
                           lambda real: real.function_entry(address))
        return int(answer) if answer is not None else None

    def call_site_target(self, return_address: int) -> int | str | None:
        answer = self._ask(("call_site_target", return_address),
                           lambda real: real.call_site_target(return_address))
        return answer if isinstance(answer, int | str) else None

    def call_site_targets(self, return_address: int) -> list[int] | str | None:
        answer = self._ask(("call_site_targets", return_address),
                           lambda real: real.call_site_targets(return_address))
        if isinstance(answer, str):
            return answer
        return [int(address) for address in answer] if answer is not None else None

    def tail_call_chain(self, target_entry: int | Sequence[int], callee_entry: int
                        ) -> list[tuple[str, int]] | None:
        key = target_entry if isinstance(target_entry, int) else tuple(target_entry)
        answer = self._ask(("tail_call_chain", key, callee_entry),
                           lambda real: real.tail_call_chain(key, callee_entry))
        return [(str(name), int(pc)) for name, pc in answer] if answer is not None else None

    def remember(self, question: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """A caller's own derived answer (e.g. tail-call frames found with the help of
        other files' symbols), kept in this file's memo under ``question``."""
        if question not in self._memo:
            self._memo[question] = compute()
            self._dirty = True
        return self._memo[question]

    def save(self) -> None:
        """Write the memo if it learned something (silently skipped when it cannot)."""
        if not self._dirty or not self.build_id or self._source is None:
            return
        # Only what _load accepts is kept (a question of a new kind would otherwise make
        # every later load discard the whole memo).
        memo = {question: answer for question, answer in self._memo.items()
                if _shape_of(question)(question, answer)}
        store(memo_kind(self._separate), self.build_id, marshal.dumps(memo), self._source)
        self._dirty = False


def _load(build_id: bytes, source: Source, separate: str | None
          ) -> dict[tuple[Any, ...], Any]:
    """The memo of ``build_id`` if its entry verifies against ``source`` and has the
    shape of a memo; else an empty one."""
    payload = load(memo_kind(separate), build_id, source)
    if payload is None:
        return {}
    try:
        memo = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return {}
    if type(memo) is not dict or not all(_shape_of(question)(question, answer)
                                         for question, answer in memo.items()):
        return {}
    return memo


def _shape_of(question: object) -> Callable[[tuple[Any, ...], Any], bool]:
    """The check of the answers to ``question`` (one that fails for anything unknown)."""
    if type(question) is not tuple or not question or type(question[0]) is not str:
        return _unknown
    return _SHAPES.get(question[0], _unknown)


def _unknown(question: tuple[Any, ...], answer: Any) -> bool:
    return False


def _is_int(value: object) -> bool:
    return type(value) is int


def _is_name_pc_list(value: object) -> bool:
    """[(name, pc), ...]: a tail-call chain."""
    return type(value) is list and all(
        type(item) is tuple and len(item) == 2 and type(item[0]) is str and _is_int(item[1])
        for item in value)


def _at_address(question: tuple[Any, ...]) -> bool:
    return len(question) == 2 and _is_int(question[1])


#: question name -> whether (question, answer) is what this class asks and remembers.
_SHAPES: dict[str, Callable[[tuple[Any, ...], Any], bool]] = {
    "frames_at": lambda q, a: _at_address(q) and (
        a is None or (type(a) is list and all(type(name) is str for name in a))),
    "function_entry": lambda q, a: _at_address(q) and (a is None or _is_int(a)),
    "call_site_target": lambda q, a: _at_address(q) and (
        a is None or _is_int(a) or type(a) is str),
    "call_site_targets": lambda q, a: _at_address(q) and (
        a is None or type(a) is str or (type(a) is list and all(map(_is_int, a)))),
    "tail_call_chain": lambda q, a: len(q) == 3 and _is_int(q[2]) and (
        _is_int(q[1]) or (type(q[1]) is tuple and all(map(_is_int, q[1])))) and (
        a is None or _is_name_pc_list(a)),
    # FrameNamer's own question: (caller pc, callee build id or path, callee pc).
    "tail_frames": lambda q, a: len(q) == 4 and _is_int(q[1]) and type(q[2]) is str
    and _is_int(q[3]) and _is_name_pc_list(a),
}

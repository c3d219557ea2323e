"""A memo of DWARF answers per build id, kept under the XDG cache directory.

Reading DWARF (pyelftools' import alone is ~30 ms, libc's first names ~60 ms) would be
most of a ``sframe stack`` run; the questions a run asks (names at a pc, call-site
targets, tail-call chains) are few and the same from one run to the next on the same
binaries. So every answer is remembered by build id, and the DWARF is opened only for
a question not seen before. Entries are written with :func:`pysframe.cachedir.store`;
a damaged entry is ignored and rewritten.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..cachedir import store
from .symbols import cache_entry

if TYPE_CHECKING:
    from .dwarf import DwarfNames

#: Bumped whenever the answers of DwarfNames change, so old memos are not reused.
MEMO_FORMAT = 3


class CachedDwarfNames:
    """The questions of :class:`~pysframe.symbolize.dwarf.DwarfNames`, answered from
    the memo when possible; the DWARF is opened on the first new question."""

    def __init__(self, path: str, build_id: bytes | None, *, use_cache: bool = True) -> None:
        self.path = path
        self.build_id = build_id
        self._real: DwarfNames | None = None
        self._opened = False
        self._dirty = False
        self._memo: dict[tuple[Any, ...], Any] = {}
        self._memo_path = (cache_entry("dwarf", build_id, f".m{MEMO_FORMAT}")
                           if build_id and use_cache else None)
        if self._memo_path is not None:
            self._memo = _load(self._memo_path)

    @property
    def memo_path(self) -> str | None:
        """Where this build id's memo is kept (None without a build id or a cache)."""
        return self._memo_path

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

            self._real = DwarfNames.open(self.path, self.build_id)
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
        if not self._dirty or self._memo_path is None:
            return
        store(self._memo_path, marshal.dumps(self._memo))
        self._dirty = False


def _load(path: str) -> dict[tuple[Any, ...], Any]:
    try:
        with open(path, "rb") as handle:
            memo = marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(memo, dict) or not all(isinstance(key, tuple) for key in memo):
        return {}
    return memo

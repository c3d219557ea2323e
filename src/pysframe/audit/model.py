"""The audit's facts as typed records: what :mod:`.facts` finds in one ELF file, what the
cache and the worker processes carry, what :mod:`.summary` counts.

They become JSON only at the edges (the cache entry, ``--json``): :meth:`FileFacts.as_json`
writes the keys the report has always had, leaving out what was not found, and
:meth:`FileFacts.from_json` reads a cache entry back (a malformed one raises
``ValueError``, and the file is judged again).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any


def shown(path: str) -> str:
    """A path as shown to a person (a page, a terminal): bytes that are not UTF-8 (kept as
    surrogates, so that the path still opens its file and the JSON keeps them) become
    U+FFFD. Escaping for the page is the caller's."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class FileKind(Enum):
    """What a file turned out to be."""

    NOT_ELF = "not ELF"
    ELF = "ELF"
    #: ELF that this tool cannot judge (a relocation type it does not apply, say): not
    #: damage in the file.
    UNSUPPORTED = "unsupported ELF"
    DAMAGED = "damaged ELF"
    #: Not read at all (permissions, a file that vanished, too large).
    UNREADABLE = "unreadable"
    #: A bug of ours met while judging it: not said to be the file's fault.
    INTERNAL = "internal error"


@dataclass(slots=True)
class SectionFacts:
    """One SFrame section."""

    name: str
    size: int
    version: int | None = None
    abi: str | None = None
    fdes: int | None = None
    fres: int | None = None
    #: Its header could not be read.
    error: str | None = None
    valid: bool = False
    first_error: str | None = None
    #: The kernel's verdict (linked files only).
    kernel_ok: bool | None = None
    kernel_refuses: str | None = None


@dataclass(slots=True)
class FileFacts:
    """One ELF file (or archive member), or why it is none."""

    path: str
    kind: FileKind
    size: int | None = None
    type: str | None = None
    machine: str | None = None
    sframe: list[SectionFacts] | None = None
    eh_frame_size: int | None = None
    functions: int | None = None
    without_sframe: int | None = None
    #: Why functions of the CFI have no SFrame FDE: reason -> count, most common first.
    reasons: dict[str, int] | None = None
    no_cfi_symbols: int | None = None
    cfi_disagreements: int | None = None
    #: Disagreements with the CFI by known cause: cause -> count, most common first.
    cfi_causes: dict[str, int] | None = None
    cfi_examples: list[str] | None = None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The report's keys: what was found (no ``None``), sections as objects."""
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            if item.name == "kind":
                value = value.value
            elif item.name == "sframe":
                value = [_section_json(section) for section in value]
            out[item.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileFacts:
        """Facts read back from :meth:`as_json` (``ValueError``: not facts)."""
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            raise ValueError("not audit facts")
        known = {item.name for item in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["kind"] = FileKind(values.get("kind"))
        if values.get("sframe") is not None:
            values["sframe"] = [_section_from_json(item) for item in values["sframe"]]
        try:
            return cls(**values)
        except TypeError as error:
            raise ValueError(f"not audit facts: {error}") from None


def _section_json(section: SectionFacts) -> dict[str, Any]:
    return {item.name: getattr(section, item.name) for item in fields(section)
            if getattr(section, item.name) is not None}


def _section_from_json(data: Any) -> SectionFacts:
    if not isinstance(data, dict):
        raise ValueError("not an SFrame section's facts")
    try:
        return SectionFacts(**data)
    except TypeError as error:
        raise ValueError(f"not an SFrame section's facts: {error}") from None

"""The audit's running totals: kept as counters while the results stream past (nothing per
file is held), then shown as a table or written into the JSON and HTML reports."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import Any

from ..records import field, record_class
from .model import FileFacts, FileKind, shown


@record_class
class Totals:
    """Counts over every result seen (and per directory, for the report)."""

    files: int = 0
    elf: int = 0
    damaged: int = 0
    unsupported: int = 0
    unreadable: int = 0
    #: Files that met a bug of ours (each is named in the JSON).
    internal: int = 0
    not_elf: int = 0
    with_sframe: int = 0
    versions: Counter[str] = field(default_factory=Counter)
    abis: Counter[str] = field(default_factory=Counter)
    invalid: int = 0
    kernel_ok: int = 0
    kernel_checked: int = 0
    functions: int = 0
    without_sframe: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    no_cfi_symbols: int = 0
    disagreements: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    files_disagreeing: int = 0
    sframe_bytes: int = 0
    eh_frame_bytes: int = 0
    #: Archives and packages whose members hold SFrame of more than one version.
    mixed: dict[str, list[str]] = field(default_factory=dict)
    #: Per directory: [ELF files, with SFrame, functions, without SFrame, SFrame bytes,
    #: .eh_frame bytes].
    directories: dict[str, list[int]] = field(default_factory=lambda: defaultdict(
        lambda: [0, 0, 0, 0, 0, 0]))
    _container: str = ""
    _container_versions: set[str] = field(default_factory=set)

    def add_file(self, path: str, results: list[FileFacts]) -> None:
        """One audited file's results (none: not ELF)."""
        self.files += 1
        if not results:
            self.not_elf += 1
        versions: set[str] = set()
        for facts in results:
            self._add(facts)
            versions |= {f"V{section.version}" for section in facts.sframe or []
                         if section.version is not None}
        if len(results) > 1 and len(versions) > 1:
            self.mixed[path] = sorted(versions)

    def _add(self, facts: FileFacts) -> None:
        if facts.kind == FileKind.UNREADABLE:
            self.unreadable += 1
            return
        if facts.kind == FileKind.INTERNAL:
            self.internal += 1
            return
        if facts.kind == FileKind.DAMAGED:
            self.damaged += 1
            return
        if facts.kind == FileKind.UNSUPPORTED:
            self.unsupported += 1
            return
        self.elf += 1
        sections = facts.sframe or []
        directory = self.directories[os.path.dirname(facts.path.split("(", 1)[0])]
        directory[0] += 1
        if sections:
            self.with_sframe += 1
            directory[1] += 1
        for section in sections:
            self.versions[f"V{section.version if section.version is not None else '?'}"] += 1
            self.abis[str(section.abi if section.abi is not None else "?")] += 1
            self.invalid += not section.valid
            if section.kernel_ok is not None:
                self.kernel_checked += 1
                self.kernel_ok += section.kernel_ok
            self.sframe_bytes += section.size
            directory[4] += section.size
        functions = facts.functions or 0
        self.functions += functions
        self.without_sframe += facts.without_sframe or 0
        directory[2] += functions
        directory[3] += facts.without_sframe or 0
        self.reasons.update(facts.reasons or {})
        self.no_cfi_symbols += facts.no_cfi_symbols or 0
        count = facts.cfi_disagreements or 0
        self.disagreements += count
        self.causes.update(facts.cfi_causes or {})
        self.files_disagreeing += count > 0
        self.eh_frame_bytes += facts.eh_frame_size or 0
        directory[5] += facts.eh_frame_size or 0

    @property
    def coverage(self) -> float:
        """The share of the CFI's functions that have an SFrame FDE, in percent."""
        return 100 * (self.functions - self.without_sframe) / self.functions if (
            self.functions) else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "files": self.files, "elf_files": self.elf, "damaged": self.damaged,
            "unsupported": self.unsupported,
            "unreadable": self.unreadable, "not_elf": self.not_elf,
            "internal_errors": self.internal,
            "with_sframe": self.with_sframe, "versions": dict(sorted(self.versions.items())),
            "abis": dict(sorted(self.abis.items())), "invalid_sections": self.invalid,
            "kernel_checked": self.kernel_checked, "kernel_ok": self.kernel_ok,
            "functions": self.functions, "without_sframe": self.without_sframe,
            "coverage_percent": round(self.coverage, 2),
            "reasons": dict(self.reasons.most_common()),
            "symbols_without_cfi": self.no_cfi_symbols,
            "cfi_disagreements": self.disagreements,
            "cfi_disagreement_causes": dict(self.causes.most_common()),
            "files_disagreeing": self.files_disagreeing,
            "sframe_bytes": self.sframe_bytes, "eh_frame_bytes": self.eh_frame_bytes,
            "mixed_versions": self.mixed,
            "directories": {name: dict(zip(("elf", "with_sframe", "functions",
                                            "without_sframe", "sframe_bytes",
                                            "eh_frame_bytes"), values, strict=True))
                            for name, values in sorted(self.directories.items())},
        }

    def table(self) -> list[tuple[str, str]]:
        """(label, value) rows for the terminal."""
        ratio = (f"{100 * self.sframe_bytes / self.eh_frame_bytes:.1f}% of .eh_frame"
                 if self.eh_frame_bytes else "-")
        rows = [
            ("files", f"{self.files:,} ({self.not_elf:,} not ELF, {self.unreadable:,} "
                      "unreadable)"),
            ("ELF objects", f"{self.elf:,} judged (archive and package members included), "
                            f"{self.damaged:,} damaged, {self.unsupported:,} not supported"
                            + (f", {self.internal:,} hit an internal error (please report "
                               "it; the JSON names them)" if self.internal else "")),
            ("with .sframe", f"{self.with_sframe:,} of {self.elf:,} ELF files"),
            ("versions", ", ".join(f"{k}: {v:,}" for k, v in sorted(self.versions.items()))
             or "-"),
            ("ABIs", ", ".join(f"{k}: {v:,}" for k, v in sorted(self.abis.items())) or "-"),
            ("invalid sections", f"{self.invalid:,}"),
            ("kernel would take", f"{self.kernel_ok:,} of {self.kernel_checked:,} sections"),
            ("coverage", f"{self.coverage:.1f}% of {self.functions:,} CFI functions have an "
                         f"SFrame FDE ({self.without_sframe:,} without)"),
            ("symbols without CFI", f"{self.no_cfi_symbols:,}"),
            ("disagreeing with CFI", f"{self.disagreements:,} rows in "
                                     f"{self.files_disagreeing:,} files"),
            ("size", f"{self.sframe_bytes:,} bytes of SFrame, {ratio}"),
        ]
        for reason, count in self.reasons.most_common(5):
            rows.append(("  no FDE: " + reason, f"{count:,}"))
        for cause, count in self.causes.most_common(5):
            rows.append(("  disagreeing: " + cause, f"{count:,} row{'s' if count != 1 else ''}"))
        for path, versions in sorted(self.mixed.items())[:10]:
            rows.append(("mixed versions",
                         f"{shown(path)}: {', '.join(versions)} (a 2.46 link fails)"))
        return rows

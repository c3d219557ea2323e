"""A machine-readable dump: the same information as the text dump, as JSON-ready data."""

from __future__ import annotations

from typing import Any

from .constants import ABI, FLAG_NAMES, INFO_SIGNAL_BIT, VERSION_3, FDEType, PCType
from .decode import SFrameReader
from .dump_style import RowFormatter, style_for
from .lookup import FrameRow, Rule, RuleKind, SFrameLookup

_U64 = (1 << 64) - 1


def _rule(rule: Rule) -> dict[str, Any]:
    if rule.kind == RuleKind.RETAIN:
        return {"kind": "same"}
    out: dict[str, Any] = {"kind": "cfa" if rule.kind == RuleKind.CFA else "register",
                           "offset": rule.offset, "deref": rule.deref}
    if rule.kind == RuleKind.REGISTER:
        out["regnum"] = rule.regnum
    return out


def _row_rules(row: FrameRow | None) -> dict[str, Any]:
    if row is None:
        return {}
    if row.outermost:
        return {"ra_undefined": True}
    return {"cfa": _rule(row.cfa), "ra": _rule(row.ra), "fp": _rule(row.fp)}


def section_json(reader: SFrameReader, name: str = ".sframe") -> dict[str, Any]:
    """Header, functions and rows of a section (addresses as integers)."""
    h = reader.header
    reader.check_fre_total()
    abi_name = ABI(h.abi).name if h.abi in ABI._value2member_map_ else f"unknown({h.abi})"
    flags = [text for bit, text in FLAG_NAMES.items() if h.flags & bit]
    header = {
        "version": h.version, "flags": flags, "flags_value": h.flags, "abi": abi_name,
        "abi_id": h.abi, "cfa_fixed_fp_offset": h.cfa_fixed_fp_offset,
        "cfa_fixed_ra_offset": h.cfa_fixed_ra_offset, "auxhdr_len": h.auxhdr_len,
        "num_fdes": h.num_fdes, "num_fres": h.num_fres, "fre_len": h.fre_len,
        "fdeoff": h.fdeoff, "freoff": h.freoff,
    }
    formatter = RowFormatter(reader, style_for(h.version, h.flags))
    lookup = SFrameLookup(reader) if h.abi in ABI._value2member_map_ else None
    functions = []
    for entry in reader.fdes():
        mask = entry.pc_type == PCType.MASK
        flex = entry.fde_type == FDEType.FLEX
        rows = []
        for k, fre in enumerate(reader.fres(entry)):
            row: dict[str, Any] = {
                "start": fre.start, "pc": (fre.start if mask else entry.start + fre.start) & _U64,
                "base_reg": "sp" if fre.base_reg else "fp", "data_words": list(fre.words),
                "word_size": fre.word_size, "ra_mangled": fre.mangled_ra,
                "text": formatter.columns(fre, flex).rstrip(),
            }
            if lookup is not None:
                try:
                    row.update(_row_rules(lookup.make_row(entry, k, fre)))
                except ValueError as error:
                    row["error"] = str(error)
            rows.append(row)
        functions.append({
            "index": entry.index, "pc": entry.start & _U64, "size": entry.size,
            "pc_type": "MASK" if mask else "INC", "fde_type": "FLEX" if flex else "DEFAULT",
            "fre_type": entry.fre_type, "rep_size": entry.rep_size,
            "pauth_key": "B" if entry.pauth_key_b else "A",
            "signal": bool(entry.info & INFO_SIGNAL_BIT) and h.version == VERSION_3,
            "num_fres": entry.num_fres, "rows": rows,
        })
    return {"name": name, "address": reader.address, "header": header, "functions": functions}

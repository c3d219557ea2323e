"""Generating SFrame from DWARF CFI, with the rules of GNU as (per function) and GNU ld
(PLT entries, merging, sorting)."""

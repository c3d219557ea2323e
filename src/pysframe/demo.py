"""The built-in demo section: a small x86-64 SFrame V3 table made by our own encoder.

It shows each kind of row a reader meets: frame-pointer functions, a leaf, a
DRAP (flexible) function, an outermost ``_start``, a signal trampoline and the
two PLT FDEs ld synthesizes. ``python -m pysframe.demo`` rewrites the shipped
``data/demo.sframe`` from :func:`build_demo_section`; a test checks the two agree.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from .format.constants import ABI, F_FDE_FUNC_START_PCREL, BaseReg, FDEType, PCType
from .format.encode import encode
from .format.model import FDE, FRE, Section

#: Where the demo section pretends to sit (like a small non-PIE program's .sframe).
DEMO_ADDRESS = 0x402000
DEMO_FILE = "demo.sframe"

SP = BaseReg.SP
FP = BaseReg.FP


def build_demo_section() -> Section:
    """The demo section as an object model (sorted, as ld would write it)."""
    plt0 = FDE(0x401020, 16, [FRE(0, (16,), SP), FRE(6, (24,), SP)])
    plt_n = FDE(0x401030, 48, [FRE(0, (8,), SP), FRE(11, (16,), SP)], pc_type=PCType.MASK,
                rep_size=16)
    start = FDE(0x401060, 38, [FRE(0, (8,), SP), FRE(4, ())])
    main = FDE(0x401090, 61, [FRE(0, (8,), SP), FRE(1, (16, -16), SP), FRE(4, (16, -16), FP),
                              FRE(60, (8, -16), SP)])
    leaf = FDE(0x4010d0, 9, [FRE(0, (8,), SP)])
    # DRAP: CFA in r10 (ctl 10<<3|1), then FP = *(rbp+0) and CFA = *(rbp-8).
    drap = FDE(0x4010e0, 80, [
        FRE(0, (0x39, 8), FP),
        FRE(5, (0x51, 0), FP),
        FRE(14, (0x51, 0, 0, 0x33, 0), FP),
        FRE(18, (0x33, -8, 0, 0x33, 0), FP),
        FRE(76, (0x39, 8), FP),
    ], fde_type=FDEType.FLEX)
    big_frame = FDE(0x401130, 300, [FRE(0, (8,), SP), FRE(7, (69640,), SP), FRE(290, (8,), SP)])
    sigreturn = FDE(0x401260, 9, [], signal=True)
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, flags=F_FDE_FUNC_START_PCREL,
                      cfa_fixed_ra_offset=-8, address=DEMO_ADDRESS,
                      fdes=[start, main, leaf, drap, big_frame, sigreturn, plt0, plt_n])
    section.sort_fdes()
    return section


def demo_bytes() -> bytes:
    """The shipped demo section's bytes."""
    return resources.files("pysframe").joinpath("data", DEMO_FILE).read_bytes()


def main() -> int:
    target = Path(__file__).with_name("data") / DEMO_FILE
    target.write_bytes(encode(build_demo_section()))
    sys.stdout.write(f"wrote {target}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Hypothesis strategies for valid SFrame sections of every version and ABI, as the
encoder writes them (the property tests decode them back and run every reader)."""

from __future__ import annotations

from hypothesis import strategies as st

from pysframe.format import ABI, FDE, FRE, BaseReg, FDEType, FREType, PCType, Section
from pysframe.format.constants import F_FDE_FUNC_START_PCREL, F_FDE_SORTED


@st.composite
def fres(draw: st.DrawFn, version: int, abi: ABI, fde_type: FDEType, size: int) -> list[FRE]:
    count = draw(st.integers(0, 6))
    limit = max(size, 1)
    starts = sorted(draw(st.sets(st.integers(1, limit - 1), max_size=count))) if limit > 1 else []
    starts = [0, *starts]
    out = []
    for start in starts:
        if fde_type == FDEType.FLEX:
            n = draw(st.sampled_from([2, 4, 5, 6]))
            words = [draw(st.integers(0, 40)) << 3 | 1, draw(st.integers(-300, 300))]
            if n == 4:
                words += [2, draw(st.integers(-64, 0))]
            elif n == 5:
                words += [0, 2, draw(st.integers(-64, 0))]
            elif n == 6:
                words += [draw(st.integers(0, 40)) << 3 | 1, 0, 2, -16]
        else:
            n_max = 2 if abi.is_amd64 else 3
            n = draw(st.integers(1 if version == 1 else 0, n_max))
            words = [draw(st.integers(-(2**31), 2**31 - 1)) for _ in range(n)]
        out.append(FRE(start, tuple(words), draw(st.sampled_from(list(BaseReg))),
                       draw(st.booleans()) and abi.is_aarch64))
    return out


@st.composite
def sections(draw: st.DrawFn) -> Section:
    version = draw(st.sampled_from([1, 2, 3]))
    abi = draw(st.sampled_from(list(ABI) if version > 1 else list(ABI)[:3]))
    address = draw(st.integers(0, 2**40))
    fdes = []
    pc = address + draw(st.integers(-(2**20), 2**20))
    for _ in range(draw(st.integers(0, 8))):
        size = draw(st.integers(1, 0x20000))
        fde_type = FDEType.FLEX if version == 3 and draw(st.booleans()) else FDEType.DEFAULT
        mask = draw(st.booleans()) and version > 1
        fdes.append(FDE(
            start=pc, size=size, fres=draw(fres(version, abi, fde_type, min(size, 16) if mask else size)),
            pc_type=PCType.MASK if mask else PCType.INC, fde_type=fde_type,
            pauth_key_b=abi.is_aarch64 and draw(st.booleans()),
            signal=version == 3 and draw(st.booleans()), rep_size=16 if mask else 0,
            fre_type=draw(st.sampled_from([None, FREType.ADDR4]))))
        pc += size + draw(st.integers(0, 64))
    flags = (F_FDE_FUNC_START_PCREL if version > 1 else 0) | draw(st.sampled_from([0, F_FDE_SORTED]))
    return Section(version=version, abi=abi, flags=flags,
                   cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0, fdes=fdes, address=address)

"""Hostile variants of an SFrame section, for the robustness tests and ``fuzz.mutate``."""

from __future__ import annotations

import random
import struct


def mutations(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    """Bit flips, byte stores, truncations, extensions and inflated counts."""
    out = []
    size = len(data)
    for _ in range(count):
        kind = rng.randrange(6)
        buf = bytearray(data)
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(size)
                buf[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            at = rng.randrange(size)
            buf[at] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif kind == 2:
            del buf[rng.randrange(size):]
        elif kind == 3:
            buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        elif kind == 4:
            field = rng.choice((8, 12, 16, 20, 24))  # num_fdes, num_fres, fre_len, fdeoff, freoff
            order = "<" if data[:2] == b"\xe2\xde" else ">"
            struct.pack_into(order + "I", buf, field,
                             rng.choice((0xFFFFFFFF, 0x7FFFFFFF, 0x10000, size, size * 2)))
        else:
            # inflate one FDE/attribute field near the start of the tables
            at = rng.randrange(28, min(size, 28 + 200))
            buf[at:at + 4] = b"\xff\xff\xff\xff"
        out.append(bytes(buf))
    return out

"""Every seed the harness derives comes from `derive_seed`: sha256 of the parts joined by "/",
cut to an integer. Stable across processes and machines (Python's hash() is not)."""
from __future__ import annotations

import hashlib


def derive_seed(*parts, bits: int = 60, byteorder: str = "big") -> int:
    """A `bits`-bit seed from any parts (run seed, round, purpose...): the first ceil(bits/8) bytes
    of sha256("/".join(parts)) read as a `byteorder` integer, less its lowest surplus bits.

    The defaults give the seeds of runs and rounds. The task splits use bits=48 and the sampler's
    per-row generators bits=63, byteorder="little" (torch's manual_seed takes < 2**63): the
    widths the frozen protocols were built with, kept so their sets and records stay the same."""
    if not 1 <= bits <= 256:
        raise ValueError(f"derive_seed: bits must be in 1..256, got {bits}")
    n = -(-bits // 8)
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:n], byteorder) >> (8 * n - bits)

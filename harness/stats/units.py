"""The one formatter of pass-rate differences in percentage points, for every text the harness writes."""
from __future__ import annotations


def pts(x: float | None, signed: bool = True, digits: int = 1) -> str:
    """A pass-rate difference (a fraction) in points: 0.05 -> "+5.0 pts" ("5.0 pts" unsigned; a spread such
    as a seed SD is unsigned, with `digits` 2: 0.0491 -> "4.91 pts"); None -> "n/a"."""
    if x is None:
        return "n/a"
    return f"{100 * x:{'+' if signed else ''}.{digits}f} pts"

"""The one formatter of pass-rate differences in percentage points, for every text the harness writes."""
from __future__ import annotations


def pts(x: float | None, signed: bool = True) -> str:
    """A pass-rate difference (a fraction) in points: 0.05 -> "+5.0 pts" ("5.0 pts" unsigned); None -> "n/a"."""
    if x is None:
        return "n/a"
    return f"{100 * x:+.1f} pts" if signed else f"{100 * x:.1f} pts"

"""Frontier scores: how useful a proposed task is, given k passing rollouts out of G.

Every score is a function ``f(k, G, valid=True, **params) -> float`` of the empirical solver
win rate p = k / G. The band keeps a task when ``admits(name, k, G)`` is true; the protocol names
which score (and its parameters) an arm uses. The shapes come from SPICE (2510.24684), its three
ablation rivals (R-Zero, Absolute-Zero-style, threshold) and the Self-Play SWE-RL injector reward
(2512.18552).

Values at G = 8 (k = 0..8), as the tests check them:

    k            0      1      2      3      4      5      6      7      8
    flat_top     0      0      0      0      1      0      0      0      0
    spice        0.044  0.372  0.823  0.988  1.000  0.988  0.823  0.372  0.044
    rzero        0      0.25   0.5    0.75   1      0.75   0.5    0.25   0
    azr          1      0.875  0.75   0.625  0.5    0.375  0.25   0.125  0
    threshold    0      1      1      1      1      1      1      1      0
    ssr          -0.8   0.775  0.55   0.325  0.1    -0.125 -0.35  -0.575 -0.8

What "admit" means for each score (see `admits`): the task is valid and its score is above the
score's floor -- 0 for all shapes except spice_variance, whose Gaussian is positive everywhere
and so admits whatever beats a degenerate (all-agree) group.

    flat_top        lo <= p <= hi (the registered band, [0.4, 0.6] by default)
    spice_variance  0 < k < G (any group that disagrees)
    rzero           0 < k < G
    threshold       0 < k < G
    azr             k < G (an impossible task, p = 0, is admitted: the flaw SPICE points out);
                    with degenerate_zero=True (the original Absolute Zero convention) 0 < k < G
    ssr_injector    0 < k < G and p < 1 / (1 + alpha) (k = 1..4 at G = 8, alpha = 0.8)
"""
from __future__ import annotations

import math
import numbers
from typing import Callable


class _Registry(dict):
    """A name -> function dict whose failed lookups name the known entries."""

    def __init__(self, kind: str, **entries):
        super().__init__(**entries)
        self.kind = kind

    def __missing__(self, name):
        raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self))}")


def _win_rate(k: int, G: int) -> float:
    """Check k (passing rollouts) and G (rollouts) and return p = k / G."""
    if isinstance(G, bool) or not isinstance(G, numbers.Integral) or G < 1:
        raise ValueError(f"G (rollouts per task) must be an integer >= 1, got {G!r}")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= k <= G:
        raise ValueError(f"k (passing rollouts) must be an integer in [0, G={G}], got {k!r}")
    return int(k) / int(G)


def flat_top(k: int, G: int, valid: bool = True, lo: float = 0.4, hi: float = 0.6,
             invalid_score: float = 0.0) -> float:
    """1.0 when the win rate p = k/G lies in the closed band [lo, hi], else 0.0."""
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"flat_top band must satisfy 0 <= lo <= hi <= 1, got lo={lo}, hi={hi}")
    p = _win_rate(k, G)
    if not valid:
        return float(invalid_score)
    eps = 1e-12  # k/G and the band edges are both decimal fractions; absorb rounding
    return 1.0 if lo - eps <= p <= hi + eps else 0.0


def spice_variance(k: int, G: int, valid: bool = True, var_opt: float = 0.25, tau: float = 0.01,
                   invalid_score: float = -0.1) -> float:
    """SPICE's Gaussian on the Bernoulli variance: exp(-(p(1-p) - var_opt)^2 / (2 tau)).

    Peaks at 1.0 for p = 0.5; 0.044 at p in {0, 1} with the defaults. An invalid task gets
    SPICE's malformed-question penalty rho = -0.1.
    """
    if tau <= 0:
        raise ValueError(f"spice_variance tau must be > 0, got {tau}")
    p = _win_rate(k, G)
    if not valid:
        return float(invalid_score)
    return math.exp(-((p * (1.0 - p) - var_opt) ** 2) / (2.0 * tau))


def rzero(k: int, G: int, valid: bool = True, invalid_score: float = 0.0) -> float:
    """R-Zero-style linear peak: 1 - 2|p - 1/2| (1 at p = 0.5, 0 at p in {0, 1})."""
    p = _win_rate(k, G)
    if not valid:
        return float(invalid_score)
    return 1.0 - 2.0 * abs(p - 0.5)


def azr(k: int, G: int, valid: bool = True, degenerate_zero: bool = False,
        invalid_score: float = 0.0) -> float:
    """Absolute-Zero-style difficulty reward 1 - p.

    Default convention is the one in SPICE's ablation (the seed's): p = 0 scores 1.0, so an
    impossible task is rewarded most. degenerate_zero=True gives the original Absolute Zero
    learnability convention: 0 at p in {0, 1}.
    """
    p = _win_rate(k, G)
    if not valid:
        return float(invalid_score)
    if degenerate_zero and k in (0, G):
        return 0.0
    return 1.0 - p


def threshold(k: int, G: int, valid: bool = True, invalid_score: float = 0.0) -> float:
    """1.0 for any non-degenerate group (0 < k < G), 0.0 when all rollouts agree."""
    _win_rate(k, G)
    if not valid:
        return float(invalid_score)
    return 1.0 if 0 < k < G else 0.0


def ssr_injector(k: int, G: int, valid: bool = True, alpha: float = 0.8) -> float:
    """Self-Play SWE-RL injector reward: -1 if invalid, -alpha at p in {0, 1}, else 1 - (1 + alpha) p."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"ssr_injector alpha must lie in (0, 1), got {alpha}")
    p = _win_rate(k, G)
    if not valid:
        return -1.0
    if k in (0, G):
        return -alpha
    return 1.0 - (1.0 + alpha) * p


SCORES: dict[str, Callable[..., float]] = _Registry(
    "frontier score",
    flat_top=flat_top,
    spice_variance=spice_variance,
    rzero=rzero,
    azr=azr,
    threshold=threshold,
    ssr_injector=ssr_injector,
)
DEFAULT_SCORE = "flat_top"


def score(name: str, k: int, G: int, valid: bool = True, **params) -> float:
    """The named frontier score of a task with k passing rollouts out of G."""
    return float(SCORES[name](k, G, valid, **params))


def admits(name: str, k: int, G: int, valid: bool = True, **params) -> bool:
    """Band decision: keep the task iff it is valid and its score is above the score's floor.

    The floor is 0, except for spice_variance (positive everywhere), whose floor is its value
    for a degenerate group (k = 0). The module docstring lists what this means per score.
    """
    s = score(name, k, G, valid, **params)
    floor = score(name, 0, G, True, **params) if name == "spice_variance" else 0.0
    return bool(valid and s > floor)

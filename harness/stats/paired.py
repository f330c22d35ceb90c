"""Statistical power of a paired binary comparison (two models on the same n probe items).

Only discordant items (one model passes, the other fails) carry information; the exact test is
a sign test (McNemar) on them. With p_d the discordance rate and d = p_10 - p_01 the difference
in pass rates (|d| <= p_d), Connor's (1987) normal approximation reads

    n d^2 = (z_{1-a} sqrt(p_d) + z_{power} sqrt(p_d - d^2))^2,

with z_{1-a} = z_{1-alpha/2} for a two-sided test and z_{1-alpha} for a one-sided one. Effects
and MDEs are fractions (0.11 = 11 pass-rate points). Example: mde_paired(128, 0.2) = 0.110.

These closed forms describe ONE pooled paired test (C's per-round confirm test reports its MDE with
them). They overstate what the readout's whole decision rule can detect (seed-level test, two-stage
interval, two contrasts): the rule's operating characteristic comes from simulation, harness.stats.power.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom, norm

ALTERNATIVES = ("two-sided", "greater")


def _check(n, p_discordant, alpha, alternative):
    if not n > 0:
        raise ValueError(f"n (paired items) must be > 0, got {n}")
    if not 0.0 < p_discordant <= 1.0:
        raise ValueError(f"p_discordant must lie in (0, 1], got {p_discordant}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")


def _z_alpha(alpha: float, alternative: str) -> float:
    return float(norm.ppf(1.0 - alpha / 2.0 if alternative == "two-sided" else 1.0 - alpha))


def _check_effect(effect, p_discordant):
    if abs(effect) > p_discordant + 1e-12:
        raise ValueError(f"effect |{effect}| cannot exceed p_discordant={p_discordant} "
                         f"(d = p_10 - p_01 and p_d = p_10 + p_01)")


def power_paired(n: float, p_discordant: float, effect: float, alpha: float = 0.05,
                 alternative: str = "two-sided") -> float:
    """Approximate power (Connor 1987) to detect a pass-rate difference `effect` over n pairs.

    Two-sided: the far (wrong-direction) tail is ignored, as in Connor's formula, so the sign of
    effect does not matter. "greater": power to show hi > lo for a signed effect.
    """
    _check(n, p_discordant, alpha, alternative)
    _check_effect(effect, p_discordant)
    d = abs(effect) if alternative == "two-sided" else effect
    num = math.sqrt(n) * d - _z_alpha(alpha, alternative) * math.sqrt(p_discordant)
    den = math.sqrt(max(p_discordant - d * d, 0.0))
    if den == 0.0:
        return 1.0 if num > 0 else 0.0
    return float(norm.cdf(num / den))


def mde_paired(n: float, p_discordant: float, alpha: float = 0.05, power: float = 0.8,
               alternative: str = "two-sided") -> float:
    """Minimum detectable effect (fraction) at the given power: Connor's formula solved for d.

    Raises ValueError when no effect up to p_discordant (the largest possible) is detectable.
    """
    _check(n, p_discordant, alpha, alternative)
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must lie in (0, 1), got {power}")
    za, zb = _z_alpha(alpha, alternative), float(norm.ppf(power))
    if za + zb <= 0:
        raise ValueError(f"power={power} is not above the test's size alpha={alpha}")

    def gap(d):  # sqrt(n) d - (z_a sqrt(p_d) + z_b sqrt(p_d - d^2)); zero at the MDE
        return math.sqrt(n) * d - za * math.sqrt(p_discordant) - zb * math.sqrt(max(p_discordant - d * d, 0.0))

    if gap(p_discordant) < 0:
        raise ValueError(f"n={n} pairs at p_discordant={p_discordant} cannot detect any effect "
                         f"<= {p_discordant} with power {power} at alpha {alpha}")
    return float(brentq(gap, 0.0, p_discordant, xtol=1e-12, rtol=1e-12))


def exact_power_sign_test(n: int, p_discordant: float, effect: float, alpha: float = 0.05,
                          alternative: str = "two-sided") -> float:
    """Power of the exact sign test by binomial enumeration (no approximation).

    Each of n items is discordant with probability p_d; a discordant item favours hi with
    probability q = (p_d + d) / (2 p_d). Given D = m discordant items, X ~ Binomial(m, q) favour
    hi, and the test rejects when the exact p-value (scipy.stats.binomtest's, at 0.5) is
    <= alpha. Only rejections in the effect's direction count, matching `power_paired`.
    """
    if isinstance(n, bool) or int(n) != n:
        raise ValueError(f"n (paired items) must be an integer for the exact test, got {n}")
    _check(n, p_discordant, alpha, alternative)
    _check_effect(effect, p_discordant)
    n = int(n)
    d = abs(effect) if alternative == "two-sided" else effect
    q = min(max((p_discordant + d) / (2.0 * p_discordant), 0.0), 1.0)
    sides = 2.0 if alternative == "two-sided" else 1.0
    total = 0.0
    for m in range(1, n + 1):
        x = np.arange(m + 1)
        p_upper = np.minimum(1.0, sides * binom.sf(x - 1, m, 0.5))  # P(X >= x) under H0
        reject = p_upper <= alpha * (1.0 + 1e-7)  # binomtest's relative tolerance
        total += binom.pmf(m, n, p_discordant) * binom.pmf(x[reject], m, q).sum()
    return float(total)


def mde_decision_rule(n_items: int, n_seeds: int, p_discordant: float, alpha: float = 0.05,
                      power: float = 0.8, intra_item_corr: float = 0.0,
                      alternative: str = "two-sided") -> float:
    """MDE of the readout's contrast, whose outcomes are paired per item x seed and averaged
    over seeds.

    Approximation: the n_items * n_seeds pairs are treated as a clustered sample with a design
    effect 1 + (n_seeds - 1) * intra_item_corr, i.e. n_eff = n_items * n_seeds / deff, and
    Connor's formula is applied at n_eff. intra_item_corr = 0 (seeds independent given the
    item: the optimistic bound, the one the pooled sign test assumes) gives n_items * n_seeds;
    intra_item_corr = 1 (every seed repeats the item's outcome) gives n_items.
    p_discordant is the per-pair discordance rate.
    """
    if n_items < 1 or n_seeds < 1:
        raise ValueError(f"n_items and n_seeds must be >= 1, got {n_items}, {n_seeds}")
    if not 0.0 <= intra_item_corr <= 1.0:
        raise ValueError(f"intra_item_corr must lie in [0, 1], got {intra_item_corr}")
    n_eff = n_items * n_seeds / (1.0 + (n_seeds - 1) * intra_item_corr)
    return mde_paired(n_eff, p_discordant, alpha, power, alternative)

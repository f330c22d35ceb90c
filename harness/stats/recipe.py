"""A verdict about the recipe: bases as a random factor.

The readout's rule (harness.stats.contrasts) labels each decision contrast on ONE base. The question is
about the training recipe, and another base of the recipe is another draw whose true effect moves with
it (harness.stats.design.bases: effect_base = effect_recipe + base_sd v). Here the labels are about the
recipe: every arm runs on K bases built by the recipe, each with the same n probe items, and the
contrast's effect is the mean over bases of each base's effect, over the population of probe items.

The model (pass-rate fractions). For one contrast hi - lo, the per-item difference of the seed means on
base b and item i,
    D_bi = mu + beta_b + gamma_i + e_bi,
beta_b the base's deviation (with the seeds' run spread and whatever else a base's gap shares over its
items), gamma_i the item x arm effect, SHARED by every base (the bases share the probe items: items are
crossed with bases), e_bi the rest (base x item, Bernoulli). The recipe's effect is mu, estimated by the
mean over bases and items, gap = mean_bi D_bi, with
    Var(gap) = sigma_base^2 / K + sigma_item^2 / n + sigma_resid^2 / (K n).
gamma does not average out over bases: a t-test over the K base gaps alone leaves out sigma_item^2 / n
and over-rejects when the items' part is large and bases vary little (tests/test_recipe_stats.py).

The test (`recipe_parts`, `recipe_bounds`). From the two-way table D (K x n), the crossed random-effects
mean squares MS_base = n var_b(gap_b), MS_item = K var_i(mean_b D_bi), MS_resid give the unbiased
    Var(gap) = (MS_base + MS_item - MS_resid) / (K n) = v_base + v_item,
    v_base = var_b(gap_b) / K                              (the t over bases' own variance)
    v_item = max(var_i(mean_b D_bi) - MS_resid / K, 0) / n  (the items' part, floored at 0),
the same split as the run bound's (harness.stats.checks.run_parts: the per-item difference's variance
less its within part, over n). The one-sided (1 - alpha) bounds are
    gap -+ sqrt(t(1 - alpha, K - 1)^2 v_base + t(1 - alpha, n - 1)^2 v_item)
(`checks.run_half_width`): each part at its own quantile, as the run bound puts them. Why not one
Satterthwaite df for the sum: the df is estimated from the same mean squares, so it grows towards n - 1
exactly when MS_base happens to be small, which is when the bound is already too narrow; the run bound
dropped that construction for this reason (docs/statistics.md). With each part at its own quantile the
bound is the t over bases (K - 1 df) where the bases' part dominates and a t over items (n - 1 df) where
the items' part does. MS_resid sits in v_base at the bases' K - 1 df although it has (K - 1)(n - 1):
conservative. Zero spread over the base gaps leaves the bases' variance unmeasured: the bounds are then
infinite (no evidence either way), as the run bound's. The level rests on roughly symmetric base effects:
with skewness 1 the side opposite the long tail reached 0.068 at 9 bases and 0.081 under a (6, 9, 12)
plan at nominal 0.05 (docs/statistics.md, "A verdict about the recipe").

Labels: `supported` = low > 0, `reversed` = high < 0, `ruled_out` = high < sesoi, with the rule's
precedence (contrasts.label_of: reversed, then ruled_out, then supported, else `not_supported`, the
rule's name for an inconclusive contrast). Every label tests the same quantity: the recipe's mean effect.

The sequential plan (`obf_plan`, `sequential_verdict`): registered looks at K_1 < ... < K_J bases; each
one-sided test (supported, reversed, ruled_out) spends its own alpha by the Lan-DeMets O'Brien-Fleming
function alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)) over t = K_j / K_J. The z boundaries come from
the joint normal of the look statistics (corr sqrt(K_i / K_j)) by scipy's multivariate normal cdf, and
each look's nominal level 1 - Phi(c_j) sets both quantiles of its bound (p-values matched at each
look's df). Stop at the first look where every decision contrast has a label other than
`not_supported`; at the last look the labels stand as read. Bases are read in their registered order
(the order they were built), never chosen by their results.

The outlier-base rule (`outlier_report`): base b's leave-one-out studentized gap
    r_b = (gap_b - mean_{-b}) / (sd_{-b} sqrt(1 + 1/(K - 1)))  ~ t(K - 2) under normal bases,
is flagged when |r_b| > t(1 - outlier_alpha / (2 K), K - 2) (Bonferroni over the K bases). A flagged base is
reported with the labels the other bases give (a sensitivity analysis); the verdict stands on ALL bases.

`label_stability`: each base's own labels beside the recipe's. `multi_bootstrap`: a percentile bootstrap
over bases then items (a sensitivity figure only: with few bases it is anti-conservative, as its level
test shows). `recipe_oc`: the rule's operating characteristics by simulation.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import expit
from scipy.stats import multivariate_normal, norm
from scipy.stats import t as student_t

from harness.stats.checks import run_half_width
from harness.stats.contrasts import LABELS, label_of, lo_index, outcome_of
from harness.stats.design.bases import arm_intercepts
from harness.stats.design.model import VarianceComponents
from harness.stats.design.records import mc_se
from harness.stats.design.simulate import run_effects
from harness.stats.results import sig as _sig

INCONCLUSIVE = "not_supported"  # the rule's label for a contrast neither shown nor ruled out
OUTLIER_ALPHA = 0.05            # the outlier rule's family-wise level over the K bases (Bonferroni)
BASE_LAWS = ("normal", "skewed", "outlier")
SKEW_SHAPE = 4.0                # "skewed": a standardised Gamma(4): skewness 1
OUTLIER_SHIFT = 5.0             # "outlier": one base of K_max shifted by 5 base SDs (centred: see `base_effects`)
CHUNK = 256                     # simulated experiments generated at once (bounds the memory, not the result)
MVN_EPS = 1e-8                  # absolute error of the joint normal cdf the boundaries are solved on


# ---- per-base summary measures ------------------------------------------------------------------

@dataclass(frozen=True)
class BaseSummary:
    """One contrast hi - lo on K bases sharing the same n probe items.
    gaps: (K,) each base's gap, hi's pass rate - lo's over seeds x items (fraction);
    diffs: (K, n) per-item difference of the two arms' seed means (fraction), gaps = diffs.mean(1);
    numerators: (K, n) int64, diffs x k_hi x k_lo exactly (the bootstrap sums these as integers);
    seeds: (k_hi, k_lo), seeds per base of each arm."""
    gaps: np.ndarray
    diffs: np.ndarray
    numerators: np.ndarray
    seeds: tuple

    @property
    def n_bases(self) -> int:
        return int(self.diffs.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.diffs.shape[1])

    def first(self, k: int) -> "BaseSummary":
        """The summary of the first k bases (registered order)."""
        return BaseSummary(self.gaps[:k], self.diffs[:k], self.numerators[:k], self.seeds)

    def without(self, b: int) -> "BaseSummary":
        """The summary without base index b."""
        keep = np.arange(self.n_bases) != b
        return BaseSummary(self.gaps[keep], self.diffs[keep], self.numerators[keep], self.seeds)


def _outcomes(y, name: str) -> np.ndarray:
    """y as an int64 (K, k, n) array of 0/1; ValueError naming `name` otherwise."""
    a = np.asarray(y)
    if a.ndim != 3 or 0 in a.shape:
        raise ValueError(f"base_summary: {name} must have shape (K bases, n_seeds, n_items) with none 0, "
                         f"got {a.shape}")
    bad = ~np.isin(a, (0, 1))
    if bad.any():
        raise ValueError(f"base_summary: {name} must hold 0/1 outcomes, got {a[bad].flat[0].item()!r}")
    return a.astype(np.int64)


def base_summary(hi, lo) -> BaseSummary:
    """The per-base summary measures of the contrast hi - lo. hi: (K, k_hi, n), lo: (K, k_lo, n) 0/1
    outcomes, base b of each on the same n probe items (one seed per arm per base is enough)."""
    h, w = _outcomes(hi, "hi"), _outcomes(lo, "lo")
    if (h.shape[0], h.shape[2]) != (w.shape[0], w.shape[2]):
        raise ValueError(f"base_summary: hi has {h.shape[0]} bases x {h.shape[2]} items, lo {w.shape[0]} x "
                         f"{w.shape[2]}; both arms need the same bases and probe items")
    k_hi, k_lo = h.shape[1], w.shape[1]
    num = k_lo * h.sum(1) - k_hi * w.sum(1)                         # (K, n) integers
    diffs = num / float(k_hi * k_lo)
    return BaseSummary(gaps=diffs.mean(1), diffs=diffs, numerators=num, seeds=(k_hi, k_lo))


# ---- the recipe-level test ------------------------------------------------------------------------

@dataclass(frozen=True)
class RecipeParts:
    """The recipe-level estimate and its variance parts for any leading shape S (arrays S):
    gap: mean over bases and items of the per-item differences (fraction);
    v_base: var over bases of their gaps (ddof 1) / K (fraction^2), on K - 1 df;
    v_item: the items' part, max(var over items of the base-mean difference - MS_resid / K, 0) / n."""
    gap: np.ndarray
    v_base: np.ndarray
    v_item: np.ndarray
    n_bases: int
    n_items: int


def recipe_parts(diffs) -> RecipeParts:
    """The parts of the recipe-level test from per-item differences diffs (..., K, n) (fraction): the
    crossed two-way mean squares, Var(gap) = (MS_base + MS_item - MS_resid) / (K n) = v_base + v_item."""
    d = np.asarray(diffs, dtype=np.float64)
    K, n = d.shape[-2:]
    if K < 2:
        raise ValueError(f"the recipe-level test needs at least 2 bases, got {K}")
    rows, cols = d.mean(-1), d.mean(-2)                                # (..., K), (..., n)
    grand = rows.mean(-1)
    ss_res = (((d - rows[..., None]) - (cols[..., None, :] - grand[..., None, None])) ** 2).sum((-2, -1))
    ms_res = ss_res / ((K - 1) * max(n - 1, 1))
    v_item = np.maximum(cols.var(-1, ddof=1) - ms_res / K, 0.0) / n if n > 1 else np.zeros_like(grand)
    return RecipeParts(gap=grand, v_base=rows.var(-1, ddof=1) / K, v_item=v_item, n_bases=K, n_items=n)


def recipe_bounds(parts: RecipeParts, alpha) -> tuple[np.ndarray, np.ndarray]:
    """One-sided (1 - alpha) low and high bounds on the recipe's effect (arrays like parts.gap): each
    variance part at its own quantile (`checks.run_half_width`); -inf / +inf where the base gaps show no
    spread (the bases' variance unmeasured)."""
    df = np.full(np.shape(parts.gap), float(parts.n_bases - 1))
    half = run_half_width(parts.v_base, parts.v_item, df, parts.n_items, float(alpha))
    informative = parts.v_base > 0
    return np.where(informative, parts.gap - half, -np.inf), np.where(informative, parts.gap + half, np.inf)


def recipe_labels(parts: RecipeParts, alpha, sesoi: float) -> np.ndarray:
    """The rule's label strings (like parts.gap) from the bounds at nominal one-sided level alpha."""
    low, high = recipe_bounds(parts, alpha)
    return np.asarray(label_of(ruled_out=high < sesoi, reversed_=high < 0, supported=low > 0))


@dataclass(frozen=True)
class RecipeTest:
    """The recipe-level test of one contrast on one set of bases (fractions; bounds None where the
    base gaps show no spread). alpha: the nominal one-sided level of each bound."""
    contrast: str
    n_bases: int
    n_items: int
    gap: float
    se: float
    v_base: float
    v_item: float
    alpha: float
    low: float | None
    high: float | None
    label: str

    def to_dict(self) -> dict:
        return {f.name: _rounded(getattr(self, f.name)) for f in fields(self)}


def _rounded(x):
    return _sig(x) if isinstance(x, float) else x


def recipe_test(summary: BaseSummary, alpha: float, sesoi: float, contrast: str = "") -> RecipeTest:
    """The recipe-level test of one contrast on all of `summary`'s bases at nominal one-sided level alpha."""
    p = recipe_parts(summary.diffs)
    low, high = (float(x) for x in recipe_bounds(p, alpha))
    finite = lambda x: x if math.isfinite(x) else None  # noqa: E731
    return RecipeTest(contrast=contrast, n_bases=p.n_bases, n_items=p.n_items, gap=float(p.gap),
                      se=math.sqrt(float(p.v_base + p.v_item)), v_base=float(p.v_base), v_item=float(p.v_item),
                      alpha=float(alpha), low=finite(low), high=finite(high),
                      label=str(recipe_labels(p, alpha, sesoi)))


def own_labels(summary: BaseSummary, alpha: float, sesoi: float) -> list[str]:
    """Each base's own label, as a one-base experiment would read it from that base alone: its gap with
    one-sided (1 - alpha) bounds from a t over its probe items (n - 1 df) on the per-item differences
    (K,) labels. Base and seed noise are not in it (one base, and one seed shows no seed spread): it is
    what the label-stability table sets beside the recipe's, never a verdict."""
    d = np.asarray(summary.diffs, dtype=np.float64)
    n = d.shape[1]
    half = student_t.ppf(1.0 - alpha, n - 1) * d.std(axis=1, ddof=1) / math.sqrt(n) if n > 1 else np.full(len(d), np.inf)
    gap = d.mean(axis=1)
    low, high = gap - half, gap + half
    return [str(x) for x in np.atleast_1d(label_of(ruled_out=high < sesoi, reversed_=high < 0, supported=low > 0))]


# ---- the group-sequential plan --------------------------------------------------------------------

def obf_spent(t, alpha: float) -> np.ndarray:
    """Lan-DeMets O'Brien-Fleming alpha spent by information fraction t in (0, 1] (one-sided total
    alpha): 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)); alpha at t = 1."""
    return 2.0 * norm.sf(norm.isf(alpha / 2.0) / np.sqrt(np.asarray(t, dtype=np.float64)))


def _look_corr(info: np.ndarray) -> np.ndarray:
    """Correlation of the look statistics: sqrt(t_i / t_j) for t_i <= t_j (independent increments)."""
    return np.sqrt(np.minimum.outer(info, info) / np.maximum.outer(info, info))


@lru_cache(maxsize=64)
def _obf_bounds(info: tuple, alpha: float) -> tuple:
    """z boundaries c_j with P(Z_1 < c_1, ..., Z_j < c_j) = 1 - alpha(t_j) for every j, solved look by
    look on the joint normal cdf (scipy, seeded: the same bounds every call)."""
    t = np.asarray(info)
    spent = obf_spent(t, alpha)
    bounds = [float(norm.isf(spent[0]))]
    for j in range(1, len(t)):
        joint = multivariate_normal(cov=_look_corr(t[: j + 1]), seed=np.random.default_rng(0), abseps=MVN_EPS,
                                    releps=0, maxpts=100_000 * (j + 1))
        cdf = lambda c: joint.cdf(np.r_[bounds, c])  # noqa: E731
        # c_j lies between the bound that spends all of alpha(t_j) at look j and the one spending its increment
        lo, hi = norm.isf(spent[j]) - 1e-6, norm.isf(spent[j] - spent[j - 1]) + 1e-6
        bounds.append(float(brentq(lambda c: cdf(c) - (1.0 - spent[j]), lo, hi, xtol=1e-9)))
    return tuple(bounds)


@dataclass(frozen=True)
class SequentialPlan:
    """Registered looks over bases and the boundaries every one-sided test uses (tuples, one per look):
    looks: bases read at each look, increasing; alpha: each test's one-sided total level;
    information: K_j / K_J; spent: cumulative alpha spent (Lan-DeMets OBF); z_bounds: the z boundary;
    nominal: each bound's one-sided nominal level at the look, 1 - Phi(z_j)."""
    looks: tuple
    alpha: float
    information: tuple
    spent: tuple
    z_bounds: tuple
    nominal: tuple

    @property
    def max_bases(self) -> int:
        return int(self.looks[-1])

    def to_dict(self) -> dict:
        return {k: ([_rounded(float(x)) if not isinstance(x, int) else x for x in v] if isinstance(v, tuple)
                    else _rounded(v)) for k, v in asdict(self).items()}


def _check_looks(looks, alpha) -> tuple:
    ok = (isinstance(looks, (list, tuple)) and len(looks) > 0
          and all(isinstance(k, int) and not isinstance(k, bool) for k in looks))
    if not ok or any(k < 2 for k in looks) or list(looks) != sorted(set(looks)):
        raise ValueError(f"looks: expected strictly increasing integers >= 2 (bases at each look), got {looks!r}")
    if not isinstance(alpha, (int, float)) or not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha: expected a one-sided level in (0, 0.5), got {alpha!r}")
    return tuple(int(k) for k in looks)


def obf_plan(looks: Sequence[int], alpha: float) -> SequentialPlan:
    """The group-sequential plan over bases: Lan-DeMets O'Brien-Fleming spending over K_j / K_J, its
    exact z boundaries and each look's nominal level. One look is the fixed design at alpha."""
    looks = _check_looks(looks, alpha)
    info = tuple(k / looks[-1] for k in looks)
    z = _obf_bounds(info, float(alpha))
    return SequentialPlan(looks=looks, alpha=float(alpha), information=info,
                          spent=tuple(float(x) for x in obf_spent(info, alpha)), z_bounds=z,
                          nominal=tuple(float(norm.sf(c)) for c in z))


@dataclass(frozen=True)
class Look:
    """One look of the plan: n_bases read, its nominal level and z boundary, each contrast's test and
    label, and whether every contrast is decisive (a label other than not_supported)."""
    n_bases: int
    nominal: float
    z_bound: float
    tests: dict
    labels: dict
    decisive: bool

    def to_dict(self) -> dict:
        return {"n_bases": self.n_bases, "nominal": _sig(self.nominal), "z_bound": _sig(self.z_bound),
                "tests": {k: t.to_dict() for k, t in self.tests.items()}, "labels": dict(self.labels),
                "decisive": self.decisive}


@dataclass(frozen=True)
class SequentialVerdict:
    """The plan read on the bases available. looks: every look read, in order; decided: False when the
    latest look was not decisive and the plan has later looks (next_look: the bases to reach before
    reading again); n_bases and labels: the last look read (final once decided); outcome: the rule's
    verdict (contrasts.outcome_of) when B-A and C-B are among the contrasts, once decided."""
    plan: SequentialPlan
    looks: tuple
    decided: bool
    n_bases: int
    labels: dict
    outcome: str | None
    next_look: int | None

    def to_dict(self) -> dict:
        return {"plan": self.plan.to_dict(), "looks": [x.to_dict() for x in self.looks], "decided": self.decided,
                "n_bases": self.n_bases, "labels": dict(self.labels), "outcome": self.outcome,
                "next_look": self.next_look}


def _bases_of(summaries: Mapping[str, BaseSummary]) -> tuple[int, int]:
    """(K, n) shared by every contrast's summary; ValueError otherwise."""
    if not summaries:
        raise ValueError("summaries: expected one BaseSummary per decision contrast, got none")
    shapes = {c: s.diffs.shape for c, s in summaries.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"summaries: every contrast needs the same bases x probe items, got {shapes}")
    return next(iter(shapes.values()))


def read_look(summaries: Mapping[str, BaseSummary], n_bases: int, alpha: float, sesoi: float,
              z_bound: float = math.nan) -> Look:
    """Every contrast's recipe-level test on the first n_bases bases at nominal level alpha."""
    tests = {c: recipe_test(s.first(n_bases), alpha, sesoi, c) for c, s in summaries.items()}
    labels = {c: t.label for c, t in tests.items()}
    return Look(n_bases=n_bases, nominal=alpha, z_bound=z_bound, tests=tests, labels=labels,
                decisive=all(lab != INCONCLUSIVE for lab in labels.values()))


def _outcome(labels: Mapping[str, str]) -> str | None:
    return str(outcome_of(labels["B-A"], labels["C-B"])) if {"B-A", "C-B"} <= set(labels) else None


def sequential_verdict(plan: SequentialPlan, summaries: Mapping[str, BaseSummary],
                       sesoi: float) -> SequentialVerdict:
    """The plan on the bases built so far (each contrast's BaseSummary, bases in registered order): every
    look the bases reach, up to the first decisive one; at the last look the labels stand as read."""
    K, _ = _bases_of(summaries)
    if K < plan.looks[0] or K > plan.max_bases:
        raise ValueError(f"summaries: {K} bases; the plan reads {list(plan.looks)} (between {plan.looks[0]} and "
                         f"{plan.max_bases} bases)")
    read = []
    for j, k in enumerate(plan.looks):
        if k > K:
            break
        read.append(read_look(summaries, k, plan.nominal[j], sesoi, plan.z_bounds[j]))
        if read[-1].decisive:
            break
    last = read[-1]
    decided = last.decisive or last.n_bases == plan.max_bases
    nxt = None if decided else plan.looks[len(read)]
    return SequentialVerdict(plan=plan, looks=tuple(read), decided=decided, n_bases=last.n_bases,
                             labels=dict(last.labels), outcome=_outcome(last.labels) if decided else None,
                             next_look=nxt)


def sequential_labels(plan: SequentialPlan, diffs, sesoi: float) -> tuple[np.ndarray, np.ndarray]:
    """One contrast's plan on R experiments at once: diffs (R, K_J, n). Returns (labels (J, R) at each
    look, the index of the look each experiment stops at (R,): its first decisive look, else the last)."""
    labels = np.stack([recipe_labels(recipe_parts(diffs[:, :k]), plan.nominal[j], sesoi)
                       for j, k in enumerate(plan.looks)])
    decisive = labels != INCONCLUSIVE
    decisive[-1] = True
    return labels, decisive.argmax(0)


# ---- the outlier-base rule --------------------------------------------------------------------------

def loo_studentized(gaps) -> np.ndarray:
    """Each base's leave-one-out studentized gap, (..., K) -> (..., K): (gap_b - mean of the others) over
    the others' SD x sqrt(1 + 1/(K - 1)); t(K - 2) under normal bases. inf where the others agree exactly
    and gap_b differs; 0 where all agree."""
    g = np.asarray(gaps, dtype=np.float64)
    K = g.shape[-1]
    if K < 3:
        raise ValueError(f"the outlier rule needs at least 3 bases, got {K}")
    dev = g - g.mean(-1, keepdims=True)
    ss_out = np.maximum((dev ** 2).sum(-1, keepdims=True) - K / (K - 1) * dev ** 2, 0.0)   # SS of the others
    num = K / (K - 1) * dev
    den = np.sqrt(ss_out / (K - 2) * K / (K - 1))
    with np.errstate(invalid="ignore"):
        lone = np.where(np.abs(num) > 1e-15, np.sign(num) * np.inf, 0.0)    # the others agree exactly
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), lone)


def outlier_critical(n_bases: int, outlier_alpha: float = OUTLIER_ALPHA) -> float:
    """Bonferroni critical value of |studentized gap| over n_bases bases: t(1 - a / (2 K), K - 2)."""
    return float(student_t.isf(outlier_alpha / (2.0 * n_bases), n_bases - 2))


@dataclass(frozen=True)
class OutlierReport:
    """The registered outlier-base rule on the bases a verdict rests on: per contrast each base's
    studentized gap (base id -> value) and the flagged ids; `flagged` over all contrasts (registered
    order); `without`: flagged id -> the labels the other bases give (a sensitivity analysis: the verdict
    stands on all bases)."""
    critical: float
    outlier_alpha: float
    studentized: dict
    flagged_by: dict
    flagged: tuple
    without: dict

    def to_dict(self) -> dict:
        return {"critical": _sig(self.critical), "outlier_alpha": _sig(self.outlier_alpha),
                "studentized": {c: {b: _sig(v) if math.isfinite(v) else str(v) for b, v in r.items()}
                                for c, r in self.studentized.items()},
                "flagged_by": {c: list(v) for c, v in self.flagged_by.items()}, "flagged": list(self.flagged),
                "without": {b: dict(v) for b, v in self.without.items()}}


def _check_ids(base_ids: Sequence[str], K: int) -> list[str]:
    """base_ids as strings, one distinct id per base; ValueError otherwise."""
    ids = [str(b) for b in base_ids]
    if len(ids) != K or len(set(ids)) != K:
        raise ValueError(f"base_ids: expected {K} distinct ids, one per base, got {list(base_ids)!r}")
    return ids


def outlier_report(summaries: Mapping[str, BaseSummary], base_ids: Sequence[str], alpha: float, sesoi: float,
                   outlier_alpha: float = OUTLIER_ALPHA) -> OutlierReport:
    """The outlier rule on every base of the summaries (ids in registered order); each flagged base's
    sensitivity labels come from the other bases at nominal level alpha (the verdict's look's)."""
    K, _ = _bases_of(summaries)
    ids = _check_ids(base_ids, K)
    crit = outlier_critical(K, outlier_alpha)
    stud = {c: dict(zip(ids, (float(x) for x in loo_studentized(s.gaps)))) for c, s in summaries.items()}
    by = {c: tuple(b for b in ids if abs(r[b]) > crit) for c, r in stud.items()}
    flagged = tuple(b for b in ids if any(b in v for v in by.values()))
    without = {b: {c: recipe_test(s.without(ids.index(b)), alpha, sesoi, c).label for c, s in summaries.items()}
               for b in flagged}
    return OutlierReport(critical=crit, outlier_alpha=float(outlier_alpha), studentized=stud, flagged_by=by,
                         flagged=flagged, without=without)


@dataclass(frozen=True)
class RecipeVerdict:
    """The verdict about the recipe (the sequential plan on all bases read) and the outlier rule on the
    bases it rests on."""
    sequential: SequentialVerdict
    outliers: OutlierReport | None   # None: fewer than 3 bases read

    def to_dict(self) -> dict:
        return {"sequential": self.sequential.to_dict(),
                "outliers": None if self.outliers is None else self.outliers.to_dict()}


def recipe_verdict(plan: SequentialPlan, summaries: Mapping[str, BaseSummary], base_ids: Sequence[str],
                   sesoi: float, outlier_alpha: float = OUTLIER_ALPHA) -> RecipeVerdict:
    """`sequential_verdict`, then `outlier_report` on the bases its labels rest on (the first n_bases)."""
    ids = _check_ids(base_ids, _bases_of(summaries)[0])
    seq = sequential_verdict(plan, summaries, sesoi)
    k = seq.n_bases
    used = {c: s.first(k) for c, s in summaries.items()}
    out = outlier_report(used, ids[:k], seq.looks[-1].nominal, sesoi, outlier_alpha) if k >= 3 else None
    return RecipeVerdict(sequential=seq, outliers=out)


# ---- label stability ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LabelStability:
    """Each base's own labels beside the recipe's. table: one row per base (columns `base`, then per
    contrast c: c (the base's label) and f"{c} agrees" (bool)); share: contrast -> label -> the share
    of bases with that label (every label of the rule, fractions summing to 1)."""
    table: pd.DataFrame
    share: dict


def _check_label(lab, where: str) -> str:
    if lab not in LABELS:
        raise ValueError(f"{where}: label {lab!r}; expected one of {list(LABELS)}")
    return lab


def label_stability(base_labels: Mapping[str, Mapping[str, str]], recipe_labels: Mapping[str, str]) -> LabelStability:
    """How far each base's own verdict agrees with the recipe's: base id -> contrast -> label, and the
    recipe's contrast -> label (every base must label every contrast of the recipe)."""
    if not base_labels or not recipe_labels:
        raise ValueError(f"label_stability: expected labels per base and the recipe's, got {len(base_labels)} "
                         f"base(s) and {len(recipe_labels)} recipe contrast(s)")
    contrasts = [c for c in recipe_labels]
    rows = []
    for base, labs in base_labels.items():
        missing = [c for c in contrasts if c not in labs]
        if missing:
            raise ValueError(f"base_labels[{base!r}]: lacks contrast(s) {missing}")
        row = {"base": str(base)}
        for c in contrasts:
            row[c] = _check_label(labs[c], f"base_labels[{base!r}][{c!r}]")
            row[f"{c} agrees"] = labs[c] == _check_label(recipe_labels[c], f"recipe_labels[{c!r}]")
        rows.append(row)
    table = pd.DataFrame(rows, columns=["base"] + [x for c in contrasts for x in (c, f"{c} agrees")])
    share = {c: {lab: float((table[c] == lab).mean()) for lab in LABELS} for c in contrasts}
    return LabelStability(table=table, share=share)


# ---- the percentile bootstrap over bases and items (sensitivity only) ---------------------------------

@dataclass(frozen=True)
class BootstrapInterval:
    """The Multi-Bootstrap with a base stage: percentile one-sided (1 - alpha) bounds on the recipe's
    effect (fractions). Anti-conservative with few bases: a sensitivity figure, never a label."""
    gap: float
    low: float
    high: float
    alpha: float
    n_resamples: int
    rng_seed: int

    def to_dict(self) -> dict:
        return {f.name: _rounded(getattr(self, f.name)) for f in fields(self)}


def bootstrap_draws(n_bases: int, n_items: int, n_resamples: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Resample weights: bases (B, K) and items (B, n) multinomial counts, in that order from rng;
    the items' set is shared by every base of a replicate (items are crossed with bases)."""
    wb = rng.multinomial(n_bases, np.full(n_bases, 1.0 / n_bases), size=n_resamples).astype(np.float64)
    wi = rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=n_resamples).astype(np.float64)
    return wb, wi


def bootstrap_sums(x, wb: np.ndarray, wi: np.ndarray) -> np.ndarray:
    """sum_b sum_i wb[r_b] wi[r_i] x[b, i] for each replicate: x (R, K, n) -> (R, B). Exact for integer x
    (every partial sum an integer below 2^53), so the order statistics are the same on every machine."""
    x = np.asarray(x, dtype=np.float64)
    return np.einsum("bk,rkb->rb", wb, x @ wi.T)


def bootstrap_bounds(x, alpha: float, wb: np.ndarray, wi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Percentile one-sided (1 - alpha) bounds on the mean of x over bases and items: x (R, K, n) -> (R,),
    (R,) in x's units (the registered order statistic, contrasts.lo_index)."""
    sums = bootstrap_sums(x, wb, wi)
    B, j = sums.shape[1], lo_index(wb.shape[0], alpha)
    part = np.partition(sums, (j, B - 1 - j), axis=1)
    scale = float(np.asarray(x).shape[-2] * np.asarray(x).shape[-1])
    return part[:, j] / scale, part[:, B - 1 - j] / scale


def multi_bootstrap(summary: BaseSummary, alpha: float, n_resamples: int = 9999,
                    rng_seed: int = 0) -> BootstrapInterval:
    """The percentile bootstrap over bases, then items, of one contrast (`BootstrapInterval`), seeded:
    the same seed gives the same bytes."""
    wb, wi = bootstrap_draws(summary.n_bases, summary.n_items, n_resamples, np.random.default_rng(rng_seed))
    low, high = bootstrap_bounds(summary.numerators[None], alpha, wb, wi)
    scale = float(summary.seeds[0] * summary.seeds[1])
    return BootstrapInterval(gap=float(summary.numerators.sum() / (scale * summary.numerators.size)),
                             low=float(low[0]) / scale, high=float(high[0]) / scale, alpha=float(alpha),
                             n_resamples=int(n_resamples), rng_seed=int(rng_seed))


# ---- the rule's operating characteristics, simulated --------------------------------------------------

@dataclass(frozen=True)
class RecipeDesign:
    """A design about the recipe to simulate. looks, alpha, sesoi: the plan and the rule; effect: the
    recipe's true effect (fraction); base_sd: SD over bases of a base's effect (fraction); base_law: the
    law of a base's standardised deviation (BASE_LAWS; `base_effects`); tail: +1 puts the long tail of
    "skewed" / the shifted base of "outlier" above, -1 below; n_items, seeds_per_base; item_sd,
    arm_item_sd, run_sd: the outcome model's logit SDs (harness.stats.design.model: item difficulty,
    item x arm effect shared by every base, a seed's run effect); mid_rate: the two arms' mean pass rate
    (each base's effect d puts hi at mid + d/2 and lo at mid - d/2); n_sims, seed: the simulation.
    Defaults: main's fitted components, rounded (item_sd 4.5, arm_item_sd 2.4; run SD 0.2)."""
    looks: tuple = (6, 9, 12)
    alpha: float = 0.05
    sesoi: float = 0.05
    effect: float = 0.0
    base_sd: float = 0.04
    base_law: str = "normal"
    tail: int = 1
    n_items: int = 1024
    seeds_per_base: int = 1
    item_sd: float = 4.5
    arm_item_sd: float = 2.4
    run_sd: float = 0.2
    mid_rate: float = 0.3
    outlier_shift: float = OUTLIER_SHIFT
    n_sims: int = 2000
    seed: int = 0

    def __post_init__(self):
        _check_looks(self.looks, self.alpha)
        if self.base_law not in BASE_LAWS:
            raise ValueError(f"base_law: expected one of {list(BASE_LAWS)}, got {self.base_law!r}")
        if self.tail not in (1, -1):
            raise ValueError(f"tail: expected +1 or -1, got {self.tail!r}")
        for name in ("n_items", "seeds_per_base", "n_sims"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < (2 if name == "n_items" else 1):
                raise ValueError(f"{name}: expected a positive integer, got {getattr(self, name)!r}")
        if not 0.0 < self.mid_rate < 1.0:
            raise ValueError(f"mid_rate: expected a pass rate in (0, 1), got {self.mid_rate!r}")
        if min(self.base_sd, self.item_sd, self.arm_item_sd, self.run_sd, self.outlier_shift) < 0:
            raise ValueError("base_sd, item_sd, arm_item_sd, run_sd and outlier_shift must be >= 0")

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else _rounded(v)) for k, v in asdict(self).items()}


def base_effects(law: str, R: int, K: int, rng: np.random.Generator, tail: int = 1,
                 shift: float = OUTLIER_SHIFT) -> np.ndarray:
    """Standardised base deviations v (R, K), each base's expectation 0:
    "normal": N(0, 1); "skewed": tail x (G - a) / sqrt(a), G ~ Gamma(a = SKEW_SHAPE) (variance 1,
    skewness tail x 2 / sqrt(a)); "outlier": N(0, 1) plus tail x shift on one base drawn uniformly among
    the K, less tail x shift / K on every base (so each base's expected deviation stays 0 and the
    recipe's effect is the mean over its bases, the outlier included)."""
    if law == "normal":
        return rng.standard_normal((R, K))
    if law == "skewed":
        return tail * (rng.standard_gamma(SKEW_SHAPE, (R, K)) - SKEW_SHAPE) / math.sqrt(SKEW_SHAPE)
    if law == "outlier":
        v = rng.standard_normal((R, K))
        v[np.arange(R), rng.integers(0, K, R)] += tail * shift
        return v - tail * shift / K
    raise ValueError(f"base_law: expected one of {list(BASE_LAWS)}, got {law!r}")


def _arm_rates(d: RecipeDesign, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(hi, lo) expected pass rates (R, K) from the deviations v, and the share of them clipped into
    [1/(2n), 1 - 1/(2n)] (the model has no intercept at a rate of 0 or 1)."""
    eff = d.effect + d.base_sd * v
    raw = np.stack([d.mid_rate + eff / 2.0, d.mid_rate - eff / 2.0])
    cap = 0.5 / d.n_items
    rates = np.clip(raw, cap, 1.0 - cap)
    return rates[0], rates[1], float((rates != raw).mean())


def _outcomes_of(mu: np.ndarray, item: np.ndarray, d: RecipeDesign, rng: np.random.Generator) -> np.ndarray:
    """One arm's 0/1 outcomes (c, K, k, n) bool: P(pass) = L(mu + item effect + run effect), mu (c, K),
    item (c, n) the item and item x arm effects (logit) shared by every base and seed."""
    c, K = mu.shape
    k, n = d.seeds_per_base, d.n_items
    run = run_effects(rng.standard_normal((c * K, k, 1)), d.run_sd, "normal").reshape(c, K, k, 1)
    eta = (mu[:, :, None, None] + item[:, None, None, :] + run).astype(np.float32)
    return rng.random((c, K, k, n), dtype=np.float32) < expit(eta)


def simulated_chunks(d: RecipeDesign, R: int, rng: np.random.Generator):
    """R simulated experiments of one contrast on the plan's K_J bases, CHUNK at a time: yields per-item
    differences of the seed means (c, K_J, n) (fraction). The outcome model is harness.stats.design's:
    item difficulty and item x arm effects drawn once per experiment (the bases share the probe items),
    a base's effect on the pass-rate scale (`_arm_rates`), a seed's run effect. The share of base rates
    clipped is `_arm_rates`' (`clipped_share`)."""
    K, n = d.looks[-1], d.n_items
    hi, lo, _ = _arm_rates(d, base_effects(d.base_law, R, K, rng, d.tail, d.outlier_shift))
    vc = VarianceComponents(control_rate=d.mid_rate, gate_rate=d.mid_rate, item_sd=d.item_sd,
                            arm_item_sd=d.arm_item_sd, run_sd={"hi": d.run_sd, "lo": d.run_sd})
    mu_hi, mu_lo = (arm_intercepts(vc, d.run_sd, d.seeds_per_base, r) for r in (hi, lo))
    for s in range(0, R, CHUNK):
        c = min(CHUNK, R - s)
        alpha, b_hi, b_lo = (rng.standard_normal((c, n)) for _ in range(3))
        y_hi = _outcomes_of(mu_hi[s:s + c], d.item_sd * alpha + d.arm_item_sd * b_hi, d, rng)
        y_lo = _outcomes_of(mu_lo[s:s + c], d.item_sd * alpha + d.arm_item_sd * b_lo, d, rng)
        yield y_hi.mean(2) - y_lo.mean(2)


def simulate_diffs(d: RecipeDesign, R: int, rng: np.random.Generator) -> np.ndarray:
    """`simulated_chunks` as one array (R, K_J, n) (fraction): for small R (R x K_J x n x 8 bytes)."""
    return np.concatenate(list(simulated_chunks(d, R, rng)))


def clipped_share(d: RecipeDesign) -> float:
    """The share of base rates `recipe_oc` clips at this design (its base draws, seeded as it seeds them)."""
    v = base_effects(d.base_law, d.n_sims, d.looks[-1], np.random.default_rng(d.seed), d.tail, d.outlier_shift)
    return _arm_rates(d, v)[2]


@dataclass(frozen=True)
class RecipeOC:
    """The plan's operating characteristics at one design (`recipe_oc`): share: label -> P(the plan ends
    with it); at_look: per look, label -> P(the plan stops there with it); expected_bases: E[bases read];
    max_bases: the most any simulated experiment read; mc_se: the Monte-Carlo s.e. of the largest share;
    clipped: the share of simulated base rates clipped into the model's range (0: the truth is exact)."""
    design: RecipeDesign
    plan: SequentialPlan
    share: dict
    at_look: tuple
    expected_bases: float
    max_bases: int
    mc_se: float
    clipped: float

    def to_dict(self) -> dict:
        return {"design": self.design.to_dict(), "plan": self.plan.to_dict(),
                "share": {k: _sig(v) for k, v in self.share.items()},
                "at_look": [{k: _sig(v) for k, v in x.items()} for x in self.at_look],
                "expected_bases": _sig(self.expected_bases), "max_bases": self.max_bases,
                "mc_se": _sig(self.mc_se), "clipped": _sig(self.clipped)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def recipe_oc(d: RecipeDesign) -> RecipeOC:
    """P(each label) under the sequential plan, per look, and the bases it reads, over d.n_sims
    simulated experiments (numpy Generator(d.seed): the same design gives the same bytes)."""
    plan = obf_plan(d.looks, d.alpha)
    parts = [sequential_labels(plan, x, d.sesoi) for x in simulated_chunks(d, d.n_sims, np.random.default_rng(d.seed))]
    labels, stop = np.concatenate([p[0] for p in parts], axis=1), np.concatenate([p[1] for p in parts])
    final = labels[stop, np.arange(d.n_sims)]
    share = {lab: float((final == lab).mean()) for lab in LABELS}
    at_look = tuple({lab: float(((stop == j) & (final == lab)).mean()) for lab in LABELS}
                    for j in range(len(plan.looks)))
    used = np.asarray(plan.looks)[stop]
    return RecipeOC(design=d, plan=plan, share=share, at_look=at_look, expected_bases=float(used.mean()),
                    max_bases=int(used.max()), mc_se=mc_se(max(share.values()), d.n_sims), clipped=clipped_share(d))

"""The readout's registered analysis, as pure functions over the final-round probe outcomes.

Input `items`: a pandas DataFrame with one row per arm x seed x probe item and columns
    arm (str: "A", "B", "C", ...), seed (int), item (int probe index), passed (0/1).
Every arm must hold the same complete seed x item grid.

Input `spec`: the protocol's decision spec (decision.yaml + bootstrap.yaml), read and checked by `rule_spec`
(a harness.stats.results.RuleSpec; `validate_spec` gives its normalised dict):
    alpha: 0.05              # size of every one-sided test (sign test, seed test, each interval end)
    sesoi: 0.05              # smallest effect size of interest (pass-rate fraction)
    power: 0.8               # the power the design analysis must reach at the sesoi
    contrasts: [[C, B], [B, A]]
    spread_rule: {test: welch}                    # or {test: range, multiplier: 1.0}
    bootstrap: {n_resamples: 9999, method: percentile, confidence_level: 0.90, rng_seed: 20261129}

The unit of inference. Seeds are replicates of a training run, not of an item, so nothing here pairs
seed s of one arm with seed s of another, and every number is invariant to how seeds are labelled:
  * sign test: per item the net difference d_i = sum_s hi_is - sum_s lo_is; an exact one-sided
    binomial test on the signs of the non-zero d_i (items are the independent unit);
  * interval: a two-stage bootstrap. Each replicate resamples each arm's seeds with replacement
    (independently per arm: the runs are independent), then the items with ONE index set shared
    by both arms (the contrast stays paired by item). The seeds of an arm enter in a canonical,
    label-free order (by pass count, then by outcome bits), so relabelling seeds cannot change a
    draw. The registered interval is two-sided at level 1 - 2 alpha: each end is a one-sided
    (1 - alpha) bound, the level of the sign and seed tests;
  * beyond the seed spread: a one-sided Welch t-test on the per-seed pass rates of BOTH arms
    (run-to-run variation of either arm can explain a gap); `range` (gap > multiplier x the larger
    of the two arms' seed ranges) is a registered alternative. Zero seed variance in both arms, or
    one seed, is no evidence of a gap beyond the spread: p = 1 (scipy would give t = +-inf);
  * the run bound (`run_bound`): gap -+ sqrt(t_k^2 (s_hi^2/k + s_lo^2/k) + t_n^2 sigma_items^2/n),
    t_k = t(1 - alpha, k - 1), t_n = t(1 - alpha, n - 1): a one-sided bound that carries both arms'
    run spread, on the degrees of freedom of one arm's seeds, and the item sampling, on the items'
    (each variance part at its own quantile: docs/statistics.md). None of
    the other three tests holds its level alone when runs differ (the sign test ignores run
    spread, Welch treats the probe set as fixed, the bootstrap's seed stage under-counts run
    variance with few seeds); every label requires the run bound as well, and an intersection of
    tests keeps the level of the one that is valid alone (docs/statistics.md: the measured levels).
Bootstrap statistics are integer numerators on the (1 / (items x seeds)) grid and the endpoints are
order statistics of them (percentile or basic method, no bias correction): a BCa correction counts
replicates tied with the observed value, which floating-point noise on the grid decides; here no tie
can move an endpoint.

Labels (one per contrast; precedence top to bottom):
    reversed       hi is significantly LOWER: the mirror test holds (sign test, interval, seed test,
                   run bound's upper end < 0)
    ruled_out      the interval's upper end AND the run bound's upper end lie below the sesoi: no
                   advantage as large as the sesoi (such a contrast never counts as support)
    supported      sign test p < alpha, interval's lower end > 0, the seed rule holds and the run
                   bound's lower end > 0
    not_supported  none of these: the data neither show nor rule out an advantage

Output: typed records (harness.stats.results) whose `to_dict` holds ints, strings, bools and floats
rounded to 10 significant digits, so that json.dumps(..., sort_keys=True) is byte-identical across runs.

The same core (`evaluate`) runs on a stack of R simulated experiments; harness.stats.power uses it for
the operating characteristic, so the design analysis applies exactly the readout's decision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binom
from scipy.stats import t as student_t

from harness.stats.checks import run_half_width
from harness.stats.results import (AnalysisResult, ArmResult, BootstrapSpec, ContrastResult, ContrastSays, Labelled,
                                   RangeSummary, RuleDecision, RuleSpec, RunBoundSummary, SpreadRule, WelchSummary)
from harness.stats.results import sig as _sig

COLUMNS = ("arm", "seed", "item", "passed")
SPEC_KEYS = {"alpha", "sesoi", "contrasts", "spread_rule", "bootstrap", "power"}
SPEC_DEFAULTS = {"power": 0.8}
SPREAD_TESTS = ("welch", "range")
BOOTSTRAP_KEYS = {"n_resamples", "method", "confidence_level", "rng_seed"}
BOOTSTRAP_METHODS = ("percentile", "basic")  # no bias correction: grid ties cannot move an endpoint
DECISION_CONTRASTS = (("B", "A"), ("C", "B"))  # the decision rule needs both
LABELS = ("supported", "not_supported", "ruled_out", "reversed")
OUTCOMES = ("keep_both", "drop_heircommit", "loop_earns_nothing", "not_resolved")


# ---- the decision spec ----------------------------------------------------------------------

def _spec_error(msg: str) -> ValueError:
    return ValueError(f"decision spec: {msg}")


def _keys(d: Any, allowed: set[str], required: set[str], where: str) -> None:
    if not isinstance(d, dict):
        raise _spec_error(f"{where or 'spec'} must be a mapping, got {type(d).__name__}")
    prefix = f"{where}." if where else ""
    for k in sorted(required - set(d)):
        raise _spec_error(f"missing key '{prefix}{k}'")
    for k in sorted(set(d) - allowed):
        raise _spec_error(f"unknown key '{prefix}{k}'; expected one of {sorted(allowed)}")


def _number(v: Any, key: str, lo: float, hi: float, lo_open=True, hi_open=True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _spec_error(f"'{key}' must be a number, got {v!r}")
    if (v <= lo if lo_open else v < lo) or (v >= hi if hi_open else v > hi):
        raise _spec_error(f"'{key}' must lie in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}, got {v!r}")
    return float(v)


def spread_rule_of(rule: Any) -> SpreadRule:
    """{test: welch} or {test: range, multiplier: m >= 0} as a SpreadRule; ValueError naming the key otherwise."""
    if not isinstance(rule, dict) or rule.get("test") not in SPREAD_TESTS:
        got = rule.get("test") if isinstance(rule, dict) else rule
        raise _spec_error(f"'spread_rule.test' must be one of {list(SPREAD_TESTS)}, got {got!r}")
    test = rule["test"]
    if test == "welch":
        _keys(rule, {"test"}, {"test"}, "spread_rule")
        return SpreadRule("welch")
    _keys(rule, {"test", "multiplier"}, {"test", "multiplier"}, "spread_rule")
    return SpreadRule("range", _number(rule["multiplier"], "spread_rule.multiplier", 0.0, math.inf, lo_open=False))


def validate_spread_rule(rule: Any) -> dict:
    """{test: welch} or {test: range, multiplier: m >= 0}, normalised; ValueError naming the key otherwise."""
    return spread_rule_of(rule).to_dict()


def _contrast_pairs(contrasts: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(contrasts, (list, tuple)) or not contrasts:
        raise _spec_error(f"'contrasts' must be a non-empty list of [hi, lo] pairs, got {contrasts!r}")
    pairs = []
    for i, c in enumerate(contrasts):
        if (not isinstance(c, (list, tuple)) or len(c) != 2 or not all(isinstance(a, str) for a in c)
                or c[0] == c[1]):
            raise _spec_error(f"'contrasts[{i}]' must be a pair of two different arm names, got {c!r}")
        pairs.append((c[0], c[1]))
    for hi, lo in DECISION_CONTRASTS:
        if (hi, lo) not in pairs:
            raise _spec_error(f"'contrasts' must include [{hi}, {lo}] for the decision rule, got "
                              f"{[list(p) for p in pairs]}")
    return tuple(pairs)


def _bootstrap_of(boot: Any, alpha: float) -> BootstrapSpec:
    _keys(boot, BOOTSTRAP_KEYS, BOOTSTRAP_KEYS, "bootstrap")
    for key in ("n_resamples", "rng_seed"):
        v = boot[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "n_resamples" else 0):
            raise _spec_error(f"'bootstrap.{key}' must be an integer >= {1 if key == 'n_resamples' else 0}, got {v!r}")
    method = boot["method"]
    if not isinstance(method, str) or method.lower() not in BOOTSTRAP_METHODS:
        raise _spec_error(f"'bootstrap.method' must be one of {list(BOOTSTRAP_METHODS)} (any case; no bias-"
                          f"corrected method: ties on the outcome grid would move its endpoints), got {method!r}")
    level = _number(boot["confidence_level"], "bootstrap.confidence_level", 0.0, 1.0)
    if abs(level - (1.0 - 2.0 * alpha)) > 1e-9:
        raise _spec_error(f"'bootstrap.confidence_level' must be 1 - 2 x alpha = {1.0 - 2.0 * alpha:.6g} "
                          f"(each end of the two-sided interval is a one-sided bound at alpha), got {level!r}")
    lo_index(boot["n_resamples"], alpha)  # enough resamples for the order statistic
    return BootstrapSpec(n_resamples=boot["n_resamples"], method=method.lower(), confidence_level=level,
                         rng_seed=boot["rng_seed"])


def rule_spec(spec: dict | RuleSpec) -> RuleSpec:
    """Check a decision spec (a dict: decision.yaml + bootstrap.yaml) and return it typed, optional keys
    filled in; a RuleSpec is returned as is. Raises ValueError naming the offending key (e.g. "missing key
    'bootstrap.rng_seed'")."""
    if isinstance(spec, RuleSpec):
        return spec
    _keys(spec, SPEC_KEYS, SPEC_KEYS - set(SPEC_DEFAULTS), "")
    full = {**SPEC_DEFAULTS, **spec}
    alpha = _number(full["alpha"], "alpha", 0.0, 0.5)
    sesoi = _number(full["sesoi"], "sesoi", 0.0, 1.0, lo_open=False)
    power = _number(full["power"], "power", 0.0, 1.0)
    pairs = _contrast_pairs(full["contrasts"])
    return RuleSpec(power=power, alpha=alpha, sesoi=sesoi, contrasts=pairs, spread_rule=spread_rule_of(full["spread_rule"]),
                    bootstrap=_bootstrap_of(full["bootstrap"], alpha))


def validate_spec(spec: dict) -> dict:
    """Check a decision spec and return a normalised copy (optional keys filled in): `rule_spec`'s dict.

    Raises ValueError naming the offending key (e.g. "missing key 'bootstrap.rng_seed'").
    """
    return rule_spec(spec).to_dict()


def lo_index(n_resamples: int, alpha: float) -> int:
    """0-based order statistic of the lower bound among n_resamples sorted replicates: the
    floor(alpha (B + 1))-th smallest (B = 9999, alpha 0.05: the 500th); the upper bound is the
    same rank from the top."""
    j = int(math.floor(alpha * (n_resamples + 1) + 1e-9)) - 1
    if j < 0:
        raise _spec_error(f"'bootstrap.n_resamples' {n_resamples} is too few for a bound at alpha {alpha}: "
                          f"need at least {math.ceil(1 / alpha - 1)}")
    return j


# ---- the probe outcomes ---------------------------------------------------------------------

def check_items(items: pd.DataFrame) -> pd.DataFrame:
    """Check the outcome table; return it with canonical dtypes, sorted by arm, seed, item."""
    if not isinstance(items, pd.DataFrame):
        raise ValueError(f"items must be a pandas DataFrame, got {type(items).__name__}")
    missing = [c for c in COLUMNS if c not in items.columns]
    if missing:
        raise ValueError(f"items: missing column(s) {missing}; expected {list(COLUMNS)}")
    df = items.loc[:, list(COLUMNS)]
    if len(df) == 0 or df.isna().any().any():
        raise ValueError("items: must be non-empty with no missing values")
    bad = df.loc[~df["passed"].isin([0, 1, True, False]), "passed"]
    if len(bad):
        raise ValueError(f"items: 'passed' must be 0 or 1, got {bad.iloc[0]!r}")
    df = df.astype({"arm": str, "seed": int, "item": int, "passed": int})
    dup = df.duplicated(["arm", "seed", "item"])
    if dup.any():
        row = df[dup].iloc[0]
        raise ValueError(f"items: duplicate row for arm={row.arm!r} seed={row.seed} item={row.item}")
    seeds, probes = sorted(df["seed"].unique()), sorted(df["item"].unique())
    for arm, g in df.groupby("arm"):
        if len(g) != len(seeds) * len(probes):
            have = set(zip(g["seed"], g["item"]))
            gap = next((s, i) for s in seeds for i in probes if (s, i) not in have)
            raise ValueError(f"items: arm {arm!r} lacks {len(seeds) * len(probes) - len(g)} of the "
                             f"{len(seeds)} seeds x {len(probes)} items grid, e.g. seed={gap[0]} item={gap[1]}")
    return df.sort_values(["arm", "seed", "item"]).reset_index(drop=True)


def outcome_arrays(items: pd.DataFrame) -> dict[str, np.ndarray]:
    """arm -> uint8 array (1, n_seeds, n_items) of outcomes: the core's input for one experiment
    (leading axis: replicates). Seed order is irrelevant (the core canonicalises it)."""
    df = check_items(items)
    n_seeds, n_items = df["seed"].nunique(), df["item"].nunique()
    return {str(arm): g["passed"].to_numpy(np.uint8).reshape(1, n_seeds, n_items)
            for arm, g in df.groupby("arm")}


def _need_arm(y: dict, arm: str) -> np.ndarray:
    if arm not in y:
        raise ValueError(f"items: no rows for arm {arm!r}; arms present: {sorted(y)}")
    return y[arm]


def pass_rates(items: pd.DataFrame) -> pd.DataFrame:
    """Pass rate per arm (rows) x seed (columns), each over all probe items."""
    df = check_items(items)
    return df.pivot_table(index="arm", columns="seed", values="passed", aggfunc="mean")


def arm_means(items: pd.DataFrame) -> pd.Series:
    """Mean pass rate per arm over items x seeds."""
    df = check_items(items)
    return df.groupby("arm")["passed"].mean()


# ---- the vectorised core: R experiments at once -----------------------------------------------

def canonical_seeds(y: np.ndarray) -> np.ndarray:
    """Reorder each experiment's seeds into a label-free order: by pass count, then by the outcome
    bits. y: (R, k, n) 0/1 -> (R, k, n). Seeds with equal outcomes are interchangeable, so the
    result is the same for every permutation of the seed axis."""
    words = np.packbits(y.astype(np.uint8), axis=-1)              # (R, k, ceil(n / 8))
    keys = np.concatenate([np.moveaxis(words, -1, 0)[::-1], y.sum(-1, dtype=np.int64)[None]])
    order = np.lexsort(keys, axis=-1)                              # last key (pass count) is primary
    return np.take_along_axis(y, order[..., None], axis=1)


@dataclass(frozen=True)
class BootstrapDraws:
    """The registered resamples, drawn once from Generator(rng_seed) in a fixed order.
    items: (B, n) multinomial item counts, shared by both arms of a contrast;
    seeds_hi, seeds_lo: (B, k) seed multiplicities, independent per arm."""
    items: np.ndarray
    seeds_hi: np.ndarray
    seeds_lo: np.ndarray

    @classmethod
    def draw(cls, n_resamples: int, n_items: int, n_seeds: int, rng_seed: int) -> "BootstrapDraws":
        rng = np.random.default_rng(rng_seed)
        items = rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=n_resamples)
        hi = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=n_resamples)
        lo = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=n_resamples)
        return cls(items.astype(np.float32), hi.astype(np.float32), lo.astype(np.float32))


def item_resampled(y: np.ndarray, draws: BootstrapDraws) -> np.ndarray:
    """Passes of each seed over each replicate's resampled items, as exact integers.
    y: (R, k, n) canonical -> (B, R, k) float32. float32 matmul is exact here: every partial sum is
    an integer below 2^24 (n < 2^24 items)."""
    R, k, n = y.shape
    return (draws.items @ y.reshape(R * k, n).T.astype(np.float32)).reshape(-1, R, k)


def _resampled_sums(per_seed: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Total passes of one arm in each two-stage replicate: item_resampled output (B, R, k) weighted
    by the replicate's seed multiplicities (B, k). Returns (R, B) float64 holding integers."""
    return np.einsum("brk,bk->rb", per_seed, seeds).astype(np.float64)  # exact: integer products and sums


def _bounds(num_obs: np.ndarray, num_boot: np.ndarray, alpha: float, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Interval ends on the integer numerator scale: order statistics of num_boot (R, B)."""
    B = num_boot.shape[1]
    j = lo_index(B, alpha)
    part = np.partition(num_boot, (j, B - 1 - j), axis=1)
    q_lo, q_hi = part[:, j], part[:, B - 1 - j]
    if method == "basic":
        return 2 * num_obs - q_hi, 2 * num_obs - q_lo
    return q_lo, q_hi


@dataclass(frozen=True)
class SignTest:
    """The exact one-sided sign test on R experiments: arrays (R,)."""
    n_pos: np.ndarray      # items whose net difference favours hi
    n_neg: np.ndarray      # items whose net difference favours lo
    p_greater: np.ndarray  # p-value of hi > lo
    p_less: np.ndarray     # p-value of lo > hi


@dataclass(frozen=True)
class WelchTest:
    """The one-sided Welch t-test on per-seed pass rates, R experiments: arrays (R,)."""
    t: np.ndarray
    df: np.ndarray
    p_greater: np.ndarray  # p-value of hi > lo
    p_less: np.ndarray     # p-value of lo > hi


@dataclass(frozen=True)
class RangeTest:
    """The seed rule "range", R experiments: the threshold (R,) the gap must exceed (pass-rate fraction)."""
    threshold: np.ndarray


@dataclass(frozen=True)
class RunBound:
    """The run bound (`run_bound`), R experiments: arrays (R,)."""
    low: np.ndarray          # one-sided (1 - alpha) low end on the gap (fraction; -inf when uninformative)
    high: np.ndarray         # one-sided (1 - alpha) high end (fraction; +inf when uninformative)
    se: np.ndarray           # standard error of the gap (fraction; inf when uninformative)
    df: np.ndarray           # degrees of freedom of the seeds' part (k - 1; 0 when uninformative)
    informative: np.ndarray  # bool: some arm shows seed spread


def sign_test(d: np.ndarray) -> SignTest:
    """Exact one-sided binomial (sign) test on per-item net differences d (R, n), both directions.
    p_greater = P(X >= n_pos), X ~ Binomial(n_pos + n_neg, 1/2), as scipy.stats.binomtest(...,
    alternative='greater'); p = 1 where no item differs."""
    pos, neg = (d > 0).sum(-1), (d < 0).sum(-1)
    m = pos + neg
    p_gt = np.where(m > 0, binom.sf(pos - 1, np.maximum(m, 1), 0.5), 1.0)
    p_lt = np.where(m > 0, binom.sf(neg - 1, np.maximum(m, 1), 0.5), 1.0)
    return SignTest(n_pos=pos, n_neg=neg, p_greater=np.minimum(p_gt, 1.0), p_less=np.minimum(p_lt, 1.0))


def welch_test(x_hi: np.ndarray, x_lo: np.ndarray) -> WelchTest:
    """One-sided Welch t-test of mean(x_hi) > mean(x_lo), both directions, on per-seed pass rates
    (R, k_hi) and (R, k_lo), as scipy.stats.ttest_ind(equal_var=False) where both arms show seed
    variance. Degenerate cases (stated outcomes, not scipy's): where both arms have zero seed
    variance, or an arm has one seed, the seeds show no run-to-run spread to compare a gap with, and
    that is not evidence that the spread is zero: t is 0 and p is 1 both ways."""
    k_hi, k_lo = x_hi.shape[-1], x_lo.shape[-1]
    diff = x_hi.mean(-1) - x_lo.mean(-1)
    if min(k_hi, k_lo) < 2:
        ones, zeros = np.ones_like(diff), np.zeros_like(diff)
        return WelchTest(t=zeros, df=zeros, p_greater=ones, p_less=ones)
    v_hi, v_lo = x_hi.var(-1, ddof=1) / k_hi, x_lo.var(-1, ddof=1) / k_lo
    se2 = v_hi + v_lo
    ok = se2 > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(ok, diff / np.sqrt(np.where(ok, se2, 1.0)), 0.0)
        df = np.where(ok, se2 ** 2 / np.where(ok, v_hi ** 2 / (k_hi - 1) + v_lo ** 2 / (k_lo - 1), 1.0), 0.0)
    p_gt = np.where(ok, student_t.sf(t, np.maximum(df, 1e-12)), 1.0)
    p_lt = np.where(ok, student_t.cdf(t, np.maximum(df, 1e-12)), 1.0)
    return WelchTest(t=t, df=df, p_greater=p_gt, p_less=p_lt)


def run_bound(hi: "ArmSums", lo: "ArmSums", alpha: float) -> RunBound:
    """One-sided (1 - alpha) bounds on the true gap hi - lo that carry BOTH sources of error: the
    run-to-run variance of each arm (its seeds) and the sampling of the probe items.

    gap = mean_hi - mean_lo over items x seeds; its variance, items and runs independent, is
        Var(gap) = s_hi^2 / k + s_lo^2 / k + sigma_d^2 / n
    with s_a^2 the variance (ddof 1) of arm a's per-seed pass rates (run spread plus the Bernoulli
    part of a seed's mean, estimated without bias since seeds are independent given the items) and
    sigma_d^2 the between-item variance of the true per-item difference, estimated by the variance
    over items of d_i = (mean over seeds of hi) - (mean over seeds of lo) less its within-item part
    (the seed variance of each outcome, (k / (k - 1)) p_i (1 - p_i), over k), floored at 0. The
    bound is gap -+ sqrt(t_k^2 (v_hi + v_lo) + t_n^2 v_item) (`checks.run_half_width`, the negative
    control's check's too), each part at its own one-sided
    quantile: the seeds' part at t(1 - alpha, k - 1) (Hsu's conservative degrees of freedom for two
    arms' spreads), the items' at t(1 - alpha, n - 1). The bound used before put the whole variance
    at one Welch-Satterthwaite df, which is estimated from the same variances: when the seeds of the
    arm with the run spread happen to agree it grows towards n - 1 just as that spread is
    under-estimated, and with 2 seeds P(ruled_out | sesoi) reached 0.08-0.10 (docs/statistics.md, the
    measured levels). With 2 seeds t_k is 6.3, which is what 2 seeds can say about run spread; `df`
    is k - 1, the seeds' part's.

    Degenerate cases: one seed per arm, or zero seed variance in BOTH arms, leaves the run spread
    unmeasured; the bounds are then -inf / +inf (no evidence either way), never a certainty.
    Returns a RunBound of arrays (R,)."""
    R, n = hi.per_item.shape
    k = hi.per_seed.shape[1]
    gap = (hi.total - lo.total) / float(n * k)
    if k < 2:
        inf = np.full(R, np.inf)
        return RunBound(low=-inf, high=inf, se=inf, df=np.zeros(R), informative=np.zeros(R, bool))
    r_hi, r_lo = hi.per_seed / n, lo.per_seed / n
    v_hi, v_lo = r_hi.var(-1, ddof=1) / k, r_lo.var(-1, ddof=1) / k
    m_hi, m_lo = hi.per_item / k, lo.per_item / k                     # (R, n) per-item means over seeds
    within = (k / (k - 1)) * ((m_hi * (1 - m_hi)).mean(-1) + (m_lo * (1 - m_lo)).mean(-1)) / k
    sigma_d2 = np.maximum((m_hi - m_lo).var(-1, ddof=1) - within, 0.0) if n > 1 else np.zeros(R)
    v_item = sigma_d2 / n
    var = v_hi + v_lo + v_item
    informative = (v_hi + v_lo) > 0
    safe = np.where(informative, var, 1.0)
    df = np.where(informative, float(k - 1), 0.0)
    half = run_half_width(v_hi + v_lo, v_item, df, n, alpha)
    se = np.sqrt(safe)
    low = np.where(informative, gap - half, -np.inf)
    high = np.where(informative, gap + half, np.inf)
    return RunBound(low=low, high=high, se=np.where(informative, se, np.inf), df=df, informative=informative)


def label_of(ruled_out, reversed_, supported) -> np.ndarray:
    """Label per experiment from the three criteria (bool arrays), with the registered precedence."""
    return np.where(reversed_, "reversed", np.where(ruled_out, "ruled_out",
                                                    np.where(supported, "supported", "not_supported")))


def outcome_of(ba: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """Intersection-union verdict from the labels of B-A and C-B (arrays of label strings)."""
    ba, cb = np.asarray(ba), np.asarray(cb)
    against = lambda lab: (lab == "ruled_out") | (lab == "reversed")  # noqa: E731
    return np.where(against(ba), "loop_earns_nothing",
                    np.where(ba != "supported", "not_resolved",
                             np.where(cb == "supported", "keep_both",
                                      np.where(against(cb), "drop_heircommit", "not_resolved"))))


@dataclass(frozen=True)
class ArmSums:
    """One arm's outcomes reduced to the integer sums every contrast reads (R experiments).
    per_item: (R, n) passes over seeds; per_seed: (R, k) passes over items, sorted ascending (no
    float depends on seed order); total: (R,); resampled: (B, R, k), `item_resampled` of the
    canonical outcomes."""
    per_item: np.ndarray
    per_seed: np.ndarray
    total: np.ndarray
    resampled: np.ndarray

    @classmethod
    def of(cls, y: np.ndarray, draws: BootstrapDraws) -> "ArmSums":
        """y: (R, k, n) 0/1 outcomes in canonical seed order (`canonical_seeds`)."""
        per_seed = y.sum(-1, dtype=np.int64)
        return cls(per_item=y.sum(1, dtype=np.int64), per_seed=np.sort(per_seed, axis=-1),
                   total=per_seed.sum(-1), resampled=item_resampled(y, draws))


@dataclass(frozen=True)
class CoreContrast:
    """Every quantity of the contrast "hi beats lo" on R experiments: arrays (R,) unless said."""
    gap: np.ndarray            # mean_hi - mean_lo (pass-rate fraction)
    ci_low: np.ndarray         # bootstrap interval's low end (fraction)
    ci_high: np.ndarray        # its high end (fraction)
    sign: SignTest
    seed: WelchTest | RangeTest
    bound: RunBound
    mean_hi: np.ndarray        # pass rates over items x seeds (fractions)
    mean_lo: np.ndarray
    seed_rates_hi: np.ndarray  # (R, k) per-seed pass rates, ascending (fractions)
    seed_rates_lo: np.ndarray
    criteria: dict[str, np.ndarray]  # each criterion by name -> bool (R,)
    label: np.ndarray          # label strings (R,)


def contrast_core(hi: ArmSums, lo: ArmSums, spec: RuleSpec | dict, draws: BootstrapDraws) -> CoreContrast:
    """Every quantity of the contrast "hi beats lo" for R experiments at once (`spec`: a RuleSpec, or a
    spec dict `rule_spec` reads): the interval, the sign test, the seed test, the run bound, the criteria
    and the label."""
    spec = rule_spec(spec)
    R, n = hi.per_item.shape
    k = hi.per_seed.shape[1]
    alpha, sesoi = spec.alpha, spec.sesoi
    tot_hi, tot_lo = hi.total, lo.total
    scale = float(n * k)
    num_obs = (tot_hi - tot_lo).astype(np.float64)
    num_boot = _resampled_sums(hi.resampled, draws.seeds_hi) - _resampled_sums(lo.resampled, draws.seeds_lo)
    lo_num, hi_num = _bounds(num_obs, num_boot, alpha, spec.bootstrap.method)

    sign = sign_test(hi.per_item - lo.per_item)          # per-item net differences (R, n)
    c_hi, c_lo = hi.per_seed / n, lo.per_seed / n
    gap = num_obs / scale
    rule = spec.spread_rule
    if rule.test == "welch":
        seed = welch_test(c_hi, c_lo)
        seed_ok, seed_rev = seed.p_greater < alpha, seed.p_less < alpha
    else:
        spread = np.maximum(c_hi[:, -1] - c_hi[:, 0], c_lo[:, -1] - c_lo[:, 0])
        seed = RangeTest(threshold=rule.multiplier * spread)
        seed_ok, seed_rev = gap > seed.threshold, -gap > seed.threshold
    ci_low, ci_high = lo_num / scale, hi_num / scale
    bound = run_bound(hi, lo, alpha)
    ruled_out = (ci_high < sesoi) & (bound.high < sesoi)
    reversed_ = (sign.p_less < alpha) & (hi_num < 0) & seed_rev & (bound.high < 0)
    supported = (sign.p_greater < alpha) & (lo_num > 0) & seed_ok & (bound.low > 0) & ~ruled_out
    return CoreContrast(
        gap=gap, ci_low=ci_low, ci_high=ci_high, sign=sign, seed=seed, bound=bound,
        mean_hi=tot_hi / scale, mean_lo=tot_lo / scale, seed_rates_hi=c_hi, seed_rates_lo=c_lo,
        criteria={"sign_p_below_alpha": sign.p_greater < alpha, "ci_low_above_zero": lo_num > 0,
                  "beyond_seed_spread": seed_ok, "run_bound_low_above_zero": bound.low > 0,
                  "ci_high_below_sesoi": ci_high < sesoi, "run_bound_high_below_sesoi": bound.high < sesoi},
        label=label_of(ruled_out, reversed_, supported))


@dataclass(frozen=True)
class Evaluation:
    """The registered decision on R experiments (`evaluate`)."""
    contrasts: dict[str, CoreContrast]   # "hi-lo" -> its core, in registered order
    outcome: np.ndarray                  # (R,) verdict strings
    draws: BootstrapDraws
    canonical: dict[str, np.ndarray]     # arm -> (R, k, n) outcomes in canonical seed order
    sums: dict[str, ArmSums]


def evaluate(y: dict[str, np.ndarray], spec: RuleSpec | dict, n_resamples: int | None = None) -> Evaluation:
    """The registered decision on R experiments: arm -> (R, k, n) outcomes.

    `n_resamples` overrides the registered resample count (the design analysis' cheaper
    equivalent); the readout never passes it.
    """
    spec = rule_spec(spec)
    shapes = {arm: a.shape for arm, a in y.items()}
    if len({s[1:] for s in shapes.values()}) != 1:
        raise ValueError(f"every arm needs the same seeds x items grid, got {shapes}")
    first = next(iter(y.values()))
    draws = BootstrapDraws.draw(n_resamples or spec.bootstrap.n_resamples, first.shape[2], first.shape[1],
                                spec.bootstrap.rng_seed)
    canon = {arm: canonical_seeds(a) for arm, a in y.items()}
    sums = {arm: ArmSums.of(a, draws) for arm, a in canon.items()}
    contrasts = {f"{hi}-{lo}": contrast_core(_need_arm(sums, hi), _need_arm(sums, lo), spec, draws)
                 for hi, lo in spec.contrasts}
    return Evaluation(contrasts=contrasts, outcome=outcome_of(contrasts["B-A"].label, contrasts["C-B"].label),
                      draws=draws, canonical=canon, sums=sums)


# ---- one experiment: the readout's records -----------------------------------------------------

def _seed_summary(seed: WelchTest | RangeTest, rule: SpreadRule) -> WelchSummary | RangeSummary:
    """Experiment 0 of the seed test, as recorded."""
    if rule.test == "welch":
        t = float(seed.t[0])
        return WelchSummary(t=_sig(t) if math.isfinite(t) else ("inf" if t > 0 else "-inf"), df=_sig(seed.df[0]),
                            p=_sig(seed.p_greater[0]), p_reverse=_sig(seed.p_less[0]))
    return RangeSummary(multiplier=_sig(rule.multiplier), threshold=_sig(seed.threshold[0]))


def _bound_summary(b: RunBound) -> RunBoundSummary:
    """Experiment 0 of the run bound, as recorded (None where uninformative)."""
    informative = bool(b.informative[0])
    at = lambda x: _sig(x[0]) if informative else None  # noqa: E731
    return RunBoundSummary(informative=informative, low=at(b.low), high=at(b.high), df=at(b.df))


def _contrast_result(hi: str, lo: str, c: CoreContrast, spec: RuleSpec, n_items: int, n_seeds: int) -> ContrastResult:
    """Experiment 0 of a contrast's core, as recorded."""
    boot = spec.bootstrap
    n_pos, n_neg = int(c.sign.n_pos[0]), int(c.sign.n_neg[0])
    return ContrastResult(
        hi=hi, lo=lo, n_items=int(n_items), n_seeds=int(n_seeds),
        mean_hi=_sig(c.mean_hi[0]), mean_lo=_sig(c.mean_lo[0]),
        gap=_sig(c.gap[0]), ci_low=_sig(c.ci_low[0]), ci_high=_sig(c.ci_high[0]),
        confidence_level=_sig(boot.confidence_level), bootstrap_method=boot.method,
        n_resamples=int(boot.n_resamples), rng_seed=int(boot.rng_seed),
        n_items_hi=n_pos, n_items_lo=n_neg, n_items_tied=int(n_items) - n_pos - n_neg,
        sign_p=_sig(c.sign.p_greater[0]), sign_p_reverse=_sig(c.sign.p_less[0]),
        seed_rates_hi=[_sig(r) for r in c.seed_rates_hi[0]], seed_rates_lo=[_sig(r) for r in c.seed_rates_lo[0]],
        spread_test=spec.spread_rule.test, alpha=_sig(spec.alpha), sesoi=_sig(spec.sesoi),
        criteria={k: bool(v[0]) for k, v in c.criteria.items()}, label=str(c.label[0]),
        run_bound=_bound_summary(c.bound), seed_test=_seed_summary(c.seed, spec.spread_rule))


def arm_interval(arm: ArmSums, draws: BootstrapDraws, alpha: float, method: str) -> tuple[float, float]:
    """Per-arm interval from the same two-stage bootstrap (the arm's seeds, then items), seeds
    averaged per item, for one experiment. Returns pass-rate fractions.

    Why two-stage and not items only: a per-arm interval that held each seed's run fixed would
    leave out run-to-run variance, which is what the seeds are there to measure."""
    n, k = arm.per_item.shape[1], arm.per_seed.shape[1]
    lo, hi = _bounds(arm.total.astype(np.float64), _resampled_sums(arm.resampled, draws.seeds_hi), alpha, method)
    return float(lo[0]) / (n * k), float(hi[0]) / (n * k)


SAYS = {
    "supported": "supported: {hi} > {lo} (sign test p < alpha, interval and run bound above 0, beyond the seed spread "
                 "of both arms)",
    "not_supported": "not_supported: the data neither show {hi} > {lo} nor rule out an advantage of {hi} over {lo} as "
                     "large as the sesoi",
    "ruled_out": "ruled_out: the interval and the run bound lie wholly below the sesoi; an advantage of {hi} over {lo} "
                 "as large as the sesoi is ruled out (this does not show {lo} >= {hi})",
    "reversed": "reversed: {lo} > {hi} significantly (mirror sign test, interval and run bound below 0, beyond the "
                "seed spread)",
}

CLAUSES = {
    "keep_both": "B-A supported and C-B supported (C > B > A beyond the seed spread): keep both mechanisms.",
    "drop_heircommit": "B-A supported; C-B ruled_out: the inheritance gate adds no advantage as large as the sesoi "
                       "over gated self-play: drop HeirCommit, keep gated self-play.",
    "drop_heircommit_reversed": "B-A supported; C-B reversed: the inheritance gate does significantly worse than "
                                "gated self-play alone: drop HeirCommit, keep gated self-play.",
    "loop_earns_nothing": "B-A ruled_out: gated self-play shows no advantage as large as the sesoi over the "
                          "control: the loop earns nothing at this scale.",
    "loop_earns_nothing_reversed": "B-A reversed: gated self-play does significantly worse than the control: the "
                                   "loop earns nothing at this scale (it does harm).",
    "not_resolved_ba": "B-A not_supported: the data neither show nor rule out that gated self-play beats the "
                       "control, so no clause of the decision rule holds.",
    "not_resolved_cb": "B-A supported but C-B not_supported: the data neither show nor rule out that the "
                       "inheritance gate adds to gated self-play.",
}


def decide(contrasts: dict[str, ContrastResult | Labelled]) -> RuleDecision:
    """Intersection-union verdict over the labels of "B-A" and "C-B" (ContrastResults, or any records
    with hi, lo and label: results.Labelled)."""
    for key in ("B-A", "C-B"):
        if key not in contrasts:
            raise ValueError(f"decide: missing contrast '{key}'; got {sorted(contrasts)}")
    ba, cb = contrasts["B-A"].label, contrasts["C-B"].label
    for key, lab in (("B-A", ba), ("C-B", cb)):
        if lab not in LABELS:
            raise ValueError(f"decide: contrast '{key}' has label {lab!r}; expected one of {list(LABELS)}")
    outcome = str(outcome_of(ba, cb))
    if outcome == "not_resolved":
        clause = CLAUSES["not_resolved_ba" if ba != "supported" else "not_resolved_cb"]
    elif outcome == "keep_both":
        clause = CLAUSES[outcome]
    else:
        decisive = ba if outcome == "loop_earns_nothing" else cb
        clause = CLAUSES[outcome + ("_reversed" if decisive == "reversed" else "")]
    says = {k: ContrastSays(contrasts[k].label, SAYS[contrasts[k].label].format(hi=contrasts[k].hi, lo=contrasts[k].lo))
            for k in ("B-A", "C-B")}
    return RuleDecision(outcome=outcome, clause=clause, contrasts=says, clauses_held={
        "C > B > A: B-A and C-B supported (keep both)": outcome == "keep_both",
        "C-B ruled_out or reversed (drop HeirCommit)": cb in ("ruled_out", "reversed"),
        "B-A ruled_out or reversed (loop earns nothing)": ba in ("ruled_out", "reversed"),
    })


def paired_contrast(items: pd.DataFrame, hi: str, lo: str, spec: RuleSpec | dict) -> ContrastResult:
    """The registered test of "arm hi beats arm lo" on one experiment (see the module docstring)."""
    spec = rule_spec(spec)
    y = outcome_arrays(items)
    a_hi, a_lo = _need_arm(y, hi), _need_arm(y, lo)
    _, k, n = a_hi.shape
    draws = BootstrapDraws.draw(spec.bootstrap.n_resamples, n, k, spec.bootstrap.rng_seed)
    c = contrast_core(ArmSums.of(canonical_seeds(a_hi), draws), ArmSums.of(canonical_seeds(a_lo), draws), spec, draws)
    return _contrast_result(hi, lo, c, spec, n, k)


def _arm_result(a: np.ndarray, sums: ArmSums, draws: BootstrapDraws, spec: RuleSpec, n_items: int) -> ArmResult:
    """One arm's record: a (1, k, n) canonical outcomes."""
    k, n = int(a.sum()), int(a.size)
    lo, hi = arm_interval(sums, draws, spec.alpha, spec.bootstrap.method)
    return ArmResult(mean=_sig(k / n), passed=k, n=n, ci_low=_sig(lo), ci_high=_sig(hi),
                     seed_rates=[_sig(r) for r in np.sort(a[0].sum(-1)) / n_items])


def analyze(items: pd.DataFrame, spec: RuleSpec | dict) -> AnalysisResult:
    """The whole registered analysis of one experiment: per-arm means with two-stage bootstrap
    intervals, the seed x arm table, every registered contrast and the verdict. A pure function of
    (items, spec): the same input gives an identical record, whatever the row order or seed labels."""
    spec = rule_spec(spec)
    df = check_items(items)
    y = outcome_arrays(df)
    res = evaluate(y, spec)
    n_items, n_seeds = df["item"].nunique(), df["seed"].nunique()
    arms = {arm: _arm_result(a, res.sums[arm], res.draws, spec, n_items) for arm, a in sorted(res.canonical.items())}
    table = pass_rates(df)
    per_seed = {str(arm): {str(int(seed)): _sig(table.loc[arm, seed]) for seed in table.columns}
                for arm in table.index}
    contrasts = {f"{hi}-{lo}": _contrast_result(hi, lo, res.contrasts[f"{hi}-{lo}"], spec, n_items, n_seeds)
                 for hi, lo in spec.contrasts}
    verdict = decide(contrasts)
    if verdict.outcome != str(res.outcome[0]):  # one decision, whichever path reads it
        raise RuntimeError(f"verdict {verdict.outcome!r} differs from the core's {res.outcome[0]!r}")
    return AnalysisResult(n_items=int(n_items), seeds=[int(s) for s in sorted(df["seed"].unique())], arms=arms,
                          per_seed=per_seed, contrasts=contrasts, verdict=verdict, spec=spec.recorded())

"""The readout's registered analysis, as pure functions over the final-round probe outcomes.

Input `items`: a pandas DataFrame with one row per arm x seed x probe item and columns
    arm (str: "A", "B", "C"), seed (int), item (int probe index), passed (0/1).
Every arm must hold the same complete seed x item grid (the contrasts pair arm hi seed s with arm
lo seed s on item i).

Input `spec`: the protocol's decision spec (decision.yaml), checked by `validate_spec`:
    alpha: 0.05             # size of the one-sided sign test
    sesoi: 0.05             # smallest effect size of interest (pass-rate fraction)
    contrasts: [[C, B], [B, A]]
    spread_rule: {control: A, statistic: range, multiplier: 1.0}   # statistic: range | std
    bootstrap: {n_resamples: 9999, method: BCa, confidence_level: 0.95, rng_seed: 20261129}
    power: 0.8              # optional (default 0.8): for the observed MDE

Output: plain dicts of ints, strings, bools and floats rounded to 10 significant digits, so that
json.dumps(..., sort_keys=True) is byte-identical across runs. Decisions are taken on the
rounded numbers, so the published figures reproduce them exactly.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binomtest, bootstrap

from harness.power import mde_paired

COLUMNS = ("arm", "seed", "item", "passed")
SPEC_KEYS = {"alpha", "sesoi", "contrasts", "spread_rule", "bootstrap", "power"}
SPEC_DEFAULTS = {"power": 0.8}
SPREAD_KEYS = {"control", "statistic", "multiplier"}
BOOTSTRAP_KEYS = {"n_resamples", "method", "confidence_level", "rng_seed"}
SPREAD_STATISTICS = ("range", "std")
BOOTSTRAP_METHODS = ("percentile", "basic", "bca")  # what scipy.stats.bootstrap accepts
DECISION_CONTRASTS = (("B", "A"), ("C", "B"))  # the decision rule needs both


def _sig(x: float) -> float:
    """Round to 10 significant digits (byte-stable JSON across platforms)."""
    return float(f"{float(x):.10g}")


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


def validate_spec(spec: dict) -> dict:
    """Check a decision spec and return a normalised copy (optional keys filled in).

    Raises ValueError naming the offending key (e.g. "missing key 'bootstrap.rng_seed'").
    """
    _keys(spec, SPEC_KEYS, SPEC_KEYS - set(SPEC_DEFAULTS), "")
    out = {**SPEC_DEFAULTS, **spec}
    out["alpha"] = _number(out["alpha"], "alpha", 0.0, 1.0)
    out["sesoi"] = _number(out["sesoi"], "sesoi", 0.0, 1.0, lo_open=False)
    out["power"] = _number(out["power"], "power", 0.0, 1.0)

    contrasts = out["contrasts"]
    if not isinstance(contrasts, (list, tuple)) or not contrasts:
        raise _spec_error(f"'contrasts' must be a non-empty list of [hi, lo] pairs, got {contrasts!r}")
    pairs = []
    for i, c in enumerate(contrasts):
        if (not isinstance(c, (list, tuple)) or len(c) != 2 or not all(isinstance(a, str) for a in c)
                or c[0] == c[1]):
            raise _spec_error(f"'contrasts[{i}]' must be a pair of two different arm names, got {c!r}")
        pairs.append([c[0], c[1]])
    for hi, lo in DECISION_CONTRASTS:
        if [hi, lo] not in pairs:
            raise _spec_error(f"'contrasts' must include [{hi}, {lo}] for the decision rule, got {pairs}")
    out["contrasts"] = pairs

    rule = out["spread_rule"]
    _keys(rule, SPREAD_KEYS, SPREAD_KEYS, "spread_rule")
    if not isinstance(rule["control"], str):
        raise _spec_error(f"'spread_rule.control' must be an arm name, got {rule['control']!r}")
    if rule["statistic"] not in SPREAD_STATISTICS:
        raise _spec_error(f"'spread_rule.statistic' must be one of {list(SPREAD_STATISTICS)}, "
                          f"got {rule['statistic']!r}")
    out["spread_rule"] = {**rule, "multiplier": _number(rule["multiplier"], "spread_rule.multiplier",
                                                        0.0, math.inf, lo_open=False)}

    boot = out["bootstrap"]
    _keys(boot, BOOTSTRAP_KEYS, BOOTSTRAP_KEYS, "bootstrap")
    for key in ("n_resamples", "rng_seed"):
        v = boot[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "n_resamples" else 0):
            raise _spec_error(f"'bootstrap.{key}' must be an integer >= {1 if key == 'n_resamples' else 0}, got {v!r}")
    if not isinstance(boot["method"], str) or boot["method"].lower() not in BOOTSTRAP_METHODS:
        raise _spec_error(f"'bootstrap.method' must be one of {list(BOOTSTRAP_METHODS)} (any case), "
                          f"got {boot['method']!r}")
    out["bootstrap"] = {**boot, "confidence_level": _number(boot["confidence_level"],
                                                            "bootstrap.confidence_level", 0.0, 1.0)}
    return out


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


def _arm(df: pd.DataFrame, arm: str) -> pd.DataFrame:
    part = df[df["arm"] == arm]
    if part.empty:
        raise ValueError(f"items: no rows for arm {arm!r}; arms present: {sorted(df['arm'].unique())}")
    return part


def pass_rates(items: pd.DataFrame) -> pd.DataFrame:
    """Pass rate per arm (rows) x seed (columns), each over all probe items."""
    df = check_items(items)
    return df.pivot_table(index="arm", columns="seed", values="passed", aggfunc="mean")


def arm_means(items: pd.DataFrame) -> pd.Series:
    """Mean pass rate per arm over items x seeds."""
    df = check_items(items)
    return df.groupby("arm")["passed"].mean()


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k successes out of n (via scipy.stats.binomtest)."""
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


# ---- one contrast ---------------------------------------------------------------------------

def _spread(df: pd.DataFrame, rule: dict) -> tuple[float, list[float]]:
    """Control arm's per-seed pass rates and their spread statistic."""
    rates = _arm(df, rule["control"]).groupby("seed")["passed"].mean().to_numpy()
    if rule["statistic"] == "range":
        return float(rates.max() - rates.min()), rates.tolist()
    if len(rates) < 2:
        raise ValueError(f"spread_rule.statistic 'std' needs >= 2 seeds of arm {rule['control']!r}, "
                         f"got {len(rates)}")
    return float(np.std(rates, ddof=1)), rates.tolist()


def _observed_mde(n: int, p_d: float, alpha: float, power: float) -> tuple[float | None, str]:
    if p_d == 0:
        return None, "no discordant pairs: no effect is detectable"
    try:
        return _sig(mde_paired(n, p_d, alpha, power, alternative="greater")), "ok"
    except ValueError as err:
        return None, str(err)


def paired_contrast(items: pd.DataFrame, hi: str, lo: str, spec: dict) -> dict:
    """The registered test of "arm hi beats arm lo" on the probe set.

    gap: mean over items of (hi's pass rate over seeds - lo's), paired by item.
    Interval: scipy.stats.bootstrap of the per-item differences' mean (paired over items),
      with the registered n_resamples, method, confidence_level and rng_seed (a fresh
      numpy Generator per contrast, so contrasts do not depend on each other's order). When all
      per-item differences are equal the interval is the point itself (ci_degenerate).
    Discordance: every item x seed pair (hi seed s vs lo seed s on item i); n_hi_only pairs
      where only hi passed, n_lo_only where only lo passed.
    Sign test: binomtest(n_hi_only, n_hi_only + n_lo_only, 0.5, alternative="greater"), one-sided
      because the hypotheses are directional; p = 1 when there are no discordant pairs.
    Spread threshold: multiplier x statistic (range, or std with ddof=1) of the control arm's
      per-seed pass rates.
    observed_mde: harness.power.mde_paired at the observed discordance over the n_pairs pooled
      pairs, one-sided like the test (observed_mde_items: the same over n_items, the bound for
      fully item-correlated seeds). None, with mde_note, when undefined.
    status: "greater" if gap > threshold and ci_low > 0 and sign p < alpha (checked first);
      "not_greater" if ci_high < sesoi (a meaningful advantage is ruled out; `reversed` says
      whether the whole interval is below 0); "unresolved" otherwise.
    """
    spec = validate_spec(spec)
    df = check_items(items)
    h = _arm(df, hi).set_index(["seed", "item"])["passed"]
    l = _arm(df, lo).set_index(["seed", "item"])["passed"]
    n_seeds, n_items = df["seed"].nunique(), df["item"].nunique()

    diff = (h.groupby("item").mean() - l.groupby("item").mean()).to_numpy(dtype=float)
    gap = float(diff.mean())
    boot = spec["bootstrap"]
    degenerate = bool(np.all(diff == diff[0]))
    if degenerate:
        ci_low = ci_high = gap
    else:
        res = bootstrap((diff,), np.mean, n_resamples=boot["n_resamples"], method=boot["method"],
                        confidence_level=boot["confidence_level"], vectorized=True,
                        rng=np.random.default_rng(boot["rng_seed"]))
        ci_low, ci_high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isfinite(ci_low) and math.isfinite(ci_high)):
            raise RuntimeError(f"bootstrap interval for {hi}-{lo} is not finite ({ci_low}, {ci_high})")

    n_hi_only = int(((h == 1) & (l == 0)).sum())
    n_lo_only = int(((h == 0) & (l == 1)).sum())
    n_disc, n_pairs = n_hi_only + n_lo_only, int(len(h))
    sign_p = binomtest(n_hi_only, n_disc, 0.5, alternative="greater").pvalue if n_disc else 1.0
    p_d = n_disc / n_pairs

    spread, control_rates = _spread(df, spec["spread_rule"])
    threshold = spec["spread_rule"]["multiplier"] * spread
    mde, note = _observed_mde(n_pairs, p_d, spec["alpha"], spec["power"])
    mde_items, _ = _observed_mde(n_items, p_d, spec["alpha"], spec["power"])

    gap, ci_low, ci_high, threshold, sign_p = map(_sig, (gap, ci_low, ci_high, threshold, sign_p))
    criteria = {
        "gap_beyond_spread": gap > threshold,
        "ci_low_above_zero": ci_low > 0,
        "sign_p_below_alpha": sign_p < spec["alpha"],
        "ci_high_below_sesoi": ci_high < spec["sesoi"],
    }
    if criteria["gap_beyond_spread"] and criteria["ci_low_above_zero"] and criteria["sign_p_below_alpha"]:
        status = "greater"
    elif criteria["ci_high_below_sesoi"]:
        status = "not_greater"
    else:
        status = "unresolved"
    return {
        "hi": hi, "lo": lo,
        "n_items": int(n_items), "n_seeds": int(n_seeds), "n_pairs": n_pairs,
        "mean_hi": _sig(h.mean()), "mean_lo": _sig(l.mean()), "gap": gap,
        "ci_low": ci_low, "ci_high": ci_high, "ci_degenerate": degenerate,
        "confidence_level": _sig(boot["confidence_level"]), "bootstrap_method": boot["method"],
        "n_resamples": int(boot["n_resamples"]), "rng_seed": int(boot["rng_seed"]),
        "n_hi_only": n_hi_only, "n_lo_only": n_lo_only, "p_discordant": _sig(p_d),
        "sign_test": "binomtest one-sided greater on item x seed discordant pairs",
        "sign_p": sign_p, "alpha": _sig(spec["alpha"]), "sesoi": _sig(spec["sesoi"]),
        "spread_control": spec["spread_rule"]["control"],
        "spread_statistic": spec["spread_rule"]["statistic"],
        "spread_multiplier": _sig(spec["spread_rule"]["multiplier"]),
        "control_seed_rates": [_sig(r) for r in control_rates],
        "spread_threshold": threshold,
        "observed_mde": mde, "observed_mde_items": mde_items, "mde_note": note,
        "power": _sig(spec["power"]),
        "criteria": criteria, "status": status,
        "reversed": bool(status == "not_greater" and ci_high < 0),
    }


# ---- the verdict ----------------------------------------------------------------------------

def _reading(c: dict) -> str:
    """What a contrast's status says, keeping "not supported" apart from "reversed"."""
    if c["status"] == "greater":
        return "supported"
    if c["status"] == "not_greater":
        return "reversed" if c["reversed"] else "ruled_out"
    return "unresolved"


READINGS = {
    "supported": "{hi} > {lo}: gap beyond the control's seed spread, interval above 0, sign test significant",
    "ruled_out": "not supported: the interval excludes an advantage of {hi} over {lo} as large as the sesoi; "
                 "no reversal shown",
    "reversed": "reversed: {lo} > {hi}, the whole interval lies below 0",
    "unresolved": "not supported: the data neither show nor rule out that {hi} > {lo}",
}


def decide(contrasts: dict[str, dict]) -> dict:
    """Intersection-union verdict over the contrasts "B-A" and "C-B" (paired_contrast outputs).

    B-A not_greater -> loop_earns_nothing; B-A unresolved -> not_resolved; then C-B greater ->
    keep_both; C-B not_greater -> drop_heircommit; else not_resolved.
    """
    for key in ("B-A", "C-B"):
        if key not in contrasts:
            raise ValueError(f"decide: missing contrast '{key}'; got {sorted(contrasts)}")
    ba, cb = contrasts["B-A"]["status"], contrasts["C-B"]["status"]
    if ba == "not_greater":
        outcome = "loop_earns_nothing"
        clause = ("B-A is not greater: the data rule out a meaningful advantage of gated self-play over "
                  "the control (A >= B), so the loop earns nothing at this scale.")
    elif ba == "unresolved":
        outcome = "not_resolved"
        clause = ("B-A is unresolved: the data neither show nor rule out that gated self-play beats the "
                  "control, so no clause of the decision rule holds.")
    elif cb == "greater":
        outcome = "keep_both"
        clause = ("B-A and C-B are both greater beyond the control's seed spread (C > B > A): keep both "
                  "mechanisms.")
    elif cb == "not_greater":
        outcome = "drop_heircommit"
        clause = ("B-A is greater but C-B is not greater (B >= C): drop HeirCommit, keep gated self-play.")
    else:
        outcome = "not_resolved"
        clause = ("B-A is greater but C-B is unresolved: the data neither show nor rule out that the "
                  "inheritance gate adds to gated self-play.")
    per_contrast = {}
    for key in ("B-A", "C-B"):
        c = contrasts[key]
        reading = _reading(c)
        per_contrast[key] = {"status": c["status"], "reversed": bool(c["reversed"]), "reading": reading,
                             "says": READINGS[reading].format(hi=c["hi"], lo=c["lo"])}
    return {
        "outcome": outcome,
        "clause": clause,
        "contrasts": per_contrast,
        "clauses_held": {
            "C > B > A (keep both)": ba == "greater" and cb == "greater",
            "B >= C (drop HeirCommit)": cb == "not_greater",
            "A >= B (loop earns nothing)": ba == "not_greater",
        },
    }


def analyze(items: pd.DataFrame, spec: dict) -> dict:
    """The whole registered analysis: per-arm means with Wilson intervals (over items x seeds,
    at the bootstrap's confidence level), the seed x arm table, every registered contrast and
    the verdict. Deterministic: the same input gives an identical dict."""
    spec = validate_spec(spec)
    df = check_items(items)
    level = spec["bootstrap"]["confidence_level"]
    arms = {}
    for arm, g in df.groupby("arm"):
        k, n = int(g["passed"].sum()), int(len(g))
        lo, hi = wilson(k, n, level)
        arms[str(arm)] = {"mean": _sig(k / n), "passed": k, "n": n, "wilson_low": _sig(lo), "wilson_high": _sig(hi)}
    table = pass_rates(df)
    per_seed = {str(arm): {str(int(seed)): _sig(table.loc[arm, seed]) for seed in table.columns}
                for arm in table.index}
    contrasts = {f"{hi}-{lo}": paired_contrast(df, hi, lo, spec) for hi, lo in spec["contrasts"]}
    return {
        "n_items": int(df["item"].nunique()),
        "seeds": [int(s) for s in sorted(df["seed"].unique())],
        "arms": arms,
        "per_seed": per_seed,
        "contrasts": contrasts,
        "verdict": decide(contrasts),
        "spec": {**spec, "alpha": _sig(spec["alpha"]), "sesoi": _sig(spec["sesoi"]),
                 "power": _sig(spec["power"])},
    }

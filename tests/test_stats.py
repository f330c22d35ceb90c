"""The readout's statistics: hand-computed values on small fixtures, scipy recomputed
independently as the reference for the bootstrap interval and the sign test, every verdict
outcome reachable, determinism, and clear errors for a bad spec or bad outcome table."""
import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, bootstrap, norm

from harness.power import mde_paired
from harness.stats import (analyze, arm_means, decide, paired_contrast, pass_rates, validate_spec,
                           wilson)

SPEC = {
    "alpha": 0.05,
    "sesoi": 0.05,
    "contrasts": [["C", "B"], ["B", "A"]],
    "spread_rule": {"control": "A", "statistic": "range", "multiplier": 1.0},
    "bootstrap": {"n_resamples": 999, "method": "BCa", "confidence_level": 0.95, "rng_seed": 20261129},
}


def span(a, b):
    return set(range(a, b))


def make_items(passes: dict, n_items: int) -> pd.DataFrame:
    """passes: (arm, seed) -> set of passing item indices; one row per arm x seed x item."""
    rows = [{"arm": arm, "seed": seed, "item": i, "passed": int(i in passed)}
            for (arm, seed), passed in passes.items() for i in range(n_items)]
    return pd.DataFrame(rows)


# 10 items x 2 seeds, worked by hand:
#   A: seed 1 passes 0-4 (0.5), seed 2 passes 0-3 (0.4)  -> per item 1,1,1,1,.5,0,0,0,0,0
#   B: seed 1 passes 0-7 (0.8), seed 2 passes 0-6 and 9 (0.8) -> 1,1,1,1,1,1,1,.5,0,.5
#   C: passes everything
HAND = {("A", 1): span(0, 5), ("A", 2): span(0, 4),
        ("B", 1): span(0, 8), ("B", 2): span(0, 7) | {9},
        ("C", 1): span(0, 10), ("C", 2): span(0, 10)}
HAND_DIFF_BA = [0, 0, 0, 0, 0.5, 1, 1, 0.5, 0, 0.5]


def test_pass_rates_and_arm_means_by_hand():
    items = make_items(HAND, 10)
    table = pass_rates(items)
    assert table.loc["A"].tolist() == pytest.approx([0.5, 0.4])
    assert table.loc["B"].tolist() == pytest.approx([0.8, 0.8])
    assert arm_means(items).to_dict() == pytest.approx({"A": 0.45, "B": 0.8, "C": 1.0})


def test_wilson_matches_the_closed_form():
    for k, n in [(9, 20), (0, 20), (16, 20), (64, 128)]:
        z = norm.ppf(0.975)
        centre = (k + z * z / 2) / (n + z * z)
        half = z / (n + z * z) * math.sqrt(k * (n - k) / n + z * z / 4)
        assert wilson(k, n) == pytest.approx((centre - half, centre + half), abs=1e-12)


def test_paired_contrast_by_hand_with_scipy_as_reference():
    c = paired_contrast(make_items(HAND, 10), "B", "A", SPEC)
    assert (c["mean_hi"], c["mean_lo"], c["gap"]) == (0.8, 0.45, 0.35)
    # discordant pairs: seed 1 B-only items 5,6,7; seed 2 B-only items 4,5,6,9; no A-only pair
    assert (c["n_hi_only"], c["n_lo_only"], c["n_pairs"]) == (7, 0, 20)
    assert c["p_discordant"] == 0.35
    assert c["sign_p"] == 0.5 ** 7
    assert c["sign_p"] == pytest.approx(binomtest(7, 7, 0.5, alternative="greater").pvalue)
    # spread: range of A's per-seed rates 0.5 and 0.4, multiplier 1
    assert c["control_seed_rates"] == [0.5, 0.4] and c["spread_threshold"] == 0.1
    ref = bootstrap((np.array(HAND_DIFF_BA),), np.mean, n_resamples=999, method="BCa",
                    confidence_level=0.95, rng=np.random.default_rng(20261129))
    assert c["ci_low"] == pytest.approx(ref.confidence_interval.low, rel=1e-9)
    assert c["ci_high"] == pytest.approx(ref.confidence_interval.high, rel=1e-9)
    assert c["observed_mde"] == pytest.approx(mde_paired(20, 0.35, 0.05, 0.8, alternative="greater"))
    assert c["observed_mde_items"] is None and c["mde_note"] == "ok"  # 10 items detect nothing
    assert c["ci_low"] > 0 and c["status"] == "greater" and not c["reversed"]


def test_registered_default_bootstrap_once():
    spec = copy.deepcopy(SPEC)
    spec["bootstrap"]["n_resamples"] = 9999
    c = paired_contrast(make_items(HAND, 10), "B", "A", spec)
    ref = bootstrap((np.array(HAND_DIFF_BA),), np.mean, n_resamples=9999, method="BCa",
                    confidence_level=0.95, rng=np.random.default_rng(20261129))
    assert (c["ci_low"], c["ci_high"]) == pytest.approx(
        (ref.confidence_interval.low, ref.confidence_interval.high), rel=1e-9)


def test_std_spread_rule_uses_sample_std():
    spec = copy.deepcopy(SPEC)
    spec["spread_rule"] = {"control": "A", "statistic": "std", "multiplier": 2.0}
    c = paired_contrast(make_items(HAND, 10), "B", "A", spec)
    assert c["spread_threshold"] == pytest.approx(2.0 * np.std([0.5, 0.4], ddof=1))


# ---- every verdict outcome on a constructed fixture (20 items x 2 seeds) ------------------

A_LOW = {("A", 1): span(0, 5), ("A", 2): span(0, 4)}             # 0.25, 0.20: spread 0.05
B_MID = {("B", 1): span(0, 12), ("B", 2): span(0, 12)}           # 0.60


def _verdict(passes):
    return analyze(make_items(passes, 20), SPEC)


def test_keep_both():
    out = _verdict({**A_LOW, **B_MID, ("C", 1): span(0, 20), ("C", 2): span(0, 20)})
    assert out["contrasts"]["C-B"]["status"] == "greater"
    assert out["verdict"]["outcome"] == "keep_both"
    assert out["verdict"]["clauses_held"]["C > B > A (keep both)"]


def test_drop_heircommit_on_a_tie():
    out = _verdict({**A_LOW, **B_MID, ("C", 1): span(0, 12), ("C", 2): span(0, 12)})
    cb = out["contrasts"]["C-B"]
    assert cb["ci_degenerate"] and (cb["ci_low"], cb["ci_high"]) == (0.0, 0.0)
    assert cb["status"] == "not_greater" and not cb["reversed"]
    assert out["verdict"]["outcome"] == "drop_heircommit"
    assert out["verdict"]["contrasts"]["C-B"]["reading"] == "ruled_out"


def test_loop_earns_nothing_reversed_vs_ruled_out():
    a_high = {("A", 1): span(0, 12), ("A", 2): span(0, 12)}
    b_low = {("B", 1): span(0, 4), ("B", 2): span(0, 4)}
    c_any = {("C", 1): span(0, 4), ("C", 2): span(0, 4)}
    reversed_ = _verdict({**a_high, **b_low, **c_any})
    ba = reversed_["contrasts"]["B-A"]
    assert ba["ci_high"] < 0 and ba["status"] == "not_greater" and ba["reversed"]
    assert reversed_["verdict"]["outcome"] == "loop_earns_nothing"
    assert reversed_["verdict"]["contrasts"]["B-A"]["reading"] == "reversed"
    # the same clause from a tie: not supported, and not reversed either
    tie = _verdict({**a_high, ("B", 1): span(0, 12), ("B", 2): span(0, 12), **c_any})
    assert tie["verdict"]["outcome"] == "loop_earns_nothing"
    assert tie["verdict"]["contrasts"]["B-A"]["reading"] == "ruled_out"
    assert not tie["contrasts"]["B-A"]["reversed"]


def test_not_resolved_when_b_minus_a_is_unresolved():
    # one extra B pass on one seed: gap 0.025, sign p 0.5, interval reaches past the sesoi
    out = _verdict({("A", 1): span(0, 5), ("A", 2): span(0, 5), ("B", 1): span(0, 6),
                    ("B", 2): span(0, 5), ("C", 1): span(0, 20), ("C", 2): span(0, 20)})
    ba = out["contrasts"]["B-A"]
    assert ba["gap"] == 0.025 and ba["sign_p"] == 0.5 and ba["ci_high"] >= 0.05
    assert ba["status"] == "unresolved"
    assert out["verdict"]["outcome"] == "not_resolved"
    assert "B-A is unresolved" in out["verdict"]["clause"]


def test_not_resolved_when_c_minus_b_is_unresolved():
    out = _verdict({**A_LOW, **B_MID, ("C", 1): span(0, 13), ("C", 2): span(0, 12)})
    assert out["contrasts"]["B-A"]["status"] == "greater"
    assert out["contrasts"]["C-B"]["status"] == "unresolved"
    assert out["verdict"]["outcome"] == "not_resolved"
    assert "C-B is unresolved" in out["verdict"]["clause"]


@pytest.mark.parametrize("ba,cb,outcome", [
    ("not_greater", "greater", "loop_earns_nothing"),
    ("unresolved", "greater", "not_resolved"),
    ("greater", "greater", "keep_both"),
    ("greater", "not_greater", "drop_heircommit"),
    ("greater", "unresolved", "not_resolved"),
])
def test_decide_intersection_union_table(ba, cb, outcome):
    c = {"B-A": {"hi": "B", "lo": "A", "status": ba, "reversed": False},
         "C-B": {"hi": "C", "lo": "B", "status": cb, "reversed": False}}
    assert decide(c)["outcome"] == outcome


def test_decide_needs_both_contrasts():
    with pytest.raises(ValueError, match="missing contrast 'C-B'"):
        decide({"B-A": {"hi": "B", "lo": "A", "status": "greater", "reversed": False}})


def test_analyze_is_deterministic_and_json_stable():
    items = make_items(HAND, 10)
    first = json.dumps(analyze(items, SPEC), sort_keys=True)
    second = json.dumps(analyze(items.sample(frac=1.0, random_state=3), copy.deepcopy(SPEC)), sort_keys=True)
    assert first == second  # row order of the input does not matter either
    out = json.loads(first)
    assert out["arms"]["A"]["passed"] == 9 and out["arms"]["A"]["n"] == 20
    assert (out["arms"]["A"]["wilson_low"], out["arms"]["A"]["wilson_high"]) == pytest.approx(wilson(9, 20))
    assert out["per_seed"] == {"A": {"1": 0.5, "2": 0.4}, "B": {"1": 0.8, "2": 0.8}, "C": {"1": 1.0, "2": 1.0}}


# ---- bad input ------------------------------------------------------------------------------

def _spec_with(path, value=None, delete=False):
    spec = copy.deepcopy(SPEC)
    *parents, leaf = path.split(".")
    node = spec
    for p in parents:
        node = node[p]
    if delete:
        del node[leaf]
    else:
        node[leaf] = value
    return spec


@pytest.mark.parametrize("spec,message", [
    (_spec_with("spread_rule.statistic", "iqr"), "'spread_rule.statistic' must be one of"),
    (_spec_with("bootstrap.rng_seed", delete=True), "missing key 'bootstrap.rng_seed'"),
    (_spec_with("alpha", delete=True), "missing key 'alpha'"),
    (_spec_with("sesio", 0.05), "unknown key 'sesio'"),
    (_spec_with("bootstrap.method", "studentized"), "'bootstrap.method' must be one of"),
    (_spec_with("alpha", 1.5), "'alpha' must lie in"),
    (_spec_with("contrasts", [["C", "B"]]), "must include \\[B, A\\]"),
    (_spec_with("bootstrap.n_resamples", 99.5), "'bootstrap.n_resamples' must be an integer"),
])
def test_bad_spec_names_the_key(spec, message):
    with pytest.raises(ValueError, match=message):
        validate_spec(spec)


def test_validate_spec_fills_the_default_power():
    assert validate_spec(SPEC)["power"] == 0.8


def test_bad_items_raise_clear_errors():
    items = make_items(HAND, 10)
    with pytest.raises(ValueError, match="missing column"):
        analyze(items.drop(columns="passed"), SPEC)
    bad = items.copy()
    bad.loc[3, "passed"] = 2
    with pytest.raises(ValueError, match="'passed' must be 0 or 1"):
        analyze(bad, SPEC)
    with pytest.raises(ValueError, match="duplicate row"):
        analyze(pd.concat([items, items.iloc[:1]]), SPEC)
    with pytest.raises(ValueError, match="arm 'B' lacks 1 .*seed=1 item=0"):
        analyze(items.drop(index=items[(items.arm == "B")].index[0]), SPEC)
    with pytest.raises(ValueError, match="no rows for arm 'C'"):
        analyze(items[items.arm != "C"], SPEC)

"""The readout's statistics, held to account: hand-computed values, statsmodels' exact McNemar and
scipy's Welch test as references, an independent loop implementation of the two-stage bootstrap in
exact integer arithmetic, invariance of every number to seed labels, the label precedence (an
interval wholly below the sesoi never supports), every verdict outcome, and clear errors."""
import copy
import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, ttest_ind
from statsmodels.stats.contingency_tables import mcnemar

from harness.stats.contrasts import (
    LABELS,
    BootstrapDraws,
    analyze,
    arm_means,
    decide,
    label_of,
    lo_index,
    outcome_of,
    paired_contrast,
    pass_rates,
    rule_spec,
    sign_test,
    validate_spec,
    welch_test,
)
from harness.stats.results import Labelled

SPEC = {
    "alpha": 0.05,
    "sesoi": 0.05,
    "contrasts": [["C", "B"], ["B", "A"]],
    "spread_rule": {"test": "welch"},
    "bootstrap": {"n_resamples": 999, "method": "percentile", "confidence_level": 0.90, "rng_seed": 20261129},
}


def span(a, b):
    return set(range(a, b))


def make_items(passes: dict, n_items: int) -> pd.DataFrame:
    """passes: (arm, seed) -> set of passing item indices; one row per arm x seed x item."""
    rows = [{"arm": arm, "seed": seed, "item": i, "passed": int(i in passed)}
            for (arm, seed), passed in passes.items() for i in range(n_items)]
    return pd.DataFrame(rows)


def random_items(rng, n_items=60, seeds=(1, 2, 3), rates=None) -> pd.DataFrame:
    rates = rates or {"A": 0.4, "B": 0.5, "C": 0.55}
    rows = [(arm, s, i, int(rng.random() < p)) for arm, p in rates.items() for s in seeds for i in range(n_items)]
    return pd.DataFrame(rows, columns=["arm", "seed", "item", "passed"])


# 10 items x 2 seeds, worked by hand:
#   A: seed 1 passes 0-4, seed 2 passes 0-3       -> per-item totals 2,2,2,2,1,0,0,0,0,0
#   B: seed 1 passes 0-7, seed 2 passes 0-6 and 9 -> 2,2,2,2,2,2,2,1,0,1
#   C: passes everything
HAND = {("A", 1): span(0, 5), ("A", 2): span(0, 4),
        ("B", 1): span(0, 8), ("B", 2): span(0, 7) | {9},
        ("C", 1): span(0, 10), ("C", 2): span(0, 10)}


def test_pass_rates_and_arm_means_by_hand():
    items = make_items(HAND, 10)
    table = pass_rates(items)
    assert table.loc["A"].tolist() == pytest.approx([0.5, 0.4])
    assert table.loc["B"].tolist() == pytest.approx([0.8, 0.8])
    assert arm_means(items).to_dict() == pytest.approx({"A": 0.45, "B": 0.8, "C": 1.0})


@pytest.mark.filterwarnings("ignore:Precision loss occurred")
def test_contrast_by_hand():
    c = paired_contrast(make_items(HAND, 10), "B", "A", SPEC)
    assert (c.mean_hi, c.mean_lo, c.gap) == (0.8, 0.45, 0.35)
    # net differences per item: 0,0,0,0,+1,+2,+2,+1,0,+1 -> 5 items favour B, none A, 5 tie
    assert (c.n_items_hi, c.n_items_lo, c.n_items_tied) == (5, 0, 5)
    assert c.sign_p == 0.5 ** 5 and c.sign_p_reverse == 1.0
    assert (c.seed_rates_hi, c.seed_rates_lo) == ([0.8, 0.8], [0.4, 0.5])
    # Welch: B has no seed variance, A's is 0.005: t = 0.35 / sqrt(0.005 / 2) = 7, df = 1
    assert c.seed_test.t == pytest.approx(7.0) and c.seed_test.df == pytest.approx(1.0)
    ref = ttest_ind([0.8, 0.8], [0.5, 0.4], equal_var=False, alternative="greater")
    assert c.seed_test.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert c.confidence_level == 0.9 and c.bootstrap_method == "percentile"
    # run bound: seeds' part 0.005 / 2 at t(0.95, 1) = 6.3138, items' part (var(d_i) 0.16944 - within 0.075)
    # / 10 at t(0.95, 9) = 1.8331: 0.35 -+ sqrt(6.3138^2 x 0.0025 + 1.8331^2 x 0.0094444) = [-0.0125, +0.7125].
    # Every other test holds; two seeds cannot bound the run spread tightly enough to support the gap
    assert c.run_bound.df == 1.0
    assert (c.run_bound.low, c.run_bound.high) == pytest.approx((-0.0124843, 0.7124843), abs=1e-6)
    assert c.ci_low > 0 and c.criteria["beyond_seed_spread"] and c.criteria["sign_p_below_alpha"]
    assert c.label == "not_supported"


# ---- the sign test against statsmodels' exact McNemar ---------------------------------------

def test_one_seed_sign_test_is_the_exact_mcnemar_test():
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(5, 80))
        hi = (rng.random(n) < rng.uniform(0.2, 0.8)).astype(int)
        lo = (rng.random(n) < rng.uniform(0.2, 0.8)).astype(int)
        b, c = int(((hi == 1) & (lo == 0)).sum()), int(((hi == 0) & (lo == 1)).sum())
        table = [[int(((hi == 1) & (lo == 1)).sum()), b], [c, int(((hi == 0) & (lo == 0)).sum())]]
        two_sided = mcnemar(table, exact=True).pvalue
        st = sign_test((hi - lo)[None, :])
        p_gt, p_lt = float(st.p_greater[0]), float(st.p_less[0])
        if b + c == 0:
            assert p_gt == p_lt == 1.0 and two_sided == 1.0
            continue
        # the exact two-sided McNemar p is twice the smaller one-sided tail (capped at 1)
        assert min(1.0, 2 * min(p_gt, p_lt)) == pytest.approx(two_sided, rel=1e-12, abs=1e-300)
        if b > c:
            assert p_gt == pytest.approx(two_sided / 2, rel=1e-12)
        assert p_gt == pytest.approx(binomtest(b, b + c, 0.5, alternative="greater").pvalue, rel=1e-12)


def test_multi_seed_sign_test_is_mcnemar_on_the_per_item_net_signs():
    rng = np.random.default_rng(12)
    for trial in range(40):
        items = random_items(rng, n_items=int(rng.integers(10, 90)), seeds=(1, 2, 3)[: 2 + trial % 2])
        c = paired_contrast(items, "C", "A", SPEC)
        d = (items[items.arm == "C"].groupby("item")["passed"].sum()
             - items[items.arm == "A"].groupby("item")["passed"].sum())
        pos, neg = int((d > 0).sum()), int((d < 0).sum())
        assert (c.n_items_hi, c.n_items_lo) == (pos, neg)
        if pos + neg == 0:
            continue
        two_sided = mcnemar([[0, pos], [neg, 0]], exact=True).pvalue
        assert min(1.0, 2 * min(c.sign_p, c.sign_p_reverse)) == pytest.approx(two_sided, rel=1e-9)
        assert c.sign_p == pytest.approx(binomtest(pos, pos + neg, 0.5, alternative="greater").pvalue, rel=1e-9)


def test_welch_matches_scipy_both_ways():
    rng = np.random.default_rng(13)
    for k_hi, k_lo in [(2, 2), (3, 3), (5, 5), (2, 4)]:
        x, y = rng.random((50, k_hi)), rng.random((50, k_lo))
        w = welch_test(x, y)
        ref_gt = ttest_ind(x, y, axis=1, equal_var=False, alternative="greater")
        ref_lt = ttest_ind(x, y, axis=1, equal_var=False, alternative="less")
        np.testing.assert_allclose(w.t, ref_gt.statistic, rtol=1e-12)
        np.testing.assert_allclose(w.p_greater, ref_gt.pvalue, rtol=1e-10)
        np.testing.assert_allclose(w.p_less, ref_lt.pvalue, rtol=1e-10)
    # no seed variance in either arm: no spread measured, which is not evidence of a gap beyond it
    # (scipy's t is +inf here); one seed likewise
    w = welch_test(np.array([[0.5, 0.5], [0.3, 0.3]]), np.array([[0.4, 0.4], [0.3, 0.3]]))
    assert w.p_greater.tolist() == [1.0, 1.0] and w.p_less.tolist() == [1.0, 1.0]
    w = welch_test(np.ones((1, 1)), np.ones((1, 2)))
    assert (w.p_greater[0], w.p_less[0]) == (1.0, 1.0)


# ---- the two-stage bootstrap, recomputed independently in exact arithmetic --------------------

def _canonical_order(block: np.ndarray) -> list[int]:
    """Seeds sorted by (pass count, outcome bits), the documented label-free order."""
    return sorted(range(len(block)), key=lambda s: (int(block[s].sum()), tuple(int(v) for v in block[s])))


def _reference_interval(items: pd.DataFrame, hi: str, lo: str, n_resamples: int, rng_seed: int, alpha: float,
                        method: str = "percentile") -> tuple[Fraction, Fraction]:
    """Loop implementation: draw the resamples in the documented order (item counts, hi's seed
    counts, lo's seed counts), rebuild each replicate's data set explicitly, take its mean difference
    as an exact Fraction, and read the floor(alpha (B + 1))-th order statistics."""
    def block(arm):
        g = items[items.arm == arm].sort_values(["seed", "item"])
        k, n = g.seed.nunique(), g.item.nunique()
        m = g.passed.to_numpy().reshape(k, n)
        return m[_canonical_order(m)]

    y_hi, y_lo = block(hi), block(lo)
    k, n = y_hi.shape
    rng = np.random.default_rng(rng_seed)
    w = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
    c_hi = rng.multinomial(k, np.full(k, 1.0 / k), size=n_resamples)
    c_lo = rng.multinomial(k, np.full(k, 1.0 / k), size=n_resamples)
    stats = []
    for b in range(n_resamples):
        total = 0
        for i in range(n):
            for s in range(k):
                total += int(w[b, i]) * (int(c_hi[b, s]) * int(y_hi[s, i]) - int(c_lo[b, s]) * int(y_lo[s, i]))
        stats.append(Fraction(total, n * k))
    stats.sort()
    j = int(np.floor(alpha * (n_resamples + 1) + 1e-9)) - 1
    lo_q, hi_q = stats[j], stats[n_resamples - 1 - j]
    if method == "basic":
        obs = Fraction(int(y_hi.sum()) - int(y_lo.sum()), n * k)
        return 2 * obs - hi_q, 2 * obs - lo_q
    return lo_q, hi_q


@pytest.mark.parametrize("method", ["percentile", "basic"])
def test_bootstrap_interval_equals_an_exact_loop_implementation(method):
    rng = np.random.default_rng(14)
    spec = copy.deepcopy(SPEC)
    spec["bootstrap"].update(n_resamples=199, method=method)
    for _ in range(3):
        items = random_items(rng, n_items=25)
        c = paired_contrast(items, "B", "A", spec)
        lo, hi = _reference_interval(items, "B", "A", 199, spec["bootstrap"]["rng_seed"], 0.05, method)
        assert (c.ci_low, c.ci_high) == (float(f"{float(lo):.10g}"), float(f"{float(hi):.10g}"))


def test_three_seed_tie_vectors_sit_exactly_on_the_grid():
    """With 3 seeds the per-item means live on a 1/3 grid; many replicates tie. The endpoints must be
    exact grid values that equal the exact-arithmetic reference, which a bias correction counting
    float ties could not guarantee."""
    rng = np.random.default_rng(15)
    spec = copy.deepcopy(SPEC)
    spec["bootstrap"]["n_resamples"] = 199
    for _ in range(13):
        n = int(rng.integers(6, 20))
        items = random_items(rng, n_items=n, rates={"A": 0.5, "B": 0.55, "C": 0.5})
        c = paired_contrast(items, "B", "A", spec)
        lo, hi = _reference_interval(items, "B", "A", 199, spec["bootstrap"]["rng_seed"], 0.05)
        assert c.ci_low == float(f"{float(lo):.10g}") and c.ci_high == float(f"{float(hi):.10g}")
        for end in (c.ci_low, c.ci_high):
            assert abs(end * 3 * n - round(end * 3 * n)) < 1e-6


def test_registered_order_statistic():
    assert lo_index(9999, 0.05) == 499 and lo_index(999, 0.05) == 49 and lo_index(199, 0.05) == 9
    with pytest.raises(ValueError, match="too few for a bound at alpha"):
        lo_index(10, 0.05)


def test_bootstrap_draws_follow_the_documented_order():
    d = BootstrapDraws.draw(50, 7, 3, 99)
    rng = np.random.default_rng(99)
    np.testing.assert_array_equal(d.items, rng.multinomial(7, np.full(7, 1 / 7), size=50))
    np.testing.assert_array_equal(d.seeds_hi, rng.multinomial(3, np.full(3, 1 / 3), size=50))
    np.testing.assert_array_equal(d.seeds_lo, rng.multinomial(3, np.full(3, 1 / 3), size=50))


# ---- invariance to seed labels ----------------------------------------------------------------

def _relabel(items: pd.DataFrame, perms: dict) -> pd.DataFrame:
    out = items.copy()
    for arm, perm in perms.items():
        mask = out.arm == arm
        out.loc[mask, "seed"] = out.loc[mask, "seed"].map(perm)
    return out


@pytest.mark.parametrize("rule", [{"test": "welch"}, {"test": "range", "multiplier": 1.0}])
def test_every_number_is_invariant_to_a_permutation_of_seed_labels(rule):
    rng = np.random.default_rng(16)
    spec = copy.deepcopy(SPEC)
    spec["spread_rule"] = rule
    items = random_items(rng, n_items=64, seeds=(1, 2, 3))
    base = analyze(items, spec)
    for perms in ({"C": {1: 3, 2: 1, 3: 2}}, {"A": {1: 2, 2: 1, 3: 3}, "B": {1: 3, 2: 2, 3: 1}},
                  {"A": {1: 3, 2: 1, 3: 2}, "B": {1: 2, 2: 3, 3: 1}, "C": {1: 2, 2: 1, 3: 3}}):
        other = analyze(_relabel(items, perms), spec)
        # the seed x arm table moves with the labels; every statistic stays put
        assert {a: sorted(v.values()) for a, v in other.per_seed.items()} == \
               {a: sorted(v.values()) for a, v in base.per_seed.items()}
        strip = lambda r: json.dumps({k: v for k, v in r.to_dict().items() if k != "per_seed"}, sort_keys=True)  # noqa: E731
        assert strip(other) == strip(base)


def test_row_order_and_spec_copy_do_not_matter():
    items = make_items(HAND, 10)
    first = json.dumps(analyze(items, SPEC).to_dict(), sort_keys=True)
    second = json.dumps(analyze(items.sample(frac=1.0, random_state=3), copy.deepcopy(SPEC)).to_dict(), sort_keys=True)
    assert first == second
    out = json.loads(first)
    assert out["arms"]["A"]["passed"] == 9 and out["arms"]["A"]["n"] == 20
    assert out["per_seed"] == {"A": {"1": 0.5, "2": 0.4}, "B": {"1": 0.8, "2": 0.8}, "C": {"1": 1.0, "2": 1.0}}


def test_per_arm_interval_is_the_two_stage_bootstrap_of_that_arm():
    rng = np.random.default_rng(17)
    spec = copy.deepcopy(SPEC)
    spec["bootstrap"]["n_resamples"] = 199
    items = random_items(rng, n_items=30)
    out = analyze(items, spec)
    # an arm against an all-fail arm is that arm's own interval (lo contributes zero everywhere)
    zero = items[items.arm == "A"].assign(arm="Z", passed=0)
    both = pd.concat([items[items.arm == "B"], zero])
    lo, hi = _reference_interval(both, "B", "Z", 199, spec["bootstrap"]["rng_seed"], 0.05)
    assert (out.arms["B"].ci_low, out.arms["B"].ci_high) == (float(f"{float(lo):.10g}"),
                                                                         float(f"{float(hi):.10g}"))
    assert out.arms["B"].ci_low <= out.arms["B"].mean <= out.arms["B"].ci_high


# ---- labels and precedence --------------------------------------------------------------------

def test_an_interval_wholly_below_the_sesoi_never_counts_as_support():
    """The SESOI-precedence example: a 2.3-pt gap whose interval lies inside (0, 5 pts) with a
    significant sign test and seed test is `ruled_out`, not `supported`."""
    n, k = 1000, 4
    a_pass = {s: span(0, 400 + s % 2) for s in range(1, k + 1)}   # the seeds differ by one item
    passes = {("A", s): a_pass[s] for s in range(1, k + 1)}
    passes.update({("B", s): a_pass[s] | span(401, 424) for s in range(1, k + 1)})
    passes.update({("C", s): a_pass[s] | span(401, 424) for s in range(1, k + 1)})
    c = paired_contrast(make_items(passes, n), "B", "A", SPEC)
    assert c.gap == pytest.approx(0.023)
    assert 0 < c.ci_low < c.gap < c.ci_high < SPEC["sesoi"]
    assert 0 < c.run_bound.low < c.gap < c.run_bound.high < SPEC["sesoi"]
    assert c.criteria["sign_p_below_alpha"] and c.criteria["beyond_seed_spread"]
    assert c.criteria["ci_low_above_zero"] and c.criteria["ci_high_below_sesoi"]
    assert c.criteria["run_bound_low_above_zero"] and c.criteria["run_bound_high_below_sesoi"]
    assert c.label == "ruled_out"
    # the numbers: gap 2.3, interval [0.8, 4.7], sesoi 5, every significance criterion met
    ci_high = np.array([0.047])
    assert label_of(ci_high < 0.05, np.array([False]), np.array([True]) & ~(ci_high < 0.05)).tolist() == ["ruled_out"]


def test_label_precedence_table():
    t, f = np.array([True]), np.array([False])
    assert label_of(t, t, f).tolist() == ["reversed"]
    assert label_of(t, f, f).tolist() == ["ruled_out"]
    assert label_of(f, f, t).tolist() == ["supported"]
    assert label_of(f, f, f).tolist() == ["not_supported"]


A_LOW = {("A", 1): span(0, 5), ("A", 2): span(0, 4)}             # 0.25, 0.20
B_MID = {("B", 1): span(0, 12), ("B", 2): span(0, 12)}           # 0.60 on both seeds
C_TOP = {("C", 1): span(0, 20), ("C", 2): span(0, 19)}           # 1.00, 0.95


def _four(rates: dict) -> dict:
    """(arm, seed) -> passing items for 4 seeds: arm -> passes per seed (items 0..m-1)."""
    return {(arm, s + 1): span(0, m) for arm, ms in rates.items() for s, m in enumerate(ms)}


def _verdict(passes, spec=SPEC):
    return analyze(make_items(passes, 20), spec)


def test_keep_both():
    out = _verdict({**A_LOW, **B_MID, **C_TOP})
    assert out.contrasts["C-B"].label == "supported" == out.contrasts["B-A"].label
    assert out.verdict.outcome == "keep_both"
    assert out.verdict.clauses_held["C > B > A: B-A and C-B supported (keep both)"]
    assert "B-A supported and C-B supported" in out.verdict.clause


def test_drop_heircommit_on_a_tie_says_ruled_out_not_b_beats_c():
    # 4 seeds that differ by one item: enough to bound the run spread below the sesoi
    out = _verdict(_four({"A": [5, 4, 5, 4], "B": [12, 12, 11, 12], "C": [12, 12, 11, 12]}))
    cb = out.contrasts["C-B"]
    assert cb.gap == 0 and cb.ci_high < 0.05 and cb.run_bound.high < 0.05 and cb.label == "ruled_out"
    assert out.verdict.outcome == "drop_heircommit"
    assert "C-B ruled_out" in out.verdict.clause
    assert "does not show B >= C" in out.verdict.contrasts["C-B"].says


def test_loop_earns_nothing_reversed_vs_ruled_out():
    a_high = {("A", 1): span(0, 12), ("A", 2): span(0, 12)}
    b_low = {("B", 1): span(0, 4), ("B", 2): span(0, 3)}
    c_any = {("C", 1): span(0, 4), ("C", 2): span(0, 4)}
    rev = _verdict({**a_high, **b_low, **c_any})
    ba = rev.contrasts["B-A"]
    assert ba.ci_high < 0 and ba.sign_p_reverse < 0.05 and ba.label == "reversed"
    assert rev.verdict.outcome == "loop_earns_nothing" and "B-A reversed" in rev.verdict.clause
    tie = _verdict(_four({"A": [12, 12, 11, 12], "B": [12, 12, 11, 12], "C": [4, 4, 4, 3]}))
    assert tie.contrasts["B-A"].label == "ruled_out"
    # the same tie over 2 seeds cannot bound the run spread (t with ~2 df): not ruled out
    two = _verdict({("A", 1): span(0, 12), ("A", 2): span(0, 11), ("B", 1): span(0, 12), ("B", 2): span(0, 11), **c_any})
    assert two.contrasts["B-A"].label == "not_supported" and two.contrasts["B-A"].run_bound.high > 0.05
    assert tie.verdict.outcome == "loop_earns_nothing" and "B-A ruled_out" in tie.verdict.clause


def test_a_lower_interval_without_the_mirror_seed_test_is_ruled_out_not_reversed():
    # B below A on every item of one seed only: the interval is below 0 but the seeds disagree
    a = {("A", 1): span(0, 12), ("A", 2): span(0, 12)}
    b = {("B", 1): span(0, 4), ("B", 2): span(0, 12)}
    c = {("C", 1): span(0, 4), ("C", 2): span(0, 4)}
    ba = _verdict({**a, **b, **c}).contrasts["B-A"]
    assert ba.seed_test.p_reverse > 0.05 and ba.label in ("ruled_out", "not_supported")
    assert ba.label != "reversed"


def test_not_resolved_when_b_minus_a_is_not_supported():
    out = _verdict({("A", 1): span(0, 5), ("A", 2): span(0, 5), ("B", 1): span(0, 6),
                    ("B", 2): span(0, 5), ("C", 1): span(0, 20), ("C", 2): span(0, 20)})
    ba = out.contrasts["B-A"]
    assert ba.gap == 0.025 and ba.sign_p == 0.5 and ba.ci_high >= 0.05
    assert ba.label == "not_supported"
    assert out.verdict.outcome == "not_resolved" and "B-A not_supported" in out.verdict.clause


def test_range_rule_uses_the_larger_seed_range_of_both_arms():
    spec = copy.deepcopy(SPEC)
    spec["spread_rule"] = {"test": "range", "multiplier": 1.0}
    # A's seeds differ by 1 item (0.05), B's by 4 items (0.20): the threshold is B's range
    out = _verdict({("A", 1): span(0, 5), ("A", 2): span(0, 4), ("B", 1): span(0, 8), ("B", 2): span(0, 12),
                    ("C", 1): span(0, 20), ("C", 2): span(0, 20)}, spec)
    ba = out.contrasts["B-A"]
    assert ba.seed_test.threshold == pytest.approx(0.2)
    assert ba.gap == pytest.approx(0.275) and ba.criteria["beyond_seed_spread"]


@pytest.mark.parametrize("ba,cb,outcome", [
    ("ruled_out", "supported", "loop_earns_nothing"),
    ("reversed", "supported", "loop_earns_nothing"),
    ("not_supported", "supported", "not_resolved"),
    ("supported", "supported", "keep_both"),
    ("supported", "ruled_out", "drop_heircommit"),
    ("supported", "reversed", "drop_heircommit"),
    ("supported", "not_supported", "not_resolved"),
])
def test_decide_intersection_union_table(ba, cb, outcome):
    c = {"B-A": Labelled("B", "A", ba), "C-B": Labelled("C", "B", cb)}
    v = decide(c)
    assert v.outcome == outcome == str(outcome_of(np.array([ba]), np.array([cb]))[0])
    # the clause names the label that decided, in the label's own words
    decisive = f"B-A {ba}" if outcome in ("loop_earns_nothing", "not_resolved") and ba != "supported" else f"C-B {cb}"
    assert decisive in v.clause or (outcome == "keep_both" and "C-B supported" in v.clause)
    for key, lab in (("B-A", ba), ("C-B", cb)):
        assert decide(c).contrasts[key].says.startswith(lab)


def test_decide_needs_both_contrasts_and_known_labels():
    with pytest.raises(ValueError, match="missing contrast 'C-B'"):
        decide({"B-A": Labelled("B", "A", "supported")})
    with pytest.raises(ValueError, match="label 'greater'"):
        decide({"B-A": Labelled("B", "A", "greater"), "C-B": Labelled("C", "B", "supported")})
    assert set(LABELS) == {"supported", "not_supported", "ruled_out", "reversed"}


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
    (_spec_with("spread_rule", {"test": "iqr"}), "'spread_rule.test' must be one of"),
    (_spec_with("spread_rule", {"test": "range"}), "missing key 'spread_rule.multiplier'"),
    (_spec_with("spread_rule", {"test": "welch", "multiplier": 1}), "unknown key 'spread_rule.multiplier'"),
    (_spec_with("bootstrap.rng_seed", delete=True), "missing key 'bootstrap.rng_seed'"),
    (_spec_with("alpha", delete=True), "missing key 'alpha'"),
    (_spec_with("sesio", 0.05), "unknown key 'sesio'"),
    (_spec_with("bootstrap.method", "BCa"), "'bootstrap.method' must be one of"),
    (_spec_with("bootstrap.confidence_level", 0.95), "must be 1 - 2 x alpha = 0.9"),
    (_spec_with("alpha", 0.7), "'alpha' must lie in"),
    (_spec_with("contrasts", [["C", "B"]]), "must include \\[B, A\\]"),
    (_spec_with("bootstrap.n_resamples", 99.5), "'bootstrap.n_resamples' must be an integer"),
    (_spec_with("bootstrap.n_resamples", 9), "too few for a bound at alpha"),
])
def test_bad_spec_names_the_key(spec, message):
    with pytest.raises(ValueError, match=message):
        validate_spec(spec)


def test_the_records_write_the_keys_the_readout_has_always_written_in_order():
    out = analyze(make_items(HAND, 10), SPEC)
    assert list(out.to_dict()) == ["n_items", "seeds", "arms", "per_seed", "contrasts", "verdict", "spec"]
    assert list(out.to_dict()["spec"]) == ["power", "alpha", "sesoi", "contrasts", "spread_rule", "bootstrap"]
    assert list(out.to_dict()["arms"]["A"]) == ["mean", "passed", "n", "ci_low", "ci_high", "seed_rates"]
    assert list(out.verdict.to_dict()) == ["outcome", "clause", "contrasts", "clauses_held"]
    assert list(out.contrasts["B-A"].to_dict()) == [
        "hi", "lo", "n_items", "n_seeds", "mean_hi", "mean_lo", "gap", "ci_low", "ci_high", "confidence_level",
        "bootstrap_method", "bootstrap", "n_resamples", "rng_seed", "n_items_hi", "n_items_lo", "n_items_tied",
        "sign_test", "sign_p", "sign_p_reverse", "seed_rates_hi", "seed_rates_lo", "spread_test", "alpha", "sesoi",
        "criteria", "label", "run_bound", "run_bound_informative", "run_bound_low", "run_bound_high", "run_bound_df",
        "welch_t", "welch_df", "welch_p", "welch_p_reverse"]
    ranged = paired_contrast(make_items(HAND, 10), "B", "A", {**SPEC, "spread_rule": {"test": "range", "multiplier": 1.0}})
    assert list(ranged.to_dict())[-2:] == ["spread_multiplier", "spread_threshold"]
    assert rule_spec(validate_spec(SPEC)) == rule_spec(SPEC) and rule_spec(SPEC).to_dict() == validate_spec(SPEC)


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


# ---- a verdict at any data: the degenerate cases, each with its stated outcome ----------------

def _grid(rates: dict, n_items: int, seeds=(1, 2), offset=None) -> pd.DataFrame:
    """arm -> number of passing items per seed (int, or {seed: int}); items 0..m-1 pass."""
    passes = {}
    for arm, m in rates.items():
        for s in seeds:
            passes[(arm, s)] = span(0, m[s] if isinstance(m, dict) else m)
    return make_items(passes, n_items)


def test_zero_seed_spread_in_both_arms_is_not_evidence_of_a_difference_beyond_it():
    # every seed of an arm passes exactly the same items: C beats B on 20 of 40 items, B beats A on 10
    items = _grid({"A": 10, "B": 20, "C": 40}, 40)
    w = welch_test(np.array([[0.5, 0.5]]), np.array([[0.25, 0.25]]))
    assert (w.p_greater[0], w.p_less[0]) == (1.0, 1.0)   # scipy would say p = 0 here
    res = analyze(items, SPEC)
    for key in ("B-A", "C-B"):
        c = res.contrasts[key]
        assert c.sign_p < 0.05 and c.ci_low > 0          # the item-level tests see the gap ...
        assert c.criteria["beyond_seed_spread"] is False     # ... but no seed spread to weigh it against
        assert c.run_bound.informative is False and c.run_bound.low is None
        assert c.label == "not_supported"
    assert res.verdict.outcome == "not_resolved"


def test_all_equal_arms_are_not_resolved_never_a_difference():
    items = _grid({"A": 7, "B": 7, "C": 7}, 20)
    res = analyze(items, SPEC)
    assert {c.label for c in res.contrasts.values()} == {"not_supported"}
    assert res.verdict.outcome == "not_resolved"


@pytest.mark.parametrize("m", [0, 30])
def test_floor_and_ceiling_give_a_verdict(m):
    res = analyze(_grid({"A": m, "B": m, "C": m}, 30), SPEC)
    assert res.verdict.outcome == "not_resolved"
    assert all(c.gap == 0 and c.label == "not_supported" for c in res.contrasts.values())


def test_one_seed_per_arm_gives_a_verdict_that_never_claims_beyond_the_seed_spread():
    items = _grid({"A": 5, "B": 25, "C": 40}, 40, seeds=(1,))
    res = analyze(items, SPEC)
    for c in res.contrasts.values():
        assert c.seed_test.p == 1.0 and c.run_bound.informative is False
        assert c.label == "not_supported"
    assert res.verdict.outcome == "not_resolved"
    rng = {**SPEC, "spread_rule": {"test": "range", "multiplier": 1.0}}
    assert analyze(items, rng).verdict.outcome == "not_resolved"


def test_the_run_bound_carries_run_spread_and_item_sampling():
    rng = np.random.default_rng(3)
    items = random_items(rng, n_items=200, seeds=(1, 2, 3, 4), rates={"A": 0.3, "B": 0.5, "C": 0.5})
    c = analyze(items, SPEC).contrasts["B-A"]
    y = items.pivot_table(index=["arm", "seed"], columns="item", values="passed")
    hi, lo = y.loc["B"].to_numpy(float), y.loc["A"].to_numpy(float)
    k, n = hi.shape
    v_seed = hi.mean(1).var(ddof=1) / k + lo.mean(1).var(ddof=1) / k
    m_hi, m_lo = hi.mean(0), lo.mean(0)
    within = (k / (k - 1)) * (np.mean(m_hi * (1 - m_hi)) + np.mean(m_lo * (1 - m_lo))) / k
    v_item = max(np.var(m_hi - m_lo, ddof=1) - within, 0.0) / n
    from scipy.stats import t as student_t
    # each part at its own quantile: the seeds' on k - 1 df (Hsu's), the items' on n - 1
    half = np.sqrt(student_t.ppf(0.95, k - 1) ** 2 * v_seed + student_t.ppf(0.95, n - 1) ** 2 * v_item)
    assert c.run_bound.df == k - 1 and half >= student_t.ppf(0.95, k - 1) * np.sqrt(v_seed) - 1e-12
    assert (c.run_bound.low, c.run_bound.high) == pytest.approx((c.gap - half, c.gap + half), rel=1e-6)
    assert c.label == "supported" and c.run_bound.low > 0

"""Power of the paired binary comparison: the design's 128-probe figure, and cross-checks of the
closed form against independent computations (sample-size formula, exact enumeration,
simulation with scipy.stats.binomtest)."""
import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from harness.stats.paired import exact_power_sign_test, mde_decision_rule, mde_paired, power_paired


def test_design_figure_128_probes_20pct_discordant_detects_11_to_12_points():
    d = mde_paired(128, 0.2)
    assert 0.10 <= d <= 0.125


def test_mde_plugs_back_into_connors_sample_size_formula():
    # the textbook form solved for n: n = (z_{1-a/2} sqrt(p_d) + z_pow sqrt(p_d - d^2))^2 / d^2
    for n, pd, alpha, pw in [(128, 0.2, 0.05, 0.8), (500, 0.1, 0.01, 0.9), (64, 0.35, 0.05, 0.8)]:
        d = mde_paired(n, pd, alpha, pw)
        za, zb = norm.ppf(1 - alpha / 2), norm.ppf(pw)
        n_back = (za * math.sqrt(pd) + zb * math.sqrt(pd - d * d)) ** 2 / d ** 2
        assert n_back == pytest.approx(n, rel=1e-9)
        assert power_paired(n, pd, d, alpha) == pytest.approx(pw, abs=1e-9)


def test_exact_power_is_near_the_target_at_the_approximate_mde():
    d = mde_paired(128, 0.2)
    exact = exact_power_sign_test(128, 0.2, d)
    # the discrete sign test is a little conservative; it lands near, below, 0.8
    assert 0.72 <= exact <= 0.85


def test_exact_power_matches_a_binomtest_simulation():
    n, pd, d, alpha = 60, 0.3, 0.15, 0.05
    rng = np.random.default_rng(7)
    q = (pd + d) / (2 * pd)
    reps, hits = 4000, 0
    cache = {}
    for _ in range(reps):
        m = rng.binomial(n, pd)
        x = rng.binomial(m, q)
        if m == 0:
            continue
        if (x, m) not in cache:
            cache[(x, m)] = binomtest(x, m, 0.5).pvalue <= alpha and x > m / 2
        hits += cache[(x, m)]
    sim = hits / reps
    exact = exact_power_sign_test(n, pd, d, alpha)
    assert abs(sim - exact) < 4 * math.sqrt(exact * (1 - exact) / reps)


def test_one_sided_mde_is_smaller_and_zero_effect_power_is_the_size():
    assert mde_paired(128, 0.2, alternative="greater") < mde_paired(128, 0.2)
    # at d = 0 the approximate power of a one-sided test is alpha itself
    assert power_paired(128, 0.2, 0.0, 0.05, alternative="greater") == pytest.approx(0.05)
    # and the exact one-sided test never exceeds its size
    assert exact_power_sign_test(128, 0.2, 0.0, 0.05, alternative="greater") <= 0.05


def test_power_increases_with_effect_and_n():
    assert power_paired(128, 0.2, 0.05) < power_paired(128, 0.2, 0.10) < power_paired(128, 0.2, 0.15)
    assert mde_paired(256, 0.2) < mde_paired(128, 0.2)


def test_decision_rule_mde_between_pooled_and_per_item_bounds():
    pooled = mde_decision_rule(128, 3, 0.2)
    per_item = mde_decision_rule(128, 3, 0.2, intra_item_corr=1.0)
    mid = mde_decision_rule(128, 3, 0.2, intra_item_corr=0.5)
    assert pooled == pytest.approx(mde_paired(384, 0.2))
    assert per_item == pytest.approx(mde_paired(128, 0.2))
    assert pooled < mid < per_item
    assert mid == pytest.approx(mde_paired(128 * 3 / 2.0, 0.2))


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="p_discordant"):
        mde_paired(128, 0.0)
    with pytest.raises(ValueError, match="cannot detect"):
        mde_paired(3, 0.2)
    with pytest.raises(ValueError, match="cannot exceed"):
        power_paired(128, 0.2, 0.3)
    with pytest.raises(ValueError, match="alternative"):
        mde_paired(128, 0.2, alternative="less")
    with pytest.raises(ValueError, match="integer"):
        exact_power_sign_test(12.5, 0.2, 0.1)
    with pytest.raises(ValueError, match="intra_item_corr"):
        mde_decision_rule(128, 3, 0.2, intra_item_corr=1.5)


@pytest.mark.parametrize("sd", [1.0, 4.5, 12.0, 17.0])
def test_intercept_hits_the_rate_exactly(sd):
    """An arm simulated at rate r has expected pass rate r at any fitted SD (an independent Monte
    Carlo of 4 million normal draws, standard error under 0.0002): a sesoi cell then simulates its
    effect within 0.1 pts. A fixed 80-node Gauss-Hermite rule missed by 0.15 pts at sd 17."""
    from scipy.special import expit

    from harness.stats.design.model import intercept as _intercept
    z = np.random.default_rng(20261203).standard_normal(4_000_000)
    means = {}
    for rate in (0.06, 0.11, 0.5):
        means[rate] = float(expit(_intercept(rate, sd) + sd * z).mean())
        assert abs(means[rate] - rate) < 6e-4, (rate, means[rate])
    assert abs((means[0.11] - means[0.06]) - 0.05) < 1e-3

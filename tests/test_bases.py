"""Bases as a factor of the design (harness.stats.design.bases): the per-experiment simulator hits the
exact simulator, the bases a claim about the recipe needs match a Monte-Carlo of the t-test over bases,
a base spread inflates the labels' level about the recipe as it must, and the registration is checked
and written (or left out) as documented."""
import dataclasses

import numpy as np
import pytest
from scipy import stats

from harness.readout import prereg, words
from harness.spec.protocol import load_protocol
from harness.stats import power
from harness.stats.design import bases, model, records, simulate, summary
from tests.test_design import SPEC  # the rule the design tests simulate

ASSUMED = {"n_items": 128, "pass_rates": {"A": 0.3, "B": 0.3, "C": 0.3},
           "seed_sd": {"A": 0.011, "B": 0.02, "C": 0.02},
           "seed_agreement": {"A": 0.88, "B": 0.85, "C": 0.85}, "arm_agreement": 0.82}
DESIGN = power.DesignSettings(replicates=600, rng_seed=11, bootstrap_resamples=99, assumed=ASSUMED)
VC = model.VarianceComponents.from_moments(ASSUMED, "assumed")


def _spread(ba: float, cb: float, n: int = 2) -> dict:
    return {"bases": n, "sd": {"B-A": ba, "C-B": cb}}


def test_per_experiment_rates_simulate_as_the_exact_simulator():
    noise = simulate.Noise.draw(50, 3, 128, ("hi", "lo"), np.random.default_rng(2))
    same = bases.simulate_at_rates(VC, noise, "hi", np.full(50, 0.3), VC.run_sd["B"])
    assert np.array_equal(same, simulate.simulate_arm(VC, noise, "hi", 0.3, VC.run_sd["B"]))
    rates = np.linspace(0.02, 0.9, 50)  # the spline between exact solves, for both run shapes
    for shape in ("normal", "one_collapse"):
        vc = dataclasses.replace(VC, run_shape=shape)
        got = bases.arm_intercepts(vc, 0.6, 3, rates)
        want = [simulate.arm_intercept(r, vc.item_sd, vc.arm_item_sd, 0.6, shape, 3) for r in rates]
        assert np.max(np.abs(got - want)) < 1e-5


def test_bases_needed_matches_a_monte_carlo_of_the_t_test_over_bases():
    rng = np.random.default_rng(5)
    sd, se, sesoi = 0.04, 0.012, 0.05
    k = bases.bases_needed(sesoi, 0.05, 0.8, sd, se)
    assert k is not None and k > 2

    def power_at(n: int) -> float:
        gaps = rng.normal(0.0, np.hypot(sd, se), size=(20000, n))
        return float((stats.ttest_1samp(gaps, sesoi, axis=1, alternative="less").pvalue < 0.05).mean())

    mc = 3 * np.sqrt(0.8 * 0.2 / 20000)
    assert power_at(k) >= 0.8 - mc
    assert power_at(k - 1) < 0.8 + mc
    # more spread between bases needs more bases; no spread at all is decided by two
    assert bases.bases_needed(sesoi, 0.05, 0.8, 2 * sd, se) > k
    assert bases.bases_needed(sesoi, 0.05, 0.8, 0.0, 0.0) == 2
    assert bases.bases_needed(sesoi, 0.05, 0.8, 5.0, se) is None  # beyond MAX_BASES


def test_one_base_speaks_for_the_recipe_only_when_bases_do_not_move_the_effect():
    none = bases.base_oc(SPEC, DESIGN, VC, 512, 3, _spread(0.0, 0.0))
    wide = bases.base_oc(SPEC, DESIGN, VC, 512, 3, _spread(0.06, 0.0))
    alpha, R = SPEC["alpha"], DESIGN.replicates
    for c in none.contrasts:  # no base spread: the rule's own level and power
        assert c.level <= alpha + 3 * records.mc_se(alpha, R)
        assert c.ruled_out_at_0 > 0.5
    ba = {c.contrast: c for c in wide.contrasts}["B-A"]
    cb = {c.contrast: c for c in wide.contrasts}["C-B"]
    assert ba.level > 0.15  # a base SD above the sesoi: one base often labels the recipe wrongly
    assert ba.ruled_out_at_0 < {c.contrast: c for c in none.contrasts}["B-A"].ruled_out_at_0
    assert cb.level == {c.contrast: c for c in none.contrasts}["C-B"].level  # same draws, no spread on C-B
    assert ba.per_base_se == pytest.approx(cb.per_base_se, rel=0.25)  # the gap's s.e. about its own base
    assert ba.bases_needed > cb.bases_needed
    assert wide.fewest_seeds == 2 and ba.per_base_se_few > ba.per_base_se  # fewer seeds, a noisier base
    assert ba.base_sd_upper == pytest.approx(0.06 * np.sqrt(1 / stats.chi2.ppf(0.2, 1)))


def test_the_registration_is_checked_and_written_only_where_registered():
    for bad, what in ((_spread(0.07, 0.01, 1), "base_spread.bases"), ({"bases": 2, "sd": {"B-A": 0.07}}, "base_spread.sd"),
                      (_spread(1.5, 0.01), "base_spread.sd.B-A"), ({"sd": {}}, "base_spread: expected a mapping")):
        with pytest.raises(ValueError, match=what.replace(".", r"\.")):
            power.validate_design({**DESIGN.__dict__, "base_spread": bad})
    plain = power.design_analysis(SPEC, dataclasses.replace(DESIGN, replicates=60), VC, 128, 3)
    assert "bases" not in plain.to_dict() and list(summary.design_summary(plain)) == list(summary.SUMMARY_KEYS)
    assert words.base_lines(plain) == []
    spread = dataclasses.replace(DESIGN, replicates=60, base_spread=_spread(0.07, 0.01))
    d = power.design_analysis(SPEC, spread, VC, 128, 3)
    assert records.DesignAnalysis.from_dict(d.to_dict()).to_dict() == d.to_dict()
    assert summary.design_summary(d)["label_level_about_the_recipe"] == max(c.level for c in d.bases.contrasts)
    text = "\n".join(words.base_lines(d))
    assert "design: About the recipe, not this base" in text and "P(ruled_out), recipe at sesoi" in text
    b_a = next(line for line in words.base_lines(d) if line.split()[1:2] == ["B-A"])
    assert "7.0 pts (27.6 pts)" in b_a and f"{next(c for c in d.bases.contrasts if c.contrast == 'B-A').ruled_out_at_sesoi:.3f}" in b_a


def test_main_registers_its_measured_base_spread_and_its_preregistration_says_so():
    p = load_protocol("main")
    spread = bases.BaseSpread.of(p.decision.design["base_spread"])
    assert spread.bases == 2 and spread.sd == {"B-A": 0.07, "C-B": 0.015}
    design = power.design_analysis(SPEC, dataclasses.replace(DESIGN, replicates=60, base_spread=spread.to_dict()),
                                   VC, 128, 3)
    text = "\n".join(prereg._about_the_recipe(design) + prereg._hypotheses(p))
    assert "### The design about the recipe" in text and "| B-A | 7.0 pts (27.6 pts) |" in text
    assert "not about the recipe" in text and "section 3, the design about the recipe" in text

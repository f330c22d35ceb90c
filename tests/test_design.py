"""The design analysis: the simulation model recovers its own components, the batch core decides
exactly as the readout does on one experiment, the registered rule holds its size at the null under
run effects (2, 3 and 5 seeds), C's gate simulation applies heircommit's rule, and the protocols'
designs say what they can resolve."""
import copy
import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.freeze.freeze import power_report
from harness.readout import words
from harness.readout.design import protocol_design
from harness.running.heircommit import confirm
from harness.spec.protocol import ConfirmRule, load_protocol
from harness.stats import contrasts, power
from harness.stats.design import model, records, simulate, summary
from harness.stats.decision import decision_spec

SPEC = {
    "alpha": 0.05, "sesoi": 0.05, "power": 0.8, "contrasts": [["C", "B"], ["B", "A"]],
    "spread_rule": {"test": "welch"},
    "bootstrap": {"n_resamples": 999, "method": "percentile", "confidence_level": 0.90, "rng_seed": 20261129},
}
ASSUMED = {"n_items": 128, "pass_rates": {"A": 0.45, "B": 0.45, "C": 0.45},
           "seed_sd": {"A": 0.011, "B": 0.039, "C": 0.061},
           "seed_agreement": {"A": 0.83, "B": 0.83, "C": 0.83}, "arm_agreement": 0.80}
DESIGN = {"replicates": 400, "rng_seed": 7, "bootstrap_resamples": 199, "assumed": ASSUMED}


def _frame(y: dict, r: int) -> pd.DataFrame:
    """Replicate r of simulated outcomes arm -> (R, k, n) as an items frame."""
    rows = [(arm, s, i, int(a[r, s, i])) for arm, a in y.items() for s in range(a.shape[1]) for i in range(a.shape[2])]
    return pd.DataFrame(rows, columns=list(contrasts.COLUMNS))


def test_calibration_recovers_the_components_it_simulates():
    truth = model.VarianceComponents(control_rate=0.4, gate_rate=0.4, item_sd=2.0, arm_item_sd=0.8,
                                      run_sd={"A": 0.1, "B": 0.3, "C": 0.5})
    noise = simulate.Noise.draw(1, 40, 3000, records.ARMS, np.random.default_rng(3))
    y = {a: simulate.simulate_arm(truth, noise, a, 0.4, truth.run_sd[a]) for a in records.ARMS}
    fit = model.VarianceComponents.from_items(_frame(y, 0))
    assert fit.source == "observed"
    assert fit.item_sd == pytest.approx(2.0, rel=0.12)
    assert fit.arm_item_sd == pytest.approx(0.8, rel=0.25)
    for a, want in truth.run_sd.items():  # 40 seeds: the run SD is known to about 12%
        assert fit.run_sd[a] == pytest.approx(want, rel=0.35, abs=0.04)


def test_simulated_arms_hit_their_target_pass_rates():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    noise = simulate.Noise.draw(200, 3, 128, records.ARMS, np.random.default_rng(4))
    for rate in (0.3, 0.45, 0.6):
        y = simulate.simulate_arm(vc, noise, "B", rate, vc.run_sd["B"])
        assert y.mean() == pytest.approx(rate, abs=0.01)


def test_moments_are_checked_with_clear_errors():
    with pytest.raises(ValueError, match="pilot.json: missing key 'variance_components'"):
        model.VarianceComponents.from_pilot({"base_pass_rate": 0.4})
    bad = copy.deepcopy(ASSUMED)
    del bad["arm_agreement"]
    with pytest.raises(ValueError, match=r"missing key\(s\) \['arm_agreement'\]"):
        model.VarianceComponents.from_pilot({"variance_components": bad})
    bad = copy.deepcopy(ASSUMED)
    bad["seed_agreement"]["C"] = 1.3
    with pytest.raises(ValueError, match=r"seed_agreement\.C: expected a number in \[0.0, 1.0\], got 1.3"):
        model.VarianceComponents.from_moments(bad, "pilot", "pilot.json: variance_components")
    with pytest.raises(ValueError, match="decision.yaml design.replicates: expected an integer >= 10, got 3"):
        power.validate_design({**DESIGN, "replicates": 3})


def test_the_batch_core_decides_exactly_as_the_readout_does_on_each_experiment():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    noise = simulate.Noise.draw(6, 3, 40, records.ARMS, np.random.default_rng(5))
    y = {"A": simulate.simulate_arm(vc, noise, "A", 0.45, 0.1), "B": simulate.simulate_arm(vc, noise, "B", 0.6, 0.3),
         "C": simulate.simulate_arm(vc, noise, "C", 0.62, 0.3)}
    spec = contrasts.validate_spec(SPEC)
    batch = contrasts.evaluate(y, spec)
    for r in range(6):
        one = contrasts.analyze(_frame(y, r), spec)
        assert one.verdict.outcome == batch.outcome[r]
        for key, c in one.contrasts.items():
            assert c.label == batch.contrasts[key].label[r]
            assert c.ci_low == pytest.approx(batch.contrasts[key].ci_low[r], rel=1e-9, abs=1e-12)
            assert c.sign_p == pytest.approx(batch.contrasts[key].sign.p_greater[r], rel=1e-9)


def test_design_analysis_is_seeded_and_reproducible():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    small = {**DESIGN, "replicates": 100}
    a = power.design_analysis(SPEC, small, vc, 40, 2)
    b = power.design_analysis(copy.deepcopy(SPEC), copy.deepcopy(small), vc, 40, 2)
    assert a == b
    c = power.design_analysis(SPEC, {**small, "rng_seed": 8}, vc, 40, 2)
    assert c.rule.cells != a.rule.cells
    assert len(a.rule.cells) == 9
    for cell in a.rule.cells:
        assert sum(cell.verdict.values()) == pytest.approx(1.0)
        for key in ("B-A", "C-B"):
            assert sum(cell.labels[key].values()) == pytest.approx(1.0)
    # the one writer and the one reader: reading what is written gives the analysis back
    assert records.DesignAnalysis.from_dict(json.loads(json.dumps(a.to_dict()))) == a


def test_power_grows_with_the_effect_and_the_assumed_source_is_flagged():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    d = power.design_analysis(SPEC, {**DESIGN, "positive_control_effect": 0.2}, vc, 128, 3)
    curve = {p.effect: p.labels["supported"] for p in d.positive_control.curve}
    assert curve[0.0] < curve[0.05] < curve[0.2]
    cells = {(c.effect_BA, c.effect_CB): c.keep_both for c in d.rule.cells}
    assert cells[(0.1, 0.1)] > cells[(0.05, 0.05)] > cells[(0.0, 0.0)]
    assert any("no pilot" in w for w in d.warnings)
    assert any(w.startswith("underpowered: P(keep_both) at the sesoi") for w in d.warnings)
    text = "\n".join(words.design_lines(d))
    assert "design: variance components from the registered ASSUMPTIONS (no pilot)" in text
    assert "keep_both false-positive rate" in text


# ---- type-I error of the registered rule under run effects -----------------------------------

def _null_supported(k: int, R: int, scale_hi: float, which: str, rng_seed: int) -> tuple[float, float]:
    """P(label supported) of one contrast at a true effect of 0, with run effects in the treatment
    arm(s): B-A (B's calibrated run SD x scale_hi against A's) or C-B (C's x scale_hi against B's)."""
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    d = {**DESIGN, "replicates": R, "rng_seed": rng_seed}
    hi, lo = ("B", "A") if which == "B-A" else ("C", "B")
    curve = power.contrast_oc(SPEC, d, vc, 128, k, [0.0], scale_hi * vc.run_sd[hi], vc.run_sd[lo])
    p = curve[0].labels["supported"]
    return p, math.sqrt(p * (1 - p) / R) if 0 < p < 1 else 1.0 / R


@pytest.mark.parametrize("k", [2, 3, 5])
def test_type_one_error_at_the_null_is_within_alpha_fast(k):
    for which, scale in (("B-A", 1.0), ("C-B", 2.0)):
        p, se = _null_supported(k, 600, scale, which, 100 + k)
        assert p <= SPEC["alpha"] + 3 * se, (which, scale, k, p, se)


@pytest.mark.long
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("which,scale", [("B-A", 1.0), ("B-A", 2.0), ("C-B", 1.0), ("C-B", 2.0)])
def test_type_one_error_at_the_null_is_within_alpha(k, which, scale):
    p, se = _null_supported(k, 4000, scale, which, 200 + k)
    assert p <= SPEC["alpha"] + 3 * se, (which, scale, k, p, se)


@pytest.mark.long
@pytest.mark.parametrize("k", [2, 3, 5])
def test_keep_both_false_positive_rate_is_within_alpha(k):
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    doubled = model.VarianceComponents(vc.control_rate, vc.gate_rate, vc.item_sd, vc.arm_item_sd,
                                        {a: 2 * v if a != "A" else v for a, v in vc.run_sd.items()})
    for comps in (vc, doubled):
        r = power.rule_oc(SPEC, {**DESIGN, "replicates": 2000}, comps, 128, k)
        fp = r.keep_both_false_positive
        assert fp.p <= SPEC["alpha"] + 3 * max(fp.se, 1 / 2000), (k, fp)


# ---- C's confirm gate -------------------------------------------------------------------------

@pytest.mark.parametrize("rule,margin", [("not_worse", 0), ("not_worse", 2), ("superior", 0)])
def test_gate_simulation_applies_heircommits_confirm_rule(rule, margin):
    rng = np.random.default_rng(9)
    for _ in range(300):
        n = int(rng.integers(4, 60))
        succ, root = (rng.random(n) < 0.5).astype(int), (rng.random(n) < 0.5).astype(int)
        counts = {"n": n, "successor_pass": int(succ.sum()), "root_pass": int(root.sum()),
                  "successor_only": int(((succ == 1) & (root == 0)).sum()),
                  "root_only": int(((succ == 0) & (root == 1)).sum())}
        want = confirm(counts, rule, margin, 0.1)["decision"] == "commit"
        got = power.commit_decisions(counts["successor_pass"], counts["root_pass"], counts["successor_only"],
                                      counts["root_only"], rule, margin, 0.1)
        assert bool(got) == want


def test_gate_curve_rises_and_not_worse_commits_on_ties():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    curve = power.gate_oc(ConfirmRule("not_worse", 0, 0.1), 48, {**DESIGN, "replicates": 2000}, vc)
    p = {c.diff: c.p_commit for c in curve}
    assert p[-0.1] < p[-0.05] < p[0.0] < p[0.05] < p[0.1]
    assert p[0.0] > 0.5  # ties commit: at no true difference the successor is kept more often than not
    sup = power.gate_oc(ConfirmRule("superior", 0, 0.1), 48, {**DESIGN, "replicates": 2000}, vc)
    assert {c.diff: c.p_commit for c in sup}[0.0] <= 0.1 + 3 * math.sqrt(0.09 / 2000)


# ---- the shipped protocols ------------------------------------------------------------------

def test_freeze_power_report_of_smoke_is_the_simulated_design():
    report = power_report(load_protocol("smoke"))
    d = report["design"]  # as freeze.json holds it
    assert d["size"] == {"n_items": 128, "n_seeds": 2, "arms": ["A", "B", "C"]}
    assert d["components"]["source"] == "assumed" and any("no pilot" in w for w in report["underpowered"])
    text = "\n".join(report["lines"])
    for needle in ("P(verdict) by true effect", "keep_both false-positive rate", "C's confirm gate (not_worse, margin 0, "
                   "48 probes per round)", "commits on ties"):
        assert needle in text, needle
    # smoke registers the positive control its readouts showed (+5 pts against A), which 128 probes x 2
    # seeds detect well under the registered power: freeze says so, loudly
    pc = d["positive_control"]
    at = next(c for c in pc["curve"] if c["effect"] == pc["effect"])
    assert pc["effect"] == 0.05 and at["labels"]["supported"] < d["power"] - 3 * at["supported_se"]
    # the registered check itself (P beats the base and A by 3 pts, sign test), simulated as the readout applies it
    ctrl = {c["role"]: c for c in d["controls"]}
    assert ctrl["positive"]["versus"] == ["base", "A"] and ctrl["positive"]["margin"] == 0.03
    assert ctrl["positive"]["p_pass_at_effect"] < d["power"] and ctrl["positive"]["p_pass_at_0"] <= 0.05
    assert any(w.startswith("the positive control (+5.0 pts) passes its registered check") for w in report["underpowered"])
    assert "positive control P, its registered check itself (beats base and A by +3.0 pts, sign test): P(pass)" in text
    assert "negative control N, its registered check itself (must not beat B by +0.0 pts): P(fires)" in text



@pytest.mark.long
def test_the_main_protocol_is_registered_to_decide():
    """`make experiment PROTOCOL=main`, the one-base experiment: at its registered components its design
    meets what a deciding experiment needs (the positive control's check, keep_both at the sesoi, the false
    positives, C's gate), at 512 probes x 12 seeds. Behind `long`, as the recipe protocol's plan check is
    (tests/test_recipe_experiment.py): a registration's figures at full size (2000 replicates a cell)."""
    p = load_protocol("main")
    assert (p.tasks.probe.size, len(p.seeds.run_seeds), p.seeds.pilot_seeds) == (512, 12, 4)
    s = summary.design_summary(protocol_design(p))
    assert s["positive_control_power"] >= 0.8 and s["keep_both_at_sesoi"] >= 0.8
    assert s["keep_both_false_positive"] <= 0.05 + 0.015      # alpha, within 3 MC s.e. of 2000 replicates
    assert s["gate_commit_at_minus_sesoi"] <= 0.2 and s["gate_commit_at_plus_sesoi"] >= 0.8
    # and about the recipe, at the base spread it registers (B-A 7 pts between bases), it decides little
    assert s["label_level_about_the_recipe"] > 0.2

@pytest.mark.long
def test_the_powered_protocol_resolves_its_sesoi():
    p = load_protocol("polygon_powered")
    d = protocol_design(p)
    assert d.keep_both_at_sesoi >= decision_spec(p)["power"]
    assert d.rule.keep_both_false_positive.p <= 0.05 + 3 * d.rule.keep_both_false_positive.se
    polygon = protocol_design(load_protocol("polygon"))
    assert polygon.keep_both_at_sesoi < 0.8  # the seed's design cannot resolve its sesoi


@pytest.mark.parametrize("fname,change,message", [
    ("bootstrap.yaml", {"confidence_level": 0.95}, r"bootstrap\.yaml: .*must be 1 - 2 x alpha = 0\.9"),
    ("bootstrap.yaml", {"method": "BCa"}, r"bootstrap\.yaml: key 'method'"),
    ("decision.yaml", {"spread_rule": {"test": "iqr"}}, r"decision\.yaml: .*'spread_rule\.test' must be one of"),
    ("decision.yaml", {"design": {"replicates": 100}}, r"decision\.yaml: decision\.yaml design: missing key"),
])
def test_a_protocol_with_a_bad_statistics_block_is_refused_naming_the_file(tmp_path, fname, change, message):
    import shutil

    import yaml

    from harness.spec.protocol import PROJECT_ROOT, ProtocolError
    d = tmp_path / "p"
    shutil.copytree(PROJECT_ROOT / "protocols" / "smoke", d)
    data = yaml.safe_load((d / fname).read_text())
    data.update(change)
    (d / fname).write_text(yaml.safe_dump(data))
    with pytest.raises(ProtocolError, match=message):
        load_protocol(d)


def test_an_arm_at_the_ceiling_still_has_an_observed_design():
    rows = [(arm, s, i, int(arm == "C" or (i + s) % 3 == 0)) for arm in "ABC" for s in (1, 2) for i in range(30)]
    m = model.observed_moments(pd.DataFrame(rows, columns=list(contrasts.COLUMNS)))
    assert m.pass_rates["C"] == pytest.approx(1 - 0.5 / 30)
    vc = model.VarianceComponents.from_moments(m, "observed")
    assert math.isfinite(vc.item_sd) and all(math.isfinite(v) for v in vc.run_sd.values())


def test_a_one_seed_design_says_the_rule_cannot_decide_and_still_draws_the_gate():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 100}, vc, 40, 1,
                               gate=ConfirmRule("not_worse", 0, 0.1), n_confirm=16)
    assert "needs >= 2 seeds per arm" in d.rule.error and any("needs >= 2 seeds" in w for w in d.warnings)
    assert d.to_dict()["rule"] == {"error": d.rule.error}
    text = "\n".join(words.design_lines(d))
    assert "cannot decide" in text and "P(commit)" in text


def test_a_one_seed_range_design_runs_without_the_welch_alternative():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    spec = {**SPEC, "spread_rule": {"test": "range", "multiplier": 1.0}}
    d = power.design_analysis(spec, {**DESIGN, "replicates": 100}, vc, 40, 1)
    assert d.rule.alternative is None and len(d.rule.cells) == 9
    assert all("keep_both_alternative" not in c for c in d.to_dict()["rule"]["cells"])
    two = power.design_analysis(spec, {**DESIGN, "replicates": 100}, vc, 40, 2)
    assert two.rule.alternative.spread_rule == {"test": "welch"}


@pytest.mark.parametrize("rate", [0.9, 0.97, 0.003])
def test_a_control_at_a_ceiling_or_floor_still_has_a_design(rate):
    """The observed design at A's pass rate 0.9 (or 0.97, or at the floor): every cell is simulated, the
    control moved down where the effects above it would pass 1, with the effects as stated."""
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    vc = model.VarianceComponents(rate, rate, vc.item_sd, vc.arm_item_sd, vc.run_sd)
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 60, "positive_control_effect": 0.15}, vc, 64, 2,
                               gate=ConfirmRule("not_worse", 0, 0.1), n_confirm=16)
    assert len(d.rule.cells) == 9
    for cell in d.rule.cells:
        assert 0 < cell.control_rate <= max(rate, 0.5 / 64)
        assert cell.control_rate + cell.effect_BA + cell.effect_CB <= 1 - 0.5 / 64 + 1e-9
    assert all(x.control_rate + 0.15 < 1 for x in d.positive_control.curve)
    assert simulate.placed_control(0.5, 0.1, 64) == 0.5 and simulate.placed_control(0.95, 0.1, 64) == pytest.approx(1 - 0.5 / 64 - 0.1)


# ---- every label at its level under run spread (item 1 of the statistics' promises) ----------

def _levels(k: int, spread: float, R: int, n_items: int = 128) -> list[power.LabelLevel]:
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    return power.label_levels(SPEC, {**DESIGN, "replicates": R, "rng_seed": 300 + k}, vc, n_items, k, spread)


def _assert_level(rows: list[power.LabelLevel]) -> None:
    for row in rows:
        for p, se in ((row.supported_at_0, row.supported_at_0_se), (row.ruled_out_at_sesoi, row.ruled_out_at_sesoi_se)):
            assert p <= SPEC["alpha"] + 3 * max(se, 1.0 / 4000), row


def test_each_label_holds_its_level_under_doubled_run_spread_fast():
    _assert_level(_levels(2, 2.0, 600))


@pytest.mark.long
@pytest.mark.parametrize("k", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("spread", [1.0, 2.0])
def test_each_label_holds_its_level_under_run_spread(k, spread):
    """P(supported | 0) <= alpha and P(ruled_out | sesoi) <= alpha for B-A and C-B, within 3 MC s.e."""
    _assert_level(_levels(k, spread, 3000))


def test_the_control_simulation_applies_the_readouts_registered_check():
    """control_oc's pass rate is controls.beats on controls.paired (the readout's functions) applied
    to each simulated experiment; and P(pass) rises with the positive control's effect."""
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    checks = [{"role": "positive", "arm": "P", "versus": ["base", "A"], "margin": 0.03},
              {"role": "negative", "arm": "N", "versus": ["B"], "margin": 0.0}]
    d = {**DESIGN, "replicates": 300}
    small, big = (power.control_oc(checks, SPEC, d, vc, 64, 2, e) for e in (0.05, 0.25))
    assert small[0].p_pass_at_0 == big[0].p_pass_at_0 <= 0.05
    assert small[0].p_pass_at_effect < big[0].p_pass_at_effect and big[0].p_pass_at_effect > 0.8
    assert 0 <= small[1].p_fires_when_equal < 0.5
    assert list(small[1].to_dict()) == ["role", "arm", "versus", "margin", "effect", "p_fires_when_equal",
                                        "p_fires_when_equal_se"]
    from harness.readout import controls
    rng = np.random.default_rng(4)
    hi, lo = rng.integers(0, 2, (50, 2, 30)), rng.integers(0, 2, (50, 3, 30))
    batch = controls.beats(controls.paired_batch(hi, lo), 0.02, 0.05)
    one = [controls.beats(controls.paired(hi[r], lo[r]), 0.02, 0.05) for r in range(50)]
    assert batch.tolist() == one


def test_the_false_positive_rate_is_the_maximum_found_over_the_null_set_not_a_grid_cell():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    r = power.rule_oc(SPEC, {**DESIGN, "replicates": 300}, vc, 64, 3)
    fp = r.keep_both_false_positive
    assert fp.p >= fp.grid_worst["p"] and 0 in fp.at
    visited = power.null_search(lambda a, b: a + b, 64)   # a toy objective: the search reaches the far end
    assert max(a + b for a, b in visited) == pytest.approx(1 - 1 / 64, abs=0.02)
    assert all(a == 0 or b == 0 for a, b in visited)


def test_the_design_summary_is_flat_and_reads_the_analysis():
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    checks = [{"role": "positive", "arm": "P", "versus": ["base", "A"], "margin": 0.03}]
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 100, "positive_control_effect": 0.1}, vc, 64, 2,
                               gate=ConfirmRule("not_worse", 0, 0.1), n_confirm=16, control_checks=checks)
    s = summary.design_summary(d)
    assert tuple(s) == (*summary.SUMMARY_KEYS, "joint_power") and all(isinstance(v, float) for v in s.values())
    assert s["joint_power"] == d.joint.p <= s["keep_both_at_sesoi"]  # on the rule's own experiments
    assert s["positive_control_power"] == d.controls[0].p_pass_at_effect
    assert s["keep_both_false_positive"] == d.rule.keep_both_false_positive.p
    sesoi_cells = [c for c in d.rule.cells if 0.05 in (c.effect_BA, c.effect_CB)]
    assert s["ruled_out_at_sesoi"] == max(c.labels[k]["ruled_out"] for c in sesoi_cells
                                          for k in ("B-A", "C-B") if c.effect(k) == 0.05)
    assert summary.design_summary(d.to_dict()) == s  # the same from what verdict.json holds
    curve = {x.diff: x.p_commit for x in d.gate.curve}
    assert (s["gate_commit_at_minus_sesoi"], s["gate_commit_at_plus_sesoi"]) == (curve[-0.05], curve[0.05])
    assert summary.design_summary({"error": "x"}) == dict.fromkeys(summary.SUMMARY_KEYS)
    assert "summary: positive_control_power" in "\n".join(words.design_lines(d))


def test_a_fit_that_cannot_reproduce_the_agreements_says_so():
    """One item effect shared by all arms cannot give A near-perfect seed agreement while B and C
    disagree often: the fit reports what it misses, and the design analysis warns."""
    m = {**ASSUMED, "seed_agreement": {"A": 0.99, "B": 0.75, "C": 0.75}}
    vc = model.VarianceComponents.from_moments(m, "pilot")
    assert any(x.startswith("arm A's seed agreement 0.990") for x in vc.misfit())
    assert model.VarianceComponents.from_moments(ASSUMED, "assumed").misfit() == []
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 60}, vc, 32, 2)
    assert any(w.startswith("the fitted model cannot reproduce the pilot outcomes") for w in d.warnings)


def test_the_pessimistic_components_widen_the_run_spread_and_freeze_warns():
    import dataclasses
    vc = dataclasses.replace(model.VarianceComponents.from_moments(ASSUMED, "pilot"), n_seeds=3)
    worse = vc.pessimistic()
    assert worse.n_seeds == 3 and all(worse.run_sd[a] > vc.run_sd[a] for a in "BC")
    factor = math.sqrt(2 / __import__("scipy.stats", fromlist=["chi2"]).chi2.ppf(0.2, 2))
    assert worse.moments.seed_sd["B"] == pytest.approx(ASSUMED["seed_sd"]["B"] * factor)
    assert model.VarianceComponents.from_moments(ASSUMED, "assumed").pessimistic() is None  # seeds unknown
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 100}, vc, 64, 3)
    p = d.pessimistic.keep_both_at_sesoi.p
    assert p <= d.keep_both_at_sesoi + 0.05
    assert any(w.startswith("at the pessimistic components") for w in d.warnings)
    assert "positive_control_power" not in d.to_dict()["pessimistic"]  # no control check registered
    assert any("pessimistic (seed SDs at their 80% upper confidence limit over 3 seeds" in x for x in words.design_lines(d))


def test_the_pilots_arm_agreement_is_over_the_compared_arms_only():
    from harness.freeze.pilot import moments
    runs = {"A": {1: "1100", 2: "1100"}, "B": {1: "1000", 2: "1100"}, "C": {1: "1111", 2: "1110"},
            "P": {1: "0000", 2: "0000"}}
    # A-B 0.875, A-C 0.625, B-C 0.5 over seed pairs; the positive control P takes no part
    assert moments(runs, 4)["arm_agreement"] == pytest.approx((0.875 + 0.625 + 0.5) / 3)


def test_design_grid_is_the_freeze_analysis_at_other_sizes(capsys):
    """tools.design_grid runs freeze's own design analysis at other (probes, seeds): the registered
    cell equals protocol_design's summary, and more probes never lose positive-control power
    (far apart, beyond Monte Carlo noise)."""
    from harness.stats.design.summary import design_summary
    from tools.design_grid import _resized, grid, main, pessimistic_figures
    p = load_protocol("smoke")
    rows = grid(p, None, [32, p.tasks.probe.size, 2048], [2], replicates=200)
    assert [(r["n_items"], r["n_seeds"]) for r in rows] == [(32, 2), (p.tasks.probe.size, 2), (2048, 2)]
    d = protocol_design(_resized(p, p.tasks.probe.size, 2, 200))
    assert rows[1] == {"n_items": p.tasks.probe.size, "n_seeds": 2, **design_summary(d), **pessimistic_figures(d)}
    assert rows[1]["pess_keep_both"] is None  # registered assumptions: no seed count to be pessimistic about
    # components measured on 3 seeds: the pessimistic figures are freeze's own, below the designed ones
    vc = dataclasses.replace(model.VarianceComponents.from_moments(p.decision.design["assumed"], "assumed"), n_seeds=3)
    row = grid(p, vc, [p.tasks.probe.size], [4], replicates=200)[0]
    d = protocol_design(_resized(p, p.tasks.probe.size, 4, 200), vc)
    assert (row["pess_keep_both"], row["pess_pc_power"]) == (d.pessimistic.keep_both_at_sesoi.p,
                                                            d.pessimistic.positive_control_power)
    assert row["pess_keep_both"] < row["keep_both_at_sesoi"] and row["pess_pc_power"] <= row["positive_control_power"]
    assert rows[2]["positive_control_power"] > rows[0]["positive_control_power"] + 0.2
    assert rows[0]["gate_commit_at_plus_sesoi"] == rows[2]["gate_commit_at_plus_sesoi"]  # the gate's size is confirm's
    with pytest.raises(SystemExit, match="--seeds: expected comma-separated positive integers, got '0,2'"):
        main(["--protocol", "smoke", "--seeds", "0,2"])
    with pytest.raises(SystemExit, match=r"--pilot .*nope.json: no such file"):
        main(["--protocol", "smoke", "--pilot", "nope.json"])


@pytest.mark.parametrize("name", ["main", "smoke"])
def test_the_fit_reproduces_the_moments_in_simulation(name):
    """The fit reaches the average seed agreement and the arms' agreement exactly, and the fitted model,
    simulated over many item sets and seeds, gives back what `fit` says it gives: each arm's seed
    agreement and seed SD and the arms' agreement (main's registered moments put the item SD near 5, where
    the old fixed-point fit ran to its bound and missed the agreements by 0.02-0.05)."""
    from itertools import combinations
    m = load_protocol(name).decision.design["assumed"]
    vc = model.VarianceComponents.from_moments(m, "assumed")
    fit = vc.fit
    assert fit.at_bound == []
    assert np.mean([fit.seed_agreement[a].model for a in "ABC"]) == pytest.approx(
        np.mean([m["seed_agreement"][a] for a in "ABC"]), abs=2e-4)
    assert fit.arm_agreement.model == pytest.approx(m["arm_agreement"], abs=2e-4)
    for a in "BC":  # above the Bernoulli part, the seed SD is met exactly
        assert fit.seed_sd[a].model == pytest.approx(m["seed_sd"][a], rel=1e-4)
    n, k, R = m["n_items"], 10, 40
    noise = simulate.Noise.draw(R, k, n, records.ARMS, np.random.default_rng(11))
    y = {a: simulate.simulate_arm(vc, noise, a, m["pass_rates"][a], vc.run_sd[a]).astype(np.int8) for a in records.ARMS}

    def near(per_experiment: np.ndarray, want: float) -> bool:
        """Within 3 Monte-Carlo s.e. over the R item sets (+0.002 for the fit's quadrature)."""
        return abs(per_experiment.mean() - want) <= 3 * per_experiment.std(ddof=1) / math.sqrt(R) + 0.002
    for a in "ABC":
        agree = np.mean([(y[a][:, s] == y[a][:, t]).mean(1) for s, t in combinations(range(k), 2)], axis=0)  # (R,)
        assert near(agree, fit.seed_agreement[a].model), (a, agree.mean(), fit.seed_agreement[a])
        sim_sd = math.sqrt(y[a].mean(2).var(1, ddof=1).mean())
        assert sim_sd == pytest.approx(fit.seed_sd[a].model, rel=0.1), a
    cross = np.mean([(y[a][:, s] == y[b][:, t]).mean(1) for a, b in combinations("ABC", 2) for s in range(k) for t in range(k)],
                    axis=0)
    assert near(cross, m["arm_agreement"]), cross.mean()


def test_a_seed_sd_below_the_bernoulli_part_is_noted_on_the_pessimistic_side():
    vc = model.VarianceComponents.from_moments({**ASSUMED, "seed_sd": {**ASSUMED["seed_sd"], "A": 0.0}}, "pilot")
    bernoulli = math.sqrt(model.seed_variance_of(0.45, math.hypot(vc.item_sd, vc.arm_item_sd), 0.0, 128))
    assert vc.run_sd["A"] == 0.0 and vc.fit.seed_sd["A"].model == pytest.approx(bernoulli, rel=1e-6) and bernoulli > 0.02
    assert [x.split(" is below")[0] for x in vc.fit_notes()] == ["arm A's seed SD 0.00 pts"]
    assert "the pessimistic side" in vc.fit_notes()[0] and vc.misfit() == []


def _simulated_groups(run_sd: float, R: int, G: int = 12, n: int = 256, seed: int = 100):
    """R experiments' worth of G groups of 2 seeds (pass rates 0.1-0.4) at one run SD, item SD sqrt(5)."""
    truth = model.VarianceComponents(control_rate=0.2, gate_rate=0.2, item_sd=2.0, arm_item_sd=1.0)
    rates = np.linspace(0.1, 0.4, G)
    sims = [simulate.simulate_arm(truth, simulate.Noise.draw(R, 2, n, ("x",), np.random.default_rng(seed + g)), "x",
                               float(rates[g]), run_sd).mean(2) for g in range(G)]
    return [[model.SpreadGroup(arm="x", round=g, n_items=n, pass_rates=tuple(sims[g][r])) for g in range(G)]
            for r in range(R)]


def test_the_pooled_run_spread_and_its_floor_cover_the_run_sd_they_estimate():
    """Twelve groups of two seeds at run SD 0.3 (logit): the pooled estimate is near it and its 90% upper
    limit, the pessimistic floor, covers it in at least 80% of 150 experiments; at run SD 0 the limit
    holds 0 in most. Groups of one seed add nothing."""
    tau = math.hypot(2.0, 1.0)
    pools = [model.pooled_run_spread(g, tau) for g in _simulated_groups(0.3, 150)]
    assert all(p.df == 12 and p.groups == 12 and p.level == model.SPREAD_FLOOR_LEVEL for p in pools)
    assert np.mean([p.run_sd for p in pools]) == pytest.approx(0.3, abs=0.05)
    assert np.mean([p.run_sd_upper >= 0.3 for p in pools]) >= 0.8
    assert all(p.run_sd_upper >= p.run_sd for p in pools)
    zero = [model.pooled_run_spread(g, tau) for g in _simulated_groups(0.0, 60, seed=300)]
    assert np.median([p.run_sd for p in zero]) == 0.0
    assert model.pooled_run_spread([model.SpreadGroup(arm="x", round=0, n_items=10, pass_rates=(0.5,))], tau) is None


def test_the_pessimistic_design_lifts_a_zero_seed_sd_to_the_pooled_floor():
    """Two pilot seeds of B that pass the same number of items (seed SD 0): its own upper limit stays 0,
    the pooled floor from every arm and round lifts it; an arm above the floor keeps its own limit."""
    import dataclasses
    m = {**ASSUMED, "seed_sd": {"A": 0.011, "B": 0.0, "C": 0.061}}
    vc = dataclasses.replace(model.VarianceComponents.from_moments(m, "pilot"), n_seeds=2)
    alone = vc.pessimistic()
    assert alone.moments.seed_sd["B"] == 0.0 and vc.spread_pool() is None
    groups = _simulated_groups(0.4, 1, G=18, n=128, seed=500)[0]
    floored = dataclasses.replace(vc, spread_groups=tuple(groups))
    pool = floored.spread_pool()
    assert pool.df == 18 and pool.run_sd_upper > pool.run_sd > 0
    worse = floored.pessimistic()
    tau, factor = math.hypot(vc.item_sd, vc.arm_item_sd), math.sqrt(1 / __import__("scipy.stats", fromlist=["chi2"]).chi2.ppf(0.2, 1))
    floor = {a: math.sqrt(model.seed_variance_of(m["pass_rates"][a], tau, pool.run_sd_upper, 128)) for a in "ABC"}
    for a in "ABC":
        assert worse.moments.seed_sd[a] == pytest.approx(min(max(m["seed_sd"][a] * factor, floor[a]), 0.5))
    assert worse.moments.seed_sd["B"] == pytest.approx(floor["B"]) and worse.run_sd["B"] > 0.1
    assert worse.spread_groups == floored.spread_groups and worse.n_seeds == 2
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 60}, floored, 64, 2)
    text = "\n".join(words.design_lines(d))
    assert "design: run spread pooled over arms x x rounds 0, 1, 2" in text and "the floor under each arm's pessimistic seed SD" in text
    assert "pessimistic (seed SDs at their 80% upper confidence limit over 2 seeds or the pooled floor" in text


def test_the_pessimistic_design_takes_the_seed_agreement_end_with_the_lower_power():
    """Arms whose seeds agree unequally (A 0.90, B and C 0.80): one item effect for all three cannot
    give each its own, so the pessimistic design is fitted to the lowest and to the highest and keeps
    the lower P(keep_both); with equal agreements only the average is fitted."""
    import dataclasses
    m = {**ASSUMED, "seed_agreement": {"A": 0.90, "B": 0.80, "C": 0.80}}
    vc = dataclasses.replace(model.VarianceComponents.from_moments(m, "pilot"), n_seeds=3)
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 100}, vc, 64, 3)
    p = d.pessimistic
    tried = p.keep_both_by_agreement
    assert set(tried) == {"mean", "lowest", "highest"}
    assert p.keep_both_at_sesoi.p == min(tried.values()) and tried[p.agreement] == min(tried.values())
    want = {"lowest": 0.80, "highest": 0.90}.get(p.agreement)
    if want is not None:  # every arm fitted to that arm's agreement
        assert p.components.moments.seed_agreement == dict.fromkeys("ABC", want)
    even = dataclasses.replace(model.VarianceComponents.from_moments(ASSUMED, "pilot"), n_seeds=3)
    assert list(power.design_analysis(SPEC, {**DESIGN, "replicates": 60}, even, 32, 3).pessimistic.keep_both_by_agreement) == ["mean"]


def test_the_reports_design_section_says_which_rounds_the_pilot_read_and_its_floor():
    import dataclasses

    from harness.readout.report import render_sections
    from harness.readout.report.design import design_section
    groups = _simulated_groups(0.4, 1, G=6, n=64, seed=700)[0]
    vc = dataclasses.replace(model.VarianceComponents.from_moments(ASSUMED, "pilot"), n_seeds=2, rounds=3,
                             rounds_read={"A": 2, "B": 2, "C": 2, "P": 2}, spread_groups=tuple(groups))
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 60}, vc, 64, 2)
    assert d.components.rounds_read == {"A": 2, "B": 2, "C": 2, "P": 2} and d.components.rounds == 3
    assert records.DesignAnalysis.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    text = render_sections([design_section({"designed": d, "observed": {"error": "no observed design"}})])
    assert "Designed (variance components from the pilot; rounds read: A 2, B 2, C 2, P 2 of rounds 0-2)" in text
    assert "run spread pooled over arms x x rounds 0, 1, 2, 3, 4, 5 (6 groups, 6 df)" in text
    assert "pessimistic (seed SDs at their 80% upper confidence limit over 2 seeds or the pooled floor" in text


def test_freeze_and_the_report_say_each_design_sentence_the_same_way():
    """One place for the design's words: every finding freeze prints ("design: <sentence>") is a bullet
    of the report's Design analysis section, word for word, and so are the components' and the run's
    sentences; the margin-0 gate's note, the pooled floor and the pessimistic design included."""
    from harness.readout.report import render_sections
    from harness.readout.report.design import design_section
    groups = _simulated_groups(0.4, 1, G=6, n=64, seed=700)[0]
    vc = dataclasses.replace(model.VarianceComponents.from_moments(ASSUMED, "pilot"), n_seeds=2, rounds=3,
                             rounds_read={"A": 2, "B": 2, "C": 2}, spread_groups=tuple(groups))
    checks = [{"role": "positive", "arm": "P", "versus": ["base", "A"], "margin": 0.03},
              {"role": "negative", "arm": "N", "versus": ["B"], "margin": 0.0}]
    d = power.design_analysis(SPEC, {**DESIGN, "replicates": 60, "positive_control_effect": 0.1}, vc, 64, 2,
                               gate=ConfirmRule("not_worse", 0, 0.1), n_confirm=16, control_checks=checks)
    lines = words.design_lines(d)
    md = render_sections([design_section({"designed": d, "observed": {"error": "no observed design"}})])
    items = words.design_items(d)
    starts = ("keep_both false-positive rate (the largest over the null set", "P(keep_both) at the sesoi",
              "the other spread rule (", "one contrast against A, P(supported)", "positive control P, its registered",
              "negative control N, its registered", "C's confirm gate (not_worse, margin 0, 16 probes",
              "run spread pooled over arms", "pessimistic (seed SDs")
    assert [next(x for x in items if x.startswith(w)) for w in starts]  # each finding is there
    # the gate's margin-0 note, once: in the gate's own sentence
    gate = next(x for x in items if x.startswith("C's confirm gate"))
    assert "commits on ties" in gate and sum("commits on ties" in x for x in items) == 1
    for sentence in items:
        assert f"design: {sentence}" in lines and f"\n- {sentence}\n" in md, sentence
    c = d.components
    assert lines[:3] == [f"design: {words.source_words(c)}", f"design: {words.components_words(c)}",
                         f"design: {words.run_words(d)}"]
    assert f"### Designed ({words.source_words(c)})" in md and words.components_words(c) in md
    assert words.run_words(d) in md and "Observed variance components unavailable: no observed design" in md


def test_the_one_points_formatter_signs_differences_and_gives_spreads_their_digits():
    from harness.stats.units import pts
    assert [pts(0.05), pts(-0.108), pts(0.0), pts(None)] == ["+5.0 pts", "-10.8 pts", "+0.0 pts", "n/a"]
    assert pts(0.03, signed=False) == "3.0 pts" and pts(0.04913, signed=False, digits=2) == "4.91 pts"


def test_a_design_analysis_read_back_names_a_missing_or_malformed_field():
    """verdict.json's design analyses are read by their one reader: what is written reads back equal,
    an analysis that could not run is its error alone, and a damaged one is refused naming the field."""
    vc = model.VarianceComponents.from_moments(ASSUMED, "assumed")
    written = power.design_analysis(SPEC, {**DESIGN, "replicates": 30}, vc, 32, 2).to_dict()
    assert records.DesignAnalysis.from_dict(written).to_dict() == written
    assert records.DesignAnalysis.from_dict({"error": "no seeds"}).to_dict() == {"error": "no seeds"}
    with pytest.raises(ValueError, match=r"^design: lacks field 'components'"):
        records.DesignAnalysis.from_dict({k: v for k, v in written.items() if k != "components"})
    cells = [dict(c) for c in written["rule"]["cells"]]
    del cells[4]["verdict_se"]
    with pytest.raises(ValueError, match=r"^design\.rule\.cells\[4\]: lacks field 'verdict_se' \(Cell\)"):
        records.DesignAnalysis.from_dict({**written, "rule": {**written["rule"], "cells": cells}})
    with pytest.raises(ValueError, match=r"^design\.components\.moments: expected a mapping"):
        records.DesignAnalysis.from_dict({**written, "components": {**written["components"], "moments": [1]}})

"""Design analysis by simulation: what the registered experiment can resolve.

The readout's own decision core (`harness.stats.contrasts.evaluate`) is run on simulated experiments of the
registered size (probe items x seeds x arms A, B, C) and C's confirm gate on simulated confirm
batches, giving the operating characteristic: P(each verdict) at true effects 0, sesoi and
2 x sesoi of both contrasts, the false-positive rate of `keep_both`, and P(commit) against the true
successor - root difference. freeze prints and records it; the readout repeats it with the
variance components it observed.

The model, its fit to the moments and the simulator are harness.stats.design.model and
harness.stats.design.simulate; what the analysis writes is harness.stats.design.records, and how it
is read (summary, warnings) harness.stats.design.summary. This module runs the readout's rule over
the cells of true effects.

Cheaper equivalent inside the simulation: the interval uses `design.bootstrap_resamples` (e.g. 199)
instead of the registered 9999; everything else is the readout's code. The endpoint is an order
statistic of the same resampling distribution, and fewer resamples make it noisier, which makes the
simulated rule slightly conservative. Measured on polygon's design (128 x 3, 2000 experiments, the
same draws): P(keep_both) with 199 resamples is 0 to 2.3 points below that with 999 in every cell
(0.443 vs 0.459 at 10/10 pts, 0.025 vs 0.033 at the sesoi), and the false-positive cells agree
within 0.2 points: on that measurement the printed power slightly under-states the readout's.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from itertools import product
from typing import Protocol

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit
from scipy.stats import binom

from harness.stats import contrasts
from harness.stats.checks import beats, paired_batch
from harness.stats.design.bases import BaseSpread, base_oc
from harness.stats.design.model import PESSIMISTIC_LEVEL, VarianceComponents, intercept
from harness.stats.design.records import (ARMS, Alternative, Cell, ControlPower, CurvePoint, DesignAnalysis,
                                          DesignSize, Estimate, FalsePositive, GateOC, GatePoint, Moments, Pessimistic,
                                          PositiveControlCurve, RuleOC, mc_se)
from harness.stats.design.records import rounded as _r
from harness.stats.design.simulate import Noise, placed_control, simulate_arm
from harness.stats.design.summary import design_warnings
from harness.stats.units import pts

DESIGN_KEYS = {"replicates", "rng_seed", "bootstrap_resamples", "positive_control_effect", "assumed", "base_spread"}
OPTIONAL_DESIGN_KEYS = {"positive_control_effect", "base_spread"}
GATE_DIFFS = (-0.15, -0.10, -0.05, -0.025, 0.0, 0.025, 0.05, 0.10, 0.15)


def validate_design(d: dict) -> dict:
    """decision.yaml's `design` block; ValueError naming the key otherwise."""
    where = "decision.yaml design"
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a mapping with keys {sorted(DESIGN_KEYS)}")
    missing = sorted(DESIGN_KEYS - OPTIONAL_DESIGN_KEYS - set(d))
    extra = sorted(set(d) - DESIGN_KEYS)
    if missing or extra:
        raise ValueError(f"{where}: " + (f"missing key(s) {missing}" if missing else f"unknown key(s) {extra}")
                         + f"; expected {sorted(DESIGN_KEYS)} ({' and '.join(sorted(OPTIONAL_DESIGN_KEYS))} optional)")
    for key, lo in (("replicates", 10), ("rng_seed", 0), ("bootstrap_resamples", 19)):
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{where}.{key}: expected an integer >= {lo}, got {v!r}")
    pc = d.get("positive_control_effect")
    if pc is not None and (isinstance(pc, bool) or not isinstance(pc, (int, float)) or not 0 < pc < 1):
        raise ValueError(f"{where}.positive_control_effect: expected a pass-rate difference in (0, 1), got {pc!r}")
    Moments.from_dict(d["assumed"], f"{where}.assumed")
    if d.get("base_spread") is not None:
        BaseSpread.of(d["base_spread"], f"{where}.base_spread")
    return dict(d)


@dataclass(frozen=True)
class DesignSettings:
    """decision.yaml's `design` block (`validate_design` checks it): `replicates` simulated experiments
    per effect cell drawn from `rng_seed`, `bootstrap_resamples` resamples per simulated interval, the
    moments `assumed` without a pilot (MOMENT_KEYS), the positive control's registered effect
    (fraction; None: not registered) and the SD over bases of each decision contrast's true effect
    (harness.stats.design.bases.BaseSpread; None: not registered, no design about the recipe)."""
    replicates: int
    rng_seed: int
    bootstrap_resamples: int
    assumed: dict
    positive_control_effect: float | None = None
    base_spread: dict | None = None

    @classmethod
    def of(cls, design: "DesignSettings | dict") -> "DesignSettings":
        """The settings of a design block as given (a block from decision.yaml is checked on loading)."""
        return design if isinstance(design, cls) else cls(**design)


NULL_SEARCH_EVALS = 5  # keep_both evaluations per edge of the null set (bounded Brent search)


def null_search(fn, n_items: int) -> list[tuple[float, float]]:
    """Candidate worst cases of keep_both's false positives over the whole null set {effect_BA = 0,
    effect_CB >= 0} u {effect_CB = 0, effect_BA >= 0} (a contrast at or below 0 cannot be less
    null than at 0): per edge, scipy's bounded scalar search of fn(e_ba, e_cb) over the free effect
    in [0, 1 - 1/n], plus that edge's far end. Returns the points visited (effects, fractions)."""
    hi = 1.0 - 1.0 / n_items
    points: list[tuple[float, float]] = []
    for edge in (lambda x: (0.0, x), lambda x: (x, 0.0)):
        seen: list[tuple[float, float]] = []

        def neg(x: float) -> float:
            pt = edge(float(x))
            seen.append(pt)
            return -fn(*pt)

        minimize_scalar(neg, bounds=(0.0, hi), method="bounded", options={"xatol": 0.01, "maxiter": NULL_SEARCH_EVALS})
        points += seen + [edge(hi)]
    return points


def rule_oc(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int) -> RuleOC:
    """P(each verdict) and P(each label) at true effects {0, sesoi, 2 sesoi} of B-A x C-B.

    Returns the cells, keep_both's false positives, P(keep_both) at the sesoi and the alternative:
    P(keep_both) under the other spread rule (range x 1 for welch, welch for range) on the same
    simulated experiments, what the registered choice gains or costs; every probability with its
    Monte-Carlo standard error sqrt(p (1 - p) / R).
    """
    spec, design = contrasts.validate_spec(spec), DesignSettings.of(design)
    alt_rule = {"test": "range", "multiplier": 1.0} if spec["spread_rule"]["test"] == "welch" else {"test": "welch"}
    if alt_rule["test"] == "welch" and n_seeds < 2:
        alt_rule = None  # the Welch test needs two seeds: no alternative to show
    alt_spec = {**spec, "spread_rule": alt_rule}
    R, sesoi = design.replicates, spec["sesoi"]
    effects = [0.0, sesoi, 2 * sesoi]
    rng = np.random.default_rng(design.rng_seed)
    noise = Noise.draw(R, n_seeds, n_items, ARMS, rng)
    a_rate = vc.control_rate
    cache: dict = {}

    boot = spec["bootstrap"]
    draws = contrasts.BootstrapDraws.draw(design.bootstrap_resamples, n_items, n_seeds, boot["rng_seed"])

    def arm(a: str, rate: float) -> contrasts.ArmSums:
        """Arm a at `rate`, simulated once and reduced to what the contrasts read."""
        key = (a, round(rate, 12))
        if key not in cache:
            cache[key] = contrasts.ArmSums.of(contrasts.canonical_seeds(simulate_arm(vc, noise, a, rate, vc.run_sd[a])), draws)
        return cache[key]

    def labels_at(e_ba: float, e_cb: float, rule_spec: dict) -> dict:
        """{contrast: its labels (R,)} of the simulated experiments at true effects e_ba, e_cb."""
        a_cell = placed_control(a_rate, e_ba + e_cb, n_items)
        y = dict(zip(ARMS, (arm("A", a_cell), arm("B", a_cell + e_ba), arm("C", a_cell + e_ba + e_cb))))
        return {f"{hi}-{lo}": contrasts.contrast_core(y[hi], y[lo], rule_spec, draws).label
                for hi, lo in contrasts.DECISION_CONTRASTS}

    def keep_both_of(labels: dict) -> np.ndarray:
        return contrasts.outcome_of(*(labels[f"{hi}-{lo}"] for hi, lo in contrasts.DECISION_CONTRASTS)) == "keep_both"

    cells = []
    for e_ba, e_cb in product(effects, effects):
        labs = labels_at(e_ba, e_cb, spec)
        outcome = contrasts.outcome_of(*(labs[f"{hi}-{lo}"] for hi, lo in contrasts.DECISION_CONTRASTS))
        verdict = {o: _r((outcome == o).mean()) for o in contrasts.OUTCOMES}
        cells.append(Cell(
            effect_BA=_r(e_ba), effect_CB=_r(e_cb), control_rate=_r(placed_control(a_rate, e_ba + e_cb, n_items)),
            keep_both_alternative=None if alt_rule is None else _r(keep_both_of(labels_at(e_ba, e_cb, alt_spec)).mean()),
            verdict=verdict, labels={key: {lab: _r((x == lab).mean()) for lab in contrasts.LABELS} for key, x in labs.items()},
            verdict_se={o: _r(mc_se(p, R)) for o, p in verdict.items()}))
    nulls = [c for c in cells if c.effect_BA == 0 or c.effect_CB == 0]
    worst = max(nulls, key=lambda c: c.keep_both)
    grid_worst = [worst.effect_BA, worst.effect_CB]

    searched: dict = {}

    def keep_both(e_ba: float, e_cb: float) -> float:
        if (e_ba, e_cb) not in searched:
            labs = list(labels_at(e_ba, e_cb, spec).values())
            searched[(e_ba, e_cb)] = float(((labs[0] == "supported") & (labs[1] == "supported")).mean())
        return searched[(e_ba, e_cb)]

    fp, at_fp = worst.keep_both, grid_worst
    for e_ba, e_cb in null_search(keep_both, n_items):
        p = keep_both(e_ba, e_cb)
        if p > fp:
            fp, at_fp = p, [_r(e_ba), _r(e_cb)]
    at = next(c for c in cells if c.effect_BA == _r(sesoi) and c.effect_CB == _r(sesoi))
    return RuleOC(
        cells=cells,
        keep_both_false_positive=FalsePositive(
            p=_r(fp), se=_r(mc_se(fp, R)), at=at_fp, grid_worst={"p": worst.keep_both, "at": grid_worst},
            found_by="bounded search over each edge of the null set (one true effect 0, the other free), and the grid"),
        keep_both_at_sesoi=Estimate(p=at.keep_both, se=at.keep_both_se),
        alternative=None if alt_rule is None else Alternative(
            spread_rule=alt_rule, keep_both_at_sesoi=at.keep_both_alternative,
            keep_both_false_positive=max(c.keep_both_alternative for c in nulls)))


def contrast_oc(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int,
                effects, run_sd_hi: float, run_sd_lo: float) -> list[CurvePoint]:
    """P(each label) of ONE contrast hi - lo at the given true effects (e.g. a positive control
    against A), lo at the control's pass rate."""
    spec, design = contrasts.validate_spec(spec), DesignSettings.of(design)
    R = design.replicates
    noise = Noise.draw(R, n_seeds, n_items, ("hi", "lo"), np.random.default_rng(design.rng_seed + 1))
    draws = contrasts.BootstrapDraws.draw(design.bootstrap_resamples, n_items, n_seeds, spec["bootstrap"]["rng_seed"])
    base = placed_control(vc.control_rate, max(effects), n_items)  # one control for the whole curve
    lo = contrasts.ArmSums.of(contrasts.canonical_seeds(simulate_arm(vc, noise, "lo", base, run_sd_lo)), draws)
    out = []
    for e in effects:
        hi = contrasts.ArmSums.of(contrasts.canonical_seeds(simulate_arm(vc, noise, "hi", base + e, run_sd_hi)), draws)
        lab = contrasts.contrast_core(hi, lo, spec, draws).label
        p = {x: _r((lab == x).mean()) for x in contrasts.LABELS}
        out.append(CurvePoint(effect=_r(e), control_rate=_r(base), labels=p, supported_se=_r(mc_se(p["supported"], R))))
    return out


@dataclass(frozen=True)
class RuleExperiments:
    """`design` replicates of the experiment at one cell of true effects (`rule_experiments`):
    keep_both (R,) bool, the noise they were drawn from, A's outcomes (R, k, n) uint8 and A's
    simulated pass rate (fraction)."""
    keep_both: np.ndarray
    noise: Noise
    a_outcomes: np.ndarray
    a_rate: float


def rule_experiments(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int,
                     e_ba: float, e_cb: float, top: float | None = None) -> RuleExperiments:
    """The readout's core on `design` replicates at true effects e_ba, e_cb (fractions), the draws of
    `rule_oc`'s cells (the same rng seed): A is placed for arms up to `top` above it (default e_ba + e_cb,
    as the rule's cells place it)."""
    design = DesignSettings.of(design)
    R = design.replicates
    noise = Noise.draw(R, n_seeds, n_items, ARMS, np.random.default_rng(design.rng_seed))
    draws = contrasts.BootstrapDraws.draw(design.bootstrap_resamples, n_items, n_seeds, spec["bootstrap"]["rng_seed"])
    a = placed_control(vc.control_rate, e_ba + e_cb if top is None else top, n_items)
    rates = dict(zip(ARMS, (a, a + e_ba, a + e_ba + e_cb)))
    raw = {x: simulate_arm(vc, noise, x, r, vc.run_sd[x]) for x, r in rates.items()}
    y = {x: contrasts.ArmSums.of(contrasts.canonical_seeds(o), draws) for x, o in raw.items()}
    labs = [contrasts.contrast_core(y[hi], y[lo], spec, draws).label for hi, lo in contrasts.DECISION_CONTRASTS]
    return RuleExperiments(keep_both=(labs[0] == "supported") & (labs[1] == "supported"), noise=noise,
                           a_outcomes=raw["A"], a_rate=a)


def keep_both_at(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int,
                 e_ba: float, e_cb: float) -> float:
    """P(keep_both) at one cell of true effects, by the readout's core on `design` replicates (the
    pessimistic power needs this one cell, not the whole grid)."""
    return float(rule_experiments(spec, design, vc, n_items, n_seeds, e_ba, e_cb).keep_both.mean())


def joint_at(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int,
             checks: list[dict], e_ba: float, e_cb: float, e_pc: float) -> float | None:
    """P(every positive control's registered check passes AND keep_both) at true effects e_ba, e_cb
    and the control `e_pc` above A (fractions): what a run needs to reach a verdict of the rule. Both are
    read on the SAME simulated experiments: the check's A is the rule's A (a low A helps both, so they
    are not independent), every arm shares the item effects, and the rule's draws are `rule_oc`'s. The
    check is simulated as `control_oc` simulates it (the control like A at A + e_pc with A's run SD,
    the frozen base one model at vc.base, every non-base `versus` read against A). None without a
    positive check."""
    positive = [c for c in checks or [] if c["role"] == "positive"]
    if not positive:
        return None
    design = DesignSettings.of(design)
    exp = rule_experiments(spec, design, vc, n_items, n_seeds, e_ba, e_cb, top=max(e_ba + e_cb, e_pc))
    own = Noise.draw(design.replicates, n_seeds, n_items, ("ctrl", "base"), np.random.default_rng(design.rng_seed + 4))
    noise = Noise(exp.noise.alpha, {**exp.noise.beta, **own.beta}, {**exp.noise.run, **own.run},
                  {**exp.noise.threshold, **own.threshold})  # the item effects alpha are the rule's
    base = simulate_arm(vc, noise, "base", min(max(vc.base, 0.5 / n_items), 1 - 0.5 / n_items), 0.0)[:, :1]
    ctrl = simulate_arm(vc, noise, "ctrl", exp.a_rate + e_pc, vc.run_sd["A"])
    ok = exp.keep_both.copy()
    for chk in positive:
        for other in chk["versus"]:
            ok &= beats(paired_batch(ctrl, base if other == "base" else exp.a_outcomes), chk["margin"], spec["alpha"])
    return float(ok.mean())


def control_oc(checks: list[dict], spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int,
               n_seeds: int, effect: float | None) -> list[ControlPower]:
    """P(each registered control check passes), simulating the check exactly as the readout applies
    it (`harness.stats.contrasts.checks.paired_batch` and `checks.beats`, as the readout: the margin and the sign test as
    registered, against each `versus` arm).

    Positive control: an SFT arm like A (A's run SD) at A + `effect`, against A and the frozen base
    (one model: the same outcomes for every seed, no run spread, at vc.base); P(pass) = P(it beats
    every `versus`), at effects 0 (its false pass) and `effect` (its power). Negative control: an arm
    like B (B's run SD) at B's rate, truly equal to B; P(fires) = P(it beats B by the margin), the
    check's false alarm. Returns one entry per check with the probabilities and MC s.e."""
    design = DesignSettings.of(design)
    R, alpha = design.replicates, spec["alpha"]
    rng = np.random.default_rng(design.rng_seed + 3)
    noise = Noise.draw(R, n_seeds, n_items, ("ctrl", "A", "B", "base"), rng)
    run_a, run_b = vc.run_sd["A"], vc.run_sd["B"]
    estimate = lambda ok: (_r(ok.mean()), _r(mc_se(float(ok.mean()), R)))  # noqa: E731
    out = []
    for chk in checks:
        role, arm, versus, margin = chk["role"], chk["arm"], chk["versus"], chk["margin"]
        if role == "positive":
            e = float(effect or 0.0)
            a_rate = placed_control(vc.control_rate, e, n_items)
            lo = {"A": simulate_arm(vc, noise, "A", a_rate, run_a),
                  "base": simulate_arm(vc, noise, "base", min(max(vc.base, 0.5 / n_items), 1 - 0.5 / n_items),
                                       0.0)[:, :1]}
            passes = []
            for eff in (0.0, e):
                hi = simulate_arm(vc, noise, "ctrl", a_rate + eff, run_a)
                ok = np.ones(R, bool)
                for other in versus:
                    ok &= beats(paired_batch(hi, lo["base" if other == "base" else "A"]), margin, alpha)
                passes.append(estimate(ok))
            (p0, p0_se), (pe, pe_se) = passes
            out.append(ControlPower(role=role, arm=arm, versus=versus, margin=_r(margin), effect=_r(e),
                                    control_rate=_r(a_rate), base_rate=_r(vc.base), p_pass_at_0=p0, p_pass_at_0_se=p0_se,
                                    p_pass_at_effect=pe, p_pass_at_effect_se=pe_se))
        else:
            b_rate = vc.control_rate
            lo = simulate_arm(vc, noise, "B", b_rate, run_b)
            hi = simulate_arm(vc, noise, "ctrl", b_rate, run_b)
            fires, fires_se = estimate(beats(paired_batch(hi, lo), margin, alpha, run_bound=True))
            out.append(ControlPower(role="negative", arm=arm, versus=versus, margin=_r(margin), effect=0.0,
                                    p_fires_when_equal=fires, p_fires_when_equal_se=fires_se))
    return out


@dataclass(frozen=True)
class LabelLevel:
    """The level of one decision contrast's labels at n_items x n_seeds, every run SD x `spread`:
    P(supported | true effect 0), P(reversed | 0) and P(ruled_out | true effect = sesoi), each with
    its Monte-Carlo s.e. Each must be <= alpha."""
    contrast: str
    n_items: int
    n_seeds: int
    spread: float
    supported_at_0: float
    supported_at_0_se: float
    reversed_at_0: float
    reversed_at_0_se: float
    ruled_out_at_sesoi: float
    ruled_out_at_sesoi_se: float


def label_levels(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int,
                 spread: float = 1.0) -> list[LabelLevel]:
    """The level of each label of each decision contrast at `n_seeds`, with every arm's run SD
    multiplied by `spread` (R = design replicates): one LabelLevel per contrast."""
    spec, design = contrasts.validate_spec(spec), DesignSettings.of(design)
    R = design.replicates
    rows = []
    for hi, lo in contrasts.DECISION_CONTRASTS:
        at_0, at_sesoi = contrast_oc(spec, design, vc, n_items, n_seeds, [0.0, spec["sesoi"]],
                                     spread * vc.run_sd[hi], spread * vc.run_sd[lo])
        sup, rev = at_0.labels["supported"], at_0.labels["reversed"]
        ro = at_sesoi.labels["ruled_out"]
        rows.append(LabelLevel(contrast=f"{hi}-{lo}", n_items=int(n_items), n_seeds=int(n_seeds), spread=_r(spread),
                               supported_at_0=sup, supported_at_0_se=_r(mc_se(sup, R)),
                               reversed_at_0=rev, reversed_at_0_se=_r(mc_se(rev, R)),
                               ruled_out_at_sesoi=ro, ruled_out_at_sesoi_se=_r(mc_se(ro, R))))
    return rows


@dataclass(frozen=True)
class LevelRow:
    """P(a claim the readout declares | the truth at the boundary it tests), with its Monte-Carlo s.e."""
    name: str
    truth: str
    p: float
    se: float


def every_level(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int,
                control_checks: list[dict] | None = None, spread: float = 1.0) -> list[LevelRow]:
    """The level of everything the readout declares, at `n_seeds` with every arm's run SD x `spread`
    and run effects of shape vc.run_shape: P(the claim | the truth at the boundary it tests), each
    with its Monte-Carlo s.e. (R = design replicates); each must be <= alpha. Rows (name, truth):
        "<contrast> supported" / "reversed"   at a true effect of 0 (`label_levels`)
        "<contrast> ruled_out"               at a true effect of the sesoi
        "keep_both"                          the largest P(keep_both) found over the null set (`rule_oc`)
        "positive control passes"            P(the registered check passes | P truly equals A)
        "negative control fires"             P(the registered check fires | N truly equals B)"""
    spec, design = contrasts.validate_spec(spec), DesignSettings.of(design)
    R = design.replicates
    vc = dataclasses.replace(vc, run_sd={a: spread * v for a, v in vc.run_sd.items()})
    row = lambda name, truth, p: LevelRow(name=name, truth=truth, p=_r(p), se=_r(mc_se(p, R)))  # noqa: E731
    out = []
    for lv in label_levels(spec, design, vc, n_items, n_seeds):
        out += [row(f"{lv.contrast} supported", "effect 0", lv.supported_at_0),
                row(f"{lv.contrast} reversed", "effect 0", lv.reversed_at_0),
                row(f"{lv.contrast} ruled_out", "effect = sesoi", lv.ruled_out_at_sesoi)]
    fp = rule_oc(spec, design, vc, n_items, n_seeds).keep_both_false_positive
    out.append(row("keep_both", "worst null " + "/".join(pts(e, signed=False) for e in fp.at), fp.p))
    checks = control_checks or []
    margin = max([c["margin"] for c in checks if c["role"] == "positive"], default=0.0)
    for c in control_oc(checks, spec, design, vc, n_items, n_seeds, margin):
        if c.positive:
            out.append(row(f"positive control {c.arm} passes", f"{c.arm} = A", c.p_pass_at_0))
            out.append(row(f"positive control {c.arm} passes", f"{c.arm} = A + margin", c.p_pass_at_effect))
        else:
            out.append(row(f"negative control {c.arm} fires", f"{c.arm} = {c.versus[0]}", c.p_fires_when_equal))
    return out


class ConfirmGate(Protocol):
    """What the gate analysis reads of C's registered confirm rule (harness.spec.protocol.ConfirmRule
    has these fields; stats/ sits below spec/, so it names the shape, not the class)."""
    rule: str       # "not_worse" or "superior"
    margin: int     # probes the successor may trail the root by (not_worse)
    alpha: float    # the sign test's level (superior)


def commit_decisions(succ_pass, root_pass, succ_only, root_only, rule: str, margin: int, alpha: float) -> np.ndarray:
    """C's registered confirm rule on paired counts (arrays), as harness.running.heircommit.confirm decides:
    not_worse commits iff succ_pass >= root_pass - margin; superior iff the one-sided exact sign
    test (successor > root) on the discordant probes has p < alpha."""
    if rule == "not_worse":
        return np.asarray(succ_pass) >= np.asarray(root_pass) - margin
    if rule == "superior":
        m = np.asarray(succ_only) + np.asarray(root_only)
        p = np.where(m > 0, binom.sf(np.asarray(succ_only) - 1, np.maximum(m, 1), 0.5), 1.0)
        return p < alpha
    raise ValueError(f"unknown confirm rule {rule!r}; expected 'not_worse' or 'superior'")


def gate_oc(gate: ConfirmGate, n_confirm: int, design: DesignSettings | dict, vc: VarianceComponents,
            diffs=GATE_DIFFS) -> list[GatePoint]:
    """P(commit) of C's confirm gate against the true successor - root difference (fractions).

    Root and successor share the per-item effect (sd sqrt(item_sd^2 + arm_item_sd^2), like two
    seeds of one arm: a successor is its root one round on) and are drawn independently given it;
    the root passes at vc.gate_rate, the successor at gate_rate + diff."""
    design = DesignSettings.of(design)
    R = design.replicates
    rng = np.random.default_rng(design.rng_seed + 2)
    tau = math.hypot(vc.item_sd, vc.arm_item_sd)
    z = tau * rng.standard_normal((R, n_confirm))
    u_root, u_succ = rng.random((R, n_confirm)), rng.random((R, n_confirm))
    root = u_root < expit(intercept(vc.gate_rate, tau) + z)
    out = []
    for d in diffs:
        rate = vc.gate_rate + d
        if not 0.0 < rate < 1.0:
            continue
        succ = u_succ < expit(intercept(rate, tau) + z)
        commit = commit_decisions(succ.sum(1), root.sum(1), (succ & ~root).sum(1), (root & ~succ).sum(1),
                                  gate.rule, gate.margin, gate.alpha)
        p = float(commit.mean())
        out.append(GatePoint(diff=_r(d), p_commit=_r(p), se=_r(mc_se(p, R))))
    return out


# ---- the whole design analysis -------------------------------------------------------------------

def design_analysis(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int,
                    gate: ConfirmGate | None = None, n_confirm: int | None = None,
                    control_checks: list[dict] | None = None) -> DesignAnalysis:
    """The operating characteristic of the rule (and of C's gate when given; of the registered
    control checks when given, `control_checks_of(protocol)`), with warnings."""
    spec = contrasts.validate_spec(spec)
    design = DesignSettings.of(validate_design(design) if isinstance(design, dict) else design)
    sesoi = spec["sesoi"]
    if spec["spread_rule"]["test"] == "welch" and n_seeds < 2:
        rule = RuleOC(error=f"the registered rule's Welch seed test needs >= 2 seeds per arm and this design has "
                            f"{n_seeds}: its readout cannot decide")
    else:
        rule = rule_oc(spec, design, vc, n_items, n_seeds)
    pc = design.positive_control_effect
    control_effect = pc if pc is not None else sesoi
    positive_control = None
    if pc is not None and rule.error is None:
        effects = sorted({0.0, sesoi, float(pc)})
        positive_control = PositiveControlCurve(effect=_r(pc), curve=contrast_oc(
            spec, design, vc, n_items, n_seeds, effects, vc.run_sd["A"], vc.run_sd["A"]))
    controls = control_oc(control_checks, spec, design, vc, n_items, n_seeds, control_effect) if control_checks else None
    joint = None
    if control_checks and rule.error is None:
        p = joint_at(spec, design, vc, n_items, n_seeds, control_checks, sesoi, sesoi, control_effect)
        joint = None if p is None else Estimate(p=_r(p), se=_r(mc_se(p, design.replicates)))
    gate_oc_ = None
    if gate is not None:
        diffs = sorted(set(GATE_DIFFS) | {-sesoi, sesoi})
        gate_oc_ = GateOC(rule=gate.rule, margin=gate.margin, alpha=_r(gate.alpha), n_confirm=int(n_confirm),
                          curve=gate_oc(gate, n_confirm, design, vc, diffs))
    out = DesignAnalysis(
        size=DesignSize(n_items=int(n_items), n_seeds=int(n_seeds), arms=list(ARMS)), replicates=design.replicates,
        rng_seed=design.rng_seed, bootstrap_resamples=design.bootstrap_resamples,
        registered_resamples=spec["bootstrap"]["n_resamples"], spread_test=spec["spread_rule"]["test"],
        alpha=_r(spec["alpha"]), sesoi=_r(sesoi), power=_r(spec["power"]), components=vc.report(), rule=rule,
        positive_control=positive_control, controls=controls,
        pessimistic=None if rule.error is not None else pessimistic_design(spec, design, vc, n_items, n_seeds,
                                                                          control_checks, control_effect),
        gate=gate_oc_, joint=joint,
        bases=None if design.base_spread is None or rule.error is not None else base_oc(
            spec, design, vc, n_items, n_seeds, design.base_spread))
    return dataclasses.replace(out, warnings=design_warnings(out))


def pessimistic_design(spec: dict, design: DesignSettings, vc: VarianceComponents, n_items: int, n_seeds: int,
                       control_checks: list[dict] | None, control_effect: float) -> Pessimistic | None:
    """P(keep_both | sesoi), the positive control's power and their joint probability (`joint_at`) at the
    pessimistic components (VarianceComponents.pessimistic); None when there are none (the number of
    seeds is unknown)."""
    worse = vc.pessimistic()
    if worse is None:
        return None
    sesoi = spec["sesoi"]
    # the seed agreements a one-item-effect model cannot all reproduce: both ends, the lower power kept
    tried = {"mean": worse} | ({v: vc.pessimistic(agreement=v) for v in ("lowest", "highest")}
                               if vc.agreement_spread() else {})
    kept = {v: keep_both_at(spec, design, x, n_items, n_seeds, sesoi, sesoi) for v, x in tried.items()}
    chosen = min(kept, key=kept.get)  # ties keep "mean"
    worse, p = tried[chosen], kept[chosen]
    power, joint = None, None
    if control_checks:
        pos = [c for c in control_oc(control_checks, spec, design, worse, n_items, n_seeds, control_effect) if c.positive]
        power = min(c.p_pass_at_effect for c in pos) if pos else None
        both = joint_at(spec, design, worse, n_items, n_seeds, control_checks, sesoi, sesoi, control_effect)
        joint = None if both is None else Estimate(p=_r(both), se=_r(mc_se(both, design.replicates)))
    pool = vc.spread_pool()
    return Pessimistic(level=PESSIMISTIC_LEVEL, components=worse.report(), agreement=chosen,
                       keep_both_by_agreement={v: _r(x) for v, x in kept.items()},
                       spread_pool=None if pool is None else pool.rounded(),
                       keep_both_at_sesoi=Estimate(p=_r(p), se=_r(mc_se(p, design.replicates))),
                       positive_control_power=power, control_checked=bool(control_checks), joint=joint)


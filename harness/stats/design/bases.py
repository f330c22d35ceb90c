"""Bases as a factor of the design: what a verdict about one base says about the recipe that built it.

Every arm of an experiment starts from one base, and the rule's labels are about the loop started from
that base. Another base of the same recipe is another draw: each contrast's true effect moves with it.
Modelled here as a base-level component on the pass-rate scale: the contrast's true effect on a base is

    effect_base = effect_recipe + base_sd v,   v ~ N(0, 1), one draw per base

with base_sd registered per decision contrast (decision.yaml design.base_spread, measured over
`bases` bases of the recipe). Two figures follow:

  * what the registered design (one base) says about the recipe: the readout's rule, run on simulated
    experiments whose base draws its own effect, gives P(label | the RECIPE's effect) -- the level of
    `supported` and `reversed` at a recipe effect of 0, of `ruled_out` at the sesoi, and their power;
  * the bases a claim about the recipe would take: K bases of this design's seeds each, the K per-base
    gaps tested by a one-sided t-test over bases (K - 1 df), whose per-base variance is base_sd^2 plus
    the squared standard error of one base's gap (simulated); the smallest K with power >= the
    registered power to rule out the sesoi when the recipe's effect is 0, at this design's seeds per base
    and at the fewest the rule reads (2: when bases move the effect more than seeds do, more bases of
    fewer seeds buy the claim for fewer runs). Read at the registered base_sd and at its upper
    confidence limit over the `bases` measured (chi-square, bases - 1 df): two bases give one degree
    of freedom, and the limit is then ~4x the estimate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.special import logit
from scipy.stats import chi2, nct, t as student_t

from harness.stats import contrasts
from harness.stats.design.model import PESSIMISTIC_LEVEL, VarianceComponents
from harness.stats.design.records import BaseContrastOC, BaseOC, mc_se
from harness.stats.design.records import rounded as _r
from harness.stats.design.simulate import Noise, arm_intercept, placed_control, run_effects

MAX_BASES = 1000      # the largest number of bases `bases_needed` looks at
INTERCEPT_NODES = 65  # rates at which the arm's intercept is solved exactly; between them, a cubic spline
FEWEST_SEEDS = 2      # the fewest seeds per base the rule reads (its Welch seed test needs two per arm)


@dataclass(frozen=True)
class BaseSpread:
    """decision.yaml design.base_spread: sd {contrast "B-A" / "C-B": SD over bases of its true effect,
    fraction}, measured over `bases` (>= 2) bases of the recipe."""
    sd: dict
    bases: int

    @classmethod
    def of(cls, d, where: str = "decision.yaml design.base_spread") -> "BaseSpread":
        """The block as registered; ValueError naming the key and what was expected otherwise."""
        if isinstance(d, cls):
            return d
        keys = {"sd", "bases"}
        if not isinstance(d, dict) or set(d) != keys:
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"{where}: expected a mapping with keys {sorted(keys)}, got {got}")
        b = d["bases"]
        if isinstance(b, bool) or not isinstance(b, int) or b < 2:
            raise ValueError(f"{where}.bases: expected the number of bases the SDs were measured over, an integer "
                             f">= 2, got {b!r}")
        want = sorted(f"{hi}-{lo}" for hi, lo in contrasts.DECISION_CONTRASTS)
        sd = d["sd"]
        if not isinstance(sd, dict) or sorted(sd) != want:
            raise ValueError(f"{where}.sd: expected one SD per decision contrast {want}, got "
                             f"{sorted(sd) if isinstance(sd, dict) else sd!r}")
        for key, v in sd.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ValueError(f"{where}.sd.{key}: expected an SD of pass-rate differences in [0, 1) "
                                 f"(fraction: 0.05 = 5 pts), got {v!r}")
        return cls(sd={k: float(v) for k, v in sorted(sd.items())}, bases=b)

    def to_dict(self) -> dict:
        return {"bases": self.bases, "sd": dict(self.sd)}

    def upper(self, level: float = PESSIMISTIC_LEVEL) -> dict:
        """Each SD at its one-sided `level` upper confidence limit over `bases` - 1 df (chi-square)."""
        df = self.bases - 1
        factor = math.sqrt(df / chi2.ppf(1.0 - level, df))
        return {k: v * factor for k, v in self.sd.items()}


def arm_intercepts(vc: VarianceComponents, run_sd: float, k: int, rates: np.ndarray) -> np.ndarray:
    """The arm's intercept mu (logit) at each rate (any shape), as `arm_intercept` solves it: exactly at
    INTERCEPT_NODES rates spanning them (evenly in logit), by a cubic spline between (mu is smooth and
    increasing in the logit of the rate; tests check the spline against the exact solve)."""
    lo, hi = float(rates.min()), float(rates.max())
    if hi - lo < 1e-9:
        return np.full(rates.shape, arm_intercept(lo, vc.item_sd, vc.arm_item_sd, run_sd, vc.run_shape, k))
    grid = np.linspace(logit(lo), logit(hi), INTERCEPT_NODES)
    mus = [arm_intercept(float(1.0 / (1.0 + math.exp(-g))), vc.item_sd, vc.arm_item_sd, run_sd, vc.run_shape, k)
           for g in grid]
    return CubicSpline(grid, mus)(logit(rates))


def simulate_at_rates(vc: VarianceComponents, noise: Noise, arm: str, rates: np.ndarray, run_sd: float) -> np.ndarray:
    """Outcomes (R, k, n) uint8 of one arm whose expected pass rate in experiment r is rates[r] (R,): as
    `simulate.simulate_arm`, with one intercept per experiment."""
    k = noise.run[arm].shape[1]
    mu = arm_intercepts(vc, run_sd, k, rates)[:, None, None]
    item = (mu + vc.item_sd * noise.alpha + vc.arm_item_sd * noise.beta[arm]).astype(np.float32)
    run = run_effects(noise.run[arm], run_sd, vc.run_shape).astype(np.float32)
    return (noise.threshold[arm] < item + run).view(np.uint8)


def _labels_over_bases(spec, vc: VarianceComponents, noise: Noise, draws, z: np.ndarray, hi: str, lo: str,
                       effect: float, base_sd: float, n_items: int):
    """The rule's core on R experiments of contrast hi - lo whose base draws its own true effect,
    effect + base_sd z[r] (clipped so both arms stay inside the model's rates). Returns (core, the true
    effect of each experiment (R,))."""
    lo_rate = placed_control(vc.control_rate, max(effect, 0.0), n_items)
    cap_lo, cap_hi = 0.5 / n_items, 1.0 - 0.5 / n_items
    hi_rates = np.clip(lo_rate + effect + base_sd * z, cap_lo, cap_hi)
    y_lo = simulate_at_rates(vc, noise, "lo", np.full(z.shape, lo_rate), vc.run_sd[lo])
    y_hi = simulate_at_rates(vc, noise, "hi", hi_rates, vc.run_sd[hi])
    core = contrasts.contrast_core(contrasts.ArmSums.of(contrasts.canonical_seeds(y_hi), draws),
                                   contrasts.ArmSums.of(contrasts.canonical_seeds(y_lo), draws), spec, draws)
    return core, hi_rates - lo_rate


def bases_needed(sesoi: float, alpha: float, power: float, base_sd: float, per_base_se: float) -> int | None:
    """The smallest K in [2, MAX_BASES] at which a one-sided t-test over K bases' gaps (K - 1 df; each
    gap with variance base_sd^2 + per_base_se^2, fractions) rules out an effect of `sesoi` with
    P >= `power` when the recipe's effect is 0; None when no K up to MAX_BASES does."""
    sd = math.hypot(base_sd, per_base_se)
    if sd == 0.0:
        return 2
    for k in range(2, MAX_BASES + 1):
        crit = student_t.ppf(1.0 - alpha, k - 1)
        if nct.cdf(-crit, k - 1, -sesoi * math.sqrt(k) / sd) >= power:
            return k
    return None


def base_oc(spec: dict, design, vc: VarianceComponents, n_items: int, n_seeds: int, spread: BaseSpread | dict) -> BaseOC:
    """What the registered design (one base of n_items x n_seeds) says about the recipe, and the bases a
    claim about the recipe would take (see the module docstring), per decision contrast. `design`: the
    DesignSettings (replicates, rng_seed, bootstrap_resamples)."""
    spec, spread = contrasts.rule_spec(spec), BaseSpread.of(spread)
    R, sesoi, alpha = design.replicates, spec.sesoi, spec.alpha
    rng = np.random.default_rng(design.rng_seed + 5)
    noise = Noise.draw(R, n_seeds, n_items, ("hi", "lo"), rng)
    z = rng.standard_normal(R)
    draws = contrasts.BootstrapDraws.draw(design.bootstrap_resamples, n_items, n_seeds, spec.bootstrap.rng_seed)
    upper = spread.upper()
    few = min(n_seeds, FEWEST_SEEDS)
    few_se = _per_base_se(spec, design, vc, n_items, few) if few < n_seeds else None
    need = lambda sd, se: bases_needed(sesoi, alpha, spec.power, sd, se)  # noqa: E731
    rows = []
    for hi, lo in contrasts.DECISION_CONTRASTS:
        key, sd = f"{hi}-{lo}", spread.sd[f"{hi}-{lo}"]
        at_0, truth = _labels_over_bases(spec, vc, noise, draws, z, hi, lo, 0.0, sd, n_items)
        at_sesoi, _ = _labels_over_bases(spec, vc, noise, draws, z, hi, lo, sesoi, sd, n_items)
        share = lambda core, label: _r((core.label == label).mean())  # noqa: E731
        se = float(np.std(at_0.gap - truth, ddof=1))  # one base's gap about its own true effect
        levels = (share(at_0, "supported"), share(at_0, "reversed"), share(at_sesoi, "ruled_out"))
        rows.append(BaseContrastOC(
            contrast=key, base_sd=_r(sd), base_sd_upper=_r(upper[key]), per_base_se=_r(se),
            supported_at_0=levels[0], reversed_at_0=levels[1], ruled_out_at_sesoi=levels[2],
            ruled_out_at_0=share(at_0, "ruled_out"), supported_at_sesoi=share(at_sesoi, "supported"),
            level_se=_r(mc_se(max(levels), R)),
            bases_needed=need(sd, se), bases_needed_upper=need(upper[key], se),
            per_base_se_few=None if few_se is None else _r(few_se[key]),
            bases_needed_few=None if few_se is None else need(sd, few_se[key])))
    return BaseOC(bases_measured=spread.bases, level=PESSIMISTIC_LEVEL, seeds_per_base=int(n_seeds),
                  fewest_seeds=int(few), contrasts=rows)


def _per_base_se(spec, design, vc: VarianceComponents, n_items: int, n_seeds: int) -> dict:
    """{contrast: the SD over simulated experiments of one base's gap at n_seeds seeds} (no base spread)."""
    rng = np.random.default_rng(design.rng_seed + 6)
    noise = Noise.draw(design.replicates, n_seeds, n_items, ("hi", "lo"), rng)
    draws = contrasts.BootstrapDraws.draw(design.bootstrap_resamples, n_items, n_seeds, spec.bootstrap.rng_seed)
    zero = np.zeros(design.replicates)
    return {f"{hi}-{lo}": float(np.std(_labels_over_bases(spec, vc, noise, draws, zero, hi, lo, 0.0, 0.0, n_items)[0].gap,
                                       ddof=1)) for hi, lo in contrasts.DECISION_CONTRASTS}

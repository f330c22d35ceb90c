"""Design analysis by simulation: what the registered experiment can resolve.

The readout's own decision core (`harness.stats.contrasts.evaluate`) is run on simulated experiments of the
registered size (probe items x seeds x arms A, B, C) and C's confirm gate on simulated confirm
batches, giving the operating characteristic: P(each verdict) at true effects 0, sesoi and
2 x sesoi of both contrasts, the false-positive rate of `keep_both`, and P(commit) against the true
successor - root difference. freeze prints and records it; the readout repeats it with the
variance components it observed.

The simulation model (logit scale; L = the logistic function). For arm a, seed s, item i:

    P(pass) = L(mu_a + alpha_i + beta_ai + u_as)
    alpha_i ~ N(0, item_sd^2)      per-item base difficulty, shared by every arm
    beta_ai ~ N(0, arm_item_sd^2)  arm x item effect, shared by an arm's seeds
    u_as    ~ N(0, run_sd[a]^2)    seed-to-seed run effect of arm a (a training run lifts or sinks all items)

and outcomes are independent Bernoulli draws given those (greedy evaluation is deterministic given
a model; the draw stands for the run x item idiosyncrasy). mu_a is set so that arm a's expected
pass rate is the target: A at the control's pass rate, B = A + effect(B-A), C = B + effect(C-B);
true effects are differences of expected pass rates (fractions).

The components come from `VarianceComponents.from_moments`, which fits the latent SDs to observable
moments (see MOMENT_KEYS); the same moments come from a pilot (pilot.json, key
"variance_components"), from the readout's own outcomes (`observed_moments`), or, without a pilot,
from the registered assumptions in decision.yaml `design.assumed`, flagged loudly.

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
from dataclasses import dataclass, field
from itertools import combinations, product
from typing import Protocol

import numpy as np
import pandas as pd
from scipy.integrate import quad
from scipy.optimize import brentq, minimize_scalar
from scipy.special import expit, ndtr, ndtri
from scipy.stats import binom, chi2

from harness.stats import contrasts
from harness.stats.checks import beats, paired_batch
from harness.stats.design.records import (ARMS, MOMENT_KEYS, Alternative, Cell, ComponentsReport, ControlPower,
                                          CurvePoint, DesignAnalysis, DesignSize, Estimate, FalsePositive, FitPair,
                                          FitReport, GateOC, GatePoint, Moments, Pessimistic, PositiveControlCurve,
                                          RuleOC, SpreadPool)
from harness.stats.design.records import rounded as _r
from harness.stats.units import pts

DESIGN_KEYS = {"replicates", "rng_seed", "bootstrap_resamples", "positive_control_effect", "assumed"}
FIT_TOLERANCE = 0.01    # an agreement the fitted model misses by more than this is reported as a misfit
PESSIMISTIC_LEVEL = 0.8  # the one-sided upper confidence limit of the seed SDs for the pessimistic power
# the pooled run spread's floor under them is read at its 90% limit: in simulation (12 groups of 2 seeds,
# run SD 0.3 and 0.6 logit) its nominal 80% limit covered the true run SD in 71-75% of experiments, the
# 90% limit in 83-87% (tests/test_design.py checks >= 80%)
SPREAD_FLOOR_LEVEL = 0.9
MAX_SD = 12.0  # logit-scale ceiling of every fitted SD (at a ceiling or floor a moment can ask for any)
GATE_DIFFS = (-0.15, -0.10, -0.05, -0.025, 0.0, 0.025, 0.05, 0.10, 0.15)
# The fit's quadrature: E[f(Z)], Z ~ N(0, 1), as a weighted sum over a fine grid (spacing 0.02: at
# the largest item SD, 12, the logistic's step of width ~4 logits spans 16 nodes, where an 80-node
# Gauss-Hermite rule left a few and missed the seed agreement by 0.001-0.002) and, for an arm's run
# effect, a coarser grid of its own; each weight vector sums to 1.
_FZ = np.linspace(-8.0, 8.0, 801)
_FW = np.exp(-0.5 * _FZ * _FZ)
_FW /= _FW.sum()
_FU = np.linspace(-6.0, 6.0, 121)
_FUW = np.exp(-0.5 * _FU * _FU)
_FUW /= _FUW.sum()


# ---- variance components ----------------------------------------------------------------------

def mean_rate(mu: float, sd: float) -> float:
    """E[L(mu + sd Z)], Z ~ N(0, 1): the expected pass rate of an arm with logit intercept mu and
    total logit SD sd, by adaptive quadrature. A fixed Gauss-Hermite rule misses at large sd (the
    logistic is a step of width 1/sd in z there): at sd 12 it put a 5-point effect at 4.75."""
    if sd < 1e-9:
        return float(expit(mu))
    z0 = min(max(-mu / sd, -12.0), 12.0)  # where the logistic steps; |z| > 12 carries no mass
    f = lambda z: expit(mu + sd * z) * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)  # noqa: E731
    return float(sum(quad(f, lo, hi, epsabs=1e-13, epsrel=1e-11, limit=200)[0]
                     for lo, hi in ((-12.0, z0), (z0, 12.0)) if hi > lo))


def _intercept(rate: float, sd: float) -> float:
    """mu with E[L(mu + sd Z)] = rate exactly (mean_rate), rate in (0, 1)."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"design: a pass rate must lie in (0, 1) to be simulated, got {rate!r}")
    edge = 40.0 + 10.0 * sd  # wide enough that the bracket holds the root at any sd
    return float(brentq(lambda m: mean_rate(m, sd) - rate, -edge, edge, xtol=1e-12))


def _grid_intercept(rate: float, sd: float) -> float:
    """mu with E[L(mu + sd Z)] = rate on the fit's grid (the simulation solves it exactly: _intercept)."""
    edge = 40.0 + 10.0 * sd
    return float(brentq(lambda m: float(_FW @ expit(m + sd * _FZ)) - rate, -edge, edge, xtol=1e-10))


def _pass_table(mu: float, shared: float, inner: float) -> tuple[np.ndarray, np.ndarray]:
    """P(pass) of items on the grid: rows are the nodes of the effect two outcomes share (SD `shared`),
    columns those of the effect they do not (SD `inner`). Returns (table (len _FZ, m), column weights (m,))."""
    if inner < 1e-9:
        return expit(mu + shared * _FZ)[:, None], np.ones(1)
    return expit(mu + shared * _FZ[:, None] + inner * _FU[None, :]), _FUW


def seed_agreement_of(rate: float, tau: float, run: float) -> float:
    """P(two seeds of an arm agree on an item) under the model: the seeds share the item effect
    alpha + beta (SD tau), each has its own run effect (SD run); the arm passes `rate` on average."""
    table, w = _pass_table(_grid_intercept(rate, math.hypot(tau, run)), tau, run)
    q = table @ w
    return float(_FW @ (q * q + (1 - q) * (1 - q)))


def seed_variance_of(rate: float, tau: float, run: float, n: int) -> float:
    """The variance over seeds of one seed's pass rate on n items: the run effect's share,
    Var_u E_items[L(mu + tau Z + run u)], plus the Bernoulli part E[p (1 - p)] / n."""
    table, w = _pass_table(_grid_intercept(rate, math.hypot(tau, run)), tau, run)
    per_run = _FW @ table                      # the pass rate given each run effect (the columns)
    spread = float(w @ per_run ** 2 - (w @ per_run) ** 2)
    return max(spread, 0.0) + float(_FW @ (table * (1 - table)) @ w) / n


def run_sd_for(rate: float, tau: float, seed_sd: float, n: int) -> float:
    """The run SD (logit) whose seed variance at item SD tau is seed_sd^2, in [0, MAX_SD] (clipped
    to an end the moment lies beyond: a seed SD below the Bernoulli part alone gives 0)."""
    gap = lambda r: seed_variance_of(rate, tau, r, n) - seed_sd * seed_sd  # noqa: E731
    if gap(0.0) >= 0.0:
        return 0.0
    if gap(MAX_SD) <= 0.0:
        return MAX_SD
    return float(brentq(gap, 0.0, MAX_SD, xtol=1e-6))


def arm_agreement_of(rates: dict, tau: float, item: float, run: dict) -> float:
    """P(two different arms agree on an item), averaged over the pairs of ARMS: they share alpha
    (SD item) only; beta (SD sqrt(tau^2 - item^2)) and the run effects are each arm's own."""
    own = math.sqrt(max(tau * tau - item * item, 0.0))
    q = {}
    for a in ARMS:
        table, w = _pass_table(_grid_intercept(rates[a], math.hypot(tau, run[a])), item, math.hypot(own, run[a]))
        q[a] = table @ w
    return float(np.mean([_FW @ (q[a] * q[b] + (1 - q[a]) * (1 - q[b])) for a, b in combinations(ARMS, 2)]))


@dataclass(frozen=True)
class VarianceComponents:
    """The simulation model's components (see the module docstring), logit scale.

    control_rate: arm A's pass rate (the simulated A; B and C are set from it by the effects);
    gate_rate: the pass rate of C's root model in the confirm-gate simulation (C's pass rate);
    source: "pilot", "observed" or "assumed"; moments: what they were fitted to.
    """
    control_rate: float
    gate_rate: float
    item_sd: float
    arm_item_sd: float
    run_sd: dict = field(default_factory=dict)   # {arm: run SD (logit)}
    source: str = "assumed"
    moments: Moments | None = None  # None: components set by hand, not fitted
    base_rate: float | None = None  # the frozen base's pass rate (the positive control's `base`); None: A's
    fit: FitReport | None = None    # the moments the fitted model reproduces, beside the observed ones
    n_seeds: int | None = None      # seeds the moments were measured over (the run spread's degrees of freedom + 1)
    rounds_read: dict = field(default_factory=dict)   # {arm: the round (0-based) its moments are from}; {}: unknown
    rounds: int | None = None       # the registered rounds (rounds_read's arms ran 0 .. rounds - 1)
    spread_groups: tuple = ()       # SpreadGroup: per-seed pass rates of every (arm, round) the pilot ran
    run_shape: str = "normal"       # how run effects are drawn in simulation (RUN_SHAPES; `run_effects`)

    def misfit(self, tol: float = FIT_TOLERANCE) -> list[str]:
        """What the fitted model cannot reproduce: each agreement it misses by more than `tol`, and
        each component the fit pushed to its bound. [] when the fit holds."""
        if self.fit is None:
            return []
        out = []
        for a, x in sorted(self.fit.seed_agreement.items()):
            if abs(x.model - x.observed) > tol:
                out.append(f"arm {a}'s seed agreement {x.observed:.3f} (the model, with one item effect shared by "
                           f"arms A, B and C, gives {x.model:.3f})")
        x = self.fit.arm_agreement
        if abs(x.model - x.observed) > tol:
            out.append(f"the arms' agreement {x.observed:.3f} (the model gives {x.model:.3f})")
        out += [f"{b} at the fit's bound" for b in self.fit.at_bound]
        return out

    def fit_notes(self) -> list[str]:
        """Where the model is more spread than the data, on the pessimistic side: an arm whose seeds
        agree in pass rate more closely than independent item outcomes alone allow (its seed SD below
        the Bernoulli part: greedy evaluation of near-identical models) is simulated at the Bernoulli part."""
        out = []
        for a, x in sorted(self.fit.seed_sd.items()) if self.fit else []:
            if x.model > x.observed * 1.1 + 0.001:
                out.append(f"arm {a}'s seed SD {100 * x.observed:.2f} pts is below what independent item outcomes "
                           f"alone give ({100 * x.model:.2f} pts): the model carries the larger, the pessimistic side")
        return out

    def spread_pool(self, level: float = SPREAD_FLOOR_LEVEL) -> SpreadPool | None:
        """The run spread pooled over every (arm, round) the pilot ran (`pooled_run_spread`) at this
        fit's item SD; None without such data (registered assumptions, observed outcomes, an old pilot)."""
        return pooled_run_spread(list(self.spread_groups), math.hypot(self.item_sd, self.arm_item_sd), level) \
            if self.spread_groups else None

    def pessimistic(self, level: float = PESSIMISTIC_LEVEL, agreement: str = "mean") -> "VarianceComponents | None":
        """The components refitted on the pessimistic side of what the moments leave open; None when
        the number of seeds is unknown (registered assumptions) or below 2.

        Seed SDs: each arm's at the larger of its own one-sided `level` upper confidence limit
        (chi-square with n_seeds - 1 df: sd x sqrt((k - 1) / chi2.ppf(1 - level, k - 1)), which cannot
        lift an SD of 0) and the floor the pooled run spread sets (`spread_pool`: the run SD at its
        SPREAD_FLOOR_LEVEL upper limit, at the arm's pass rate, Bernoulli part included). Seed
        agreement (`agreement`): "mean" fits the arms' average, as the design does; "lowest" /
        "highest" fit every arm to the least / most
        agreeing arm's, the two ends of what a model with one item effect for A, B and C can be fitted
        to when the arms' agreements differ (design_analysis takes the end with the lower power)."""
        if self.n_seeds is None or self.n_seeds < 2 or self.moments is None:
            return None
        k, m = self.n_seeds, self.moments
        factor = math.sqrt((k - 1) / chi2.ppf(1.0 - level, k - 1))
        sds = {a: min(v * factor, 0.5) for a, v in m.seed_sd.items()}
        pool = self.spread_pool()
        if pool is not None:
            tau = math.hypot(self.item_sd, self.arm_item_sd)
            floor = {a: math.sqrt(seed_variance_of(m.pass_rates[a], tau, pool.run_sd_upper, m.n_items)) for a in ARMS}
            sds = {a: min(max(sds[a], floor[a]), 0.5) for a in ARMS}
        pick = {"mean": None, "lowest": min, "highest": max}[agreement]
        agree = m.seed_agreement if pick is None else dict.fromkeys(ARMS, pick(m.seed_agreement.values()))
        what = f"seed SDs at their {level:.0%} upper confidence limit" + (" or the pooled floor" if pool else "") \
            + ("" if pick is None else f", every arm's seed agreement the {agreement} arm's")
        vc = type(self).from_moments(dataclasses.replace(m, seed_sd=sds, seed_agreement=agree), f"{self.source}, {what}")
        return dataclasses.replace(vc, base_rate=self.base_rate, n_seeds=k, rounds_read=self.rounds_read,
                                   rounds=self.rounds, spread_groups=self.spread_groups)

    def agreement_spread(self, tol: float = FIT_TOLERANCE) -> bool:
        """Whether the arms' seed agreements differ by more than `tol` (then the pessimistic design
        tries both ends, `pessimistic(agreement="lowest" | "highest")`)."""
        vals = list(self.moments.seed_agreement.values()) if self.moments else []
        return bool(vals) and max(vals) - min(vals) > tol

    @property
    def base(self) -> float:
        """The base model's simulated pass rate: the pilot's, else the control's (A's)."""
        return self.control_rate if self.base_rate is None else self.base_rate

    @classmethod
    def from_moments(cls, moments: Moments | dict, source: str, where: str = "variance components") -> "VarianceComponents":
        """Fit item_sd, arm_item_sd and run_sd to the moments, jointly and on the fit's quadrature
        grid (no approximation of the inner integrals):
          * tau = sqrt(item_sd^2 + arm_item_sd^2) so that the model's seed agreement, averaged over
            the arms, is the observed average, where at each tau every arm's run SD is the one that
            gives its observed seed SD (`run_sd_for`: run effect plus the Bernoulli part);
          * item_sd in [0, tau]: the cross-arm agreement (arms share alpha only).
        A moment outside what the model can reach is clipped to the nearest reachable value; what the
        fitted model then gives beside each observed agreement is in `fit` (`misfit` names the misses)."""
        m = Moments.from_dict(moments, where)
        rates, n, sds = m.pass_rates, m.n_items, m.seed_sd
        runs_at = lambda t: {a: run_sd_for(rates[a], t, sds[a], n) for a in ARMS}  # noqa: E731

        def mean_seed_agreement(t: float) -> float:
            run = runs_at(t)
            return float(np.mean([seed_agreement_of(rates[a], t, run[a]) for a in ARMS]))

        tau = _solve(mean_seed_agreement, float(np.mean([m.seed_agreement[a] for a in ARMS])), 0.0, MAX_SD)
        run = runs_at(tau)
        item = _solve(lambda s: arm_agreement_of(rates, tau, s, run), m.arm_agreement, 0.0, tau) if tau > 0 else 0.0
        pair = lambda observed, model: FitPair(observed=_r(observed), model=_r(model))  # noqa: E731
        fit = FitReport(
            seed_agreement={a: pair(m.seed_agreement[a], seed_agreement_of(rates[a], tau, run[a])) for a in ARMS},
            arm_agreement=pair(m.arm_agreement, arm_agreement_of(rates, tau, item, run)),
            seed_sd={a: pair(sds[a], math.sqrt(seed_variance_of(rates[a], tau, run[a], n))) for a in ARMS},
            at_bound=sorted([f"run_sd.{a}" for a in ARMS if run[a] >= MAX_SD]
                            + (["tau"] if tau >= MAX_SD or tau <= 0.0 else [])
                            + (["item_sd"] if tau > 0 and (item <= 0.0 or item >= tau) else [])))
        return cls(control_rate=rates["A"], gate_rate=rates["C"], item_sd=item,
                   arm_item_sd=math.sqrt(max(tau * tau - item * item, 0.0)), run_sd=run, source=source,
                   moments=m, fit=fit)

    @classmethod
    def from_pilot(cls, pilot: dict) -> "VarianceComponents":
        """From pilot.json: its "variance_components" entry holds the MOMENT_KEYS (as
        `observed_moments` computes them from the pilot's items frame)."""
        if not isinstance(pilot, dict) or "variance_components" not in pilot:
            raise ValueError("pilot.json: missing key 'variance_components' (the moments "
                             f"{sorted(MOMENT_KEYS)}, e.g. from harness.stats.power.observed_moments)")
        vc = cls.from_moments(pilot["variance_components"], "pilot", "pilot.json: variance_components")
        registered = pilot.get("registered") or {}
        seeds = registered.get("seeds")
        if isinstance(seeds, list) and seeds:
            vc = dataclasses.replace(vc, n_seeds=len(seeds))
        rounds_read = pilot.get("measured_rounds")
        if isinstance(rounds_read, dict):
            vc = dataclasses.replace(vc, rounds_read=dict(sorted(rounds_read.items())), rounds=registered.get("rounds"))
        per_round = pilot.get("round_pass_rates")
        if isinstance(per_round, dict):
            vc = dataclasses.replace(vc, spread_groups=tuple(spread_groups_of(per_round)))
        base = (pilot.get("base") or {}).get("pass_rate")
        if isinstance(base, (int, float)) and not isinstance(base, bool):
            n = vc.moments.n_items
            vc = dataclasses.replace(vc, base_rate=min(max(float(base), 0.5 / n), 1 - 0.5 / n))
        return vc

    @classmethod
    def from_items(cls, items: pd.DataFrame) -> "VarianceComponents":
        """From an experiment's own outcomes (the readout's observed components)."""
        vc = cls.from_moments(observed_moments(items), "observed", "observed moments")
        return dataclasses.replace(vc, n_seeds=int(contrasts.check_items(items)["seed"].nunique()))

    def report(self) -> ComponentsReport:
        """The components as the design analysis writes them, every figure rounded."""
        return ComponentsReport(
            source=self.source, control_rate=_r(self.control_rate), gate_rate=_r(self.gate_rate),
            item_sd=_r(self.item_sd), arm_item_sd=_r(self.arm_item_sd),
            run_sd={a: _r(v) for a, v in sorted(self.run_sd.items())}, base_rate=_r(self.base), fit=self.fit,
            misfit=self.misfit(), fit_notes=self.fit_notes(), n_seeds=self.n_seeds,
            moments=None if self.moments is None else self.moments.rounded(),
            rounds_read=dict(self.rounds_read), rounds=self.rounds, spread_pool=_rounded_pool(self.spread_pool()))


@dataclass(frozen=True)
class SpreadGroup:
    """The per-seed pass rates (fractions, one per seed, in seed order) of one arm after one round
    (0-based), on n_items items: a group `pooled_run_spread` pools."""
    arm: str
    round: int
    n_items: int
    pass_rates: tuple


def _rounded_pool(pool: SpreadPool | None) -> SpreadPool | None:
    return None if pool is None else pool.rounded()


def spread_groups_of(per_round: dict) -> list[SpreadGroup]:
    """pilot.json's round_pass_rates ({arm: [{round, n_items, pass_rates: {seed: rate}}]}) as the
    groups `pooled_run_spread` reads, in arm, round order."""
    out = []
    for arm, rows in sorted(per_round.items()):
        for row in sorted(rows, key=lambda r: r["round"]):
            rates = tuple(float(v) for _, v in sorted(row["pass_rates"].items(), key=lambda kv: int(kv[0])))
            out.append(SpreadGroup(arm=arm, round=int(row["round"]), n_items=int(row["n_items"]), pass_rates=rates))
    return out


def pooled_run_spread(groups: list[SpreadGroup], tau: float, level: float = SPREAD_FLOOR_LEVEL) -> SpreadPool | None:
    """The run SD (logit) pooled over groups of seeds, with its one-sided `level` upper confidence limit.

    groups: SpreadGroup, one rate per seed each; a group with fewer than 2 seeds adds
    nothing. Each group's per-seed pass rates are put on the run effect's scale by the slope of the pass
    rate in it, s_g = E[p (1 - p)] at the group's pass rate and item SD tau (linearised: a run effect u
    moves the pass rate by about s_g u), so a seed's rate varies by run^2 + 1 / (s_g n_g) on that scale
    (the second term the Bernoulli part). With df = sum (k_g - 1), V = the df-weighted mean of
    Var(rates_g) / s_g^2 and c the same mean of 1 / (s_g n_g):
        run^2 estimate     max(V - c, 0)
        run^2 upper limit  max(df V / chi2.ppf(1 - level, df) - c, 0)
    (df V / (run^2 + c) read as chi-square with df degrees of freedom). Pooling assumes one run SD for
    every arm and round: an arm or round with less spread (SFT, round 0) lowers it, so it serves as a
    floor under each arm's own estimate, not as an estimate of any one arm. None when no group has 2 seeds."""
    df, v_sum, c_sum, used = 0, 0.0, 0.0, []
    for g in groups:
        rates = np.asarray(g.pass_rates, dtype=float)
        k, n = len(rates), int(g.n_items)
        if k < 2:
            continue
        mean = min(max(float(rates.mean()), 0.5 / n), 1 - 0.5 / n)
        table, _ = _pass_table(_grid_intercept(mean, tau), tau, 0.0)
        slope = float(_FW @ (table[:, 0] * (1 - table[:, 0])))
        df += k - 1
        v_sum += (k - 1) * float(rates.var(ddof=1)) / slope ** 2
        c_sum += (k - 1) / (slope * n)
        used.append(g)
    if df == 0:
        return None
    V, c = v_sum / df, c_sum / df
    upper = df * V / chi2.ppf(1.0 - level, df) - c
    return SpreadPool(df=df, level=level, run_sd=math.sqrt(max(V - c, 0.0)),
                      run_sd_upper=min(math.sqrt(max(upper, 0.0)), MAX_SD), arms=sorted({g.arm for g in used}),
                      rounds=sorted({g.round for g in used}), groups=len(used))


def _solve(fn, target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] with fn(x) = target for increasing fn, clipped to the ends."""
    f_lo, f_hi = fn(lo), fn(hi)
    if target <= f_lo:
        return lo
    if target >= f_hi:
        return hi
    return float(brentq(lambda x: fn(x) - target, lo, hi, xtol=1e-10))


def observed_moments(items: pd.DataFrame) -> Moments:
    """The MOMENT_KEYS of an items frame (arm, seed, item, passed) with arms A, B, C and >= 2 seeds.
    Every moment is symmetric in the seeds, so it does not depend on their labels. Pass rates are
    clipped to [1/(2n), 1 - 1/(2n)]: the model is on the logit scale, and an arm at the floor or the
    ceiling still has a design to simulate."""
    y = contrasts.outcome_arrays(items)
    for a in ARMS:
        contrasts._need_arm(y, a)
    k, n = y["A"].shape[1:]
    if k < 2:
        raise ValueError(f"observed moments need >= 2 seeds per arm, got {k}")
    x = {a: y[a][0].astype(np.int64) for a in ARMS}                     # (k, n)
    agree = lambda u, v: float((u == v).mean())  # noqa: E731
    rates = {a: np.sort(x[a].sum(1)) / n for a in ARMS}
    return Moments(
        n_items=int(n),
        pass_rates={a: _r(min(max(float(x[a].mean()), 0.5 / n), 1 - 0.5 / n)) for a in ARMS},
        seed_sd={a: _r(np.std(rates[a], ddof=1)) for a in ARMS},
        seed_agreement={a: _r(np.mean([agree(x[a][s], x[a][t]) for s, t in combinations(range(k), 2)])) for a in ARMS},
        arm_agreement=_r(np.mean([agree(x[a][s], x[b][t]) for a, b in combinations(ARMS, 2)
                                  for s, t in product(range(k), range(k))])),
    )


# ---- the design spec ------------------------------------------------------------------------

def validate_design(d: dict) -> dict:
    """decision.yaml's `design` block; ValueError naming the key otherwise."""
    where = "decision.yaml design"
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a mapping with keys {sorted(DESIGN_KEYS)}")
    missing = sorted(DESIGN_KEYS - {"positive_control_effect"} - set(d))
    extra = sorted(set(d) - DESIGN_KEYS)
    if missing or extra:
        raise ValueError(f"{where}: " + (f"missing key(s) {missing}" if missing else f"unknown key(s) {extra}")
                         + f"; expected {sorted(DESIGN_KEYS)} (positive_control_effect optional)")
    for key, lo in (("replicates", 10), ("rng_seed", 0), ("bootstrap_resamples", 19)):
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{where}.{key}: expected an integer >= {lo}, got {v!r}")
    pc = d.get("positive_control_effect")
    if pc is not None and (isinstance(pc, bool) or not isinstance(pc, (int, float)) or not 0 < pc < 1):
        raise ValueError(f"{where}.positive_control_effect: expected a pass-rate difference in (0, 1), got {pc!r}")
    Moments.from_dict(d["assumed"], f"{where}.assumed")
    return dict(d)


@dataclass(frozen=True)
class DesignSettings:
    """decision.yaml's `design` block (`validate_design` checks it): `replicates` simulated experiments
    per effect cell drawn from `rng_seed`, `bootstrap_resamples` resamples per simulated interval, the
    moments `assumed` without a pilot (MOMENT_KEYS) and the positive control's registered effect
    (fraction; None: not registered)."""
    replicates: int
    rng_seed: int
    bootstrap_resamples: int
    assumed: dict
    positive_control_effect: float | None = None

    @classmethod
    def of(cls, design: "DesignSettings | dict") -> "DesignSettings":
        """The settings of a design block as given (a block from decision.yaml is checked on loading)."""
        return design if isinstance(design, cls) else cls(**design)


# ---- simulation -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Noise:
    """Standard-normal and uniform draws of R experiments, reused across effect cells (common
    random numbers: the cells differ only by their effects, so their differences are sharp).
    alpha: (R, 1, n); beta[arm]: (R, 1, n); run[arm]: (R, k, 1); threshold[arm]: (R, k, n) float32,
    the logit of a uniform draw (pass iff threshold < the outcome's logit, i.e. u < L(logit))."""
    alpha: np.ndarray
    beta: dict
    run: dict
    threshold: dict

    @classmethod
    def draw(cls, R: int, k: int, n: int, arms, rng: np.random.Generator) -> "Noise":
        alpha = rng.standard_normal((R, 1, n))
        beta = {a: rng.standard_normal((R, 1, n)) for a in arms}
        run = {a: rng.standard_normal((R, k, 1)) for a in arms}
        threshold = {}
        for a in arms:
            u = rng.random((R, k, n))
            threshold[a] = np.log(u / (1.0 - u)).astype(np.float32)
        return cls(alpha, beta, run, threshold)


RUN_SHAPES = ("normal", "collapse", "one_collapse")
COLLAPSE_SHARE = 0.9   # the share of an arm's run variance that its collapsing seeds carry
COLLAPSE_RATE = 0.25   # P(a run collapses), run_shape "collapse": one of main's four B seeds did


def collapse_parts(run_sd: float, shape: str, k: int) -> tuple[float, float, float, float]:
    """(q, c, m, s) of skewed run effects with variance run_sd^2: a seed collapses to -c with
    probability q, else its run effect is m + s Z; m makes the effects average 0 and the collapse
    carries COLLAPSE_SHARE of the variance.
      "collapse": each seed independently, q = COLLAPSE_RATE:
          c = run_sd sqrt(share (1 - q) / q), m = q c / (1 - q), s = run_sd sqrt((1 - share) / (1 - q));
          at the registered share and rate a collapsed seed lies 2.2 run SDs below the others, which
          spread 0.37 run SD (6 of their SDs: one of main's B seeds fell 5 pts below three within 1.3).
      "one_collapse": exactly one seed of every arm in every experiment, q = 1 / k, with c and s
          set so that the EXPECTED SAMPLE variance (ddof 1) of the k effects is run_sd^2:
          c = run_sd (k - 1) sqrt(share / k), m = c / (k - 1), s = run_sd sqrt((1 - share) k / (k - 1))."""
    w = COLLAPSE_SHARE
    if shape == "collapse":
        q = COLLAPSE_RATE
        c = run_sd * math.sqrt(w * (1.0 - q) / q)
        return q, c, q * c / (1.0 - q), run_sd * math.sqrt((1.0 - w) / (1.0 - q))
    if shape == "one_collapse":
        c = run_sd * (k - 1) * math.sqrt(w / k)
        return 1.0 / k, c, c / (k - 1), run_sd * math.sqrt((1.0 - w) * k / (k - 1))
    raise ValueError(f"run_shape must be one of {list(RUN_SHAPES)}, got {shape!r}")


def _skewed(shape: str, k: int, run_sd: float) -> bool:
    if shape not in RUN_SHAPES:
        raise ValueError(f"run_shape must be one of {list(RUN_SHAPES)}, got {shape!r}")
    return shape != "normal" and k >= 2 and run_sd > 0.0


def run_effects(z: np.ndarray, run_sd: float, shape: str) -> np.ndarray:
    """The run effects (logit) of one arm's seeds from its standard-normal draws z (R, k, 1), no
    other draws (so the shapes share common random numbers). "normal": run_sd z. "collapse": seed
    collapses where Phi(z) < q; the others take m + s Z' with Z' = Phi^-1((Phi(z) - q) / (1 - q)),
    a standard normal independent of the collapse. "one_collapse": seed 0 collapses, the others are
    m + s z (which seed does not matter: the readout's statistics do not depend on seed labels)."""
    k = z.shape[1]
    if not _skewed(shape, k, run_sd):
        return run_sd * z
    q, c, m, s = collapse_parts(run_sd, shape, k)
    if shape == "one_collapse":
        u = m + s * z
        u[:, 0] = -c
        return u
    p = ndtr(z)
    rest = ndtri(np.clip((p - q) / (1.0 - q), 1e-300, 1.0 - 1e-16))
    return np.where(p < q, -c, m + s * rest)


def arm_intercept(rate: float, item_sd: float, arm_item_sd: float, run_sd: float, shape: str, k: int) -> float:
    """mu with E[L(mu + tau Z + u)] = rate over items (tau = hypot(item_sd, arm_item_sd)) and the
    arm's seeds, u drawn as `run_effects` draws it (every effect is a difference of expected pass
    rates, whatever the run shape)."""
    if not _skewed(shape, k, run_sd):
        return _intercept(rate, math.sqrt(item_sd ** 2 + arm_item_sd ** 2 + run_sd ** 2))
    if not 0.0 < rate < 1.0:
        raise ValueError(f"design: a pass rate must lie in (0, 1) to be simulated, got {rate!r}")
    tau = math.hypot(item_sd, arm_item_sd)
    q, c, m, s = collapse_parts(run_sd, shape, k)
    spread = math.hypot(tau, s)
    mean = lambda mu: q * mean_rate(mu - c, tau) + (1.0 - q) * mean_rate(mu + m, spread)  # noqa: E731
    edge = 40.0 + 10.0 * (tau + c + s)
    return float(brentq(lambda mu: mean(mu) - rate, -edge, edge, xtol=1e-12))


def simulate_arm(vc: VarianceComponents, noise: Noise, arm: str, rate: float, run_sd: float) -> np.ndarray:
    """Outcomes (R, k, n) uint8 of one arm at expected pass rate `rate` with run SD `run_sd`, its run
    effects of shape vc.run_shape."""
    k = noise.run[arm].shape[1]
    mu = arm_intercept(rate, vc.item_sd, vc.arm_item_sd, run_sd, vc.run_shape, k)
    item = (mu + vc.item_sd * noise.alpha + vc.arm_item_sd * noise.beta[arm]).astype(np.float32)   # (R, 1, n)
    run = run_effects(noise.run[arm], run_sd, vc.run_shape).astype(np.float32)
    return (noise.threshold[arm] < item + run).view(np.uint8)


def placed_control(rate: float, total_effect: float, n_items: int) -> float:
    """The control's simulated pass rate when arms above it add `total_effect` (fraction): the
    observed or designed rate, moved down just enough that the highest arm stays inside
    [1/(2n), 1 - 1/(2n)] (the model is on the logit scale: a pass rate of 1 has no intercept).
    At a ceiling (control 0.9, effects 0.2) the design is simulated 0.1 lower, with its stated
    effects intact; the cell records the rate it used."""
    lo_cap, hi_cap = 0.5 / n_items, 1.0 - 0.5 / n_items
    return float(min(max(min(rate, hi_cap - total_effect), lo_cap), hi_cap))


def _mc(p: float, R: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / R)


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
        return {f"{hi}-{lo}": contrasts.contrast_core(y[hi], y[lo], rule_spec, draws)["label"]
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
            verdict_se={o: _r(_mc(p, R)) for o, p in verdict.items()}))
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
            p=_r(fp), se=_r(_mc(fp, R)), at=at_fp, grid_worst={"p": worst.keep_both, "at": grid_worst},
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
        lab = contrasts.contrast_core(hi, lo, spec, draws)["label"]
        p = {x: _r((lab == x).mean()) for x in contrasts.LABELS}
        out.append(CurvePoint(effect=_r(e), control_rate=_r(base), labels=p, supported_se=_r(_mc(p["supported"], R))))
    return out


def keep_both_at(spec: dict, design: DesignSettings | dict, vc: VarianceComponents, n_items: int, n_seeds: int,
                 e_ba: float, e_cb: float) -> float:
    """P(keep_both) at one cell of true effects, by the readout's core on `design` replicates (the
    pessimistic power needs this one cell, not the whole grid)."""
    design = DesignSettings.of(design)
    R = design.replicates
    noise = Noise.draw(R, n_seeds, n_items, ARMS, np.random.default_rng(design.rng_seed))
    draws = contrasts.BootstrapDraws.draw(design.bootstrap_resamples, n_items, n_seeds, spec["bootstrap"]["rng_seed"])
    a = placed_control(vc.control_rate, e_ba + e_cb, n_items)
    rates = dict(zip(ARMS, (a, a + e_ba, a + e_ba + e_cb)))
    y = {x: contrasts.ArmSums.of(contrasts.canonical_seeds(simulate_arm(vc, noise, x, r, vc.run_sd[x])), draws)
         for x, r in rates.items()}
    labs = [contrasts.contrast_core(y[hi], y[lo], spec, draws)["label"] for hi, lo in contrasts.DECISION_CONTRASTS]
    return float(((labs[0] == "supported") & (labs[1] == "supported")).mean())


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
    estimate = lambda ok: (_r(ok.mean()), _r(_mc(float(ok.mean()), R)))  # noqa: E731
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
                               supported_at_0=sup, supported_at_0_se=_r(_mc(sup, R)),
                               reversed_at_0=rev, reversed_at_0_se=_r(_mc(rev, R)),
                               ruled_out_at_sesoi=ro, ruled_out_at_sesoi_se=_r(_mc(ro, R))))
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
    row = lambda name, truth, p: LevelRow(name=name, truth=truth, p=_r(p), se=_r(_mc(p, R)))  # noqa: E731
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
    root = u_root < expit(_intercept(vc.gate_rate, tau) + z)
    out = []
    for d in diffs:
        rate = vc.gate_rate + d
        if not 0.0 < rate < 1.0:
            continue
        succ = u_succ < expit(_intercept(rate, tau) + z)
        commit = commit_decisions(succ.sum(1), root.sum(1), (succ & ~root).sum(1), (root & ~succ).sum(1),
                                  gate.rule, gate.margin, gate.alpha)
        p = float(commit.mean())
        out.append(GatePoint(diff=_r(d), p_commit=_r(p), se=_r(_mc(p, R))))
    return out


# ---- the whole design analysis, and its text ---------------------------------------------------

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
        gate=gate_oc_)
    return dataclasses.replace(out, warnings=design_warnings(out))


def pessimistic_design(spec: dict, design: DesignSettings, vc: VarianceComponents, n_items: int, n_seeds: int,
                       control_checks: list[dict] | None, control_effect: float) -> Pessimistic | None:
    """P(keep_both | sesoi) and the positive control's power at the pessimistic components
    (VarianceComponents.pessimistic); None when there are none (the number of seeds is unknown)."""
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
    power = None
    if control_checks:
        pos = [c for c in control_oc(control_checks, spec, design, worse, n_items, n_seeds, control_effect) if c.positive]
        power = min(c.p_pass_at_effect for c in pos) if pos else None
    return Pessimistic(level=PESSIMISTIC_LEVEL, components=worse.report(), agreement=chosen,
                       keep_both_by_agreement={v: _r(x) for v, x in kept.items()}, spread_pool=_rounded_pool(vc.spread_pool()),
                       keep_both_at_sesoi=Estimate(p=_r(p), se=_r(_mc(p, design.replicates))),
                       positive_control_power=power, control_checked=bool(control_checks))


SUMMARY_KEYS = ("positive_control_power", "keep_both_at_sesoi", "keep_both_false_positive", "ruled_out_at_sesoi",
                "gate_commit_at_minus_sesoi", "gate_commit_at_plus_sesoi")


def design_summary(d: DesignAnalysis | dict) -> dict:
    """The design analysis in six flat numbers (None where the analysis has none, e.g. no positive
    control registered, a rule that cannot decide, or an observed analysis that could not be fitted):
        positive_control_power      P(every registered positive-control check passes) at its registered
                                    effect (the smallest over positive controls)
        keep_both_at_sesoi          P(keep_both | both contrasts at the sesoi)
        keep_both_false_positive    the largest P(keep_both) found over the null set
        ruled_out_at_sesoi          the largest over the contrasts of P(ruled_out | its effect = sesoi)
        gate_commit_at_minus_sesoi  P(C's gate commits | successor truly sesoi worse than its root)
        gate_commit_at_plus_sesoi   P(commit | sesoi better)"""
    d = DesignAnalysis.from_dict(d)
    if d.failed:
        return dict.fromkeys(SUMMARY_KEYS)
    pos = [c.p_pass_at_effect for c in d.positive_controls]
    rule, sesoi = d.rule, d.sesoi
    ro = [] if rule.error is not None else [c.labels[key]["ruled_out"] for c in rule.cells
                                            for key in ("B-A", "C-B") if c.effect(key) == _r(sesoi)]
    commit = {x.diff: x.p_commit for x in d.gate.curve} if d.gate else {}
    figures = (min(pos) if pos else None,
               None if rule.error is not None else rule.keep_both_at_sesoi.p,
               None if rule.error is not None else rule.keep_both_false_positive.p,
               max(ro) if ro else None, commit.get(_r(-sesoi)), commit.get(_r(sesoi)))
    return dict(zip(SUMMARY_KEYS, figures))


@dataclass(frozen=True)
class Reliability:
    """How far to trust one contrast's label under a design analysis (`label_reliability`): its level
    (the largest P(label) where it is wrong, at true effect `level_at`) and power (the smallest P(label)
    where it is right, at `power_at`; None for reversed), each with its Monte-Carlo s.e., the nominal
    alpha, and whether the level exceeds alpha by more than 3 s.e."""
    label: str
    level: float
    level_se: float
    level_at: float
    power: float | None
    power_se: float | None
    power_at: float | None
    alpha: float
    above_alpha: bool


def label_reliability(d: DesignAnalysis | dict | None, key: str, label: str) -> Reliability | None:
    """How far to trust contrast `key`'s label ("B-A", "supported") under design analysis d: its
    level (the largest P(label) where the label is wrong: a true effect of 0 for supported and
    reversed, the sesoi for ruled_out), its power (the smallest P(label) where it is right: the sesoi
    for supported, 0 for ruled_out; None for reversed), each with its MC s.e., over the other
    contrast's simulated effects. None for not_supported or a design without a simulated rule."""
    if d is None or label not in ("supported", "ruled_out", "reversed"):
        return None
    d = DesignAnalysis.from_dict(d)
    if d.rule_failed:
        return None
    sesoi, R = _r(d.sesoi), d.replicates
    at = lambda e: [c.labels[key][label] for c in d.rule.cells if c.effect(key) == e]  # noqa: E731
    wrong, right = {"supported": (0.0, sesoi), "ruled_out": (sesoi, 0.0), "reversed": (0.0, None)}[label]
    level = max(at(wrong))
    power = min(at(right)) if right is not None else None
    return Reliability(label=label, level=level, level_se=_r(_mc(level, R)), level_at=wrong, power=power,
                       power_se=None if power is None else _r(_mc(power, R)), power_at=right, alpha=d.alpha,
                       above_alpha=level > d.alpha + 3 * _mc(level, R))


LEVEL_WARNING = "level above alpha: "  # how every `level_warnings` line starts
_WRONG_WORDS = {"supported": "the gap is truly 0", "reversed": "the gap is truly 0",
                "ruled_out": "the gap truly equals the sesoi"}


def level_warnings(d: DesignAnalysis | dict) -> list[str]:
    """One line per label of each decision contrast (supported, ruled_out, reversed) whose level
    (`label_reliability`) exceeds alpha by more than 3 MC s.e., naming it and its level, whichever
    label the readout found; and the positive control's check when it passes at no effect above alpha
    (keep_both's false positives and the negative control's false alarm have lines of their own)."""
    d = DesignAnalysis.from_dict(d)
    out = []
    for key in ("B-A", "C-B"):
        for label in ("supported", "ruled_out", "reversed"):
            rel = label_reliability(d, key, label)
            if rel is not None and rel.above_alpha:
                out.append(f"{LEVEL_WARNING}{key} `{label}` arises with P {rel.level:.3f} (MC s.e. "
                           f"{rel.level_se:.3f}) when {_WRONG_WORDS[label]}, above alpha {rel.alpha}")
    for c in d.positive_controls:
        if c.p_pass_at_0 > d.alpha + 3 * c.p_pass_at_0_se:
            out.append(f"{LEVEL_WARNING}the positive control {c.arm}'s registered check passes with P "
                       f"{c.p_pass_at_0:.3f} (MC s.e. {c.p_pass_at_0_se:.3f}) when {c.arm} is truly not above "
                       f"A, above alpha {d.alpha}")
    return out


def registration_shortfalls(d: DesignAnalysis | dict) -> list[str]:
    """Where a design misses its registered power, as freeze refuses it: P(keep_both | sesoi), the
    positive control's check and their joint probability (the product: the two are treated as
    independent), each as designed and at the pessimistic components. [] when every one meets it."""
    d = DesignAnalysis.from_dict(d)
    power, out = d.power, []
    if d.rule.error is not None:
        return [f"the decision rule cannot be simulated: {d.rule.error}"]
    pos = [c.p_pass_at_effect for c in d.positive_controls]
    figures = [("designed", d.rule.keep_both_at_sesoi.p, min(pos) if pos else None)]
    if d.pessimistic:
        figures.append(("pessimistic", d.pessimistic.keep_both_at_sesoi.p, d.pessimistic.positive_control_power))
    for where, keep, control in figures:
        named = [("P(keep_both | sesoi)", keep)]
        if control is not None:
            named += [("P(positive control passes)", control), ("their joint probability", keep * control)]
        out += [f"{where} {name} {p:.3f}" for name, p in named if p < power]
    return out


def design_warnings(d: DesignAnalysis | dict) -> list[str]:
    """Loud warnings: assumed components, power below the registered, a false-positive rate above alpha."""
    d = DesignAnalysis.from_dict(d)
    w, c = [], d.components
    if c.source == "assumed":
        w.append("no pilot: the variance components are the registered ASSUMPTIONS (decision.yaml design.assumed), "
                 "not measurements; run `make pilot` and freeze with its pilot.json")
    if c.misfit:
        w.append(f"the fitted model cannot reproduce the {c.source} outcomes: " + "; ".join(c.misfit)
                 + ": its power figures rest on components that do not match the data")
    rule, power, pess = d.rule, d.power, d.pessimistic
    if pess and pess.keep_both_at_sesoi.p < power:
        w.append(f"at the pessimistic components (seed SDs at their {pess.level:.0%} upper confidence limit over "
                 f"{pess.components.n_seeds} seeds{' or the pooled floor' if pess.spread_pool else ''}) "
                 f"P(keep_both) at the sesoi is {pess.keep_both_at_sesoi.p:.3f}, "
                 f"below the registered power {power}")
    if pess and pess.positive_control_power is not None and pess.positive_control_power < power:
        w.append(f"at the pessimistic components the positive control's registered check passes with P "
                 f"{pess.positive_control_power:.3f}, below the registered power {power}")
    if rule.error is not None:
        return w + [rule.error]
    at = rule.keep_both_at_sesoi
    if at.p < power:
        w.append(f"underpowered: P(keep_both) at the sesoi ({pts(d.sesoi, signed=False)} on both contrasts) is {at.p:.3f} "
                 f"(MC s.e. {at.se:.3f}), below the registered power {power}; this design cannot resolve its sesoi")
    fp = rule.keep_both_false_positive
    if fp.p > d.alpha + 3 * fp.se:
        w.append(f"keep_both false-positive rate {fp.p:.3f} at effects {fp.at} exceeds alpha {d.alpha} "
                 f"by more than 3 MC s.e.")
    w += level_warnings(d)
    for c in d.controls or []:
        if c.positive and c.p_pass_at_effect < power:
            w.append(f"the positive control (+{pts(c.effect, signed=False)}) passes its registered check ({c.arm} beats "
                     f"{' and '.join(c.versus)} by {pts(c.margin, signed=False)}, sign test) with P {c.p_pass_at_effect:.3f}, "
                     f"below the registered power {power}")
        if not c.positive and c.p_fires_when_equal > d.alpha + 3 * c.p_fires_when_equal_se:
            w.append(f"the negative control's check ({c.arm} must not beat {' and '.join(c.versus)} by "
                     f"{pts(c.margin, signed=False)}) fires with P {c.p_fires_when_equal:.3f} when {c.arm} truly equals "
                     f"{c.versus[0]}: above alpha {d.alpha}")
    return w

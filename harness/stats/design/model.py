"""The design analysis' model of item outcomes and its fit to observable moments.

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
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations, product

import numpy as np
import pandas as pd
from scipy.integrate import quad
from scipy.optimize import brentq
from scipy.special import expit
from scipy.stats import chi2

from harness.stats import contrasts
from harness.stats.design.records import ARMS, MOMENT_KEYS, ComponentsReport, FitPair, FitReport, Moments, SpreadPool
from harness.stats.design.records import rounded as _r
from harness.stats.units import pts

FIT_TOLERANCE = 0.01    # an agreement the fitted model misses by more than this is reported as a misfit
PESSIMISTIC_LEVEL = 0.8  # the one-sided upper confidence limit of the seed SDs for the pessimistic power
# the pooled run spread's floor under them is read at its 90% limit: in simulation (12 groups of 2 seeds,
# run SD 0.3 and 0.6 logit) its nominal 80% limit covered the true run SD in 71-75% of experiments, the
# 90% limit in 83-87% (tests/test_design.py checks >= 80%)
SPREAD_FLOOR_LEVEL = 0.9
MAX_SD = 12.0  # logit-scale ceiling of every fitted SD (at a ceiling or floor a moment can ask for any)
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


@lru_cache(maxsize=1 << 16)  # a pure function of two floats, solved again and again by every design analysis
def intercept(rate: float, sd: float) -> float:
    """mu with E[L(mu + sd Z)] = rate exactly (mean_rate), rate in (0, 1)."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"design: a pass rate must lie in (0, 1) to be simulated, got {rate!r}")
    edge = 40.0 + 10.0 * sd  # wide enough that the bracket holds the root at any sd
    return float(brentq(lambda m: mean_rate(m, sd) - rate, -edge, edge, xtol=1e-12))


@lru_cache(maxsize=1 << 16)
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


@lru_cache(maxsize=1 << 16)  # pure in its floats: a refit of the same moments reads it again
def seed_agreement_of(rate: float, tau: float, run: float) -> float:
    """P(two seeds of an arm agree on an item) under the model: the seeds share the item effect
    alpha + beta (SD tau), each has its own run effect (SD run); the arm passes `rate` on average."""
    table, w = _pass_table(_grid_intercept(rate, math.hypot(tau, run)), tau, run)
    q = table @ w
    return float(_FW @ (q * q + (1 - q) * (1 - q)))


@lru_cache(maxsize=1 << 16)
def seed_variance_of(rate: float, tau: float, run: float, n: int) -> float:
    """The variance over seeds of one seed's pass rate on n items: the run effect's share,
    Var_u E_items[L(mu + tau Z + run u)], plus the Bernoulli part E[p (1 - p)] / n."""
    table, w = _pass_table(_grid_intercept(rate, math.hypot(tau, run)), tau, run)
    per_run = _FW @ table                      # the pass rate given each run effect (the columns)
    spread = float(w @ per_run ** 2 - (w @ per_run) ** 2)
    return max(spread, 0.0) + float(_FW @ (table * (1 - table)) @ w) / n


@lru_cache(maxsize=1 << 16)
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
                out.append(f"arm {a}'s seed SD {pts(x.observed, signed=False, digits=2)} is below what independent "
                           f"item outcomes alone give ({pts(x.model, signed=False, digits=2)}): the model carries the "
                           "larger, the pessimistic side")
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
                             f"{sorted(MOMENT_KEYS)}, e.g. from harness.stats.design.model.observed_moments)")
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
    def from_items(cls, items: pd.DataFrame, base_rate: float | None = None) -> "VarianceComponents":
        """From an experiment's own outcomes (the readout's observed components). `base_rate`: the frozen
        base's pass rate on the same probes (fraction; the positive control's check against the base is
        simulated there); None leaves it at A's rate, which misstates that check whenever A moved off the
        base."""
        vc = cls.from_moments(observed_moments(items), "observed", "observed moments")
        vc = dataclasses.replace(vc, n_seeds=int(contrasts.check_items(items)["seed"].nunique()))
        if base_rate is None:
            return vc
        n = vc.moments.n_items
        return dataclasses.replace(vc, base_rate=min(max(float(base_rate), 0.5 / n), 1 - 0.5 / n))

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


"""The design analysis' simulator: outcomes of an arm's seeds x items drawn from the model
(harness.stats.design.model) with common random numbers, and the run effects' shapes."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

from harness.stats.design.model import VarianceComponents, intercept, mean_rate

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


@lru_cache(maxsize=1 << 16)  # pure in its arguments: the same arm is solved again by every design analysis
def arm_intercept(rate: float, item_sd: float, arm_item_sd: float, run_sd: float, shape: str, k: int) -> float:
    """mu with E[L(mu + tau Z + u)] = rate over items (tau = hypot(item_sd, arm_item_sd)) and the
    arm's seeds, u drawn as `run_effects` draws it (every effect is a difference of expected pass
    rates, whatever the run shape)."""
    if not _skewed(shape, k, run_sd):
        return intercept(rate, math.sqrt(item_sd ** 2 + arm_item_sd ** 2 + run_sd ** 2))
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


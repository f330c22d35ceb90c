"""The control checks' criterion, "X beats Y by m": the mean pass-rate gap X - Y over items x seeds
is at least m, and the exact one-sided sign test on the items' net differences (summed over seeds,
so the test does not depend on how seeds are labelled) gives p < alpha. The negative control's check
(`beats(..., run_bound=True)`) also asks the run bound's low end above 0 (`paired_batch`): its sign
test alone ignores run spread and fired in 7-39 % of experiments where N truly equals B with run
spread (docs/statistics.md). The readout applies it (harness.readout.controls) and the design
analysis simulates it (harness.stats.power.control_oc), through the same functions."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom
from scipy.stats import t as student_t


def _sig(x):
    return None if x is None else float(f"{float(x):.10g}")


@dataclass(frozen=True)
class RunParts:
    """The run bound's parts for R comparisons (`run_parts`): arrays (R,)."""
    v_seed: np.ndarray  # the seeds' variance of the gap (pass-rate fraction^2)
    v_item: np.ndarray  # the items' part (pass-rate fraction^2)
    df: np.ndarray      # degrees of freedom of the seeds' part (0: no seed spread, the bound is uninformative)


@dataclass(frozen=True)
class PairedBatch:
    """The registered paired comparison on R experiments (`paired_batch`): arrays (R,)."""
    gap: np.ndarray             # mean hi - mean lo over items x seeds (pass-rate fraction)
    mean_hi: np.ndarray         # pass rates (fractions)
    mean_lo: np.ndarray
    hi_only: np.ndarray         # items whose net difference favours hi
    lo_only: np.ndarray         # items whose net difference favours lo
    sign_p_greater: np.ndarray  # exact one-sided sign test p-value, hi > lo
    sign_p_less: np.ndarray     # ... lo > hi
    n_items: int
    run: RunParts


@dataclass(frozen=True)
class Paired:
    """One paired comparison hi vs lo (`paired`), as a control row and the against-base table record it."""
    mean_hi: float          # pass rate of hi over items x seeds (fraction)
    mean_lo: float          # pass rate of lo (fraction)
    gap: float              # mean_hi - mean_lo (pass-rate fraction)
    n_items: int
    hi_only: int            # items whose net difference across seeds favours hi
    lo_only: int            # ... favours lo
    sign_p_greater: float   # exact one-sided sign test p-value, hi > lo
    sign_p_less: float      # ... lo > hi

    def to_dict(self) -> dict:
        return {"mean_hi": self.mean_hi, "mean_lo": self.mean_lo, "gap": self.gap, "n_items": self.n_items,
                "hi_only": self.hi_only, "lo_only": self.lo_only, "sign_p_greater": self.sign_p_greater,
                "sign_p_less": self.sign_p_less}


def paired_batch(hi: np.ndarray, lo: np.ndarray) -> PairedBatch:
    """The registered paired comparison on R experiments at once: hi (R, k_hi, n) and lo (R, k_lo, n)
    0/1 outcomes on the same items (seed counts may differ). Per item the net difference of the
    seed means; returns a PairedBatch of arrays (R,): gap (mean hi - mean lo over items x seeds), hi_only / lo_only
    (items whose net favours each side) and the exact one-sided sign-test p-values (as
    scipy.stats.binomtest on hi_only of hi_only + lo_only at 1/2; 1 where no item differs). The
    readout (`paired`, R = 1) and the design analysis (`harness.stats.power.control_oc`) both use it."""
    if hi.shape[-1] != lo.shape[-1]:
        raise ValueError(f"paired: {hi.shape[-1]} items vs {lo.shape[-1]} items")
    net = hi.mean(axis=1) - lo.mean(axis=1)                           # (R, n) per item, pass-rate units
    n_hi, n_lo = (net > 0).sum(-1), (net < 0).sum(-1)
    m = n_hi + n_lo
    safe = np.maximum(m, 1)
    p_greater = np.where(m > 0, binom.sf(n_hi - 1, safe, 0.5), 1.0)
    p_less = np.where(m > 0, binom.cdf(n_hi, safe, 0.5), 1.0)
    mean_hi, mean_lo = hi.mean(axis=(1, 2)), lo.mean(axis=(1, 2))
    return PairedBatch(gap=mean_hi - mean_lo, mean_hi=mean_hi, mean_lo=mean_lo, hi_only=n_hi, lo_only=n_lo,
                       sign_p_greater=np.minimum(p_greater, 1.0), sign_p_less=np.minimum(p_less, 1.0),
                       n_items=hi.shape[-1], run=run_parts(hi, lo))


def _arm_parts(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(variance of the arm's mean from its run spread (R,), its per-item within-seed variance (R, n),
    its seeds' degrees of freedom): y (R, k, n) 0/1. An arm of one seed (the frozen base, one model)
    is fixed: no run variance, nothing within."""
    R, k, n = y.shape
    if k < 2:
        return np.zeros(R), np.zeros((R, n)), 0
    m = y.mean(axis=1)
    return y.mean(axis=2).var(axis=-1, ddof=1) / k, (k / (k - 1)) * m * (1 - m) / k, k - 1


def run_parts(hi: np.ndarray, lo: np.ndarray) -> RunParts:
    """The run bound's parts for hi (R, k_hi, n) vs lo (R, k_lo, n), as harness.stats.contrasts.run_bound
    computes them, with seed counts that may differ: the seeds' variance of the gap (each arm's
    per-seed pass-rate variance / k), its degrees of freedom (the smaller arm's k - 1 of those with
    run spread; Hsu's) and the items' part (between-item variance of the per-item difference less
    its within-seed part, floored at 0, / n). Arrays (R,): v_seed, v_item, df (0 where neither arm shows
    seed spread: the bound is then uninformative)."""
    v_hi, w_hi, df_hi = _arm_parts(np.asarray(hi, dtype=np.float64))
    v_lo, w_lo, df_lo = _arm_parts(np.asarray(lo, dtype=np.float64))
    n = hi.shape[-1]
    d = np.asarray(hi, dtype=np.float64).mean(axis=1) - np.asarray(lo, dtype=np.float64).mean(axis=1)
    v_item = (np.maximum(d.var(axis=-1, ddof=1) - (w_hi + w_lo).mean(-1), 0.0) / n) if n > 1 else np.zeros(len(d))
    dfs = [x for x in (df_hi, df_lo) if x > 0]
    informative = (v_hi + v_lo) > 0
    return RunParts(v_seed=v_hi + v_lo, v_item=v_item, df=np.where(informative, float(min(dfs)) if dfs else 0.0, 0.0))


def run_half_width(v_seed, v_item, df, n_items: int, alpha: float) -> np.ndarray:
    """The run bound's one-sided (1 - alpha) half-width, each variance part at its own quantile:
    sqrt(t(1 - alpha, df)^2 x v_seed + t(1 - alpha, n - 1)^2 x v_item), v_seed the seeds' variance
    of the gap, df their degrees of freedom (Hsu's: one arm's seeds' k - 1), v_item the items' part
    (pass-rate units^2, arrays (R,)). The decision rule (harness.stats.contrasts.run_bound) and the
    negative control's check both use it. Where df is 0 (no seed spread) the value is meaningless:
    callers mark the bound uninformative."""
    df = np.asarray(df, dtype=np.float64)
    q_seed = student_t.ppf(1.0 - alpha, np.where(df > 0, df, 1.0))
    q_item = student_t.ppf(1.0 - alpha, n_items - 1) if n_items > 1 else 0.0
    return np.sqrt(q_seed ** 2 * np.asarray(v_seed) + q_item ** 2 * np.asarray(v_item))


def run_bound_low(gap, run: RunParts, alpha: float, n_items: int) -> np.ndarray:
    """The run bound's one-sided (1 - alpha) low end on the gap (R,) from its parts (`run_half_width`);
    -inf where uninformative."""
    df = np.asarray(run.df, dtype=np.float64)
    half = run_half_width(run.v_seed, run.v_item, df, n_items, alpha)
    return np.where(df > 0, np.asarray(gap) - half, -np.inf)


def paired(hi: np.ndarray, lo: np.ndarray) -> Paired:
    """hi vs lo on the same items ([seeds, items] each; seed counts may differ): mean gap, the
    items whose net difference across seeds favours each side, and one-sided sign-test p-values."""
    if hi.shape[1] != lo.shape[1]:
        raise ValueError(f"paired: {hi.shape[1]} items vs {lo.shape[1]} items")
    b = paired_batch(np.asarray(hi)[None], np.asarray(lo)[None])
    return Paired(mean_hi=_sig(b.mean_hi[0]), mean_lo=_sig(b.mean_lo[0]), gap=_sig(b.gap[0]), n_items=int(hi.shape[1]),
                  hi_only=int(b.hi_only[0]), lo_only=int(b.lo_only[0]), sign_p_greater=_sig(b.sign_p_greater[0]),
                  sign_p_less=_sig(b.sign_p_less[0]))


def run_bound_of(hi, lo, alpha: float) -> float | None:
    """The run bound's low end for one comparison ([seeds, items] each), or None where neither arm
    shows seed spread (no evidence either way)."""
    hi, lo = np.asarray(hi)[None], np.asarray(lo)[None]
    gap = hi.mean(axis=(1, 2)) - lo.mean(axis=(1, 2))
    low = float(run_bound_low(gap, run_parts(hi, lo), alpha, hi.shape[-1])[0])
    return _sig(low) if np.isfinite(low) else None


def beats(c, margin: float, alpha: float, run_bound: bool = False):
    """The registered criterion: gap >= margin and one-sided sign test p < alpha; with `run_bound`
    (the negative control's check) also the run bound's low end above 0. `c` is a PairedBatch (then
    the bound comes from its run parts and the result is a bool array (R,)) or one comparison with
    gap, sign_p_greater and, for `run_bound`, run_bound_low (None: uninformative, not above 0; a bool)."""
    won = (np.asarray(c.gap) >= margin - 1e-12) & (np.asarray(c.sign_p_greater) < alpha)
    if run_bound:
        if isinstance(c, PairedBatch):
            won = won & (run_bound_low(c.gap, c.run, alpha, int(c.n_items)) > 0)
        else:
            won = won & (c.run_bound_low is not None and c.run_bound_low > 0)
    return bool(won) if won.ndim == 0 else won

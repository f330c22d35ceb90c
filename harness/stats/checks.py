"""The control checks' criterion, "X beats Y by m": the mean pass-rate gap X - Y over items x seeds
is at least m, and the exact one-sided sign test on the items' net differences (summed over seeds,
so the test does not depend on how seeds are labelled) gives p < alpha. The readout applies it
(harness.readout.controls) and the design analysis simulates it (harness.stats.power.control_oc),
through the same functions."""
from __future__ import annotations

import numpy as np
from scipy.stats import binom


def _sig(x):
    return None if x is None else float(f"{float(x):.10g}")


def paired_batch(hi: np.ndarray, lo: np.ndarray) -> dict[str, np.ndarray]:
    """The registered paired comparison on R experiments at once: hi (R, k_hi, n) and lo (R, k_lo, n)
    0/1 outcomes on the same items (seed counts may differ). Per item the net difference of the
    seed means; returns arrays (R,): gap (mean hi - mean lo over items x seeds), hi_only / lo_only
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
    return {"gap": hi.mean(axis=(1, 2)) - lo.mean(axis=(1, 2)), "mean_hi": hi.mean(axis=(1, 2)),
            "mean_lo": lo.mean(axis=(1, 2)), "hi_only": n_hi, "lo_only": n_lo,
            "sign_p_greater": np.minimum(p_greater, 1.0), "sign_p_less": np.minimum(p_less, 1.0)}


def paired(hi: np.ndarray, lo: np.ndarray) -> dict:
    """hi vs lo on the same items ([seeds, items] each; seed counts may differ): mean gap, the
    items whose net difference across seeds favours each side, and one-sided sign-test p-values."""
    if hi.shape[1] != lo.shape[1]:
        raise ValueError(f"paired: {hi.shape[1]} items vs {lo.shape[1]} items")
    b = paired_batch(np.asarray(hi)[None], np.asarray(lo)[None])
    return {"mean_hi": _sig(b["mean_hi"][0]), "mean_lo": _sig(b["mean_lo"][0]), "gap": _sig(b["gap"][0]),
            "n_items": int(hi.shape[1]), "hi_only": int(b["hi_only"][0]), "lo_only": int(b["lo_only"][0]),
            "sign_p_greater": _sig(b["sign_p_greater"][0]), "sign_p_less": _sig(b["sign_p_less"][0])}


def beats(c: dict, margin: float, alpha: float):
    """The registered criterion: gap >= margin and one-sided sign test p < alpha. A bool for one
    comparison (`paired`), a bool array for a batch (`paired_batch`)."""
    won = (np.asarray(c["gap"]) >= margin - 1e-12) & (np.asarray(c["sign_p_greater"]) < alpha)
    return bool(won) if won.ndim == 0 else won

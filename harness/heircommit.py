"""HeirCommit: the round-level inheritance gate. Screen a frozen successor against the root on fresh
probes, recover what it forgot from archived verified solutions (EvoHeir), confirm with the
pre-registered paired test, then commit the successor or retain the root."""
from __future__ import annotations

from scipy.stats import binomtest

from harness.evaluation import greedy_pass
from harness.power import mde_paired


def paired_counts(successor: list[int], root: list[int]) -> dict:
    """Paired outcomes on the same n probes (0/1 each). Returns counts of the four cells."""
    if len(successor) != len(root):
        raise ValueError(f"paired_counts: {len(successor)} successor outcomes vs {len(root)} root outcomes")
    pairs = list(zip(successor, root))
    return {"n": len(pairs), "successor_pass": sum(successor), "root_pass": sum(root),
            "successor_only": sum(1 for s, r in pairs if s and not r),
            "root_only": sum(1 for s, r in pairs if r and not s)}


def confirm(counts: dict, rule: str, margin: int, alpha: float, power: float = 0.8) -> dict:
    """The registered confirm decision on paired counts.

    not_worse: commit iff successor_pass >= root_pass - margin.
    superior:  commit iff the one-sided exact sign test (successor > root) on discordant probes has p < alpha.
    Both report the sign-test p-value and the minimum detectable effect at this size and discordance."""
    s, r_ = counts["successor_only"], counts["root_only"]
    discordant = s + r_
    p = float(binomtest(s, discordant, 0.5, alternative="greater").pvalue) if discordant else 1.0
    if rule == "not_worse":
        commit = counts["successor_pass"] >= counts["root_pass"] - margin
    elif rule == "superior":
        commit = p < alpha
    else:
        raise ValueError(f"unknown confirm rule {rule!r}; expected 'not_worse' or 'superior'")
    p_disc = max(discordant / counts["n"], 1.0 / counts["n"])
    try:
        mde = round(float(mde_paired(counts["n"], p_disc, alpha, power, alternative="greater")), 10)
    except ValueError:  # too few probes or discordant pairs to detect any effect at this power
        mde = None
    return {**counts, "rule": rule, "margin": margin, "alpha": alpha, "sign_test_p": round(p, 10),
            "statistic": s - r_, "mde": mde, "decision": "commit" if commit else "retain"}


def forgotten(model, candidates: list, max_bytes: int, device) -> tuple[list, list]:
    """Split archived (task, solution) pairs by whether `model` still passes the task greedily.
    Returns (failed pairs, passed pairs)."""
    if not candidates:
        return [], []
    passed, _ = greedy_pass(model, [t for t, _ in candidates], max_bytes, device)
    return ([c for c, ok in zip(candidates, passed) if not ok], [c for c, ok in zip(candidates, passed) if ok])

"""The registered controls that test the instrument, and every arm against the base.

Applied by the readout to the final round's probe outcomes BEFORE the decision rule:

    positive control  (role positive_control, e.g. SFT on fresh probe-distribution tasks) must
                      beat every entry of its `check.must_beat` (the base and A) by `check.margin`
    negative control  (role negative_control, e.g. B with shuffled advantages) must not beat any
                      entry of its `check.must_not_beat` (B) by `check.margin`

"X beats Y by m" means both: the mean pass-rate gap X - Y over items x seeds is at least m, and
the exact one-sided sign test on the items' net differences (summed over seeds, so the test does
not depend on how seeds are labelled) gives p < alpha (decision.yaml's alpha).

If a registered positive control fails, the verdict is `instrument_insensitive`: the registered
contrasts cannot be interpreted, whatever the decision rule says (its outcome is still reported).
A failed negative control is reported before the decision as a warning; it does not change the
outcome. Pure functions of plain data: no torch, no files.
"""
from __future__ import annotations

import numpy as np

from harness.spec.kinds import BASE, arms_with_role
from harness.stats.checks import _sig, beats, paired, paired_batch  # noqa: F401  (paired_batch: what control checks apply)

INSENSITIVE = "instrument_insensitive"
INSENSITIVE_CLAUSE = ("The positive control did not beat {failed} by the registered margin: the instrument did not "
                      "show an improvement it should see, so the registered contrasts cannot be interpreted "
                      "(a pre-registered outcome; the decision rule's outcome, {rule}, is reported but not read).")


def outcome_matrix(bits_by_seed: dict) -> np.ndarray:
    """'0'/'1' strings per seed -> int array [seeds (sorted), items]."""
    return np.array([[int(c) for c in bits_by_seed[s]] for s in sorted(bits_by_seed, key=int)], dtype=int)


def against_base(finals: dict, bases: dict, alpha: float) -> dict:
    """Every arm's final pass rate against the base, paired by item (its runs' own base_eval).
    `finals[arm][seed]` and `bases[arm][seed]` are '0'/'1' strings."""
    out = {}
    for arm in sorted(finals):
        c = paired(outcome_matrix(finals[arm]), outcome_matrix(bases[arm]))
        if c["sign_p_greater"] < alpha and c["gap"] > 0:
            reading = "above the base"
        elif c["sign_p_less"] < alpha and c["gap"] < 0:
            reading = "below the base (damage)"
        else:
            reading = "not distinguishable from the base"
        out[arm] = {**c, "reading": reading}
    return out


def _versus(arm: str, other: str, finals: dict, bases: dict) -> dict:
    lo = outcome_matrix(bases[arm]) if other == BASE else outcome_matrix(finals[other])
    return paired(outcome_matrix(finals[arm]), lo)


def control_checks(protocol, finals: dict, bases: dict, alpha: float) -> dict:
    """The registered control checks. Returns {"positive": [...], "negative": [...],
    "positive_ok": bool or None (None: no positive control registered), "negative_ok": ...}."""
    out = {}
    for role, key, want in (("positive_control", "must_beat", True), ("negative_control", "must_not_beat", False)):
        rows = []
        for arm in arms_with_role(protocol, role):
            check = protocol.arms[arm].check
            for other in getattr(check, key):
                c = _versus(arm, other, finals, bases)
                won = beats(c, check.margin, alpha)
                rows.append({"arm": arm, "versus": other, "margin": _sig(check.margin), "alpha": _sig(alpha),
                             **c, "beats": won, "ok": won is want})
        name = role.split("_")[0]
        out[name] = rows
        out[f"{name}_ok"] = all(r["ok"] for r in rows) if rows else None
    return out


def final_verdict(rule: dict, checks: dict) -> dict:
    """The readout's verdict: the decision rule's (harness.stats.contrasts.decide) unless a registered
    positive control failed, in which case `instrument_insensitive`."""
    base = {"rule_outcome": rule["outcome"], "rule_clause": rule["clause"]}
    warnings = [f"negative control {r['arm']} beat {r['versus']} ({100 * r['gap']:+.1f} pts, sign p "
                f"{r['sign_p_greater']:.3g}): {r['versus']}'s gain is not shown to come from its learning signal"
                for r in checks["negative"] if not r["ok"]]
    if checks["positive_ok"] is False:
        failed = " and ".join(f"{r['versus']} ({r['arm']} {100 * r['gap']:+.1f} pts, sign p {r['sign_p_greater']:.3g})"
                              for r in checks["positive"] if not r["ok"])
        return {"outcome": INSENSITIVE, "clause": INSENSITIVE_CLAUSE.format(failed=failed, rule=rule["outcome"]),
                "decided_by": "positive control", "warnings": warnings, **base}
    return {"outcome": rule["outcome"], "clause": rule["clause"], "decided_by": "decision rule",
            "warnings": warnings, **base}

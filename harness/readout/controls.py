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
INSENSITIVE_CLAUSE = ("The instrument did not show an improvement it should see, so the registered contrasts "
                      "cannot be interpreted")
CRITERIA_WORDS = {  # harness.stats.contrasts criteria -> what each check is, in the words of the report
    "sign_p_below_alpha": "one-sided sign test p < alpha",
    "ci_low_above_zero": "interval's low end above 0",
    "beyond_seed_spread": "gap beyond the seed spread",
    "run_bound_low_above_zero": "run bound's low end above 0",
    "ci_high_below_sesoi": "interval's high end below the sesoi",
    "run_bound_high_below_sesoi": "run bound's high end below the sesoi",
}


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


def _pts(x: float) -> str:
    return f"{100 * x:+.1f} pts"


def control_reason(r: dict) -> str:
    """Which half of "X beats Y by m" decided a control row, with its numbers: the margin (gap >= m)
    and the one-sided sign test (p < alpha). `r` is a control_checks row."""
    margin_ok = r["gap"] >= r["margin"] - 1e-12
    sign_ok = r["sign_p_greater"] < r["alpha"]
    gap = f"gap {_pts(r['gap'])} {'>=' if margin_ok else '<'} margin {_pts(r['margin'])}"
    sign = (f"one-sided sign test p {r['sign_p_greater']:.3g} {'<' if sign_ok else '>='} alpha {r['alpha']:g} "
            f"({r['hi_only']} items for, {r['lo_only']} against, of {r['n_items']})")
    if margin_ok and sign_ok:
        return f"the margin was met ({gap}) and the sign test passed ({sign})"
    if margin_ok:
        return f"the margin was met ({gap}) but the sign test failed ({sign})"
    if sign_ok:
        return f"the margin was not met ({gap}) although the sign test passed ({sign})"
    return f"the margin was not met ({gap}) and the sign test failed ({sign})"


def contrast_reason(key: str, c: dict) -> str:
    """One contrast's label with the criteria that held and failed, and its numbers (a stats contrast dict)."""
    held = [CRITERIA_WORDS.get(k, k) for k, ok in sorted(c["criteria"].items()) if ok]
    failed = [CRITERIA_WORDS.get(k, k) for k, ok in sorted(c["criteria"].items()) if not ok]
    return (f"{key} is {c['label']} (gap {_pts(c['gap'])}, interval [{_pts(c['ci_low'])}, {_pts(c['ci_high'])}], "
            f"sign test p {c['sign_p']:.3g}; held: {', '.join(held) or 'none'}; failed: {', '.join(failed) or 'none'})")


def _rule_reason(rule: dict, contrasts: dict) -> str:
    """The decision rule's clause, then the numbers of the contrasts it read (B-A, and C-B once B-A is supported)."""
    keys = ["B-A"] if rule["contrasts"]["B-A"]["label"] != "supported" else ["B-A", "C-B"]
    return rule["clause"] + " " + "; ".join(contrast_reason(k, contrasts[k]) for k in keys if k in contrasts) + "."


def final_verdict(rule: dict, checks: dict, contrasts: dict | None = None) -> dict:
    """The readout's verdict: the decision rule's (harness.stats.contrasts.decide) unless a registered
    positive control failed, in which case `instrument_insensitive`.

    `contrasts` are the analysis' contrast dicts (their numbers go into the reason). Returns
    outcome, decided_by, clause, reason (the check that decided it, with its numbers), sentence
    (the one verdict sentence the report and the command's log both print), rule_alone (what the
    decision rule alone would have said, or None when the rule decided), warnings, rule_outcome,
    rule_clause."""
    base = {"rule_outcome": rule["outcome"], "rule_clause": rule["clause"]}
    warnings = [f"negative control {r['arm']} beat {r['versus']}: {control_reason(r)}; {r['versus']}'s gain is not "
                f"shown to come from its learning signal" for r in checks["negative"] if not r["ok"]]
    rule_reason = _rule_reason(rule, contrasts or {})
    if checks["positive_ok"] is False:
        failed = [r for r in checks["positive"] if not r["ok"]]
        reason = "; ".join(f"{r['arm']} did not beat {r['versus']}: {control_reason(r)}" for r in failed)
        sentence = f"Verdict: {INSENSITIVE}, decided by the positive control check. {reason}. {INSENSITIVE_CLAUSE}."
        return {"outcome": INSENSITIVE, "clause": INSENSITIVE_CLAUSE, "decided_by": "positive control",
                "reason": reason, "sentence": sentence,
                "rule_alone": f"What the decision rule alone would have said (not read, the control overrides it): "
                              f"{rule['outcome']}. {rule_reason}",
                "warnings": warnings, **base}
    return {"outcome": rule["outcome"], "clause": rule["clause"], "decided_by": "decision rule",
            "reason": rule_reason, "sentence": f"Verdict: {rule['outcome']}, decided by the decision rule. {rule_reason}",
            "rule_alone": None, "warnings": warnings, **base}

"""The registered controls that test the instrument, and every arm against the base.

Applied by the readout to the final round's probe outcomes BEFORE the decision rule:

    positive control  (role positive_control, e.g. SFT on fresh probe-distribution tasks) must
                      beat every entry of its `check.must_beat` (the base and A) by `check.margin`
    negative control  (role negative_control, e.g. B with shuffled advantages) must not beat any
                      entry of its `check.must_not_beat` (B) by `check.margin`

"X beats Y by m" means both: the mean pass-rate gap X - Y over items x seeds is at least m, and
the exact one-sided sign test on the items' net differences (summed over seeds, so the test does
not depend on how seeds are labelled) gives p < alpha (decision.yaml's alpha). The negative
control's check also asks the run bound's low end (harness.stats.checks.run_bound_of) above 0: a
false alarm there decides the verdict, and the sign test alone does not carry run spread.

What a failed check does to the verdict (`final_verdict`), in this order; the first failed check
that decides sets the outcome, and the decision rule's own outcome is still reported, labelled as
what the rule alone would have said:

    infrastructure balance  an arm's rate of infrastructure failures differs from another's by more
                            than gates.yaml's max_rate_gap -> `infrastructure_imbalanced`
    positive control        fails its check -> `instrument_insensitive`
    negative control        beats an arm it must not beat -> `negative_control_failed`

decision.yaml's `infrastructure_override` / `negative_control_override` (a stated reason) instead
register a warning for that check: the rule's verdict stands, and the failure is stated beside it
with the reason. Every failed check that does not decide is a warning. Pure functions of the
outcomes, returning typed records (`to_dict`: what verdict.json holds): no torch, no files.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import ttest_1samp

from harness.readout.verdict import VerdictReasons
from harness.spec.kinds import BASE, arms_with_role
from harness.stats.checks import Paired, _sig, beats, paired, paired_batch, run_bound_of  # noqa: F401  (paired_batch: what control checks apply)
from harness.stats.results import ContrastResult, RuleDecision
from harness.stats.units import pts

INSENSITIVE = "instrument_insensitive"
INSENSITIVE_CLAUSE = ("The instrument did not show an improvement it should see, so the registered contrasts "
                      "cannot be interpreted")
NEGATIVE_FAILED = "negative_control_failed"
NEGATIVE_CLAUSE = ("The negative control beat an arm it must not beat: that arm's gain is not shown to come from its "
                   "learning signal (or the instrument finds gaps between arms that should not differ), so the "
                   "registered contrasts that read it are not interpreted")
IMBALANCED = "infrastructure_imbalanced"
IMBALANCED_CLAUSE = ("The arms' verdicts failed for infrastructure at different rates, so the arms were not scored "
                     "or trained on equal terms and the registered contrasts cannot be interpreted")
CHECK_OUTCOMES = {  # each check that can decide the verdict, in the order they decide: (outcome, its clause)
    "infrastructure balance": (IMBALANCED, IMBALANCED_CLAUSE),
    "positive control": (INSENSITIVE, INSENSITIVE_CLAUSE),
    "negative control": (NEGATIVE_FAILED, NEGATIVE_CLAUSE),
}
OVERRIDE_KEYS = {"infrastructure balance": "infrastructure_override", "negative control": "negative_control_override"}
CRITERIA_WORDS = {  # harness.stats.contrasts criteria -> what each check is, in the words of the report
    "sign_p_below_alpha": "one-sided sign test p < alpha",
    "ci_low_above_zero": "interval's low end above 0",
    "beyond_seed_spread": "gap beyond the seed spread",
    "run_bound_low_above_zero": "run bound's low end above 0",
    "ci_high_below_sesoi": "interval's high end below the sesoi",
    "run_bound_high_below_sesoi": "run bound's high end below the sesoi",
}


@dataclass(frozen=True)
class ControlCheck:
    """One registered control check, "arm beats versus by margin", on the final round's outcomes."""
    arm: str
    versus: str             # the arm it is compared with, or the base
    margin: float           # the registered margin on the gap (pass-rate fraction)
    alpha: float            # the sign test's size
    paired: Paired          # the comparison: gap, items for and against, sign test p-values
    beats: bool             # whether arm beats versus by the margin (harness.stats.checks.beats)
    ok: bool                # whether the check passed: beats for a positive control, not beats for a negative
    with_run_bound: bool = False        # the negative control's check: it carries the run bound
    run_bound_low: float | None = None  # then the run bound's low end (fraction; None: no seed spread)

    @property
    def gap(self) -> float:
        return self.paired.gap

    @property
    def sign_p_greater(self) -> float:
        return self.paired.sign_p_greater

    def to_dict(self) -> dict:
        bound = {"run_bound_low": self.run_bound_low} if self.with_run_bound else {}
        return {"arm": self.arm, "versus": self.versus, "margin": self.margin, "alpha": self.alpha,
                **self.paired.to_dict(), **bound, "beats": self.beats, "ok": self.ok}


@dataclass(frozen=True)
class ControlChecks:
    """The control checks, before the decision; *_ok is None when no such control is registered."""
    positive: list[ControlCheck]
    positive_ok: bool | None
    negative: list[ControlCheck]
    negative_ok: bool | None

    def to_dict(self) -> dict:
        return {"positive": [r.to_dict() for r in self.positive], "positive_ok": self.positive_ok,
                "negative": [r.to_dict() for r in self.negative], "negative_ok": self.negative_ok}


@dataclass(frozen=True)
class AgainstBaseRow:
    """One arm's final pass rate against the base, paired by probe item. The reading rests on p_above and
    p_below (`mean_test`: one-sided tests of the mean item gap, so their direction is the gap's); the
    paired sign test's counts and p-values are kept as recorded but do not read it (see against_base)."""
    paired: Paired
    p_above: float   # one-sided p, the arm's pass rate above the base's
    p_below: float   # ... below
    reading: str  # "above the base", "below the base (damage)" or "not distinguishable from the base"

    def to_dict(self) -> dict:
        return {**self.paired.to_dict(), "p_above": self.p_above, "p_below": self.p_below, "reading": self.reading}


@dataclass(frozen=True)
class FailedCheck:
    """A check that failed (`failed_checks`)."""
    check: str             # "infrastructure balance", "positive control" or "negative control"
    outcome: str           # the registered outcome it makes
    clause: str            # that outcome's clause
    reason: str            # why it failed, with its numbers
    override: str | None   # the registered reason to let the rule's verdict stand (None: the outcome decides)

    def to_dict(self) -> dict:
        return {"check": self.check, "outcome": self.outcome, "clause": self.clause, "reason": self.reason,
                "override": self.override}


def outcome_matrix(bits_by_seed: dict) -> np.ndarray:
    """'0'/'1' strings per seed -> int array [seeds (sorted), items]."""
    return np.array([[int(c) for c in bits_by_seed[s]] for s in sorted(bits_by_seed, key=int)], dtype=int)


def mean_test(hi: np.ndarray, lo: np.ndarray) -> tuple[float, float]:
    """(p above, p below): one-sided one-sample t-tests (scipy) that the mean over items of each item's
    gap (hi's mean over its seeds less lo's; hi, lo [seeds, items] 0/1) is above / below 0. Their mean
    is the pass-rate gap itself, so a p below alpha points the way the gap does. Items without spread in
    their gaps: p 1 both ways when every gap is 0, else 0 the way they all point and 1 the other."""
    net = hi.mean(axis=0) - lo.mean(axis=0)
    if np.ptp(net) == 0:
        return (0.0 if net[0] > 0 else 1.0), (0.0 if net[0] < 0 else 1.0)
    return (_sig(ttest_1samp(net, 0.0, alternative="greater").pvalue),
            _sig(ttest_1samp(net, 0.0, alternative="less").pvalue))


def against_base(finals: dict, bases: dict, alpha: float) -> dict[str, AgainstBaseRow]:
    """Every arm's final pass rate against the base, paired by item (its runs' own base_eval), read by
    `mean_test`. Not by the paired sign test: against the base's one 0/1 outcome per item, an item the
    base fails counts as "above" as soon as one of the arm's seeds passes it, so with many seeds and a
    base below 50 % the items "above" outnumber those "below" while the pass rate falls (an arm 3 pts
    below the base read p 1e-8 "above"; one 6 pts below, nothing).
    `finals[arm][seed]` and `bases[arm][seed]` are '0'/'1' strings."""
    out = {}
    for arm in sorted(finals):
        hi, lo = outcome_matrix(finals[arm]), outcome_matrix(bases[arm])
        c = paired(hi, lo)
        p_above, p_below = mean_test(hi, lo)
        if p_above < alpha and c.gap > 0:
            reading = "above the base"
        elif p_below < alpha and c.gap < 0:
            reading = "below the base (damage)"
        else:
            reading = "not distinguishable from the base"
        out[arm] = AgainstBaseRow(c, p_above, p_below, reading)
    return out


def _versus(arm: str, other: str, finals: dict, bases: dict) -> tuple[Paired, np.ndarray, np.ndarray]:
    lo = outcome_matrix(bases[arm]) if other == BASE else outcome_matrix(finals[other])
    hi = outcome_matrix(finals[arm])
    return paired(hi, lo), hi, lo


def _role_checks(protocol, role: str, finals: dict, bases: dict, alpha: float) -> list[ControlCheck]:
    """The rows of one control role: the positive control must beat each of `check.must_beat`, the
    negative control must not beat any of `check.must_not_beat` (its check carries the run bound)."""
    want = role == "positive_control"
    rows = []
    for arm in arms_with_role(protocol, role):
        check = protocol.arms[arm].check
        for other in (check.must_beat if want else check.must_not_beat):
            c, hi, lo = _versus(arm, other, finals, bases)
            row = ControlCheck(arm=arm, versus=other, margin=_sig(check.margin), alpha=_sig(alpha), paired=c,
                               beats=False, ok=False)
            if not want:
                row = replace(row, with_run_bound=True, run_bound_low=run_bound_of(hi, lo, alpha))
            won = beats(row, check.margin, alpha, run_bound=not want)
            rows.append(replace(row, beats=won, ok=won is want))
    return rows


def control_checks(protocol, finals: dict, bases: dict, alpha: float) -> ControlChecks:
    """The registered control checks; *_ok None where no such control is registered."""
    pos = _role_checks(protocol, "positive_control", finals, bases, alpha)
    neg = _role_checks(protocol, "negative_control", finals, bases, alpha)
    return ControlChecks(positive=pos, positive_ok=all(r.ok for r in pos) if pos else None,
                         negative=neg, negative_ok=all(r.ok for r in neg) if neg else None)


def control_reason(r: ControlCheck) -> str:
    """Which half of "X beats Y by m" decided a control row, with its numbers: the margin (gap >= m)
    and the one-sided sign test (p < alpha)."""
    c = r.paired
    margin_ok = c.gap >= r.margin - 1e-12
    sign_ok = c.sign_p_greater < r.alpha
    gap = f"gap {pts(c.gap)} {'>=' if margin_ok else '<'} margin {pts(r.margin)}"
    sign = (f"one-sided sign test p {c.sign_p_greater:.3g} {'<' if sign_ok else '>='} alpha {r.alpha:g} "
            f"({c.hi_only} items for, {c.lo_only} against, of {c.n_items})")
    if r.with_run_bound:  # the negative control's check: the run bound too
        low = r.run_bound_low
        bound = ("the run bound is unbounded (no seed spread in either arm)" if low is None else
                 f"the run bound's low end {pts(low)} is {'above' if low > 0 else 'not above'} 0")
        return (f"the margin was {'met' if margin_ok else 'not met'} ({gap}), the sign test "
                f"{'passed' if sign_ok else 'failed'} ({sign}) and {bound}")
    if margin_ok and sign_ok:
        return f"the margin was met ({gap}) and the sign test passed ({sign})"
    if margin_ok:
        return f"the margin was met ({gap}) but the sign test failed ({sign})"
    if sign_ok:
        return f"the margin was not met ({gap}) although the sign test passed ({sign})"
    return f"the margin was not met ({gap}) and the sign test failed ({sign})"


def contrast_reason(key: str, c: ContrastResult) -> str:
    """One contrast's label with the criteria that held and failed, and its numbers."""
    held = [CRITERIA_WORDS.get(k, k) for k, ok in sorted(c.criteria.items()) if ok]
    failed = [CRITERIA_WORDS.get(k, k) for k, ok in sorted(c.criteria.items()) if not ok]
    return (f"{key} is {c.label} (gap {pts(c.gap)}, interval [{pts(c.ci_low)}, {pts(c.ci_high)}], "
            f"sign test p {c.sign_p:.3g}; held: {', '.join(held) or 'none'}; failed: {', '.join(failed) or 'none'})")


def _rule_reason(rule: RuleDecision, contrasts: dict[str, ContrastResult]) -> str:
    """The decision rule's clause, then the numbers of the contrasts it read (B-A, and C-B once B-A is supported)."""
    keys = ["B-A"] if rule.contrasts["B-A"].label != "supported" else ["B-A", "C-B"]
    return rule.clause + " " + "; ".join(contrast_reason(k, contrasts[k]) for k in keys if k in contrasts) + "."


def _balance_reason(reasons: VerdictReasons | dict) -> str | None:
    """Why the infrastructure balance check failed, per table it failed on (probe verdicts, solver
    rollouts), with each arm's rate and count; None when it held. `reasons` is the analyzer's
    verdict_reasons (its per-arm tables and the balance)."""
    reasons = VerdictReasons.from_dict(reasons, "verdict_reasons")
    parts = []
    for table, words in (("probes", "probe"), ("rollouts", "rollout")):
        b = reasons.balance[table]
        if not b.flagged:
            continue
        rows = [getattr(reasons, table)[arm] for arm in b.arms]
        rates = [f"{arm}'s at {100 * r.infrastructure:.1f}% ({round(r.infrastructure * r.n)} of {r.n})"
                 for arm, r in zip(b.arms, rows)]
        parts.append(f"{words} verdicts failed for infrastructure ({', '.join(reasons.infrastructure_reasons)}) at "
                     f"unequal rates: {rates[0]}, {rates[1]}, a gap of {pts(b.gap)} > the registered maximum "
                     f"{pts(b.max_rate_gap)}")
    return "; ".join(parts) or None


def failed_checks(checks: ControlChecks, reasons: VerdictReasons | dict | None, overrides: dict) -> list[FailedCheck]:
    """Every check that failed, in the order they decide (CHECK_OUTCOMES), with the registered outcome,
    its clause, the reason (with its numbers) and the override (the registered reason to let the rule's
    verdict stand instead, or None: the outcome decides). `checks` is control_checks', `reasons` the
    analyzer's verdict_reasons (None: no balance check), `overrides` decision.yaml's
    {"infrastructure_override", "negative_control_override"}."""
    why = {"infrastructure balance": _balance_reason(reasons) if reasons else None}
    if checks.positive_ok is False:
        why["positive control"] = "; ".join(f"{r.arm} did not beat {r.versus}: {control_reason(r)}"
                                            for r in checks.positive if not r.ok)
    if checks.negative_ok is False:
        why["negative control"] = "; ".join(f"{r.arm} beat {r.versus}: {control_reason(r)}"
                                            for r in checks.negative if not r.ok)
    return [FailedCheck(check=name, outcome=outcome, clause=clause, reason=why[name],
                        override=overrides[OVERRIDE_KEYS[name]] if name in OVERRIDE_KEYS else None)
            for name, (outcome, clause) in CHECK_OUTCOMES.items() if why.get(name)]


def _positive_sentence(checks: ControlChecks, decider: FailedCheck) -> str:
    """What the positive control check found, row by row in its registered order (the base, then A), each
    with its margin and its sign test, then what that means: when every failed row failed its margin
    only, exactly that (the gain was seen, smaller than registered), else the outcome's clause."""
    rows = checks.positive
    found = "; ".join(f"{r.arm} {'beat' if r.ok else 'did not beat'} {r.versus}: {control_reason(r)}" for r in rows)
    failed = [r for r in rows if not r.ok]
    if failed and all(r.paired.sign_p_greater < r.alpha and r.gap > 0 for r in failed):
        over = " and ".join(r.versus for r in failed)
        arm = failed[0].arm
        return (f"{found[:1].upper()}{found[1:]}. Only the margin failed: {arm}'s gain over {over} passed its sign "
                f"test but is smaller than the registered margin {pts(failed[0].margin)}, so, as registered, the "
                f"instrument has not shown an improvement of the size it should see, and the registered contrasts "
                f"are not interpreted.")
    return f"{found[:1].upper()}{found[1:]}. {decider.clause}."


def _warning(f: FailedCheck, decider: FailedCheck | None) -> str:
    """A failed check that did not decide, as one warning line."""
    if f.override is not None:
        return (f"the {f.check} check failed: {f.reason}. It is registered to warn, not to decide (decision.yaml "
                f"{OVERRIDE_KEYS[f.check]}: {f.override}); without that it would make the verdict `{f.outcome}`")
    return f"the {f.check} check failed too: {f.reason} (on its own: `{f.outcome}`; the {decider.check} check decided)"


@dataclass(frozen=True)
class FinalVerdict:
    """The readout's one verdict (`final_verdict`); verdict.json's "verdict" (read back as
    harness.readout.verdict.Outcome)."""
    outcome: str
    clause: str
    decided_by: str              # "decision rule" or the check that decided
    reason: str                  # why, with its numbers
    sentence: str                # the one verdict sentence the report and the command's log print
    rule_alone: str | None       # what the rule alone would have said (None: the rule decided)
    rule_outcome: str
    rule_clause: str
    failed_checks: list[FailedCheck]
    overrides: dict[str, str | None]
    warnings: list[str]          # one per failed check that did not decide

    def to_dict(self) -> dict:
        return {"outcome": self.outcome, "clause": self.clause, "decided_by": self.decided_by, "reason": self.reason,
                "sentence": self.sentence, "rule_alone": self.rule_alone, "rule_outcome": self.rule_outcome,
                "rule_clause": self.rule_clause, "failed_checks": [f.to_dict() for f in self.failed_checks],
                "overrides": dict(self.overrides), "warnings": list(self.warnings)}


def final_verdict(rule: RuleDecision, checks: ControlChecks, contrasts: dict[str, ContrastResult] | None = None,
                  reasons: VerdictReasons | dict | None = None, overrides: dict | None = None) -> FinalVerdict:
    """The readout's verdict: the decision rule's (harness.stats.contrasts.decide) unless a registered
    check failed whose failure decides (see the module docstring): then that check's outcome.

    `contrasts` are the analysis' contrasts (their numbers go into the reason); `reasons` the
    analyzer's verdict_reasons (its infrastructure balance check); `overrides` decision.yaml's
    {"infrastructure_override", "negative_control_override"} (None: both null)."""
    overrides = {k: (overrides or {}).get(k) for k in OVERRIDE_KEYS.values()}
    failed = failed_checks(checks, reasons, overrides)
    decider = next((f for f in failed if f.override is None), None)
    rest = {"rule_outcome": rule.outcome, "rule_clause": rule.clause, "failed_checks": failed,
            "overrides": overrides, "warnings": [_warning(f, decider) for f in failed if f is not decider]}
    rule_reason = _rule_reason(rule, contrasts or {})
    if decider is not None:
        what = "control" if decider.check.endswith("control") else f"{decider.check} check"
        found = (_positive_sentence(checks, decider) if decider.check == "positive control" else
                 f"{decider.reason[:1].upper()}{decider.reason[1:]}. {decider.clause}.")
        return FinalVerdict(
            outcome=decider.outcome, clause=decider.clause, decided_by=decider.check, reason=decider.reason,
            sentence=f"Verdict: {decider.outcome}, decided by the {decider.check} check. {found}",
            rule_alone=f"What the decision rule alone would have said (not read, the {what} overrides it): "
                       f"{rule.outcome}. {rule_reason}", **rest)
    return FinalVerdict(outcome=rule.outcome, clause=rule.clause, decided_by="decision rule", reason=rule_reason,
                        sentence=f"Verdict: {rule.outcome}, decided by the decision rule. {rule_reason}",
                        rule_alone=None, **rest)

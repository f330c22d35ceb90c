"""The verdict paragraph and what bears on it: the report's Verdict section (`headline`: the sentence,
what decided it, how far to trust each label at the observed variance components, what the design
could resolve), every warning that bears on the verdict (`verdict_warnings`), what a failed check
does to the verdict (`_consequence`) and the verifier reasons' section with its balance check."""
from __future__ import annotations

import re

from harness.readout import words
from harness.readout.controls import CHECK_OUTCOMES, OVERRIDE_KEYS
from harness.readout.report.blocks import _h3, _ok, _num, _p, _pct, _section, _tbl, _ul, _warn
from harness.readout.verdict import Contrast, Verdict, VerdictReasons, as_verdict
from harness.stats.design.records import DesignAnalysis
from harness.stats.design.summary import LEVEL_WARNING, label_reliability
from harness.stats.units import pts


PREREGISTRATION_LINK = "../frozen/PREREGISTRATION.md"  # from the readout dir to freeze's pre-registration
ITEMS_LINK = "items.html"  # the per-item view beside the report


def verdict_section(verdict: Verdict) -> dict:
    """The one verdict: the verdict paragraph of `headline` (the sentence, what the rule alone would
    have said when a control overrode it, the label(s) that decided it and how far to trust them,
    the other labels, what the design could resolve, every warning that bears on the verdict), then
    the links to the pre-registration and the per-item view."""
    h = headline(verdict)
    lead = f"Verdict: {verdict.verdict.outcome}"  # the sentence starts with it: bold, and not said twice
    blocks = [_p(" ".join([h["sentence"].replace(lead, f"**{lead}**", 1), *([h["chance"]] if h["chance"] else [])]))]
    if h["checks"]:
        blocks.append(_p(f"**Checks.** {h['checks']}"))
    if h["rule_alone"]:
        blocks.append(_p(h["rule_alone"]))
    if h["deciding"]:
        blocks.append(_p("**What decided it, and how far to trust it.** " + " ".join(h["deciding"])))
    if h["trust"]:
        blocks.append(_p(f"**{h['trust_heading']}.** " + " ".join(h["trust"])))
    if h["design"]:
        blocks.append(_p(f"**Design:** {h['design']}"))
    blocks += [_warn(w) for w in h["warnings"]]
    if h.get("base"):
        blocks.append(_p(f"**{h['base'].replace('Base: ', 'Base:** ', 1)}"))
    blocks.append({"kind": "link", "href": PREREGISTRATION_LINK,
                   "text": "The pre-registration this experiment was frozen with (frozen/PREREGISTRATION.md)"})
    blocks.append({"kind": "link", "href": ITEMS_LINK,
                   "text": "Every probe, item by item: prompt, expected output and each arm's final completion per "
                           "seed (items.html)"})
    return _section("verdict", "Verdict", blocks)


_WRONG = {"supported": "is truly 0", "ruled_out": "truly equals the sesoi", "reversed": "is truly 0"}
_RIGHT = {"supported": "truly equals the sesoi", "ruled_out": "is truly 0"}
_REQUIRES = {  # what each label asks of the numbers (harness.stats.contrasts: the labels)
    "supported": "the one-sided sign test p < alpha, the interval's and the run bound's low ends above 0, and the "
                 "gap beyond the seed spread",
    "ruled_out": "the interval's and the run bound's high ends below the sesoi ({sesoi})",
    "reversed": "the mirror tests: the sign test p < alpha the other way, the interval's and the run bound's high "
                "ends below 0, and the gap beyond the seed spread the other way",
    "not_supported": "none of supported, ruled_out or reversed to hold",
}


def headline(verdict: Verdict | dict) -> dict:
    """The verdict paragraph, shared by the report's Verdict section and the command's last lines:
        sentence    the verdict sentence (the check that decided it, with its numbers)
        rule_alone  what the decision rule alone would have said when a check overrode it, else None
        deciding    one line per label that decided the verdict (B-A; C-B too once B-A is supported; the
                    failed check's rows when a check decided, `_check_trust`): its gap, interval and run
                    bound in points, what the label requires of them, and how often the rule gives it when
                    it is wrong (its level) and when it is right (its power) at the observed components
        trust       the same line for each other decision contrast (every one when a check decided),
                    under `trust_heading` (the report) or each after `trust_prefix` (the command's lines)
        design      one line: P(keep_both | both contrasts at the sesoi), designed and observed, or None
        chance      when a control check decided: how often its check gives this result at its registered
                    effect (`chance_line`), or None
        checks      what the control checks the sentence does not state found (`checks_line`), or None
        warnings    one short line per distinct warning that bears on the verdict (`distinct_warnings`)
        warning_details  [(that line, every warning it stands for, in full)]: the Warnings section
    Every figure is read from verdict.json: the paragraph is a pure function of it."""
    verdict = as_verdict(verdict)
    v = verdict.verdict
    lines, level_warnings = _label_lines(verdict)
    keys = deciding_contrasts(verdict)
    by_check = v.by_check
    deciding = (_check_trust(verdict) if by_check else [lines[k] for k in keys]) + control_scale_lines(verdict)
    trust = [line for k, line in lines.items() if k not in keys]
    if by_check:
        heading, prefix = (f"The decision rule's labels (not read: the {v.decided_by} check decided), and how far "
                           "to trust them"), "Rule's label (not read)"
    else:
        heading, prefix = f"The other label{'s' if len(trust) > 1 else ''}, and how far to trust " \
                          f"{'them' if len(trust) > 1 else 'it'}", "Other label"
    distinct = distinct_warnings(verdict_warnings(verdict, level_warnings))
    return {"sentence": v.sentence, "rule_alone": v.rule_alone, "deciding": deciding, "trust": trust,
            "trust_heading": heading, "trust_prefix": prefix, "design": _resolves_line(verdict),
            "chance": chance_line(verdict), "checks": checks_line(verdict),
            "warnings": [short for short, _ in distinct], "warning_details": distinct, "base": words.base_words(verdict.registration)}


def chance_line(verdict: Verdict | dict) -> str | None:
    """How often the control check that decided the verdict gives this result where the registration
    says it should not: a positive control's check failing when the control is truly its registered
    effect above A, a negative control's firing when it truly equals the arm it must not beat; at the
    variance components observed here and as designed, where the design analysis simulated it. None
    when the rule decided or no simulation covers the check."""
    verdict = as_verdict(verdict)
    role = {"positive control": "positive", "negative control": "negative"}.get(verdict.verdict.decided_by)
    if role is None or not verdict.design:
        return None
    found: dict = {}
    for name in ("observed", "designed"):
        d = getattr(verdict.design, name)
        for c in ([] if d.failed else d.controls or []):
            if c.role == role:
                found.setdefault(c.arm, {})[name] = c
    parts = []
    for arm, sims in found.items():
        p = {k: (1 - c.p_pass_at_effect if role == "positive" else c.p_fires_when_equal) for k, c in sims.items()}
        at = " and ".join(f"{v:.2f} {'at the variance components observed here' if k == 'observed' else 'as designed'}"
                          for k, v in p.items())
        c = next(iter(sims.values()))
        if role == "positive":
            parts.append(f"Were {arm} truly {pts(c.effect)} above A (its registered effect), its check would fail as "
                         f"it did here with P {at}.")
        else:
            parts.append(f"Were {arm} truly equal to {c.versus[0]}, its check would fire as it did here with P {at}.")
    return " ".join(parts) or None


def checks_line(verdict: Verdict | dict) -> str | None:
    """What the control checks found that the verdict sentence does not state: every control row when the
    rule decided, the other role's passed rows when a control check did (a failed one is a warning), each
    as "P beat A (gap +3.4 pts, margin +3.0 pts, sign test p 0.004)"; None when nothing is left to say."""
    verdict = as_verdict(verdict)
    decided = verdict.verdict.decided_by or "decision rule"
    groups = []
    for role, rows in (("positive", verdict.controls.positive), ("negative", verdict.controls.negative)):
        if decided == f"{role} control":
            continue
        won = (lambda r: r.ok) if role == "positive" else (lambda r: not r.ok)
        said = [f"{r.arm} {'beat' if won(r) else 'did not beat'} {r.versus} (gap {pts(r.gap)}, margin {pts(r.margin)}, "
                f"sign test p {_num(r.sign_p_greater, 3)})" for r in rows if r.ok or decided == "decision rule"]
        if said:
            groups.append(f"the {role} control: " + "; ".join(said))
    if not groups:
        return None
    text = "; ".join(groups)
    return text[:1].upper() + text[1:] + "."


_DESIGN = r"(?:the design [a-z ]+: )?"  # verdict_warnings' prefix of a design analysis' warning
_POWER = "the design is below its registered power"
# One topic per kind of warning that several lines may state (the registration's override and the designed and
# observed analyses below the power, a label's level at two sets of components): (pattern, the topic's short
# line, {0} and {1} the pattern's groups). A warning that matches none is its own topic.
_TOPICS = [
    (r"the base this experiment built", "the base this experiment built is not the one the registration was sized on"),
    (r"registered below its power criterion", _POWER),
    (_DESIGN + r"(?:underpowered:|at the pessimistic components|the positive control \(\+)", _POWER),
    (_DESIGN + r"no pilot", "no pilot: the variance components are assumed, not measured"),
    (_DESIGN + r"the fitted model cannot reproduce the (\w+) outcomes",
     "the fitted variance model does not reproduce the {0} outcomes"),
    (r"(B-A|C-B)'s label `(\w+)` holds its level poorly", "{0}'s label `{1}` holds its level poorly"),
    (_DESIGN + re.escape(LEVEL_WARNING) + r"(B-A|C-B) `(\w+)`", "{0}'s label `{1}` holds its level poorly"),
    (r"the (infrastructure balance|negative control|positive control) check failed", "the {0} check failed"),
    (r"(a registered budget equality failed|wall clock exceeded|the leakage check failed)", "{0}"),
]


def _topic(warning: str) -> str:
    """The short line of the topic a warning belongs to (`_TOPICS`); else its own first clause."""
    for pattern, short in _TOPICS:
        m = re.match(pattern, warning)
        if m:
            return short.format(*m.groups())
    own = re.sub("^" + _DESIGN, "", warning)
    return re.split(r"[:;(]", own, maxsplit=1)[0].strip().rstrip(".")


def distinct_warnings(warnings: list[str]) -> list[tuple[str, list[str]]]:
    """[(a short line, every warning of its topic in full)], one per distinct warning, in the order first
    met: lines that say the same thing (the registration's override and the designed and observed
    analyses below the power; a label's level at two sets of components) are one warning."""
    out: dict[str, list[str]] = {}
    for w in dict.fromkeys(warnings):
        out.setdefault(_topic(w), []).append(w)
    return [(short + (", registered so by a stated override" if short == _POWER and any(
             w.startswith("registered below its power criterion") for w in lines) else ""), lines)
            for short, lines in out.items()]


def warnings_section(verdict: Verdict | dict) -> dict | None:
    """Every warning that bears on the verdict, in full, under the short line the verdict gives it: one
    entry per distinct warning; None when there is none."""
    details = headline(verdict)["warning_details"]
    if not details:
        return None
    return _section("warnings", "Warnings", [_ul([f"**{_sentence(short)}** " + " ".join(_sentence(w) for w in lines)
                                                 for short, lines in details])])


def _sentence(text: str) -> str:
    """A warning line as a sentence: capitalised, ending in a full stop."""
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _label_lines(verdict: Verdict) -> tuple[dict[str, str], list[str]]:
    """({contrast: its line (`_contrast_trust`)}, the warnings of labels whose observed level exceeds alpha)."""
    lines, warnings = {}, []
    for key, c in verdict.analysis.contrasts.items():
        lines[key], w = _contrast_trust(verdict, key, c)
        warnings += w
    return lines, warnings


def control_scale_lines(verdict: Verdict | dict) -> list[str]:
    """What a `ruled_out` means when the known-good arm is weak here: one sentence per positive control
    whose observed gain over the base on the probes (its registered check's row against the base) is
    below the sesoi; [] when every one reaches it (or none is registered against the base)."""
    verdict = as_verdict(verdict)
    contrasts = verdict.analysis.contrasts
    if not contrasts:
        return []
    sesoi = next(iter(contrasts.values())).sesoi
    out = []
    for r in verdict.controls.positive:
        if r.versus == "base" and r.gap < sesoi:
            out.append(f"The positive control {r.arm} gained {pts(r.gap)} over the base on the probes, below the "
                       f"sesoi ({pts(sesoi)}): the known-good training moves the probe pass rate less than the effect the "
                       f"rule asks about, so a `ruled_out` here rules out an effect larger than the known-good arm "
                       f"produces here, not one the instrument has shown it could see.")
    return out


def deciding_contrasts(verdict: Verdict | dict) -> list[str]:
    """The decision contrasts whose labels decided the verdict: B-A alone unless it is supported, then
    C-B too (the intersection-union rule, harness.stats.contrasts.outcome_of); none when a control did."""
    verdict = as_verdict(verdict)
    if verdict.verdict.decided_by != "decision rule":
        return []
    contrasts = verdict.analysis.contrasts
    return ["B-A"] if contrasts["B-A"].label != "supported" else [k for k in ("B-A", "C-B") if k in contrasts]


def _observed(verdict: Verdict) -> DesignAnalysis | None:
    """The design analysis at the observed components (None without one)."""
    return verdict.design.observed if verdict.design else None


def _contrast_trust(verdict: Verdict, key: str, c: Contrast) -> tuple[str, list[str]]:
    """(one contrast's line, the warning when its label's observed level exceeds alpha)."""
    sesoi = pts(verdict.sesoi)
    label = c.label
    text = (f"{key} `{label}` (it requires {_REQUIRES[label].format(sesoi=sesoi)}): gap {pts(c.gap)}, interval "
            f"[{pts(c.ci_low)}, {pts(c.ci_high)}], run bound " + _run_bound(c))
    obs = _observed(verdict)
    rel = label_reliability(obs, key, label)
    if rel is not None:
        text += (f"; at the observed variance components the rule says `{label}` with P {rel.level:.3f} when the "
                 f"gap {_WRONG[label]} (nominal alpha {rel.alpha})")
        if rel.power is not None:
            text += f" and with P {rel.power:.3f} when it {_RIGHT[label]}"
    elif label == "not_supported":
        found = label_reliability(obs, key, "supported")
        if found is not None and found.power is not None:
            text += (f"; at the observed variance components the rule says `supported` with P {found.power:.3f} "
                     f"when the gap truly equals the sesoi, so a gap that large goes unseen with P "
                     f"{1 - found.power:.3f}")
    return text + ".", _level_warnings(obs, key, label)


def _level_warnings(obs: DesignAnalysis | dict | None, key: str, got: str) -> list[str]:
    """A warning for every label of contrast `key` (the one it got first) whose level at the observed
    variance components exceeds alpha by more than 3 MC s.e. (`label_reliability`): a label the
    rule cannot give at its level here is worth knowing about whichever label this run found."""
    out = []
    for label in sorted(("supported", "ruled_out", "reversed"), key=lambda x: x != got):
        rel = label_reliability(obs, key, label)
        if rel is not None and rel.above_alpha:
            out.append(f"{key}'s label `{label}` holds its level poorly here"
                       + ("" if label == got else f" (not the label it got, `{got}`)")
                       + f": at the observed variance components it arises with P {rel.level:.3f} (MC s.e. "
                       f"{rel.level_se:.3f}) when the gap {_WRONG[label]}, above alpha {rel.alpha}")
    return out


def _run_bound(c: Contrast) -> str:
    """'[+1.2 pts, +3.4 pts]', or why there is none (the seeds showed no run spread)."""
    if c.run_bound_low is None or c.run_bound_high is None:
        return "unbounded (the seeds show no run spread: no evidence either way)"
    return f"[{pts(c.run_bound_low)}, {pts(c.run_bound_high)}]"


def _check_trust(verdict: Verdict) -> list[str]:
    """The lines of the failed check that decided the verdict (harness.readout.controls.final_verdict's
    `decided_by`): one per failed control row, with how often the registered check gives that result at
    the observed components (a positive control: passes at its registered effect and at none; a
    negative control: fires when the arm truly equals the one it must not beat); for another check,
    its reason."""
    v = verdict.verdict
    role = {"positive control": "positive", "negative control": "negative"}.get(v.decided_by)
    if role is None:
        return [f"{v.decided_by} check: {v.reason}."]
    obs = verdict.design.observed if verdict.design else None
    sims = {c.arm: c for c in obs.controls or [] if c.role == role} if obs and not obs.failed else {}
    out = []
    for r in (verdict.controls.positive if role == "positive" else verdict.controls.negative):
        if r.ok:
            continue
        rule = (f"a gap of at least the margin {pts(r.margin)} and the one-sided sign test p < alpha "
                f"{r.alpha:g}" + ("" if role == "positive" else ", with the run bound's low end above 0"))
        text = (f"{role} control {r.arm} against {r.versus} ("
                + (f"it requires {rule}" if role == "positive" else f"it fails on {rule}")
                + f"): gap {pts(r.gap)}, sign test p {_num(r.sign_p_greater, 3)}")
        sim = sims.get(r.arm)
        if sim is not None and role == "positive":
            text += (f"; at the observed variance components its registered check passes with P "
                     f"{sim.p_pass_at_effect:.3f} when {r.arm} is truly {pts(sim.effect)} above A, and with P "
                     f"{sim.p_pass_at_0:.3f} when it is not above A at all")
        elif sim is not None:
            text += (f"; at the observed variance components its registered check fires with P "
                     f"{sim.p_fires_when_equal:.3f} when {r.arm} truly equals {sim.versus[0]} (nominal alpha "
                     f"{r.alpha:g})")
        out.append(text + ".")
    return out


def verdict_warnings(verdict: Verdict | dict, level_warnings: list[str] | None = None) -> list[str]:
    """Every warning that bears on the verdict, each once, in this order: a registration below its power
    (the stated override); a failed budget equality, wall clock or leakage check and the controls'
    warnings (`_warnings`); every label of every contrast whose observed level exceeds alpha
    (`level_warnings`, `_level_warnings`); the design analysis' warnings, as registered and at the
    observed components (those of the registered design that restate the override's shortfalls, and
    the observed design's label-level lines that `_level_warnings` restates, are left out)."""
    verdict = as_verdict(verdict)
    out = []
    reg = verdict.registration
    shortfalls = reg.shortfalls if reg else None
    if reg and reg.other_base:
        out.append(f"the base this experiment built ({(reg.base or {}).get('sha256', '')[:12]}) is not the base the "
                   f"registration was sized on ({(reg.sized_on_base or '')[:12]}): the protocol's own figures and the "
                   "override's reason are about that base, not this one")
    if shortfalls:
        named = reg.override_figures
        about = ("" if not reg.override else " excusing any shortfall on any base" if named == "any" else
                 f" naming its figures on base {(reg.override_base or '')[:12]}" if named else "")
        out.append(f"registered below its power criterion by a stated override{about} ({'; '.join(shortfalls)}); "
                   f"the reason given before any run: {reg.override}"
                   + (f"; on this base it does not excuse: {'; '.join(reg.unexcused)}" if reg.unexcused else ""))
    out += _warnings(verdict) + list(level_warnings or [])
    d = verdict.design
    for name, where in (("designed", "the design as registered"), ("observed", "the design at the observed components")):
        for w in (getattr(d, name).warnings or []) if d else []:
            if name == "designed" and shortfalls and w.startswith(_SHORTFALL_WARNINGS):
                continue
            if name == "observed" and w.startswith(_RESTATED_LEVELS):  # the labels' own lines say it
                continue
            out.append(f"{where}: {w}")
    return list(dict.fromkeys(out))


# harness.stats.design.summary.design_warnings' lines that registration_shortfalls also lists
_SHORTFALL_WARNINGS = ("underpowered:", "at the pessimistic components", "the positive control (")
# harness.stats.design.summary.level_warnings' contrast lines, restated for the observed design by `_level_warnings`
_RESTATED_LEVELS = tuple(f"{LEVEL_WARNING}{key} `" for key in ("B-A", "C-B"))


def trust_lines(verdict: Verdict | dict) -> tuple[list[str], list[str]]:
    """(one line per decision contrast, the deciding ones first: its label, gap, interval and run bound in
    points, and how often the rule gives that label when it is wrong and when it is right at the variance
    components this experiment showed; the warnings for labels whose observed level exceeds alpha)."""
    verdict = as_verdict(verdict)
    lines, warnings = _label_lines(verdict)
    keys = deciding_contrasts(verdict)
    return [lines[k] for k in keys] + [line for k, line in lines.items() if k not in keys], warnings


def _resolves_line(verdict: Verdict) -> str | None:
    """Which design ran and what it could resolve (P(keep_both | sesoi) designed and observed), one line."""
    if not verdict.design:
        return None
    des = verdict.design.designed
    s, sesoi = des.size, des.sesoi
    if des.rule_failed:
        return f"{s.n_items} probes x {s.n_seeds} seeds per arm: {des.rule.error}."
    parts = [f"{s.n_items} probes x {s.n_seeds} seeds per arm. P(keep_both) when both contrasts "
             f"truly equal the sesoi ({pts(sesoi)}): {des.keep_both_at_sesoi:.2f} as designed "
             f"({des.components.source} variance components)"]
    obs = verdict.design.observed
    if not obs.rule_failed:
        parts.append(f"{obs.keep_both_at_sesoi:.2f} at the variance components observed here")
    text = ", ".join(parts) + f"; registered power {des.power}."
    if des.keep_both_at_sesoi < des.power:
        text += " This design cannot resolve its own sesoi: read `not_resolved` as \"too small to tell\", not as no effect."
    return text


def _warnings(verdict: Verdict) -> list[str]:
    w = []
    budget, leak = verdict.checks.budget, verdict.checks.leakage
    if not budget.ok:
        w.append("a registered budget equality failed (see Compute ledger); the arms did not run on equal terms.")
    if budget.wall_clock_exceeded:
        w.append(f"wall clock exceeded the registered {budget.wall_clock_limit_s} s in "
                 f"{', '.join(budget.wall_clock_exceeded)} (recorded only; no run was cut).")
    if not leak.ok:
        w.append("the leakage check failed (see Leakage): probe tasks reached training; the probe comparison is "
                 "compromised.")
    return w + list(verdict.verdict.warnings)


def _consequence(verdict: Verdict, check: str) -> str:
    """What a failure of `check` ("negative control", "infrastructure balance") does to the verdict, as
    decision.yaml registers it (the verdict's `overrides`)."""
    key = OVERRIDE_KEYS[check]
    reason = (verdict.verdict.overrides or {}).get(key)
    if reason is None:
        return (f"the pre-registered outcome is `{CHECK_OUTCOMES[check][0]}` (the rule's own outcome is reported as "
                f"what it alone would have said)")
    return (f"the rule's verdict stands and the failure is a warning beside it, as registered (decision.yaml {key}: "
            f"{reason})")


def verdict_reasons_section(vr: VerdictReasons | dict | None, verdict: Verdict | None = None) -> dict | None:
    """Per arm, the rate of each verifier reason that occurs (probe verdicts, then solver rollouts),
    the infrastructure rate and retries, and the registered balance check. None for a verdict
    without the "verdict_reasons" section; without the `verdict` it belongs to, the paragraph points to
    decision.yaml's infrastructure_override instead of saying what it does."""
    if not vr:
        return None
    vr = VerdictReasons.from_dict(vr, "verdict_reasons")
    infra = ", ".join(f"`{x}`" for x in vr.infrastructure_reasons)
    blocks = [_p(f"Every verdict's reason, as a share of the arm's verdicts. Infrastructure failures ({infra}) are "
                 "retried once; the reason kept is the second run's. If the balance check fails on either table, "
                 + (f"{_consequence(verdict, 'infrastructure balance')}." if verdict is not None else
                    "decision.yaml's infrastructure_override says what it does to the verdict."))]
    for name, title in (("probes", "Probes (the base and every round, all seeds)"),
                        ("rollouts", "Solver rollouts (ledger)")):
        table = vr.probes if name == "probes" else vr.rollouts
        if not table:
            continue
        seen = [x for x in next(iter(table.values())).rates
                if any((row.rates[x] or 0) > 0 for row in table.values())]
        rows = [[arm, str(row.n)] + [_pct(row.rates[x]) for x in seen]
                + [_pct(row.infrastructure), str(row.retried), str(row.unrecorded)]
                for arm, row in sorted(table.items())]
        b = vr.balance[name]
        gap = "n/a (fewer than two arms with reasons)" if b.gap is None else \
            f"{pts(b.gap)} between {b.arms[0]} and {b.arms[1]}"
        blocks += [_h3(title),
                   _tbl(["arm", "n"] + [f"`{x}`" for x in seen] + ["infrastructure", "retried", "no reason recorded"], rows),
                   _ul([f"{_ok(not b.flagged)}: infrastructure-rate balance, largest gap {gap}, "
                        f"registered maximum {pts(b.max_rate_gap)}"])]
    return _section("verifier_reasons", "Verifier reasons per arm", blocks)

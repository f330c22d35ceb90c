"""The report's Design analysis section: what this experiment could resolve, designed (freeze's
variance components) and observed (this experiment's), and the design summary table."""
from __future__ import annotations

from harness.readout import words
from harness.readout.report.blocks import _h3, _p, _pct, _section, _tbl, _ul
from harness.readout.report.provenance import _spread_words
from harness.readout.verdict import Design
from harness.stats.design.records import DesignAnalysis
from harness.stats.units import pts


OUTCOME_ORDER = ("keep_both", "drop_heircommit", "loop_earns_nothing", "not_resolved")


def design_section(design: Design | dict | None, summaries: list[tuple[str, dict | None]] = ()) -> dict | None:
    """The operating characteristic, designed (freeze's components) and observed (this experiment's);
    `summaries` [(column name, the verdict's flat design summary)] add the summary table when both are there."""
    if not design:
        return None
    d = Design.from_dict(design, "design")
    des = d.designed
    s = des.size
    blocks = [_p(f"Design run: {s.n_items} probes x {s.n_seeds} seeds x arms {', '.join(s.arms)}. The "
                 f"readout's own decision rule applied to {des.replicates} simulated experiments per cell (bootstrap "
                 f"{des.bootstrap_resamples} resamples inside the simulation, registered "
                 f"{des.registered_resamples}); ± is the Monte-Carlo standard error.")]
    for name, result in (("designed", des), ("observed", d.observed)):
        if result.failed:
            blocks.append(_p(f"Observed variance components unavailable: {result.error}"))
            continue
        blocks += _design_blocks(name, result)
    if summaries and all(isinstance(v, dict) for _, v in summaries):
        blocks += design_summary_blocks(list(summaries))

    return _section("design", "Design analysis: what this experiment could resolve", blocks)


def _design_blocks(name: str, x: DesignAnalysis) -> list[dict]:
    """One design analysis (designed or observed): its components, the rule's cells, and the items."""
    c = x.components
    what = {"assumed": "the registered ASSUMPTIONS (no pilot)", "pilot": "the pilot",
            "observed": "this experiment's outcomes"}[c.source]
    read = words.rounds_read_words(c).strip(" ()")
    blocks = [_h3(f"{name.capitalize()} (variance components from {what}{'; ' + read if read else ''})"),
              _p(f"Item sd {c.item_sd:.3f}, arm x item sd {c.arm_item_sd:.3f}, run sd "
                 + ", ".join(f"{a} {v:.3f}" for a, v in c.run_sd.items()) + f" (logit); control pass rate "
                 f"{_pct(c.control_rate)}.")]
    rule = x.rule
    if rule.error is not None:
        return blocks + [_ul([rule.error])]
    rows = [[pts(cell.effect_BA), pts(cell.effect_CB)]
            + [f"{cell.verdict[o]:.3f} ± {cell.verdict_se[o]:.3f}" for o in OUTCOME_ORDER]
            for cell in rule.cells]
    blocks.append(_tbl(["true B-A", "true C-B"] + list(OUTCOME_ORDER), rows))
    fp, at = rule.keep_both_false_positive, rule.keep_both_at_sesoi
    items = [f"keep_both false-positive rate (the largest over the null set, at {[pts(e) for e in fp.at]}): "
             f"{fp.p:.3f} ± {fp.se:.3f} (alpha {x.alpha})",
             f"P(keep_both) at the sesoi on both contrasts: {at.p:.3f} ± {at.se:.3f} "
             f"(registered power {x.power})"]
    alt = rule.alternative
    if alt:
        items.append(f"the other spread rule ({_spread_words(alt.spread_rule)}) on the same simulated "
                     f"experiments: P(keep_both) at the sesoi {alt.keep_both_at_sesoi:.3f}, false-positive rate "
                     f"{alt.keep_both_false_positive:.3f}")
    if x.positive_control is not None:
        items.append("one contrast against A, P(supported) by true effect: " + ", ".join(
            f"{pts(p.effect)}: {p.labels['supported']:.3f}" for p in x.positive_control.curve))
    for c in x.controls or []:
        if c.positive:
            items.append(f"positive control {c.arm}, its registered check itself (beats {' and '.join(c.versus)} "
                         f"by {pts(c.margin)}, sign test): P(pass) {c.p_pass_at_effect:.3f} ± "
                         f"{c.p_pass_at_effect_se:.3f} at {pts(c.effect)} over A; {c.p_pass_at_0:.3f} at no effect")
        else:
            items.append(f"negative control {c.arm}, its registered check itself (must not beat "
                         f"{' and '.join(c.versus)} by {pts(c.margin)}): P(fires) {c.p_fires_when_equal:.3f} ± "
                         f"{c.p_fires_when_equal_se:.3f} when it truly equals {c.versus[0]}")
    if x.gate is not None:
        g = x.gate
        gate = (f"C's confirm gate ({g.rule}, margin {g.margin}, {g.n_confirm} probes per round), "
                "P(commit) by true successor - root difference: "
                + ", ".join(f"{pts(p.diff)}: {p.p_commit:.2f}" for p in g.curve))
        if g.rule == "not_worse" and g.margin == 0:
            gate += " (not_worse with margin 0 commits on ties: alpha plays no part in it)"
        items.append(gate)
    items += [line.split(": ", 1)[1] for line in words.design_lines(x)
              if line.startswith(("design: run spread pooled", "design: pessimistic", "design: note:"))]
    items += [f"**Warning:** {w}" for w in x.warnings]
    return blocks + [_ul(items)]


SUMMARY_WORDS = {  # verdict.json's design_summary keys (harness.stats.design.summary.design_summary), in words
    "positive_control_power": "P(the positive control's registered check passes) at its registered effect",
    "keep_both_at_sesoi": "P(keep_both) when both contrasts truly equal the sesoi",
    "keep_both_false_positive": "P(keep_both) at the worst true effects with no gain (false positive)",
    "ruled_out_at_sesoi": "P(ruled_out) when a contrast truly equals the sesoi (its level)",
    "gate_commit_at_minus_sesoi": "P(C's gate commits) when the successor is truly a sesoi worse",
    "gate_commit_at_plus_sesoi": "P(C's gate commits) when the successor is truly a sesoi better",
}


def design_summary_blocks(summaries: list[tuple[str, dict]]) -> list[dict]:
    """The flat design summaries [(column name, design_summary dict), ...] as one table, a row per figure
    (in words, with its verdict.json key) and a column per summary: narrow enough for the page."""
    keys = list(summaries[0][1])
    rows = [[SUMMARY_WORDS.get(k, k), f"`{k}`", *("n/a" if v[k] is None else f"{v[k]:.3f}" for _, v in summaries)]
            for k in keys]
    return [_h3("Design summary"), _tbl(["figure", "key in verdict.json", *(name for name, _ in summaries)], rows)]

"""The readout's words: the design analysis in sentences (freeze prints them, the report and the
pre-registration quote them) and the one points formatter (harness.stats.units.pts). The numbers
they read are computed in harness.stats; only the wording lives here."""
from __future__ import annotations

import functools

from harness.stats import contrasts
from harness.stats.design.records import ComponentsReport, DesignAnalysis, Pessimistic
from harness.stats.design.summary import design_summary
from harness.stats.units import pts

pts_u = functools.partial(pts, signed=False)  # a size, not a difference: "5.0 pts"


def _rule_words(rule: dict) -> str:
    return "Welch t-test" if rule["test"] == "welch" else f"gap > {rule['multiplier']:g} x larger seed range"


def rounds_read_words(c: ComponentsReport) -> str:
    """Which rounds the moments were read at, per arm ("" when unknown: assumptions, observed outcomes)."""
    if not c.rounds_read:
        return ""
    total = c.rounds
    of = f" of rounds 0-{total - 1}" if isinstance(total, int) and total > 0 else ""
    return " (rounds read: " + ", ".join(f"{a} {r}" for a, r in sorted(c.rounds_read.items())) + of + ")"


def design_lines(d: DesignAnalysis | dict, label: str = "design") -> list[str]:
    """Readable lines of a design analysis (freeze prints them, the report quotes them)."""
    d = DesignAnalysis.from_dict(d)
    c, s, rule = d.components, d.size, d.rule
    lines = [f"{label}: variance components from {c.source.upper()}"
             + (" -- registered guesses, not measurements" if c.source == "assumed" else "") + rounds_read_words(c),
             f"{label}: {s.n_items} probes x {s.n_seeds} seeds x arms {', '.join(s.arms)}; "
             f"{d.replicates} simulated experiments per cell (rng seed {d.rng_seed}); spread test "
             f"{d.spread_test}; bootstrap {d.bootstrap_resamples} resamples in simulation "
             f"(registered {d.registered_resamples})",
             f"{label}: item sd {c.item_sd:.3f}, arm x item sd {c.arm_item_sd:.3f}, run sd "
             + ", ".join(f"{a} {v:.3f}" for a, v in c.run_sd.items()) + " (logit); control pass rate "
             f"{c.control_rate:.3f}",
             f"{label}: P(verdict) by true effect (B-A, C-B):"]
    if rule.error is not None:
        return lines[:-1] + [f"{label}: {rule.error}"] + _gate_lines(d, label)
    head = "  ".join(f"{o:>18}" for o in contrasts.OUTCOMES)
    lines.append(f"{label}:   B-A pts  C-B pts  {head}")
    for cell in rule.cells:
        vals = "  ".join(f"{cell.verdict[o]:>11.3f} ±{cell.verdict_se[o]:.3f}" for o in contrasts.OUTCOMES)
        lines.append(f"{label}:   {100 * cell.effect_BA:7.1f}  {100 * cell.effect_CB:7.1f}  {vals}")
    fp, at = rule.keep_both_false_positive, rule.keep_both_at_sesoi
    lines.append(f"{label}: keep_both false-positive rate (worst cell with a zero effect, {fp.at}): "
                 f"{fp.p:.3f} ± {fp.se:.3f} (alpha {d.alpha})")
    lines.append(f"{label}: P(keep_both) at the sesoi on both contrasts: {at.p:.3f} ± {at.se:.3f} "
                 f"(registered power {d.power})")
    alt = rule.alternative
    if alt:
        lines.append(f"{label}: the other spread rule ({_rule_words(alt.spread_rule)}) on the same experiments: "
                     f"P(keep_both) at the sesoi {alt.keep_both_at_sesoi:.3f}, false-positive rate "
                     f"{alt.keep_both_false_positive:.3f}")
    if d.positive_control is not None:
        pc = d.positive_control
        lines.append(f"{label}: one contrast vs A, P(supported) by true effect: " + ", ".join(
            f"{pts(x.effect)} {x.labels['supported']:.3f}" for x in pc.curve)
            + f" (positive control sized for {pts_u(pc.effect)})")
    lines += control_lines(d, label)
    if d.pessimistic is not None:
        lines += _pessimistic_lines(d.pessimistic, label)
    if c.misfit:
        lines.append(f"{label}: the fitted model does not reproduce: " + "; ".join(c.misfit))
    for note in c.fit_notes:
        lines.append(f"{label}: note: {note}")
    summary = design_summary(d)
    return lines + _gate_lines(d, label) + base_lines(d, label) + [f"{label}: summary: " + ", ".join(
        f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in summary.items())]


def _pessimistic_lines(p: Pessimistic, label: str) -> list[str]:
    """The pooled run spread (when the pilot gave one) and the pessimistic design's power."""
    pc, pool, lines = p.positive_control_power, p.spread_pool, []
    if pool:
        lines.append(f"{label}: run spread pooled over arms {', '.join(pool.arms)} x rounds "
                     f"{', '.join(map(str, pool.rounds))} ({pool.groups} groups, {pool.df} df): run sd "
                     f"{pool.run_sd:.3f} (logit), {pool.level:.0%} upper confidence limit {pool.run_sd_upper:.3f}: "
                     f"the floor under each arm's pessimistic seed SD")
    lines.append(f"{label}: pessimistic (seed SDs at their {p.level:.0%} upper confidence limit over "
                 f"{p.components.n_seeds} seeds" + (" or the pooled floor" if pool else "")
                 + ("" if p.agreement == "mean" else
                    f"; every arm's seed agreement the {p.agreement} arm's, the end with the lower power")
                 + "; seed sd " + ", ".join(f"{a} {100 * v:.2f} pts" for a, v in p.components.moments.seed_sd.items())
                 + "; run sd " + ", ".join(f"{a} {v:.3f}" for a, v in p.components.run_sd.items())
                 + f"): P(keep_both) at the sesoi {p.keep_both_at_sesoi.p:.3f}"
                 + ("" if pc is None else f", positive control check {pc:.3f}"))
    return lines


def control_lines(d: DesignAnalysis, label: str = "design") -> list[str]:
    """The power of each registered control check itself (as the readout applies it)."""
    lines = []
    for c in d.controls or []:
        if c.positive:
            lines.append(f"{label}: positive control {c.arm}'s registered check (beats {' and '.join(c.versus)} "
                         f"by {pts_u(c.margin)}, sign test at alpha): P(pass) {c.p_pass_at_effect:.3f} ± "
                         f"{c.p_pass_at_effect_se:.3f} at +{pts_u(c.effect)} over A, {c.p_pass_at_0:.3f} at "
                         f"no effect (base at {100 * c.base_rate:.1f}%)")
        else:
            lines.append(f"{label}: negative control {c.arm}'s registered check (must not beat "
                         f"{' and '.join(c.versus)} by {pts_u(c.margin)}): P(fires) {c.p_fires_when_equal:.3f} ± "
                         f"{c.p_fires_when_equal_se:.3f} when it truly equals {c.versus[0]}")
    return lines


def _gate_lines(d: DesignAnalysis, label: str) -> list[str]:
    lines = []
    if d.gate is not None:
        g = d.gate
        lines.append(f"{label}: C's confirm gate ({g.rule}, margin {g.margin}, {g.n_confirm} probes per round): "
                     "P(commit) by true successor - root difference: "
                     + ", ".join(f"{pts(x.diff)} {x.p_commit:.2f}" for x in g.curve))
        if g.rule == "not_worse" and g.margin == 0:
            lines.append(f"{label}: note: not_worse with margin 0 commits on ties; alpha plays no part in it")
    return lines


def base_lines(d: DesignAnalysis, label: str = "design") -> list[str]:
    """What the design says about the recipe rather than its one base (harness.stats.design.bases):
    per decision contrast, the labels' levels and power about the recipe's effect and the bases a claim
    about the recipe would take. [] when no base spread is registered."""
    b = d.bases
    if b is None:
        return []
    lines = [f"{label}: about the recipe, not this base: each contrast's true effect moves from base to base with "
             f"the registered SD (decision.yaml design.base_spread, measured over {b.bases_measured} bases; its "
             f"{b.level:.0%} upper limit beside it); the rule's labels by the RECIPE's effect, and the bases of "
             f"{b.seeds_per_base} seeds (or {b.fewest_seeds}) a t-test over bases needs to rule out the sesoi "
             f"at the registered power"]
    for c in b.contrasts:
        few = "" if c.bases_needed_few is None else f", {_bases(c.bases_needed_few)} of {b.fewest_seeds} seeds"
        lines.append(f"{label}:   {c.contrast}: base SD {pts_u(c.base_sd)} (upper {pts_u(c.base_sd_upper)}), one "
                     f"base's gap s.e. {pts_u(c.per_base_se)}; P(supported | 0) {c.supported_at_0:.3f}, "
                     f"P(reversed | 0) {c.reversed_at_0:.3f}, P(ruled_out | sesoi) {c.ruled_out_at_sesoi:.3f} "
                     f"(alpha {d.alpha}; ± {c.level_se:.3f}); power: P(ruled_out | 0) {c.ruled_out_at_0:.3f}, "
                     f"P(supported | sesoi) {c.supported_at_sesoi:.3f}; a claim about the recipe needs "
                     f"{_bases(c.bases_needed)}{few} ({_bases(c.bases_needed_upper)} at the upper SD)")
    return lines


def _bases(k: int | None) -> str:
    return "more than 1000 bases" if k is None else f"{k} bases"

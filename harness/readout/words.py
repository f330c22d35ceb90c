"""The readout's words for a design analysis: each sentence about one is composed here, by one function,
and said the same way wherever it appears. Freeze prints them as lines (`design_lines`: "design: ..."),
the report arranges the same sentences as its Design analysis section (harness.readout.report.design),
and the pre-registration names the summary figures with `SUMMARY_WORDS`. What the design says about
the recipe rather than its one base (`recipe_*`) freeze prints, and the pre-registration and the report
lay out as a table. The numbers are computed in
harness.stats (the design analysis, harness.stats.design; points by harness.stats.units.pts); only the
wording lives here."""
from __future__ import annotations

from harness.readout.verdict import SpreadRule
from harness.stats.design.records import ComponentsReport, ControlPower, DesignAnalysis, GateOC, Pessimistic, \
    SpreadPool
from harness.stats.design.summary import design_summary
from harness.stats.units import pts

OUTCOME_ORDER = ("keep_both", "drop_heircommit", "loop_earns_nothing", "not_resolved")
CELL_HEADER = ("true B-A", "true C-B", *OUTCOME_ORDER)  # the columns of the rule's cells
COMPONENTS_FROM = {"assumed": "the registered ASSUMPTIONS (no pilot)", "pilot": "the pilot",
                   "observed": "this experiment's outcomes"}
SUMMARY_WORDS = {  # verdict.json's design_summary keys (harness.stats.design.summary.design_summary), in words
    "positive_control_power": "P(the positive control's registered check passes) at its registered effect",
    "keep_both_at_sesoi": "P(keep_both) when both contrasts truly equal the sesoi",
    "keep_both_false_positive": "P(keep_both) at the worst true effects with no gain (false positive)",
    "ruled_out_at_sesoi": "P(ruled_out) when a contrast truly equals the sesoi (its level)",
    "gate_commit_at_minus_sesoi": "P(C's gate commits) when the successor is truly a sesoi worse",
    "gate_commit_at_plus_sesoi": "P(C's gate commits) when the successor is truly a sesoi better",
    "label_level_about_the_recipe": "P(a label is wrong about the recipe) at the registered base spread (the largest)",
    "joint_power": "P(the positive control's check passes and keep_both) at the registered effects (what a run needs)",
}


def spread_words(rule: SpreadRule | dict) -> str:
    """The seed rule in words (the analysis' spec, or the design analysis' alternative rule, a dict)."""
    rule = SpreadRule.from_dict(rule, "spread_rule")
    if rule.test == "welch":
        return "one-sided Welch t-test on the per-seed pass rates of both arms"
    return f"gap > {rule.multiplier} x the larger seed range of the two arms"


def rounds_read_words(c: ComponentsReport) -> str:
    """Which round the moments were read at, per arm: "rounds read: A 2, B 2 of rounds 0-2" ("" when
    unknown: assumptions, observed outcomes)."""
    if not c.rounds_read:
        return ""
    total = c.rounds
    of = f" of rounds 0-{total - 1}" if isinstance(total, int) and total > 0 else ""
    return "rounds read: " + ", ".join(f"{a} {r}" for a, r in sorted(c.rounds_read.items())) + of


def source_words(c: ComponentsReport) -> str:
    """Where the variance components come from, and which rounds they were read at."""
    read = rounds_read_words(c)
    return f"variance components from {COMPONENTS_FROM[c.source]}" + (f"; {read}" if read else "")


def components_words(c: ComponentsReport) -> str:
    """The variance components themselves (logit scale) and the control pass rate."""
    return (f"Item sd {c.item_sd:.3f}, arm x item sd {c.arm_item_sd:.3f}, run sd "
            + ", ".join(f"{a} {v:.3f}" for a, v in c.run_sd.items())
            + " (logit); control pass rate " + ("n/a" if c.control_rate is None else f"{100 * c.control_rate:.1f}%")
            + ".")


def run_words(d: DesignAnalysis) -> str:
    """The simulated design: its size and how many experiments each cell simulates."""
    s = d.size
    return (f"Design run: {s.n_items} probes x {s.n_seeds} seeds x arms {', '.join(s.arms)}. The readout's own "
            f"decision rule applied to {d.replicates} simulated experiments per cell (bootstrap "
            f"{d.bootstrap_resamples} resamples inside the simulation, registered {d.registered_resamples}); ± is "
            "the Monte-Carlo standard error.")


def simulation_words(d: DesignAnalysis) -> str:
    """The simulation's own settings, for freeze's log (the report names the spread test in Provenance)."""
    return f"simulation rng seed {d.rng_seed}; spread test {d.spread_test}"


def unavailable_words(error: str) -> str:
    """Why there is no design analysis at the observed components."""
    return f"Observed variance components unavailable: {error}"


def cell_rows(d: DesignAnalysis) -> list[list[str]]:
    """The rule's cells, a row each under CELL_HEADER: the true effects in points, then P(each outcome)
    ± its Monte-Carlo standard error."""
    return [[pts(cell.effect_BA), pts(cell.effect_CB)]
            + [f"{cell.verdict[o]:.3f} ± {cell.verdict_se[o]:.3f}" for o in OUTCOME_ORDER] for cell in d.rule.cells]


def false_positive_words(d: DesignAnalysis) -> str:
    fp = d.rule.keep_both_false_positive
    return (f"keep_both false-positive rate (the largest over the null set, at {[pts(e) for e in fp.at]}): "
            f"{fp.p:.3f} ± {fp.se:.3f} (alpha {d.alpha})")


def sesoi_power_words(d: DesignAnalysis) -> str:
    at = d.rule.keep_both_at_sesoi
    text = f"P(keep_both) at the sesoi on both contrasts: {at.p:.3f} ± {at.se:.3f} (registered power {d.power})"
    if d.joint is not None:
        text += (f"; with the positive control's check passing too, on the same simulated experiments (what a run "
                 f"needs): {d.joint.p:.3f} ± {d.joint.se:.3f}")
    return text


def alternative_words(d: DesignAnalysis) -> str | None:
    """The other spread rule on the same simulated experiments (None when it was not simulated)."""
    alt = d.rule.alternative
    if not alt:
        return None
    return (f"the other spread rule ({spread_words(alt.spread_rule)}) on the same simulated experiments: "
            f"P(keep_both) at the sesoi {alt.keep_both_at_sesoi:.3f}, false-positive rate "
            f"{alt.keep_both_false_positive:.3f}")


def positive_control_curve_words(d: DesignAnalysis) -> str | None:
    """One contrast against A: P(supported) by true effect (None without a positive control)."""
    if d.positive_control is None:
        return None
    return "one contrast against A, P(supported) by true effect: " + ", ".join(
        f"{pts(p.effect)}: {p.labels['supported']:.3f}" for p in d.positive_control.curve)


def control_check_words(c: ControlPower) -> str:
    """A registered control check itself, as the readout applies it: how often it passes (positive) or
    fires (negative)."""
    versus = " and ".join(c.versus)
    if c.positive:
        return (f"positive control {c.arm}, its registered check itself (beats {versus} by {pts(c.margin)}, sign "
                f"test): P(pass) {c.p_pass_at_effect:.3f} ± {c.p_pass_at_effect_se:.3f} at {pts(c.effect)} over A; "
                f"{c.p_pass_at_0:.3f} at no effect")
    return (f"negative control {c.arm}, its registered check itself (must not beat {versus} by {pts(c.margin)}): "
            f"P(fires) {c.p_fires_when_equal:.3f} ± {c.p_fires_when_equal_se:.3f} when it truly equals {c.versus[0]}")


def _commits_on_ties(g: GateOC) -> bool:
    return g.rule == "not_worse" and g.margin == 0


def gate_words(g: GateOC) -> str:
    """C's confirm gate: P(commit) by the true successor - root difference (with the margin-0 note)."""
    text = (f"C's confirm gate ({g.rule}, margin {g.margin}, {g.n_confirm} probes per round), P(commit) by true "
            "successor - root difference: " + ", ".join(f"{pts(p.diff)}: {p.p_commit:.2f}" for p in g.curve))
    tie = " (not_worse with margin 0 commits on ties: alpha plays no part in it)" if _commits_on_ties(g) else ""
    return text + tie


def pooled_spread_words(pool: SpreadPool) -> str:
    """The run spread pooled over the pilot's arms and rounds: the floor under the pessimistic seed SDs."""
    return (f"run spread pooled over arms {', '.join(pool.arms)} x rounds {', '.join(map(str, pool.rounds))} "
            f"({pool.groups} groups, {pool.df} df): run sd {pool.run_sd:.3f} (logit), {pool.level:.0%} upper "
            f"confidence limit {pool.run_sd_upper:.3f}: the floor under each arm's pessimistic seed SD")


def pessimistic_words(p: Pessimistic) -> str:
    """The pessimistic design: its seed SDs and run SDs, and its power."""
    pc = p.positive_control_power
    return (f"pessimistic (seed SDs at their {p.level:.0%} upper confidence limit over {p.components.n_seeds} seeds"
            + (" or the pooled floor" if p.spread_pool else "")
            + ("" if p.agreement == "mean" else
               f"; every arm's seed agreement the {p.agreement} arm's, the end with the lower power")
            + "; seed sd " + ", ".join(f"{a} {pts(v, signed=False, digits=2)}"
                                       for a, v in p.components.moments.seed_sd.items())
            + "; run sd " + ", ".join(f"{a} {v:.3f}" for a, v in p.components.run_sd.items())
            + f"): P(keep_both) at the sesoi {p.keep_both_at_sesoi.p:.3f}"
            + ("" if pc is None else f", positive control check {pc:.3f}")
            + ("" if p.joint is None else f", both {p.joint.p:.3f}"))


def note_words(d: DesignAnalysis) -> list[str]:
    """The fit's notes, each "note: ..." (the gate's margin-0 note is in `gate_words`)."""
    return [f"note: {n}" for n in d.components.fit_notes]


def design_items(d: DesignAnalysis) -> list[str]:
    """The design analysis' findings in order, a sentence each (the report's bullets, freeze's lines):
    the rule's false-positive rate and power, the other spread rule, the positive-control curve, each
    control check, C's gate, the pooled run spread, the pessimistic design and the notes. The rule's
    error alone when it cannot decide."""
    if d.rule.error is not None:
        return [d.rule.error]
    items = [false_positive_words(d), sesoi_power_words(d), alternative_words(d), positive_control_curve_words(d),
             *(control_check_words(c) for c in d.controls or []), None if d.gate is None else gate_words(d.gate)]
    p = d.pessimistic
    if p is not None:
        items += [None if p.spread_pool is None else pooled_spread_words(p.spread_pool), pessimistic_words(p)]
    return [x for x in items if x is not None] + note_words(d)


def summary_words(d: DesignAnalysis) -> str:
    """The flat design summary (harness.stats.design.summary.design_summary) on one line, by its keys."""
    return "summary: " + ", ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in design_summary(d).items())


def design_lines(d: DesignAnalysis | dict, label: str = "design") -> list[str]:
    """Freeze's lines of a design analysis, each "<label>: <sentence>": the report's sentences (where the
    components come from, the components, the run, the rule's cells as a text table, `design_items`),
    the simulation's settings, what the design says about the recipe (`base_lines`) and the flat summary.
    When the rule cannot decide: its error, then C's gate."""
    d = DesignAnalysis.from_dict(d)
    c = d.components
    head = [source_words(c), components_words(c), run_words(d), simulation_words(d)]
    if d.rule.error is not None:  # the rule cannot decide; C's gate still can
        return [f"{label}: {x}" for x in head + [d.rule.error] + ([] if d.gate is None else [gate_words(d.gate)])]
    cells = ["P(verdict) by true effect:", _text_row(CELL_HEADER), *map(_text_row, cell_rows(d))]
    return ([f"{label}: {x}" for x in head + cells + design_items(d)] + base_lines(d, label)
            + [f"{label}: {summary_words(d)}"])


def _text_row(cells) -> str:
    """A row of the rule's cells for a log: the effects 9 wide, each outcome 18 (header and rows align)."""
    return "  " + "  ".join(f"{x:>9}" for x in cells[:2]) + "  " + "  ".join(f"{x:>18}" for x in cells[2:])


def recipe_intro_words(d: DesignAnalysis) -> str:
    """What the design about the recipe is (harness.stats.design.bases), before its table."""
    b = d.bases
    return (f"About the recipe, not this base: each contrast's true effect moves from one base of the recipe to "
            f"another with the SD decision.yaml registers (design.base_spread, measured over {b.bases_measured} "
            f"bases; in brackets, the SD's {b.level:.0%} upper confidence limit and the bases it would take). The "
            f"rule's labels on this one base by the RECIPE's true effect (each is at most alpha {d.alpha} only about "
            f"this base), and the bases a one-sided t-test over bases' gaps needs to rule out the sesoi at the "
            f"registered power {d.power}")


def recipe_header(d: DesignAnalysis) -> list[str]:
    """The columns of `recipe_rows`."""
    b = d.bases
    return ["contrast", "base SD", "P(supported), recipe at 0", "P(reversed), recipe at 0", "P(ruled_out), recipe at sesoi",
            f"bases of {b.seeds_per_base} seeds", f"bases of {b.fewest_seeds} seeds"]


def recipe_rows(d: DesignAnalysis) -> list[list[str]]:
    """One row per decision contrast under `recipe_header`: its base SD (upper limit), the labels' levels
    about the recipe, and the bases needed (at the upper SD in brackets; "-" where the design has no fewer
    seeds to try)."""
    return [[c.contrast, f"{pts(c.base_sd, signed=False)} ({pts(c.base_sd_upper, signed=False)})",
             f"{c.supported_at_0:.3f}", f"{c.reversed_at_0:.3f}", f"{c.ruled_out_at_sesoi:.3f}",
             f"{_bases(c.bases_needed)} ({_bases(c.bases_needed_upper)})",
             "-" if c.bases_needed_few is None else _bases(c.bases_needed_few)] for c in d.bases.contrasts]


def recipe_limitation_words(d: DesignAnalysis) -> str:
    """The design about the recipe in one sentence, for the report's Limitations: how often the labels of
    this one base are wrong about the recipe, and the bases a claim about it would take."""
    worst = max(d.bases.contrasts, key=lambda c: c.level)
    need = ", ".join(f"{c.contrast} {_bases(c.bases_needed)}" for c in d.bases.contrasts)
    spread = ", ".join(f"{c.contrast} {pts(c.base_sd, signed=False)}" for c in d.bases.contrasts)
    return (f"At the base spread decision.yaml registers ({spread}, "
            f"measured over {d.bases.bases_measured} bases), this design's {worst.contrast} label is wrong about the "
            f"recipe with P up to {worst.level:.3f} (alpha {d.alpha}), and a claim about the recipe would take bases "
            f"of {d.bases.seeds_per_base} seeds: {need} (the Design analysis section, about the recipe). This "
            "experiment ran one base.")


def base_lines(d: DesignAnalysis, label: str = "design") -> list[str]:
    """Freeze's lines of the design about the recipe: `recipe_intro_words` and `recipe_rows` as a text
    table. [] when no base spread is registered."""
    if d.bases is None:
        return []
    table = [recipe_header(d), *recipe_rows(d)]
    width = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return [f"{label}: {recipe_intro_words(d)}:"] + [
        f"{label}:   " + "  ".join(f"{x:>{w}}" for x, w in zip(r, width)) for r in table]


def _bases(k: int | None) -> str:
    return "> 1000" if k is None else str(k)


# ---- the base the experiment built and the base its registration was sized on -------------------

def _sha(x: str | None) -> str:
    return "unrecorded" if not x else x[:12]


def _rate(x) -> str:
    return "" if x is None else f", probe pass rate {100 * x:.1f}%"


def base_words(reg) -> str | None:
    """One sentence naming the base this experiment built (sha256, its probe pass rate) and the base its
    registration was sized on (model.yaml sized_on_base), saying plainly when they differ and what that
    means. `reg`: the verdict's `registration` (or harness.readout.design.registration's dict); None when
    it names no built base (a verdict of an older format)."""
    if reg is None:
        return None
    reg = reg if isinstance(reg, dict) else reg.to_dict()
    base = reg.get("base") or {}
    if not base.get("sha256"):
        return None
    built, named = base["sha256"], reg.get("sized_on_base")
    head = f"Base: this experiment built base sha256 {_sha(built)}{_rate(base.get('pass_rate'))}"
    if named is None:
        return (f"{head}; the protocol names no base its registration was sized on (model.yaml sized_on_base: null), "
                "so nothing ties its figures to this base.")
    if built.startswith(named):
        return f"{head}, the base the registration was sized on (model.yaml sized_on_base {_sha(named)})."
    about = ("the override's figures and its stated reason, " if reg.get("override") and reg.get("override_figures") != "any"
             else "")
    how = ("freeze ran it on this base as the deviation model.yaml registers (on_other_base: deviation), logged "
           "in DEVIATIONS.jsonl" if reg.get("on_other_base") == "deviation" else
           "the freeze that locked it only warned about the other base")
    return (f"{head}, NOT the base the registration was sized on ({_sha(named)}, model.yaml sized_on_base): they "
            f"differ. The figures the protocol itself states ({about}the registered base spread and assumptions, any "
            f"figure its comments quote) were measured on base {_sha(named)}, not on this one; the pilot and the design "
            f"analysis freeze ran are this base's own; {how}.")


def override_words(reg) -> str | None:
    """The stated override and the figures it names, on which base, in one sentence (None: no override)."""
    reg = reg if isinstance(reg, dict) or reg is None else reg.to_dict()
    if not reg or not reg.get("override"):
        return None
    named = reg.get("override_figures")
    if named == "any":
        return (f"Stated reason (decision.yaml `underpowered_override`, excusing any shortfall on any base: a protocol "
                f"not sized to decide anything): {reg['override']}")
    if not named:
        return f"Stated reason (decision.yaml `underpowered_override`): {reg['override']}"
    figures = "; ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in named.items())
    return (f"Stated reason (decision.yaml `underpowered_override`), about the figures it names on base "
            f"{_sha(reg.get('override_base'))} ({figures}): {reg['override']}")

"""The report's sections in order (`report_sections`) and the evidence behind the verdict: the arms,
the control checks, every arm against the base, the primary metric and its strata, the learning
curves, the contrasts, the decision rule's clauses, the secondary metric, the monitors, the commit
gate, the compute ledger, leakage, deviations and limitations. The Verdict and verifier-reasons
sections are in harness.readout.report.paragraph, Provenance in .provenance, the design analysis in
.design."""
from __future__ import annotations

from pathlib import Path

from harness.readout import words
from harness.readout.controls import CRITERIA_WORDS
from harness.readout.report.blocks import _num, _ok, _p, _pct, _section, _tbl, _ul, run_order
from harness.readout.report.design import design_section
from harness.readout.report.figures import MONITOR_LABELS, figure_caption
from harness.readout.report.paragraph import _consequence, verdict_reasons_section, verdict_section, warnings_section
from harness.readout.report.provenance import _family_words, provenance_section
from harness.readout.verdict import Contrast, Verdict, as_verdict
from harness.stats.units import pts


def report_sections(verdict: Verdict | dict, figures: list[str]) -> list[dict]:
    """Every section of the report, in order (the package's docstring lists the block kinds)."""
    verdict = as_verdict(verdict)
    designs = [("designed", verdict.design_summary), ("observed", verdict.design_summary_observed)]
    out = [verdict_section(verdict), warnings_section(verdict), _arms(verdict), _controls(verdict), _contrasts(verdict, figures),
           _against_base(verdict), _primary(verdict), _strata(verdict), _curves(verdict, figures),
           _rule_clauses(verdict), design_section(verdict.design, designs), _secondary(verdict),
           _monitors(verdict, figures), _heircommit(verdict, figures),
           verdict_reasons_section(verdict.verdict_reasons, verdict), _budget(verdict), _leakage(verdict),
           _deviations(verdict), _limitations(verdict), provenance_section(verdict)]
    return [s for s in out if s is not None]


def _fig_blocks(figures: list[str], verdict: Verdict, *names: str) -> list[dict]:
    """The figure blocks for those of `names` that were drawn, with their captions."""
    return [{"kind": "figure", "file": f, "stem": Path(f).stem, "caption": figure_caption(f, verdict)}
            for f in names if f in figures]


def _arms(verdict: Verdict) -> dict:
    """What each registered arm is (its kind's description) and its role in the readout."""
    reg = verdict.inputs.registered
    defs = reg.definitions or {}
    rows = [[f"**{arm}**", f"`{defs.get(arm, {}).get('kind', '')}`", reg.roles.get(arm, ""),
             defs.get(arm, {}).get("what", "")] for arm in reg.arms]

    rows.insert(0, ["**base**", "-", "round -1", "the frozen base checkpoint every arm starts from (its probe "
                                                 "outcomes are each run's base evaluation)"])
    return _section("arms", "The arms", [
        _p("The decision rule reads B-A (does gated self-play beat SFT?) and C-B (does the HeirCommit gate add to it?). "
           "The controls test the instrument: the positive control must beat the base and A, the negative control "
           "must not beat B; the decomposition arm splits C - B."),
        _tbl(["arm", "kind", "role", "what it is"], rows)])


def _primary(verdict: Verdict) -> dict:
    a = verdict.analysis
    seeds = [str(s) for s in a.seeds]
    base = _base_rates(verdict)
    rows = [["base (round -1)"] + [_pct(base.get(s)) for s in seeds]]
    rows += [[arm] + [_pct(a.per_seed[arm][s]) for s in seeds] for arm in sorted(a.per_seed)]
    level = a.spec.bootstrap.confidence_level
    rows2 = [[arm, f"{m.passed}/{m.n}", _pct(m.mean), f"[{_pct(m.ci_low)}, {_pct(m.ci_high)}]"]
             for arm, m in sorted(a.arms.items())]
    fam = verdict.inputs.task_family  # verdicts from before task families name none
    return _section("primary", f"Primary metric: probe pass rate (correct@{verdict.inputs.max_bytes}B)", [
        *([_p(f"The probes are tasks of the family {_family_words(fam)}.")] if fam else []),
        _p("Pass rate per arm x seed (final round):"), _tbl(["arm"] + [f"seed {s}" for s in seeds], rows),
        _p(f"Per arm over items x seeds, {level:.0%} two-stage bootstrap interval (seeds, then items; seeds "
           f"averaged per item):"),
        _tbl(["arm", "passed", "mean", "bootstrap interval"], rows2)])


def _stratum_fields(verdict: Verdict) -> list[str]:
    """The parts of a stratum, as the task family names them (the code family's before families were named)."""
    return (verdict.inputs.task_family or {}).get("stratum_fields", ["depth", "template", "phrasing class"])


def _strata(verdict: Verdict) -> dict | None:
    """Per-stratum final pass rate per arm (items x seeds) beside the base's."""
    st = verdict.strata
    if not st:
        return None
    arms = sorted(st.arms)
    rows = [[f"`{name}`", st.n_items[name], _pct(st.base[name])] + [_pct(st.arms[a][name]) for a in arms]
            for name in st.names]
    cl = st.classes  # verdicts from before the program classes have none
    if cl:
        rows += [[f"class `{c}`", cl["n_items"][c], _pct(cl["base"][c])]
                 + [f"{_pct(cl['arms'][a][c])} ({pts(cl['gain'][a][c])})" for a in arms] for c in cl["names"]]
    return _section("strata", "Per stratum: final probe pass rate per arm", [
        _p(f"A probe's stratum is {' / '.join(_stratum_fields(verdict))} (its task family's). Each cell is the arm's final-round "
           "pass rate over the stratum's probes x seeds; the base column is round -1. Descriptive only: the decision "
           "rule reads the whole probe set."
           + (f" The last rows group the probes by program class (how many programs share their structure: "
              f"{', '.join(cl['names'])}), with each arm's gain over the base in points." if cl else "")),
        _tbl(["stratum", "probes", "base"] + arms, rows)])


def _seed_rule(c: Contrast) -> str:
    if c.spread_test == "welch":
        return f"Welch p {_num(c.welch_p)} (t {c.welch_t if isinstance(c.welch_t, str) else _num(c.welch_t)})"
    return f"threshold {pts(c.spread_threshold)}"


def _base_rates(verdict: Verdict) -> dict:
    """seed -> the base's probe pass rate (the same frozen base in every run; the first arm's record)."""
    out: dict = {}
    for _, srs in sorted(verdict.series.items(), key=run_order):
        out.setdefault(str(srs.seed), srs.base["probe_pass_rate"])
    return out


def _controls(verdict: Verdict) -> dict:
    """The control checks, before the decision: they say whether the contrasts can be read."""
    c = verdict.controls
    items = []
    if c.positive_ok is None:
        items.append("no positive control is registered: nothing shows the instrument can see an improvement")
    for role, rows, want in (("positive", c.positive, "must beat"), ("negative", c.negative, "must not beat")):
        for r in rows:
            items.append(f"{_ok(r.ok)}: {role} control {r.arm} {want} {r.versus} by {pts(r.margin)} "
                         f"(gap {pts(r.gap)}, items {r.hi_only} for / {r.lo_only} against of {r.n_items}, "
                         f"one-sided sign p {_num(r.sign_p_greater)} vs alpha {r.alpha})")
    return _section("controls", "Control checks (before the decision)", [
        _ul(items),
        _p("A control beats another arm when the mean gap over items x seeds is at least the registered margin "
           "and the one-sided exact sign test on the items' net differences gives p < alpha (for the negative control, "
           "also the run bound's low end above 0: its false alarms must stay at alpha with run spread). If the "
           "positive control "
           "fails, the pre-registered outcome is `instrument_insensitive`. If the negative control beats an arm it "
           f"must not beat, {_consequence(verdict, 'negative control')}.")])


def _against_base(verdict: Verdict) -> dict:
    """Every arm's final pass rate against the base, paired by probe item."""
    rows = [[arm, _pct(b.mean_lo), _pct(b.mean_hi), pts(b.gap), f"{b.hi_only} / {b.lo_only}",
             _num(b.p_above), _num(b.p_below), b.reading]
            for arm, b in sorted(verdict.against_base.items())]
    return _section("against-base", "Every arm against the base (round -1)", [
        _tbl(["arm", "base", "final", "gap", "items above / below", "p (above)", "p (below)", "reading"], rows),
        _p("p (above) and p (below): one-sided t-tests on the items' gaps (an item's gap: the arm's pass rate on "
           "it over its seeds less the base's), whose mean is the gap; the reading needs p < alpha the way the "
           "gap points. Items above / below count the items whose gap is positive / negative: against the base's "
           "one outcome per item, one seed passing an item the base fails makes it \"above\", so these counts "
           "lean above and do not read the table."),
        _p("An arm that ends below the base is damage, whatever the contrasts say.")])


def _contrasts(verdict: Verdict, figures: list[str]) -> dict:
    contrasts = verdict.analysis.contrasts
    rows = [[key, pts(c.gap), f"[{pts(c.ci_low)}, {pts(c.ci_high)}]",
             f"{c.n_items_hi} / {c.n_items_lo} / {c.n_items_tied}", _num(c.sign_p), _seed_rule(c),
             f"`{c.label}`"] for key, c in sorted(contrasts.items())]
    items = [contrast_bullet(key, c) for key, c in sorted(contrasts.items())]
    return _section("contrasts", "Contrasts (paired by probe item)", [
        _p("Sign test: exact one-sided binomial on the signs of each item's net difference across seeds. "
           "Interval: two-stage bootstrap. Seed rule: see Provenance. Every number is invariant to how seeds "
           "are labelled."),
        _tbl(["contrast", "gap", "interval", "items hi / lo / tied", "sign test p (one-sided)", "seed rule", "label"],
             rows), _ul(items)] + _fig_blocks(figures, verdict, "contrasts.png"))


def contrast_bullet(key: str, c: Contrast | dict) -> str:
    """One contrast's criteria in words, those that held and those that did not, then each arm's per-seed
    pass rates (lowest first: seeds carry no label), e.g. "B-A: held: ...; not held: ...; per-seed pass
    rates B 50.0%, 52.5%; A 25.0%, 27.5%"."""
    c = Contrast.from_dict(c, f"contrast {key}")
    held = [CRITERIA_WORDS.get(k, k.replace("_", " ")) for k, ok in sorted(c.criteria.items()) if ok]
    failed = [CRITERIA_WORDS.get(k, k.replace("_", " ")) for k, ok in sorted(c.criteria.items()) if not ok]
    return (f"{key}: held: {', '.join(held) or 'none'}; not held: {', '.join(failed) or 'none'}; per-seed pass rates "
            f"{c.hi} {', '.join(_pct(r) for r in c.seed_rates_hi)}; {c.lo} "
            f"{', '.join(_pct(r) for r in c.seed_rates_lo)}")


def _rule_clauses(verdict: Verdict) -> dict:
    """The decision rule's clauses and what each contrast shows (its outcome is stated once, in the Verdict)."""
    v = verdict.analysis.verdict
    return _section("rule", "The decision rule, clause by clause", [
        _p("Clauses of the pre-registered rule:"),
        _ul([f"{name}: {'held' if held else 'did not hold'}" for name, held in v.clauses_held.items()]),
        _p("What each contrast shows (labels: `supported` = shown above 0 by all four one-sided tests, "
           "`not_supported`, `ruled_out` = the interval's and the run bound's high ends below the sesoi, `reversed` = "
           "shown below 0 by the mirror tests):"),
        _ul([f"{key}: {c.says}" for key, c in sorted(v.contrasts.items())])])


def _secondary(verdict: Verdict) -> dict:
    bpb = verdict.secondary.heldout_bpb
    seeds = sorted({s for arm in bpb.values() for s in arm.final_per_seed}, key=int)
    rows = [[arm, _num(m.base)] + [_num(m.final_per_seed.get(s)) for s in seeds] + [_num(m.final_mean)]
            for arm, m in sorted(bpb.items())]
    return _section("secondary", "Secondary metric: held-out bits per byte (lower is better)", [
        _p(BPB_TEXT), _tbl(["arm", "base"] + [f"seed {s}" for s in seeds] + ["final mean"], rows)])


BPB_TEXT = ("Bits per byte of each probe task's reference program given its prompt (harness.running.evaluation.heldout_pairs: "
            "the probe set's programs, which no arm trains on), lower is better; measured at the base and after every "
            "round.")


def _curves(verdict: Verdict, figures: list[str]) -> dict | None:
    """The learning curves: probe pass rate, held-out bits per byte and training loss per round."""
    blocks = _fig_blocks(figures, verdict, "probe_pass_rate.png", "heldout_bpb.png", "train_loss.png")
    return _section("curves", "Learning curves", blocks) if blocks else None


def _monitors(verdict: Verdict, figures: list[str]) -> dict:
    mon = verdict.monitors_final
    keys = [k for k in MONITOR_LABELS if any(m.get(k) is not None for m in mon.values())]
    rows = [[MONITOR_LABELS[k]] + [_num(mon[arm].get(k)) for arm in sorted(mon)] for k in keys]
    return _section("monitors", "Monitors (final round, mean over seeds)",
                    [_tbl(["monitor"] + sorted(mon), rows)] + _fig_blocks(figures, verdict, "monitors.png"))


def _heircommit(verdict: Verdict, figures: list[str]) -> dict | None:
    runs = {s_key: s for s_key, s in sorted(verdict.series.items(), key=run_order)
            if any(r.has("heircommit") for r in s.rounds)}
    if not runs:
        return None
    rows = []
    for key, s in runs.items():
        for r in s.rounds:
            h = r.heircommit
            if h is None:
                continue
            screen = f"{h['screen'][0]} vs {h['screen'][1]} of {h['screen'][2]}" if h["screen"] else "none"
            recovery = (f"{h['recovery_steps']} steps" if h["recovery_ran"]
                        else f"no ({h['continued_steps']} steps continued the update)" if h["continued_steps"] else "no")
            rows.append([key, r.round, h["decision"], screen, recovery,
                         f"{h['confirm'][0]} vs {h['confirm'][1]} of {h['confirm'][2]}", h["rule"],
                         _num(h["sign_test_p"]), pts(h["mde"]) if h["rule"] == "superior" else "-"])
    rows2 = [[k, f"{t.retained}/{t.rounds}", ", ".join(map(str, t.committed)) or "none",
              "yes (retained every round)" if t.final_is_base else "no",
              f"{t.final_equal_to_base}/{t.n_probes}"] for k, t in sorted(verdict.retained.items(), key=run_order)]
    return _section("gate", "The commit gate (C; D without recovery): commit / retain per round", [
        _tbl(["run", "round", "decision", "screen succ vs root", "recovery", "confirm succ vs root", "rule",
              "sign p", "MDE (superior rule only)"], rows),
        _p("Retained rounds and the final model:"),
        _tbl(["run", "retained", "committed rounds", "final model is the base", "final outcomes equal to the base's"],
             rows2)] + _fig_blocks(figures, verdict, "heircommit.png", "commit_curve.png"))


def _ledger_cell(values: list[int]) -> str:
    return str(values[0]) if len(set(values)) == 1 else " / ".join(map(str, values))


def _budget(verdict: Verdict) -> dict:
    """The whole compute ledger, side by side per arm (a cell lists seeds in order where they
    differ), then the registered equalities and the wall clock."""
    b = verdict.checks.budget
    arms = sorted(b.per_arm["learner_steps"])
    rows = [[k + (" (held equal)" if k in b.held_equal else "")] + [_ledger_cell(b.per_arm[k][a]) for a in arms]
            for k in b.fields]
    items = [f"{_ok(c.ok)}: {c.check}" + (f" ({c.detail})" if c.detail else "") for c in b.checks]
    items.append("(a failed equality is flagged, not refused: the runner refuses any round that breaks the "
                 "registration or charges other than what it did, so only records written by other code can fail here)")
    over = b.wall_clock_exceeded
    items.append(f"{'FLAG' if over else 'PASS'}: wall clock within the registered {_num(b.wall_clock_limit_s, 6)} s "
                 f"per run{': exceeded by ' + ', '.join(over) if over else ''} (recorded and reported, never used to cut "
                 f"a run)")
    own, theirs = b.own_training or {}, b.contenders_training
    apart = [_p(f"{a} is a control, not a contender, registered with a training budget of its own (arms.yaml): "
                f"{t['learner_steps_per_round']} learner steps per round at lr {t['lr']:g}, against budget.yaml's "
                f"{theirs['learner_steps_per_round']} at lr {theirs['lr']:g} for "
                f"every other arm; its learner_steps row differs by registration, and its fresh tasks with them.")
             for a, t in own.items()]
    return _section("ledger", "Compute ledger", [
        _p("Totals per run (base evaluation + every round). Held equal by registration: " + ", ".join(b.held_equal)
           + "; every other row is what an arm's design spends."), *apart,
        _tbl(["ledger entry"] + arms, rows), _ul(items),
        _p("Wall clock per run (s): " + ", ".join(f"{k} {_num(w, 6)}" for k, w in sorted(b.wall_clock_s.items())))])


def _leakage(verdict: Verdict) -> dict:
    leak = verdict.checks.leakage
    overlap = leak.seed_set_probe_overlap
    items = [f"{_ok(not leak.probe_hashes_at_solver)}: no probe task or program reached the solver "
             f"({leak.solver_tasks_checked} solver tasks checked across the ledgers; "
             f"{leak.probe_collisions_stopped_before_solver} probe collisions stopped before the solver)",
             f"{_ok(overlap == {'canonical': 0, 'program': 0})}: seed set holds no probe "
             f"program (overlap: {overlap['canonical']} canonical, {overlap['program']} program)",
             f"confirm-set hashes at the solver: {leak.confirm_hashes_at_solver}"]
    guard = leak.leak_guard or {}
    if guard:
        items.append(f"registered leak guard (tasks.yaml): no probe, confirm or calibration program is trained on; "
                     f"the same steps with other constants are "
                     f"{'trained on' if guard.get('same_ops_other_constants') == 'train' else 'held out too'}")
    items += [f"leak: `{x['ledger']}` line {x['line']} task `{x['task'][:16]}` matched by {', '.join(x['matched'])}"
              for x in leak.probe_hashes_at_solver]
    return _section("leakage", "Leakage", [_ul(items)])


def _deviations(verdict: Verdict) -> dict | None:
    """Deviations from the pre-registration logged after freeze (None while the verdict has no such field)."""
    if not verdict.has("deviations"):
        return None
    devs = verdict.deviations.entries
    if not devs:
        return _section("deviations", "Deviations", [_p("none (no deviation was logged after freeze)")])
    rows = [[d["date"], d["what"], d["why"], d["who"], d["outcome_seen"]] for d in devs]
    return _section("deviations", "Deviations", [
        _p("Logged after freeze with `python -m harness deviation`; none of them changed frozen content (that is "
           "refused)."), _tbl(["date", "what", "why", "who", "outcome seen"], rows)])


def _limitations(verdict: Verdict) -> dict:
    """What the verdict does not speak for, with the measured figure that says how much
    (docs/statistics.md, "The base is one draw")."""
    base = next(iter(verdict.against_base.values()), None)
    rate = "" if base is None else f", passing {_pct(base.mean_lo)} of the probes"
    sha = (verdict.inputs.base_sha256 or "unrecorded")[:12]
    return _section("limitations", "Limitations", [_ul([
        f"**The base is one draw.** Every arm started from the one base this protocol's recipe built (sha256 "
        f"{sha}{rate}): the verdict is about the loop started from that base, not about the recipe. Another "
        "draw of the same recipe can move the contrasts by more than the sesoi: on the main protocol's recipe, "
        "base seeds 7 and 8 built bases passing 10.9% and 35.7% of the probes, B-A read -0.9 pts (`ruled_out`) "
        "and -10.8 pts (`reversed`), and the verdicts differed (docs/statistics.md, \"The base is one draw\"). "
        + _recipe_words(verdict)])])


def _recipe_words(verdict: Verdict) -> str:
    """The Limitations' last sentence: the design about the recipe when decision.yaml registers a base
    spread (the designed analysis'), else what the intervals cannot say."""
    designed = verdict.design.designed if verdict.design else None
    if designed is None or designed.failed or designed.bases is None:
        return "The intervals resample this base's seeds and probes only; bases as a registered factor are not built."
    return "The intervals resample this base's seeds and probes only. " + words.recipe_limitation_words(designed)

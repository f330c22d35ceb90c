"""The pre-registration document freeze writes from the protocol: frozen/PREREGISTRATION.md, hashed
in FROZEN.lock like every other frozen file. Its sections follow the OSF Preregistration template
(AsPredicted asks the same questions): hypotheses, design, sampling plan (the data that existed
before the lock, the sample size and its rationale, the stopping rule), variables, analysis plan,
inference criteria, data exclusion and missing data, deviations.

It says what the code applies, each figure read from the protocol: every test with its sidedness
and level, the interval, the seed test, the run bound, the control checks' margins, what each
failed check does to the verdict (with decision.yaml's overrides), the labels and the decision
rule's clauses as harness.stats.contrasts decides them; the pilot's measurements and the base's one
evaluation, both made before the lock; and the deviations a resume creates by itself (the runner
logs them: harness.spec.deviations.record_resume) or a stated override brings.

`preregistration(protocol, power, pilot, base_rate)` is a pure function of the loaded protocol,
freeze's power report (harness.freeze.freeze.power_report), the pilot freeze measured with
(pilot.json's dict, or None) and the base's probe pass rate, so the same protocol frozen twice gives
the same bytes. Also here: `arm_definitions`, what each registered arm is (the report's arm table
uses it too). No torch.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.paths import DEVIATIONS_NAME, PREREG_NAME
from harness.readout.controls import CHECK_OUTCOMES, OVERRIDE_KEYS
from harness.readout import words
from harness.readout.words import SUMMARY_WORDS
from harness.spec.deviations import AUTOMATIC
from harness.spec.kinds import arms_with_role, kind_of, own_training
from harness.spec.protocol import Protocol
from harness.stats.contrasts import CLAUSES, OUTCOMES
from harness.stats.design.records import DesignAnalysis
from harness.stats.units import pts

# the seed test ("beyond the seed spread") of each registered spread_rule.test
# (harness.stats.contrasts.SPREAD_TESTS), as contrast_core applies it
SEED_TESTS = {
    "welch": "a one-sided Welch t-test on the per-seed pass rates of both arms, p < alpha (p = 1 when an arm has "
             "one seed or neither arm's seeds differ: no evidence of a gap beyond the spread)",
    "range": "the gap exceeds {multiplier} x the larger of the two arms' seed ranges (max - min of the per-seed pass "
             "rates)",
}
# when each check that can decide the verdict fails (harness.readout.controls.CHECK_OUTCOMES, in order)
CHECK_FAILS = {
    "infrastructure balance": "two arms' rates of infrastructure failures (probe or rollout verdicts) differ by more "
                              "than {gap}",
    "positive control": "the positive control {arms} does not beat every arm its check names",
    "negative control": "the negative control {arms} beats an arm it must not beat",
}


def arm_definitions(protocol: Protocol) -> dict:
    """arm -> {"kind", "role", "what"}: the registered kind, its readout role and the first sentence
    of its module's docstring (arms/<module>.py)."""
    out = {}
    for arm in protocol.arm_names:
        kind = kind_of(protocol, arm)
        spec = importlib.util.find_spec(kind.module)
        if spec is None or spec.origin is None:
            raise HarnessError(f"{protocol.dir / 'arms.yaml'}: arm {arm}: its kind's module {kind.module} is not found")
        doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text())) or ""
        first = re.split(r"(?<=\.)\s", " ".join(doc.split()), maxsplit=1)[0]
        out[arm] = {"kind": protocol.arms[arm].kind, "role": kind.role, "what": first}
    return out


def seed_test_words(rule: dict) -> str:
    """The registered seed test in words (SEED_TESTS); HarnessError for a test this document cannot word."""
    if rule.get("test") not in SEED_TESTS:
        raise HarnessError(f"decision.yaml spread_rule.test {rule.get('test')!r}: no wording for it in the "
                           f"pre-registration (harness.readout.prereg.SEED_TESTS)")
    return SEED_TESTS[rule["test"]].format(multiplier=f"{rule.get('multiplier', 0):g}")


# ---------------------------------------------------------------- 1. hypotheses

def _hypotheses(p: Protocol) -> list[str]:
    d = p.decision
    out = ["## 1. Hypotheses", "",
           f"Each hypothesis is directional and tested one-sided at alpha {d.alpha}. The smallest effect of interest "
           f"(sesoi, {pts(d.sesoi)} of probe pass rate) is not a threshold for support: a contrast is `supported` "
           "when the tests show its gap above 0, and the sesoi decides only whether an advantage is ruled out "
           "(section 6).", "",
           "Every hypothesis is about the loop started from this protocol's one frozen base (built by model.yaml's "
           "recipe, its sha256 in the lock), not about the recipe: another base of the same recipe is another draw, "
           "and the labels do not speak for it" + (" (section 3, the design about the recipe)." if p.decision.design.get(
               "base_spread") else "."), ""]
    for hi, lo in d.contrasts:
        out.append(f"- **H {hi}-{lo}**: arm {hi} ends with a higher probe pass rate than arm {lo} (direction "
                   f"{hi} > {lo}). Supported when the one-sided tests of section 5 all show {hi} - {lo} above 0; "
                   f"ruled out when {hi} - {lo} is shown below the sesoi; reversed when {lo} - {hi} is shown above 0.")
    for arm in arms_with_role(p, "positive_control"):
        c = p.arms[arm].check
        out.append(f"- **Instrument check, positive control {arm}**: {arm} beats each of {', '.join(c.must_beat)}: "
                   f"the gap is at least the margin {pts(c.margin)} and a one-sided sign test gives p < {d.alpha}.")
    for arm in arms_with_role(p, "negative_control"):
        c = p.arms[arm].check
        out.append(f"- **Instrument check, negative control {arm}**: {arm} does not beat "
                   f"{', '.join(c.must_not_beat)}: it fails if the gap is at least the margin {pts(c.margin)}, a "
                   f"one-sided sign test gives p < {d.alpha} and the run bound's low end is above 0 (gap - "
                   f"sqrt(t(1 - alpha, k - 1)^2 x seeds' variance + t(1 - alpha, n - 1)^2 x items' variance)).")
    return out + [""]


# ---------------------------------------------------------------- 2. design

def _design(p: Protocol, defs: dict) -> list[str]:
    b, g = p.budget, p.gates.confirm
    out = ["## 2. Design", "",
           "A between-arm comparison of training runs: every arm starts from the same frozen base; each run is one "
           "arm x seed; the seeds are replicates of a run and carry no pairing across arms. Nothing is blinded: "
           "the analysis is fixed here and applied once, by code, at the readout.", "",
           "| arm | kind | role | what it is |", "|---|---|---|---|"]
    out += [f"| {a} | `{x['kind']}` | {x['role']} | {x['what']} |" for a, x in defs.items()]
    out += ["", f"Held equal by registration and enforced exactly by the runner: {b.learner_steps_per_round} learner "
            f"steps per round for every arm (batch {b.batch_size}, recovery steps included), {b.rounds} rounds, "
            f"{b.tasks_per_round} tasks x {b.G} solver rollouts per round for every self-play arm, the same "
            f"evaluation for every arm, {b.max_bytes} bytes per completion. The readout checks each run's ledger "
            f"against these and flags any difference. The wall clock ({b.wall_clock_s_per_run:g} s per run) is "
            "recorded and checked, never used to stop a run."]
    own = own_training(p)
    if own:
        out += [""] + [f"The positive control {a} is a control, not a contender: it is registered with its own training, "
                       f"{t['learner_steps_per_round']} learner steps per round at lr {t['lr']:g} (the other arms: "
                       f"lr {b.lr:g}); the compute ledger records the difference." for a, t in own.items()]
    gated = [a for a in p.arm_names if kind_of(p, a).needs.confirm]
    if gated:
        test = ("commits when the successor passes at least as many fresh confirm probes as the root minus "
                f"{g.margin}" if g.rule == "not_worse" else
                f"commits when a one-sided exact sign test (successor > root) on fresh confirm probes gives p < {g.alpha}")
        out += ["", f"The commit gate of {', '.join(gated)} (gates.yaml confirm, rule `{g.rule}`) {test}; "
                    f"{p.tasks.confirm.per_round} confirm probes per round, never the probe set."]
    return out + [""]


# ---------------------------------------------------------------- 3. sampling plan

def _existing_data(p: Protocol, pilot: dict | None, base_rate: float | None) -> list[str]:
    """What was measured before the lock: the pilot (on the calibration split) and the base's evaluation."""
    out = ["### Data collected before the lock", ""]
    if pilot is None:
        out.append("No pilot was run: the design analysis rests on the registered assumptions "
                   "(decision.yaml design.assumed), not on measurements.")
    else:
        cal = pilot.get("calibration", {})
        base = pilot.get("base", {})
        rounds = pilot.get("measured_rounds", {})
        arms = pilot.get("arms", {})
        out += [f"The pilot (`make pilot`, results/{p.name}/frozen/pilot.json, hashed in FROZEN.lock) ran before the "
                f"lock on the **calibration split**: {cal.get('n_items', '?')} tasks from the probe distribution, "
                "program-disjoint from the probe and confirm sets, never used for a decision; the probe set was not "
                "looked at. It built the base exactly as freeze does and measured:", "",
                f"- the base's greedy pass rate there: {_rate(base.get('pass_rate'))}, per stratum and program class; "
                f"the k/{p.budget.G} distribution of its sampled solutions and the band's admission rate; the expected "
                f"reuse of each admitted rollout ({_num(pilot.get('reuse', {}).get('expected_epochs'))} epochs per round, "
                f"registered maximum {p.gates.band.max_reuse_epochs:g});",
                "- every registered arm run through the runner with the calibration split in the probe set's place, "
                "the arms the design reads through their registered rounds:", "",
                "| arm | rounds run | seeds | mean pass rate | seed SD (pts) | items on which every seed agrees |",
                "|---|---|---|---|---|---|"]
        for arm, a in arms.items():
            r = rounds.get(arm, a.get("round"))
            out.append(f"| {arm} | {'?' if r is None else f'0-{r}'} | {len(a.get('seeds', {}))} | "
                       f"{_rate(a.get('pass_rate_mean'))} | {_points(a.get('seed_sd'))} | {_rate(a.get('within_item_agreement'))} |")
        out += ["", "Its variance components (pass rates, seed SDs, seed and arm agreement) set the design analysis "
                "below."]
    out += ["", f"The base's one evaluation on the {p.tasks.probe.size} probes (frozen/base_eval.json, hashed in "
            "FROZEN.lock) was scored at freeze, before any arm ran"
            + (f" (pass rate {_rate(base_rate)})" if base_rate is not None else "")
            + ": it is every run's round -1 and the report's base row, checked against model.yaml's base_pass_range "
            "(a warning, not a decision). No contrast reads it; the positive control's check against the base does.",
            ""]
    return out


def _rate(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _points(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _sample_size(p: Protocol, power: dict) -> list[str]:
    d = p.decision
    design = DesignAnalysis.from_dict(power["design"], "freeze's power report: design") if power.get("design") else None
    summary = power.get("design_summary") or {}
    pess = design.pessimistic if design is not None and not design.failed else None
    source = design.components.source if design is not None and not design.failed else "?"
    replicates = "?" if design is None or design.replicates is None else design.replicates
    out = ["### Sample size", "",
           f"{p.tasks.probe.size} probes x {len(p.run_seeds)} seeds ({', '.join(map(str, p.run_seeds))}) per arm, "
           "fixed before any run.", "",
           "### Sample-size rationale", "",
           f"The design analysis (harness.stats.power) applies the readout's own decision function and control checks "
           f"to {replicates} simulated experiments of this size per effect cell, with variance "
           f"components from {'the pilot' if source == 'pilot' else 'the registered assumptions'}; registered power "
           f"{d.power}. The full operating characteristic is in frozen/freeze.json (`power`) and freeze's log.", "",
           "| figure | as designed | pessimistic |", "|---|---|---|"]
    pess_values = {"keep_both_at_sesoi": pess.keep_both_at_sesoi.p if pess else None,
                   "positive_control_power": pess.positive_control_power if pess else None,
                   "joint_power": pess.joint.p if pess and pess.joint else None}
    for key, said in SUMMARY_WORDS.items():
        if key in summary:
            out.append(f"| {said} | {_num3(summary[key])} | {_num3(pess_values.get(key))} |")
    if pess:
        out += ["", f"Pessimistic: the seed SDs at their {pess.level:.0%} upper confidence limit over "
                f"{pess.components.n_seeds} seeds."]
    if design is not None and not design.failed and design.bases is not None:
        out += [""] + _about_the_recipe(design)
    warnings = power.get("underpowered") or []
    if warnings:
        out += [""] + [f"- **Warning:** {w}" for w in warnings]
    return out + [""]


def _about_the_recipe(design: DesignAnalysis) -> list[str]:
    """The design about the recipe (harness.stats.design.bases) as a table (harness.readout.words)."""
    return (["### The design about the recipe", "", words.recipe_intro_words(design) + ":", "",
             "| " + " | ".join(words.recipe_header(design)) + " |", "|---" * 7 + "|"]
            + ["| " + " | ".join(r) + " |" for r in words.recipe_rows(design)]
            + ["", "This registration runs one base."])


def _num3(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _sampling_plan(p: Protocol, power: dict, pilot: dict | None, base_rate: float | None) -> list[str]:
    b = p.budget
    return (["## 3. Sampling plan", ""] + _base_paragraph(power.get("registration") or {})
            + _existing_data(p, pilot, base_rate)
            + ["### Data collection", "",
               f"Every registered arm x seed runs {b.rounds} rounds from the frozen base (`make run`, `make runs` or "
               f"`make experiment`); after each round the runner scores the probes greedily within {b.max_bytes} bytes "
               f"in the sandbox (the last round all {p.tasks.probe.size}, earlier rounds the registered subset of "
               f"{min(b.intermediate_eval_probes, p.tasks.probe.size)}), appends a chained record and seals the run when "
               "it completes.", ""]
            + _sample_size(p, power)
            + ["### Stopping rule", "",
               f"Fixed: {b.rounds} rounds per run and the registered seeds; no interim look at the probe outcomes "
               "between arms, no early stop. The readout runs once, when every registered run is sealed; its "
               "verdict is sealed.", ""])


# ---------------------------------------------------------------- 4. variables

def _variables(p: Protocol) -> list[str]:
    b = p.budget
    return ["## 4. Variables", "",
            f"- **Manipulated**: the arm ({', '.join(p.arm_names)}; section 2).",
            f"- **Primary outcome**: each probe's pass or fail at the final round (round {b.rounds - 1}): the greedy "
            f"completion within {b.max_bytes} bytes passes every test of the task in the sandbox; "
            f"{p.tasks.probe.size} frozen probe tasks (frozen/sets/probe.jsonl, hashed in the lock), per arm x seed. "
            "An arm's pass rate is the mean over items x seeds. Every task is drawn from the task family "
            f"`{p.family.name}` version {p.family.version} ({', '.join(f'{k} {v}' for k, v in p.family.settings().items())}), "
            "which the lock hashes with its source.",
            "- **Secondary outcomes** (reported, never part of the decision): held-out bits per byte at the base and "
            "after every round (lower is better); every arm's final pass rate against the base, paired by probe "
            "(one-sided t-tests on the items' gaps both ways at alpha: above, below (damage), not distinguishable); per-stratum "
            f"pass rates ({' / '.join(p.family.stratum_fields)}) and per program class "
            f"({', '.join(p.family.classes)}) with each arm's gain over the base; the collapse monitors (entropies, "
            "cross-input MI, zero-spread fraction, duplicate rate) per round; the commit gate's decisions; the compute "
            "ledger; the verifier's reasons per arm.", ""]


# ---------------------------------------------------------------- 5. analysis plan

def _analysis(p: Protocol) -> list[str]:
    d, boot = p.decision, p.bootstrap
    level = boot.confidence_level
    return ["## 5. Analysis plan", "",
            f"Each contrast hi - lo ({', '.join(f'{h}-{lo}' for h, lo in d.contrasts)}) is computed on the final round's "
            "probe outcomes, paired by probe item; seeds are not paired across arms, and every number is invariant "
            "to how seeds are labelled. Four tests, each one-sided at alpha "
            f"{d.alpha} (harness.stats.contrasts):", "",
            "1. **Sign test**: per item, the net difference of the two arms' outcomes summed over seeds; an exact "
            "one-sided binomial test on the signs of the non-zero differences (ties dropped).",
            f"2. **Interval**: a two-stage bootstrap (each arm's seeds with replacement, then the items with one index "
            f"set shared by both arms), {boot.method} method, {boot.n_resamples} resamples, rng seed {boot.rng_seed}; "
            f"two-sided at level {level} = 1 - 2 x alpha, so each end is a one-sided (1 - alpha) bound.",
            f"3. **Seed test** (beyond the seed spread, decision.yaml spread_rule `{d.spread_rule['test']}`): "
            f"{seed_test_words(d.spread_rule)}.",
            "4. **Run bound**: gap -+ sqrt(t(1 - alpha, k - 1)^2 x (s_hi^2/k + s_lo^2/k) + t(1 - alpha, n - 1)^2 x "
            "sigma_items^2/n), with s the SD of each arm's per-seed pass rates over its k seeds and sigma_items^2 the "
            "between-item variance of the per-item difference less its within-item part: a one-sided (1 - alpha) "
            "bound at each end that carries both arms' run spread and the item sampling. With one seed, or no seed "
            "spread in either arm, it is unbounded (-inf, +inf): no evidence either way.", "",
            "The control checks (section 6) are applied before the decision rule, on the same final-round outcomes: "
            "the mean gap over items x seeds against the registered margin, and the sign test above. The readout "
            "also checks the compute ledgers (the equalities of section 2, each rollout within the byte budget), "
            "that no probe task or program reached training (leakage), and that the verifier's infrastructure-failure "
            f"rates differ by at most {pts(p.gates.infrastructure.max_rate_gap).lstrip('+')} between arms; a failure "
            "of any is flagged in the verdict, not used to exclude data.", ""]


# ---------------------------------------------------------------- 6. inference criteria

def _inference(p: Protocol) -> list[str]:
    d = p.decision
    out = ["## 6. Inference criteria", "",
           f"alpha {d.alpha} for every one-sided test; sesoi {pts(d.sesoi)}. Each contrast gets one label, the first "
           "that holds in this order:", "",
           "- `reversed`: the mirror tests all hold: the sign test p < alpha for lo > hi, the interval's high end below "
           "0, the seed test the other way, the run bound's high end below 0;",
           "- `ruled_out`: the interval's high end AND the run bound's high end are below the sesoi (no advantage as "
           "large as the sesoi; this does not show lo >= hi);",
           "- `supported`: the sign test p < alpha, the interval's low end above 0, the seed test, and the run bound's "
           "low end above 0, all four;",
           "- `not_supported`: none of these.", "",
           "The decision rule needs both B-A and C-B (intersection-union), read in this order:", ""]
    out += [f"- `{_outcome_of_clause(k)}`: {v}" for k, v in CLAUSES.items()]
    return out + [""] + _check_outcomes(p)


def _check_outcomes(p: Protocol) -> list[str]:
    """What a failed check does to the verdict, as harness.readout.controls.final_verdict applies it with
    decision.yaml's overrides: the checks in the order they decide, each with its outcome or its stated
    reason to warn instead."""
    d = p.decision
    out = ["The checks come before the rule, in this order; the first failed check that decides sets the verdict "
           "(the contrasts are not read, and the rule's own outcome is reported beside it as what the rule alone "
           "would have said); every other failed check is a warning beside the verdict:", ""]
    for check, (outcome, _) in CHECK_OUTCOMES.items():
        role = {"positive control": "positive_control", "negative control": "negative_control"}.get(check)
        arms = arms_with_role(p, role) if role else []
        if role and not arms:
            continue
        when = CHECK_FAILS[check].format(gap=pts(p.gates.infrastructure.max_rate_gap).lstrip("+"), arms=", ".join(arms))
        key = OVERRIDE_KEYS.get(check)
        reason = getattr(d, key) if key else None
        if reason is None:
            out.append(f"- {check}: when {when}, the verdict is `{outcome}`.")
        else:
            out.append(f"- {check}: when {when}, the rule's verdict stands and the failure is a warning beside it, as "
                       f"registered (decision.yaml `{key}`: {reason}); without that reason the verdict would be "
                       f"`{outcome}`.")
    if not arms_with_role(p, "positive_control"):
        out.append("- no positive control is registered: nothing shows that the instrument can see an improvement.")
    return out + [""]


def _outcome_of_clause(clause: str) -> str:
    """The verdict a clause of CLAUSES gives ("not_resolved_ba" -> "not_resolved")."""
    return next(o for o in OUTCOMES if clause == o or clause.startswith(o + "_"))


# ---------------------------------------------------------------- 7. exclusions, 8. deviations

def _exclusions() -> list[str]:
    return ["## 7. Data exclusion and missing data", "",
            "No probe, run or seed is excluded, and nothing is imputed. The readout refuses unless every registered "
            "arm x seed is a sealed, intact run tied to this lock (chained records, manifest and seal verified). A run "
            "interrupted before it is sealed is resumed from its last completed round by the same code and ends with "
            "the same records as an uninterrupted one; the resume is logged as a deviation (section 8).", ""]


def _deviations(p: Protocol, power: dict) -> list[str]:
    log = f"results/{p.name}/{DEVIATIONS_NAME}"
    out = ["## 8. Deviations", "", "### Stated at registration", ""]
    reg = power.get("registration") or {}
    if reg.get("other_base"):
        out += ["**Frozen on another base than the registration was sized on, a deviation registered before any run "
                f"(model.yaml `on_other_base: deviation`).** Built by this freeze: `{reg['base']['sha256']}`; the "
                f"registration was sized on `{reg['sized_on_base']}` (section 3, The base). It is logged in {log} "
                "with both sha256.", ""]
    if reg.get("shortfalls"):
        said = [f"The design misses the registered power {p.decision.power}: {'; '.join(reg['shortfalls'])}",
                words.override_words(reg) or "No override states why"]
        if reg.get("unexcused"):
            said.append(f"On this base it does not excuse: {'; '.join(reg['unexcused'])}")
        out += ["**Registered below the power criterion, a deviation stated before any run.** "
                + " ".join(x.rstrip(".") + "." for x in said + ["The report's verdict repeats it"]), ""]
    elif not reg.get("other_base"):
        out += ["None: the design meets the registered power.", ""]
    out += ["### Logged after freeze", "",
            f"In {log}, a hash-chained log (date, what, why, who, whether any outcome had been seen); the readout "
            "reports every entry and seals the log's hash, and nothing can be added after it:", "",
            f"- **a resume, logged by the runner itself** (who: \"{AUTOMATIC}\", outcome seen: no): an arm x seed "
            "interrupted before it was sealed (a crash, a kill, Ctrl-C) and run again resumes from its last completed "
            "round, or starts over when none had completed; the entry names the run and the round it resumed from. "
            "Resuming is this registered rule, decided before any outcome existed;",
            "- **anything else done after freeze that leaves frozen content unchanged** (another machine, a run "
            "removed and run again from the start, a changed number of jobs), logged by hand before the readout with "
            "`make deviation WHAT=... WHY=... WHO=... OUTCOME_SEEN=yes|no`.", "",
            "A change of frozen content (any protocol file, set, the base, the source, this document) is refused by "
            "the lock: a changed protocol is a new protocol.", ""]
    return out


def _base_table(reg: dict) -> list[str]:
    """The base freeze built beside the base the registration was sized on, as a table, with what differing means."""
    base = reg.get("base") or {}
    rate = base.get("pass_rate")
    return ["", "| base | sha256 | |", "|---|---|---|",
            f"| built by this freeze, every arm's start | `{base.get('sha256')}` | probe pass rate "
            f"{_rate(rate)} |",
            f"| the registration was sized on (model.yaml `sized_on_base`) | `{reg.get('sized_on_base')}` | "
            f"{'the same base' if not reg.get('other_base') else 'another base'} |", "",
            words.base_words(reg) or ""]


def _base_paragraph(reg: dict) -> list[str]:
    """Section 3's statement of the base: the sentence of harness.readout.words.base_words, and the two
    bases side by side whenever they differ."""
    if not (reg.get("base") or {}).get("sha256"):
        return []
    if reg.get("other_base"):
        return ["### The base"] + _base_table(reg) + [""]
    return ["### The base", "", words.base_words(reg), ""]


def preregistration(protocol: Protocol, power: dict, pilot: dict | None = None, base_rate: float | None = None) -> str:
    """PREREGISTRATION.md text for `protocol`, from freeze's power report (its "design", "design_summary",
    "underpowered" and "registration"), the pilot (pilot.json's dict; None when the design rests on the
    registered assumptions) and the base's probe pass rate scored at freeze (None: not stated)."""
    head = [f"# Pre-registration: protocol `{protocol.name}`", "",
            f"Generated by freeze from protocols/{protocol.name}/*.yaml and hashed in FROZEN.lock as "
            f"frozen/{PREREG_NAME}; the YAML files are the registration, this is their reading, and every figure "
            "here is read from them. Sections follow the OSF Preregistration template (AsPredicted asks the same).", ""]
    body = (_hypotheses(protocol) + _design(protocol, arm_definitions(protocol))
            + _sampling_plan(protocol, power, pilot, base_rate) + _variables(protocol) + _analysis(protocol)
            + _inference(protocol) + _exclusions() + _deviations(protocol, power))
    return "\n".join(head + body).rstrip("\n") + "\n"

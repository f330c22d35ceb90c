"""The pre-registration document freeze writes from the protocol: frozen/PREREGISTRATION.md, hashed
in FROZEN.lock like every other frozen file, in the vocabulary of the registries (OSF Prereg,
AsPredicted): hypotheses with their directions, primary and secondary outcomes, conditions,
analysis plan, inference criteria, sample-size rationale (the design analysis), exclusions and
missing data, stopping rule, and where deviations are logged after freeze.

`preregistration(protocol, power)` is a pure function of the loaded protocol and freeze's power
report (harness.freeze.freeze.power_report), so the same protocol frozen twice gives the same bytes.
Also here: `arm_definitions`, what each registered arm is (the report's arm table uses it too).
No torch.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.paths import DEVIATIONS_NAME, PREREG_NAME
from harness.spec.kinds import arms_with_role, kind_of
from harness.spec.protocol import Protocol
from harness.stats.contrasts import CLAUSES


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


def _pts(x: float) -> str:
    return f"{100 * x:+.1f} pts"


def _hypotheses(p: Protocol) -> list[str]:
    d = p.decision
    out = ["## 1. Hypotheses (directional, one-sided)", ""]
    for hi, lo in d.contrasts:
        out.append(f"- **H {hi}-{lo}**: arm {hi} ends with a higher probe pass rate than arm {lo}, by at least the "
                   f"smallest effect of interest ({_pts(d.sesoi)}); direction {hi} > {lo}.")
    for arm in arms_with_role(p, "positive_control"):
        c = p.arms[arm].check
        out.append(f"- **Instrument check (positive control {arm})**: {arm} beats each of {', '.join(c.must_beat)} by "
                   f"at least {_pts(c.margin)} with a one-sided sign test p < {d.alpha}.")
    for arm in arms_with_role(p, "negative_control"):
        c = p.arms[arm].check
        out.append(f"- **Instrument check (negative control {arm})**: {arm} does not beat "
                   f"{', '.join(c.must_not_beat)} by {_pts(c.margin)} (gap at least the margin and sign test p < "
                   f"{d.alpha}).")
    return out + [""]


def _outcomes(p: Protocol) -> list[str]:
    b, fam = p.budget, p.family
    settings = ", ".join(f"{k} {v}" for k, v in fam.settings().items())
    return ["## 2. Primary outcome", "",
            f"Probe pass rate at the final round (round {b.rounds - 1}): a probe passes when the greedy completion "
            f"within {b.max_bytes} bytes passes every test of the task in the sandbox; {p.tasks.probe.size} frozen "
            f"probe tasks (frozen/sets/probe.jsonl, hashed in the lock), per arm x seed. Every task is drawn from the "
            f"task family `{fam.name}` version {fam.version} ({settings}), which the lock hashes with its source.", "",
            "## 3. Secondary outcomes (reported, never part of the decision)", "",
            "- held-out bits per byte at the base and after every round (lower is better);",
            "- every arm's final pass rate against the base, paired by probe (damage = significantly below);",
            f"- per-stratum pass rates ({' / '.join(fam.stratum_fields)}) per arm, and per program class "
            f"({', '.join(fam.classes)}) with each arm's gain over the base;",
            "- the collapse monitors (entropies, cross-input MI, zero-spread fraction, duplicate rate) per round;",
            "- C's commit gate: commit / retain per round; the compute ledger per run.", ""]


def _conditions(p: Protocol, defs: dict) -> list[str]:
    b = p.budget
    out = ["## 4. Conditions (arms)", "", "| arm | kind | role | what it is |", "|---|---|---|---|"]
    out += [f"| {a} | `{d['kind']}` | {d['role']} | {d['what']} |" for a, d in defs.items()]
    return out + ["", f"Every arm starts from the same frozen base and runs {b.rounds} rounds of exactly "
                  f"{b.learner_steps_per_round} learner steps (batch {b.batch_size}); the self-play arms spend "
                  f"{b.tasks_per_round} tasks x {b.G} rollouts per round. Seeds: "
                  f"{', '.join(map(str, p.run_seeds))} for every arm.", ""]


def _analysis(p: Protocol) -> list[str]:
    d, boot = p.decision, p.bootstrap
    spread = ("a one-sided Welch t-test on the per-seed pass rates of both arms" if d.spread_rule["test"] == "welch"
              else f"gap > {d.spread_rule.get('multiplier')} x the larger seed range of the two arms")
    return ["## 5. Analysis plan", "",
            "Each contrast is paired by probe item over the final round: per item, the net difference of the two "
            "arms' outcomes summed over seeds.", "",
            "- sign test: exact one-sided binomial on the signs of the items' net differences;",
            f"- interval: two-stage bootstrap (each arm's seeds, then items), {boot.method}, {boot.n_resamples} "
            f"resamples, level {boot.confidence_level}, rng seed {boot.rng_seed};",
            f"- beyond the seed spread: {spread};",
            "- the control checks are applied before the decision rule.", "",
            "## 6. Inference criteria", "",
            f"alpha {d.alpha} for every one-sided test; smallest effect of interest {_pts(d.sesoi)}. A contrast is "
            "`supported` when the sign test p < alpha, the interval's low end is above 0 and the gap is beyond the seed "
            "spread; `ruled_out` when the interval's high end is below the sesoi; `reversed` when the mirror tests hold; "
            "else `not_supported`. The decision rule (intersection-union over B-A and C-B):", ""] + [
            f"- `{k}`: {v}" for k, v in CLAUSES.items()] + [
            "- `instrument_insensitive`: a registered positive control fails its check; the contrasts are not read "
            "(the rule's own outcome is reported, labelled as what the rule alone would have said).",
            _check_outcome("negative_control_failed", "the negative control beats an arm it must not beat",
                           d.negative_control_override, "negative_control_override"),
            _check_outcome("infrastructure_imbalanced", "two arms' rates of infrastructure failures (probe or rollout "
                           f"verdicts) differ by more than {_pts(p.gates.infrastructure.max_rate_gap)}",
                           d.infrastructure_override, "infrastructure_override"),
            "", "The checks decide in this order: infrastructure balance, positive control, negative control; every "
            "other failed check is reported as a warning beside the verdict.", ""]


def _check_outcome(outcome: str, when: str, override: str | None, key: str) -> str:
    """One registered check outcome as the pre-registration states it: the outcome, or the stated override."""
    if override is None:
        return f"- `{outcome}`: {when}; the contrasts are not read (the rule's own outcome is reported as above)."
    return (f"- `{outcome}` is not registered: when {when}, the rule's verdict stands with the failure as a warning "
            f"(decision.yaml `{key}`: {override}).")


def _sample_size(p: Protocol, power: dict) -> list[str]:
    out = ["## 7. Sample size and its rationale", "",
           f"{p.tasks.probe.size} probes x {len(p.run_seeds)} seeds per arm, fixed before any run. The design analysis "
           f"(harness.stats.power) simulates the decision rule at this size; registered power {p.decision.power}:", ""]
    out += [f"    {line}" for line in power.get("lines", [])]
    out += [""] + [f"- **Warning:** {w}" for w in power.get("underpowered", [])]
    reg = power.get("registration") or {}
    if reg.get("shortfalls"):
        out += ["", f"**Registered below the power criterion, a deviation stated before any run.** The design misses "
                    f"the registered power {p.decision.power}: {'; '.join(reg['shortfalls'])}. Stated reason "
                    f"(decision.yaml `underpowered_override`): {reg['override']}"]
    return out + [""]


def _exclusions_and_stopping(p: Protocol) -> list[str]:
    return ["## 8. Data exclusions and missing data", "",
            "No probe, run or seed is excluded. The readout refuses unless every registered arm x seed is a sealed, "
            "intact run tied to this lock; a run that crashed is resumed or rerun from its last sealed round by the "
            "same code, and the rerun is logged as a deviation. Nothing is imputed.", "",
            "## 9. Stopping rule", "",
            f"Fixed: {p.budget.rounds} rounds per run, the registered seeds, no interim look at the probe outcomes "
            f"between arms. The wall clock ({p.budget.wall_clock_s_per_run:g} s per run) is recorded and reported, "
            "never used to stop a run. The readout runs once; its verdict is sealed.", "",
            "## 10. Deviations", "",
            f"Anything done after freeze that does not change frozen content (a rerun after a crash, another machine) "
            f"is logged in results/{p.name}/{DEVIATIONS_NAME} with `python -m harness deviation` (date, what, why, "
            "who, whether any outcome had been seen); the readout reports and seals it. A change of frozen content is "
            "refused: a changed protocol is a new protocol.", ""]


def preregistration(protocol: Protocol, power: dict) -> str:
    """PREREGISTRATION.md text for `protocol`, with freeze's power report (its "lines" and "underpowered")."""
    head = [f"# Pre-registration: protocol `{protocol.name}`", "",
            f"Generated by freeze from protocols/{protocol.name}/*.yaml and hashed in FROZEN.lock as "
            f"frozen/{PREREG_NAME}; the YAML files are the registration, this is their reading. Sections follow the "
            "OSF Prereg and AsPredicted templates.", ""]
    body = (_hypotheses(protocol) + _outcomes(protocol) + _conditions(protocol, arm_definitions(protocol))
            + _analysis(protocol) + _sample_size(protocol, power) + _exclusions_and_stopping(protocol))
    return "\n".join(head + body).rstrip("\n") + "\n"

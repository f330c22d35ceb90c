"""PREREGISTRATION.md says what the code applies: a registry's section order, hypotheses worded as the
rule decides them, every test with its sidedness, level and figures read from the protocol, the pilot
declared as data collected before the lock, the deviations a resume or an override creates, and the
design's figures as a table, not freeze's log lines."""
import re

import pytest
import yaml

from harness.freeze.freeze import power_report
from harness.readout import prereg
from harness.readout.analyzer import readout
from harness.readout.words import SUMMARY_WORDS
from harness.stats.contrasts import SPREAD_TESTS
from tests.fixtures_runs import BASE_PASSES, OUTCOMES, build_tree, write_protocol

HEADINGS = ["## 1. Hypotheses", "## 2. Design", "## 3. Sampling plan", "## 4. Variables", "## 5. Analysis plan",
            "## 6. Inference criteria", "## 7. Data exclusion and missing data", "## 8. Deviations"]
PILOT = {"calibration": {"n_items": 40}, "base": {"pass_rate": 0.175}, "reuse": {"expected_epochs": 3.25},
         "measured_rounds": {"A": 1, "B": 1, "C": 1, "P": 1, "N": 0, "D": 0},
         "arms": {a: {"round": r, "seeds": {"1": {}, "2": {}, "3": {}, "4": {}}, "pass_rate_mean": 0.25 + 0.01 * i,
                      "seed_sd": 0.0125, "within_item_agreement": 0.9}
                  for i, (a, r) in enumerate((("A", 1), ("B", 1), ("C", 1), ("P", 1), ("N", 0), ("D", 0)))}}


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """(protocol, power report, text) of the fixture protocol with its controls, frozen with PILOT."""
    p = write_protocol(tmp_path_factory.mktemp("prereg"), "fixture", controls=True)
    power = power_report(p)
    return p, power, prereg.preregistration(p, power, PILOT, 0.2)


def _section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_sections_follow_the_registry_order(registered):
    _, _, text = registered
    assert re.findall(r"^## .*$", text, flags=re.M) == HEADINGS
    sampling = _section(text, "## 3. Sampling plan")
    assert re.findall(r"^### .*$", sampling, flags=re.M) == [
        "### Data collected before the lock", "### Data collection", "### Sample size", "### Sample-size rationale",
        "### Stopping rule"]


def test_hypotheses_are_worded_as_the_rule_decides_them(registered):
    p, _, text = registered
    hyp = _section(text, "## 1. Hypotheses")
    assert "by at least" not in text  # support never requires the gap to reach the sesoi
    assert "The smallest effect of interest (sesoi, +5.0 pts of probe pass rate) is not a threshold for support" in hyp
    assert ("- **H B-A**: arm B ends with a higher probe pass rate than arm A (direction B > A). Supported when the "
            "one-sided tests of section 5 all show B - A above 0; ruled out when B - A is shown below the sesoi; "
            "reversed when A - B is shown above 0.") in hyp
    assert "P beats each of base, A: the gap is at least the margin +3.0 pts and a one-sided sign test gives p < 0.05" in hyp
    assert "N does not beat B: it fails if the gap is at least the margin +0.0 pts" in hyp


def test_every_test_bound_and_margin_is_the_protocols(registered, tmp_path):
    p, _, text = registered
    analysis = _section(text, "## 5. Analysis plan")
    boot = p.bootstrap
    for needle in ("Four tests, each one-sided at alpha 0.05", "exact one-sided binomial test on the signs",
                   f"{boot.method} method, {boot.n_resamples} resamples, rng seed {boot.rng_seed}; two-sided at level "
                   f"{boot.confidence_level} = 1 - 2 x alpha, so each end is a one-sided (1 - alpha) bound",
                   "spread_rule `welch`): a one-sided Welch t-test on the per-seed pass rates of both arms, p < alpha",
                   "**Run bound**: gap -+ sqrt(t(1 - alpha, k - 1)^2 x (s_hi^2/k + s_lo^2/k) + "
                   "t(1 - alpha, n - 1)^2 x sigma_items^2/n)", "it is unbounded (-inf, +inf)",
                   f"differ by at most {100 * p.gates.infrastructure.max_rate_gap:.1f} pts between arms"):
        assert needle in analysis, needle
    inference = _section(text, "## 6. Inference criteria")
    assert ("- `ruled_out`: the interval's high end AND the run bound's high end are below the sesoi" in inference
            and "the run bound's low end above 0, all four" in inference)
    assert re.findall(r"^- `(\w+)`: B-A", inference, flags=re.M) == [
        "keep_both", "drop_heircommit", "drop_heircommit", "loop_earns_nothing", "loop_earns_nothing", "not_resolved",
        "not_resolved"]  # every clause under the verdict it gives, no internal clause names
    gate = p.gates.confirm
    assert (f"(gates.yaml confirm, rule `{gate.rule}`) commits when the successor passes at least as many fresh "
            f"confirm probes as the root minus {gate.margin}") in _section(text, "## 2. Design")

    # the registered alternative seed test, with its multiplier
    decision = p.dir / "decision.yaml"
    data = yaml.safe_load(decision.read_text())
    other = write_protocol(tmp_path, "ranged", controls=False)
    data["spread_rule"] = {"test": "range", "multiplier": 1.5}
    (other.dir / "decision.yaml").write_text(yaml.safe_dump(data))
    from harness.spec.protocol import load_protocol
    ranged = load_protocol(other.dir)
    text2 = prereg.preregistration(ranged, power_report(ranged))
    assert "spread_rule `range`): the gap exceeds 1.5 x the larger of the two arms' seed ranges" in text2
    assert sorted(prereg.SEED_TESTS) == sorted(SPREAD_TESTS)  # every seed test the code offers has its words


def test_the_pilot_and_the_base_evaluation_are_declared_as_data_before_the_lock(registered):
    p, _, text = registered
    before = _section(text, "## 3. Sampling plan").split("### Data collection\n")[0]
    assert "ran before the lock on the **calibration split**: 40 tasks from the probe distribution" in before
    assert "the probe set was not looked at" in before and "17.5%" in before and "3.25 epochs per round" in before
    rows = [line for line in before.splitlines() if re.match(r"\| [A-Z] \|", line)]
    assert rows[0] == "| A | 0-1 | 4 | 25.0% | 1.2 | 90.0% |" and rows[4].startswith("| N | 0-0 | 4 |")
    assert len(rows) == len(PILOT["arms"])
    assert ("The base's one evaluation on the 40 probes (frozen/base_eval.json, hashed in FROZEN.lock) was scored at "
            "freeze, before any arm ran (pass rate 20.0%)") in before
    without = prereg.preregistration(p, power_report(p))
    assert "No pilot was run: the design analysis rests on the registered assumptions" in without


def test_the_design_is_a_table_of_its_figures_not_freezes_log(registered):
    p, power, text = registered
    rationale = _section(text, "## 3. Sampling plan").split("### Sample-size rationale\n")[1]
    assert not [line for line in power["lines"] if line.strip() and line.strip() in text]
    for key, value in power["design_summary"].items():
        want = "-" if value is None else f"{value:.3f}"
        assert f"| {SUMMARY_WORDS[key]} | {want} |" in rationale, key
    assert "frozen/freeze.json (`power`)" in rationale


def test_deviations_list_the_override_and_what_the_runner_logs(registered):
    p, power, text = registered
    dev = _section(text, "## 8. Deviations")
    assert "**Registered below the power criterion, a deviation stated before any run.**" in dev
    assert "; ".join(power["registration"]["shortfalls"]) in dev and p.decision.underpowered_override.reason in dev
    assert "excusing any shortfall on any base: a protocol not sized to decide anything" in dev  # smoke's, shortfalls: any
    assert f'**a resume, logged by the runner itself** (who: "{prereg.AUTOMATIC}", outcome seen: no)' in dev
    assert "`make deviation WHAT=... WHY=... WHO=... OUTCOME_SEEN=yes|no`" in dev
    assert "the resume is logged as a deviation (section 8)" in _section(text, "## 7. Data exclusion and missing data")


@pytest.mark.parametrize("finals, check, outcome", [
    ({**OUTCOMES["keep_both"], "P": BASE_PASSES}, "positive control", "instrument_insensitive"),
    ({**OUTCOMES["drop_heircommit"], "N": 30}, "negative control", "negative_control_failed")])
def test_what_a_failed_check_does_is_what_the_readout_does(tmp_path, finals, check, outcome):
    """Section 6 against the readout's behaviour on the same protocol: the failed check decides the
    verdict it names, with the rule's outcome beside it; with a stated override, the text says the rule's
    verdict stands with a warning."""
    import json
    tree = build_tree(tmp_path, finals, controls=True)
    v = json.loads((readout(tree.protocol_dir, tree.results_dir) / "verdict.json").read_text())["verdict"]
    assert v["outcome"] == outcome and v["decided_by"] == check and v["rule_alone"]
    inference = _section(prereg.preregistration(tree.protocol, power_report(tree.protocol)), "## 6. Inference criteria")
    lines = [line for line in inference.splitlines() if line.startswith(f"- {check}: when ")]
    assert len(lines) == 1 and lines[0].endswith(f", the verdict is `{outcome}`.")
    assert re.findall(r"^- (\w[\w ]*): when", inference, flags=re.M) == [
        "infrastructure balance", "positive control", "negative control"]  # the order they decide in
    if check == "negative control":
        decision = tree.protocol_dir / "decision.yaml"
        data = yaml.safe_load(decision.read_text())
        data["negative_control_override"] = "N's check is not trusted at this size"
        decision.write_text(yaml.safe_dump(data))
        from harness.spec.protocol import load_protocol
        text = prereg.preregistration(load_protocol(tree.protocol_dir), power_report(tree.protocol))
        assert ("- negative control: when the negative control N beats an arm it must not beat, the rule's verdict "
                "stands and the failure is a warning beside it, as registered (decision.yaml "
                "`negative_control_override`: N's check is not trusted at this size); without that reason the "
                "verdict would be `negative_control_failed`.") in text

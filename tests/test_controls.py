"""The control checks before the decision: the registered criterion on paired outcomes, the
verdict `instrument_insensitive` when the positive control does not beat the base (through the
real readout, on fixture runs), a failed negative control reported, and every arm against the base."""
import json

import numpy as np
import pytest

from harness.cli.main import _verdict_line
from harness.readout import controls
from harness.readout.analyzer import readout
from tests import fixtures_runs
from tests.fixtures_runs import BASE_PASSES, N_PROBES, OUTCOMES, build_tree


def _bits(k: int, n: int = N_PROBES) -> str:
    return "1" * k + "0" * (n - k)


def test_paired_nets_items_over_seeds_and_is_invariant_to_seed_labels():
    hi = np.array([[1, 1, 0, 0], [1, 0, 1, 0]])
    lo = np.array([[0, 1, 0, 1], [0, 1, 0, 1]])
    c = controls.paired(hi, lo)
    # item nets: +1, -0.5, +0.5, -1 -> 2 for hi, 2 for lo
    assert (c["hi_only"], c["lo_only"], c["gap"]) == (2, 2, 0.0)
    assert controls.paired(hi[::-1], lo) == c  # relabelling seeds changes nothing
    assert c["sign_p_greater"] == pytest.approx(0.6875)


def test_beats_needs_both_the_margin_and_the_sign_test():
    strong = {"gap": 0.10, "sign_p_greater": 0.001}
    assert controls.beats(strong, margin=0.03, alpha=0.05)
    assert not controls.beats(strong, margin=0.2, alpha=0.05)  # significant but below the margin
    assert not controls.beats({"gap": 0.10, "sign_p_greater": 0.2}, margin=0.03, alpha=0.05)  # noise


def test_against_base_reads_damage_and_gain():
    bases = {arm: {1: _bits(20), 2: _bits(20)} for arm in "XYZ"}
    finals = {"X": {1: _bits(30), 2: _bits(32)}, "Y": {1: _bits(8), 2: _bits(10)}, "Z": {1: _bits(21), 2: _bits(20)}}
    out = controls.against_base(finals, bases, alpha=0.05)
    assert out["X"]["reading"] == "above the base" and out["X"]["gap"] == pytest.approx(0.275)
    assert out["Y"]["reading"] == "below the base (damage)" and out["Y"]["lo_only"] == 12
    assert out["Z"]["reading"] == "not distinguishable from the base"


def _readout(tmp_path, finals):
    tree = build_tree(tmp_path, finals, controls=True)
    out = readout(tree.protocol_dir, tree.results_dir)
    return json.loads((out / "verdict.json").read_text()), (out / "report.md").read_text()


def test_a_positive_control_that_does_not_beat_the_base_makes_the_instrument_insensitive(tmp_path):
    """keep_both by the decision rule, but P ends at the base: the verdict is instrument_insensitive,
    the rule's outcome is still reported, and the report says so before the decision."""
    verdict, text = _readout(tmp_path, {**OUTCOMES["keep_both"], "P": BASE_PASSES})
    v = verdict["verdict"]
    assert verdict["analysis"]["verdict"]["outcome"] == v["rule_outcome"] == "keep_both"
    assert v["outcome"] == "instrument_insensitive" and v["decided_by"] == "positive control"
    assert verdict["controls"]["positive_ok"] is False
    failed = [(r["versus"], r["ok"]) for r in verdict["controls"]["positive"]]
    assert failed == [("base", False), ("A", False)]  # P 8 of 40 passes: below A's 10 too
    assert text.startswith("# Readout: protocol `fixture`\n\n## Verdict\n\n**Verdict: "
                           "instrument_insensitive**, decided by the positive control check. P did not beat base: the "
                           "margin was not met")
    assert text.index("## Verdict") < text.index("## Control checks") < text.index("## Contrasts")
    # the rule's own outcome appears once, labelled as what the rule alone would have said
    assert text.count("What the decision rule alone would have said") == 1
    assert "What the decision rule alone would have said (not read, the control overrides it): keep_both." in text
    assert "FAIL: positive control P must beat base by +3.0 pts" in text


def test_a_positive_control_that_beats_the_base_but_not_a_still_fails(tmp_path):
    # P passes 13 of 40: 5 items above the base's 8 (sign p 1/32), only 3 above A's 10 (sign p 1/8)
    verdict, _ = _readout(tmp_path, {**OUTCOMES["keep_both"], "P": 13})
    rows = {r["versus"]: (r["ok"], r["hi_only"]) for r in verdict["controls"]["positive"]}
    assert rows == {"base": (True, 5), "A": (False, 3)}
    assert verdict["verdict"]["outcome"] == "instrument_insensitive"


def _one_verdict(text: str) -> None:
    assert [line for line in text.splitlines() if "verdict" in line.lower() and line.startswith("#")] == ["## Verdict"]


def test_a_control_whose_sign_test_fails_is_reported_as_the_sign_test_not_the_margin(tmp_path):
    """P over A by +8.75 pts (margin +3 pts met) on only 4 items for, 0 against: sign p 1/16 >= 0.05.
    The verdict sentence names the sign test, and the command's log ends with the same sentence."""
    p_bits = "1" * 12 + "0" * 18 + "11" + "0" * 8  # base passes items 0-7, A's seeds 0-9 and 0-10, P 0-11 and 30-31
    verdict, text = _readout(tmp_path, {**OUTCOMES["keep_both"], "P": p_bits})
    v = verdict["verdict"]
    assert v["outcome"] == "instrument_insensitive"
    assert [(r["versus"], r["ok"]) for r in verdict["controls"]["positive"]] == [("base", True), ("A", False)]
    assert v["reason"] == ("P did not beat A: the margin was met (gap +8.8 pts >= margin +3.0 pts) but the sign test "
                           "failed (one-sided sign test p 0.0625 >= alpha 0.05 (4 items for, 0 against, of 40))")
    assert v["sentence"].replace("Verdict: instrument_insensitive", "**Verdict: instrument_insensitive**") in text
    assert v["reason"] in v["sentence"]
    assert "margin was not met" not in text
    _one_verdict(text)


def test_a_control_whose_margin_fails_is_reported_as_the_margin_not_the_sign_test(tmp_path, monkeypatch):
    """P's margin registered at +25 pts; P over A by +21.25 pts on 11 items for, 2 against (sign p 0.011):
    the sign test passed, the margin did not, and the sentence says so."""
    monkeypatch.setitem(fixtures_runs.SHRINK, "arms.yaml", {"C": {"recovery_steps": 2}, "P": {"check": {"margin": 0.25}}})
    p_bits = "1" * 8 + "00" + "1" * 11 + "0" * 19  # base 0-7, A's seeds 0-9 and 0-10, P 0-7 and 10-20
    verdict, text = _readout(tmp_path, {**OUTCOMES["keep_both"], "P": p_bits})
    v = verdict["verdict"]
    assert [(r["versus"], r["ok"]) for r in verdict["controls"]["positive"]] == [("base", True), ("A", False)]
    assert v["reason"] == ("P did not beat A: the margin was not met (gap +21.2 pts < margin +25.0 pts) although the "
                           "sign test passed (one-sided sign test p 0.0112 < alpha 0.05 (11 items for, 2 against, of 40))")
    assert v["reason"] in text and "sign test failed" not in text
    _one_verdict(text)


def test_a_rule_verdict_names_the_contrast_criteria_that_failed(tmp_path):
    verdict, text = _readout(tmp_path, OUTCOMES["not_resolved"])
    v = verdict["verdict"]
    assert v["outcome"] == "not_resolved" and v["decided_by"] == "decision rule" and v["rule_alone"] is None
    assert v["sentence"].startswith("Verdict: not_resolved, decided by the decision rule. B-A not_supported")
    assert "B-A is not_supported (gap +5.0 pts" in v["reason"] and "failed: " in v["reason"]
    assert "What the decision rule alone" not in text
    _one_verdict(text)


def test_the_main_commands_log_ends_with_the_reports_verdict_sentence(tmp_path):
    tree = build_tree(tmp_path, {**OUTCOMES["keep_both"], "P": BASE_PASSES}, controls=True)
    out = readout(tree.protocol_dir, tree.results_dir)
    from harness.readout.report import trust_lines
    verdict = json.loads((out / "verdict.json").read_text())
    v, reg = verdict["verdict"], verdict["registration"]
    lines, warnings = trust_lines(verdict)
    assert _verdict_line(out) == "\n".join([
        v["sentence"], v["rule_alone"], *lines, *(f"WARNING: {w}" for w in warnings),
        f"WARNING: registered below its power criterion by a stated override: {'; '.join(reg['shortfalls'])}"])
    assert lines[0].startswith("B-A: `")
    assert v["sentence"].replace("Verdict: instrument_insensitive", "**Verdict: instrument_insensitive**") in (
        out / "report.md").read_text()


def test_a_passing_positive_control_leaves_the_rules_verdict_and_a_failed_negative_warns(tmp_path):
    verdict, text = _readout(tmp_path, {**OUTCOMES["drop_heircommit"], "N": 30})
    v = verdict["verdict"]
    assert verdict["controls"]["positive_ok"] is True and verdict["controls"]["negative_ok"] is False
    assert v["outcome"] == v["rule_outcome"] == "drop_heircommit" and v["decided_by"] == "decision rule"
    assert "FAIL: negative control N must not beat B" in text
    assert "> **Warning:** negative control N beat B" in text


def test_every_arm_is_reported_against_the_base_with_a_base_row_and_retained_rounds(tmp_path):
    verdict, text = _readout(tmp_path, {**OUTCOMES["keep_both"], "A": 2})  # 6 items below the base: p 1/64
    ab = verdict["against_base"]
    assert sorted(ab) == ["A", "B", "C", "D", "N", "P"]
    assert ab["A"]["mean_lo"] == BASE_PASSES / N_PROBES and ab["A"]["reading"] == "below the base (damage)"
    assert f"| base (round -1) | {100 * BASE_PASSES / N_PROBES:.1f}% | {100 * BASE_PASSES / N_PROBES:.1f}% |" in text
    c1 = verdict["retained"]["C/seed1"]
    assert (c1["retained"], c1["committed"], c1["final_is_base"]) == (1, [0], False)
    assert "| C/seed1 | 1/2 | 0 | no |" in text


def test_a_gated_run_that_retained_every_round_ends_at_the_base(tmp_path):
    def always_retain(arm, seed, r, rec):
        if "heircommit" in rec:
            rec["heircommit"]["confirm"]["decision"] = "retain"

    tree = build_tree(tmp_path, {**OUTCOMES["keep_both"], "C": BASE_PASSES}, controls=True, edit_round=always_retain)
    verdict = json.loads((readout(tree.protocol_dir, tree.results_dir) / "verdict.json").read_text())
    c1 = verdict["retained"]["C/seed1"]
    assert (c1["retained"], c1["final_is_base"], c1["final_equal_to_base"]) == (2, True, N_PROBES)

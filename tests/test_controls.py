"""The control checks before the decision: the registered criterion on paired outcomes, the
verdict `instrument_insensitive` when the positive control does not beat the base and
`negative_control_failed` when the negative control beats B (through the real readout, on fixture runs),
the registered override that makes the latter a warning, and every arm against the base."""
import json
from types import SimpleNamespace

import numpy as np
import pytest

from harness.cli.main import _verdict_line
from harness.readout import controls
from harness.core.paths import readout_dir as _readout_dir
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
    assert (c.hi_only, c.lo_only, c.gap) == (2, 2, 0.0)
    assert controls.paired(hi[::-1], lo) == c  # relabelling seeds changes nothing
    assert c.sign_p_greater == pytest.approx(0.6875)


def test_beats_needs_both_the_margin_and_the_sign_test():
    strong = SimpleNamespace(gap=0.10, sign_p_greater=0.001)
    assert controls.beats(strong, margin=0.03, alpha=0.05)
    assert not controls.beats(strong, margin=0.2, alpha=0.05)  # significant but below the margin
    assert not controls.beats(SimpleNamespace(gap=0.10, sign_p_greater=0.2), margin=0.03, alpha=0.05)  # noise


def test_against_base_reads_damage_and_gain():
    bases = {arm: {1: _bits(20), 2: _bits(20)} for arm in "XYZ"}
    finals = {"X": {1: _bits(30), 2: _bits(32)}, "Y": {1: _bits(8), 2: _bits(10)}, "Z": {1: _bits(21), 2: _bits(20)}}
    out = controls.against_base(finals, bases, alpha=0.05)
    assert out["X"].reading == "above the base" and out["X"].paired.gap == pytest.approx(0.275)
    assert out["Y"].reading == "below the base (damage)" and out["Y"].paired.lo_only == 12
    assert out["Z"].reading == "not distinguishable from the base"
    x = out["X"]
    assert x.to_dict() == {**x.paired.to_dict(), "p_above": x.p_above, "p_below": x.p_below, "reading": "above the base"}


def readout_dir(tmp_path):
    return _readout_dir(tmp_path / "results", "fixture")


def _readout(tmp_path, finals):
    tree = build_tree(tmp_path, finals, controls=True)
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)  # the verdict and the words: no figure read
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
    title, header, rest = text.split("\n\n", 2)  # the title, then its one-line provenance header, then the verdict
    assert title == "# Readout: protocol `fixture`" and header.startswith("**Provenance:** frozen at git commit ")
    assert rest.startswith("## Verdict\n\n**Verdict: instrument_insensitive**, decided by the positive control check. "
                           "P did not beat base: the margin was not met")
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
    # the box: each check's finding in order (P vs base, then P vs A with its sign test and margin), then that
    # only the margin failed, never that the instrument showed no improvement; then the chance of this outcome
    assert v["sentence"].startswith("Verdict: instrument_insensitive, decided by the positive control check. P beat "
                                    "base: the margin was met (gap +27.5 pts >= margin +25.0 pts) and the sign test "
                                    "passed (one-sided sign test p 0.000488 < alpha 0.05 (11 items for, 0 against, of "
                                    "40)); " + v["reason"] + ". Only the margin failed: P's gain over A passed its sign "
                                    "test but is smaller than the registered margin +25.0 pts")
    assert "did not show an improvement" not in v["sentence"] and "did not show an improvement" not in _verdict_section(text)
    pos = {name: next(c for c in verdict["design"][name]["controls"] if c["role"] == "positive")
           for name in ("observed", "designed")}
    chance = (f"Were P truly +5.0 pts above A (its registered effect), its check would fail as it did here with P "
              f"{1 - pos['observed']['p_pass_at_effect']:.2f} at the variance components observed here and "
              f"{1 - pos['designed']['p_pass_at_effect']:.2f} as designed.")
    box = _verdict_section(text).split("\n\n")[1]  # the first paragraph: the sentence, then the chance
    assert box.endswith(v["sentence"].split("Verdict: instrument_insensitive", 1)[1] + " " + chance)
    assert _verdict_line(readout_dir(tmp_path)).splitlines()[:2] == [v["sentence"], chance]


def test_a_sign_test_failure_keeps_the_outcomes_clause():
    """The sentence's last words follow what failed: a failed sign test is no improvement shown; a margin
    alone is said to be only the margin."""
    def row(versus, gap, p):
        c = controls.Paired(mean_hi=0.5, mean_lo=0.5 - gap, gap=gap, n_items=40, hi_only=9, lo_only=3,
                            sign_p_greater=p, sign_p_less=1 - p)
        ok = controls.beats(c, 0.03, 0.05)
        return controls.ControlCheck(arm="P", versus=versus, margin=0.03, alpha=0.05, paired=c, beats=ok, ok=ok)
    for a_row, ends in ((row("A", 0.02, 0.01), "Only the margin failed: P's gain over A passed its sign test"),
                        (row("A", 0.05, 0.2), controls.INSENSITIVE_CLAUSE),
                        (row("A", -0.01, 0.01), controls.INSENSITIVE_CLAUSE)):
        checks = controls.ControlChecks(positive=[row("base", 0.08, 0.001), a_row], positive_ok=False, negative=[],
                                        negative_ok=None)
        rule = SimpleNamespace(outcome="keep_both", clause="keep both.",
                               contrasts={"B-A": SimpleNamespace(label="not_supported")})
        v = controls.final_verdict(rule, checks)
        assert v.sentence.startswith("Verdict: instrument_insensitive, decided by the positive control check. P beat "
                                     "base: the margin was met (gap +8.0 pts >= margin +3.0 pts)")
        assert ends in v.sentence.split("; P did not beat A: ", 1)[1]


def test_a_rule_verdict_names_the_contrast_criteria_that_failed(tmp_path):
    verdict, text = _readout(tmp_path, OUTCOMES["not_resolved"])
    v = verdict["verdict"]
    assert v["outcome"] == "not_resolved" and v["decided_by"] == "decision rule" and v["rule_alone"] is None
    assert v["sentence"].startswith("Verdict: not_resolved, decided by the decision rule. B-A not_supported")
    assert "B-A is not_supported (gap +5.0 pts" in v["reason"] and "failed: " in v["reason"]
    assert "What the decision rule alone" not in text
    _one_verdict(text)


def test_the_main_commands_log_ends_with_the_reports_verdict_paragraph(tmp_path):
    """The command's last lines are the report's verdict paragraph: the sentence, what the rule alone
    would have said, the failed control check that decided it, the labels, the design, every warning."""
    tree = build_tree(tmp_path, {**OUTCOMES["keep_both"], "P": BASE_PASSES}, controls=True)
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    from harness.readout.report import control_scale_lines, headline
    verdict = json.loads((out / "verdict.json").read_text())
    v, reg = verdict["verdict"], verdict["registration"]
    h = headline(verdict)
    assert _verdict_line(out) == "\n".join([
        v["sentence"], h["chance"], f"Checks: {h['checks']}", v["rule_alone"], *(f"Decided by: {x}" for x in h["deciding"]),
        *(f"Rule's label (not read): {x}" for x in h["trust"]), f"Design: {h['design']}",
        *(f"WARNING: {w}" for w in h["warnings"]), *([h["base"]] if h.get("base") else [])])
    # the positive control decided: its failed checks, with their numbers, are the deciding lines
    failed = [r for r in verdict["controls"]["positive"] if not r["ok"]]
    assert len(failed) == 2 and h["deciding"][2:] == control_scale_lines(verdict)  # then what a ruled_out would mean
    assert h["deciding"][0].startswith("positive control P against base (it requires a gap of at least the margin "
                                       "+3.0 pts and the one-sided sign test p < alpha 0.05): gap +0.0 pts")
    pos = next(c for c in verdict["design"]["observed"]["controls"] if c["role"] == "positive")
    assert f"its registered check passes with P {pos['p_pass_at_effect']:.3f} when P is truly +5.0 pts above A" in h["deciding"][0]
    assert [x.split(" `")[0] for x in h["trust"]] == ["B-A", "C-B"]
    details = dict(h["warning_details"])
    assert any(w.startswith("registered below its power criterion by a stated override") and "; ".join(reg["shortfalls"]) in w
               for w in details["the design is below its registered power, registered so by a stated override"])
    assert set(v["warnings"]) <= {w for lines in details.values() for w in lines}  # the failed checks that did not decide
    # one line per distinct warning in the box and the log; each warning in full once, below the verdict
    text = (out / "report.md").read_text()
    box = [line for line in _verdict_section(text).splitlines() if line.startswith("> **Warning:**")]
    assert box == [f"> **Warning:** {w}" for w in h["warnings"]] and len(set(box)) == len(box)
    assert len(box) < sum(len(lines) for lines in details.values())  # the design's power is said by several lines
    full = _warnings_section(text)
    for lines in details.values():
        for w in lines:
            assert full.count(w[1:]) == 1
    assert v["sentence"].replace("Verdict: instrument_insensitive", "**Verdict: instrument_insensitive**") in (
        out / "report.md").read_text()


def _verdict_section(text: str) -> str:
    return text[text.index("## Verdict"):text.index("\n## ", text.index("## Verdict") + 1)]


def _warnings_section(text: str) -> str:
    """The Warnings section, which follows the Verdict section."""
    start = text.index("## Warnings")
    assert text.index("\n## ", text.index("## Verdict") + 1) + 1 == start
    return text[start:text.index("\n## ", start + 1)]


def test_a_negative_control_that_beats_b_makes_the_verdict_negative_control_failed(tmp_path):
    """N passes 30 of 40 against B's 21, 20, 21, 20 (items 20-29 for, none against, sign p 2^-10): N beats B. The rule says
    drop_heircommit, but both of its contrasts read B: the registered outcome is negative_control_failed,
    stated in verdict.json, the report's verdict section and the command's last lines."""
    verdict, text = _readout(tmp_path, {**OUTCOMES["drop_heircommit"], "N": 30})
    v = verdict["verdict"]
    assert verdict["controls"]["positive_ok"] is True and verdict["controls"]["negative_ok"] is False
    assert (v["outcome"], v["decided_by"], v["rule_outcome"]) == ("negative_control_failed", "negative control",
                                                                  "drop_heircommit")
    assert [(f["check"], f["outcome"], f["override"]) for f in v["failed_checks"]] == [
        ("negative control", "negative_control_failed", None)]
    # the run bound (N's seeds agree; B's 21, 20, 21, 20): 0.2375 - sqrt(2.353^2 x 0.0000521 + 1.685^2 x 0.004431)
    # = +12.4 pts
    assert v["reason"] == ("N beat B: the margin was met (gap +23.8 pts >= margin +0.0 pts), the sign test "
                           "passed (one-sided sign test p 0.000977 < alpha 0.05 (10 items for, 0 against, of 40)) and "
                           "the run bound's low end +12.4 pts is above 0")
    assert v["sentence"] == (f"Verdict: negative_control_failed, decided by the negative control check. {v['reason']}. "
                             f"{v['clause']}.")
    assert v["rule_alone"].startswith("What the decision rule alone would have said (not read, the control overrides "
                                      "it): drop_heircommit.")
    assert v["warnings"] == []
    section = _verdict_section(text)
    assert section.startswith("## Verdict\n\n**Verdict: negative_control_failed**, decided by the negative control "
                              "check. N beat B")
    assert v["rule_alone"] in section
    assert "If the negative control beats an arm it must not beat, the pre-registered outcome is " \
           "`negative_control_failed`" in text
    log = _verdict_line(readout_dir(tmp_path))
    lines = log.splitlines()
    assert lines[0] == v["sentence"] and lines[1].startswith("Were N truly equal to B, its check would fire as it did "
                                                              "here with P ")
    assert lines[2].startswith("Checks: The positive control: P beat base") and lines[3] == v["rule_alone"]
    _one_verdict(text)


def test_a_negative_control_ahead_of_b_without_the_sign_test_leaves_the_rules_verdict(tmp_path):
    """N passes B's items plus two more on each seed: a positive gap (+5 pts, over the margin 0) on 3 items
    for (20 to 22) and 0 against, sign p 1/8: N does not beat B, nothing failed, the rule decides."""
    b = OUTCOMES["drop_heircommit"]["B"]
    verdict, text = _readout(tmp_path, {**OUTCOMES["drop_heircommit"], "N": {s: k + 2 for s, k in b.items()}})
    v = verdict["verdict"]
    row = verdict["controls"]["negative"][0]
    assert (row["gap"], row["hi_only"], row["lo_only"], row["sign_p_greater"], row["ok"]) == (0.05, 3, 0, 0.125, True)
    assert verdict["controls"]["negative_ok"] is True
    assert (v["outcome"], v["decided_by"], v["rule_alone"]) == ("drop_heircommit", "decision rule", None)
    assert v["failed_checks"] == [] and v["warnings"] == []
    assert "PASS: negative control N must not beat B" in text
    section = _verdict_section(text)
    assert "the negative control: N did not beat B (gap +5.0 pts, margin +0.0 pts, sign test p 0.125)" in section
    assert "negative control check failed" not in text


def test_a_negative_control_registered_to_warn_leaves_the_rules_verdict_with_the_reason(tmp_path, monkeypatch):
    """decision.yaml registers negative_control_override with a reason: N beating B is a warning that
    carries the reason, in verdict.json, the report's verdict section and the command's last lines."""
    reason = "a pipeline check whose negative control only shows the arm runs end to end"
    monkeypatch.setitem(fixtures_runs.SHRINK, "decision.yaml",
                        {**fixtures_runs.SHRINK["decision.yaml"], "negative_control_override": reason})
    verdict, text = _readout(tmp_path, {**OUTCOMES["drop_heircommit"], "N": 30})
    v = verdict["verdict"]
    assert verdict["controls"]["negative_ok"] is False
    assert (v["outcome"], v["decided_by"], v["rule_alone"]) == ("drop_heircommit", "decision rule", None)
    assert v["overrides"]["negative_control_override"] == reason
    assert [(f["check"], f["override"]) for f in v["failed_checks"]] == [("negative control", reason)]
    (warning,) = v["warnings"]
    assert warning.startswith("the negative control check failed: N beat B: the margin was met")
    assert f"(decision.yaml negative_control_override: {reason})" in warning
    assert warning.endswith("without that it would make the verdict `negative_control_failed`")
    assert "> **Warning:** the negative control check failed\n" in _verdict_section(text)
    assert "WARNING: the negative control check failed" in _verdict_line(readout_dir(tmp_path)).splitlines()
    assert f"**The negative control check failed.** {warning[:1].upper()}{warning[1:]}" in _warnings_section(text)
    assert f"the rule's verdict stands and the failure is a warning beside it, as registered (decision.yaml " \
           f"negative_control_override: {reason})" in text


def test_a_failed_positive_control_decides_before_a_failed_negative_one(tmp_path):
    """Both controls fail: the positive control decides (instrument_insensitive) and the negative
    control's failure is a warning naming the outcome it would have given."""
    verdict, text = _readout(tmp_path, {**OUTCOMES["keep_both"], "P": BASE_PASSES, "N": 36})
    v = verdict["verdict"]
    assert (v["outcome"], v["decided_by"]) == ("instrument_insensitive", "positive control")
    assert [f["check"] for f in v["failed_checks"]] == ["positive control", "negative control"]
    (warning,) = v["warnings"]
    assert warning.startswith("the negative control check failed too: N beat B: ")
    assert warning.endswith("(on its own: `negative_control_failed`; the positive control check decided)")
    assert "> **Warning:** the negative control check failed\n" in _verdict_section(text)
    assert warning[1:] in _warnings_section(text)


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
    verdict = json.loads((readout(tree.protocol_dir, tree.results_dir, figures=False) / "verdict.json").read_text())
    c1 = verdict["retained"]["C/seed1"]
    assert (c1["retained"], c1["final_is_base"], c1["final_equal_to_base"]) == (2, True, N_PROBES)

"""The positive control sized to the sesoi: its training registered apart from the contenders' (arms.yaml),
carried through the accounting and the compute ledger, and what the verdict says a `ruled_out` means
when the control gains less than the sesoi on the probes."""
import json

import pytest

from harness.cli.main import _verdict_line
from harness.readout.analyzer import readout
from harness.readout.report import control_scale_lines
from harness.spec import accounting
from harness.spec.kinds import learner_steps, learning_rate, own_training
from harness.spec.protocol import ProtocolError, load_protocol
from tests.fixtures_runs import BASE_PASSES, OUTCOMES, build_tree
from tests.tiny_protocol import make_tiny_protocol

OWN = {"arms.yaml": {"P": {"learner_steps_per_round": 7, "lr": 0.001}}}  # the fixture's contenders: 5 a round


def test_a_positive_control_may_register_its_own_training_and_nothing_else_may(tmp_path):
    p = load_protocol(make_tiny_protocol(tmp_path, arms={"P": {"learner_steps_per_round": 5, "lr": 0.001}}))
    assert (learner_steps(p, "P"), learning_rate(p, "P")) == (5, 0.001)
    assert (learner_steps(p, "A"), learning_rate(p, "A")) == (p.budget.learner_steps_per_round, p.budget.lr)
    assert own_training(p) == {"P": {"learner_steps_per_round": 5, "lr": 0.001}}
    assert accounting.registered_round(p, "P")["learner_steps"] == 5
    assert accounting.registered_run(p, "P")["learner_steps"] == 5 * p.budget.rounds
    assert accounting.registered_run(p, "P")["lr"] == 0.001 and accounting.registered_run(p, "A")["lr"] == p.budget.lr
    plain = load_protocol(make_tiny_protocol(tmp_path / "plain"))
    assert own_training(plain) == {} and learner_steps(plain, "P") == plain.budget.learner_steps_per_round
    # a contender cannot: its training is budget.yaml's, held equal
    with pytest.raises(ProtocolError, match=r"arms.yaml: arm 'A': unknown key\(s\) \['lr'\]"):
        load_protocol(make_tiny_protocol(tmp_path / "a", arms={"A": {"lr": 0.001}}))
    with pytest.raises(ProtocolError, match=r"arms.yaml: arm 'P': key 'learner_steps_per_round': expected an integer >= 1, got 0"):
        load_protocol(make_tiny_protocol(tmp_path / "zero", arms={"P": {"learner_steps_per_round": 0}}))


def test_the_ledger_says_how_the_controls_training_differs(tmp_path):
    """Fixture runs charging P its own 7 steps a round: every registered equality holds, per arm, and
    the report's compute ledger and the pre-registration's conditions say how P differs."""
    tree = build_tree(tmp_path, dict(OUTCOMES["keep_both"]), controls=True, changes=OWN)
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    verdict = json.loads((out / "verdict.json").read_text())
    b = verdict["checks"]["budget"]
    assert b["ok"], [c for c in b["checks"] if not c["ok"]]
    rounds = tree.protocol.budget.rounds
    assert set(b["per_arm"]["learner_steps"]["P"]) == {7 * rounds}
    assert set(b["per_arm"]["learner_steps"]["A"]) == {tree.protocol.budget.learner_steps_per_round * rounds}
    assert b["own_training"] == {"P": {"learner_steps_per_round": 7, "lr": 0.001}}
    text = (out / "report.md").read_text()
    assert ("P is a control, not a contender, registered with a training budget of its own (arms.yaml): 7 learner "
            f"steps per round at lr 0.001, against budget.yaml's {tree.protocol.budget.learner_steps_per_round} at lr "
            f"{tree.protocol.budget.lr:g} for every other arm") in text
    from harness.readout.prereg import _design, arm_definitions
    conditions = "\n".join(_design(tree.protocol, arm_definitions(tree.protocol)))
    assert "The positive control P is a control, not a contender: it is registered with its own training, 7 learner " \
           "steps per round at lr 0.001" in conditions


def test_a_round_off_the_controls_own_registration_is_flagged(tmp_path):
    """A P round that took the contenders' steps instead of its own registered 7 fails the per-round check."""
    def contenders_steps(arm, seed, r, rec):
        if arm == "P" and seed == 1 and r == 0:
            rec["budget"]["learner_steps"] = rec["budget"]["update_steps"] = 3
        return rec
    tree = build_tree(tmp_path, dict(OUTCOMES["keep_both"]), controls=True, changes=OWN, edit_round=contenders_steps)
    verdict = json.loads((readout(tree.protocol_dir, tree.results_dir, figures=False) / "verdict.json").read_text())
    failed = [c for c in verdict["checks"]["budget"]["checks"] if not c["ok"]]
    assert any(c["check"].startswith("every round took exactly the registered") and "P/seed1 round 0 took 3" in c["detail"]
               for c in failed), failed


@pytest.mark.parametrize("p_passes, said", [(BASE_PASSES, True), (36, False)])
def test_the_verdict_says_what_ruled_out_means_when_the_control_is_below_the_sesoi(tmp_path, p_passes, said):
    """P at the base (+0.0 pts over it on the probes, below the sesoi): the verdict paragraph and the
    command's last lines say that a `ruled_out` rules out an effect larger than the known-good arm
    produces here. P far above the base: nothing is said."""
    tree = build_tree(tmp_path, {**OUTCOMES["loop_earns_nothing"], "P": p_passes}, controls=True)
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    verdict = json.loads((out / "verdict.json").read_text())
    gap = next(r["gap"] for r in verdict["controls"]["positive"] if r["versus"] == "base")
    lines = control_scale_lines(verdict)
    verdict_section = (out / "report.md").read_text().split("\n## ")[1]
    if not said:
        assert gap >= 0.05 and lines == []
        assert "known-good arm" not in verdict_section and "known-good arm" not in _verdict_line(out)
        return
    assert gap == 0.0
    assert lines == ["The positive control P gained +0.0 pts over the base on the probes, below the sesoi (+5.0 pts): "
                     "the known-good training moves the probe pass rate less than the effect the rule asks about, so a "
                     "`ruled_out` here rules out an effect larger than the known-good arm produces here, not one the "
                     "instrument has shown it could see."]
    assert lines[0] in verdict_section and lines[0] in _verdict_line(out)

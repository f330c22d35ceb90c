"""Verdict reasons in the records and the readout: per-arm reason rates, the registered
infrastructure-balance check, the report's table, and what a failed balance does to the verdict
(faults injected into fixture runs' probe verdicts)."""
import json
from dataclasses import replace

import numpy as np
import pytest

from harness.cli.main import _verdict_line
from harness.core.typed import RoundRecord, StartRecord
from harness.readout.analyzer import ReadoutError, RunData, _check_eval, readout, verdict_reasons
from harness.readout.audit import audit
from harness.readout.controls import ControlCheck, ControlChecks, final_verdict
from harness.stats.checks import Paired
from harness.stats.results import ContrastSays, RuleDecision
from harness.readout.report import render_sections, verdict_reasons_section
from harness.spec.protocol import load_protocol
from tests import fixtures_runs
from tests.fixtures_runs import N_PROBES, OUTCOMES, ROUNDS, build_tree


def _ev(reasons: list[str], retried: int = 0) -> dict:
    return {"probe_passed": "".join("1" if x == "pass" else "0" for x in reasons), "probe_reasons": reasons,
            "probe_retried": retried}


def _run(arm: str, seed: int, evals: list[dict], ledger: list[dict] = ()) -> RunData:
    """A run as the readout loads it, holding only what the reason tables read: its evaluations and ledger."""
    start = StartRecord.from_dict({"kind": "start", "protocol": "smoke", "arm": arm, "seed": seed, "lock_hash": None,
                                   "code_version": "", "base_eval": evals[0], "budget": {}})
    rounds = [RoundRecord.from_dict({"kind": "round", "round": i, "eval": ev, "budget": {}, "checkpoint": "",
                                     "ledger_lines": 0, "experience_lines": 0}) for i, ev in enumerate(evals[1:])]
    return RunData(arm, seed, f"{arm}/seed{seed}", None, "", start, rounds, list(ledger))


def test_reason_rates_per_arm_and_the_balance_check_flags_an_unequal_infrastructure_rate():
    protocol = load_protocol("smoke")
    gap = protocol.gates.infrastructure.max_rate_gap
    runs = [_run("A", 0, [_ev(["pass", "wrong_answer"]), _ev(["pass", "pass"])]),
            _run("A", 1, [_ev(["pass", "error"]), _ev(["pass", "pass"])]),
            _run("B", 0, [_ev(["pass", "wrong_answer"]), _ev(["wall_limit", "pass"], retried=1)],
                 [{"solver": True, "G": 2, "reasons": ["pass", "sandbox_error"], "retried": 1}]),
            _run("B", 1, [_ev(["pass", "timeout"]), _ev(["pass", "pass"])])]
    vr = verdict_reasons(protocol, runs)
    a, b = vr["probes"]["A"], vr["probes"]["B"]
    assert (a["n"], b["n"]) == (8, 8)
    assert a["rates"]["pass"] == 6 / 8 and a["rates"]["error"] == 1 / 8 and a["infrastructure"] == 0.0
    assert b["rates"]["wall_limit"] == 1 / 8 and b["infrastructure"] == 1 / 8 and b["retried"] == 1
    assert sum(b["rates"].values()) == pytest.approx(1.0)
    assert vr["balance"]["probes"] == {"gap": 0.125, "arms": ["B", "A"], "flagged": 0.125 > gap, "max_rate_gap": gap}
    assert vr["balance"]["probes"]["flagged"]
    assert vr["rollouts"]["B"]["infrastructure"] == 0.5 and "A" not in vr["rollouts"]
    assert vr["balance"]["rollouts"]["gap"] is None  # one arm with rollouts: nothing to compare
    text = render_sections([verdict_reasons_section(vr)])
    assert "## Verifier reasons per arm" in text and "`wall_limit`" in text and "| B | 8 |" in text
    assert "FAIL: infrastructure-rate balance, largest gap +12.5 pts between B and A" in text


def test_equal_infrastructure_rates_pass_and_records_without_reasons_are_counted_apart():
    protocol = load_protocol("smoke")
    old = {"probe_passed": "10"}
    runs = [_run("A", 0, [_ev(["pass", "sandbox_error"]), old]), _run("B", 0, [_ev(["wall_limit", "pass"]), old])]
    vr = verdict_reasons(protocol, runs)
    assert vr["probes"]["A"]["unrecorded"] == 2 and vr["probes"]["A"]["n"] == 2
    assert vr["balance"]["probes"]["gap"] == 0.0 and not vr["balance"]["probes"]["flagged"]
    assert "PASS: infrastructure-rate balance" in render_sections([verdict_reasons_section(vr)])
    assert verdict_reasons_section({}) is None


@pytest.mark.parametrize("ev, match", [
    ({"probe_passed": "10", "probe_reasons": ["pass"]}, "must be a list of 2 verifier reasons"),
    ({"probe_passed": "10", "probe_reasons": ["pass", "gremlins"]}, "must be a list of 2 verifier reasons"),
    ({"probe_passed": "10", "probe_reasons": ["wrong_answer", "pass"]}, "disagree"),
])
def test_malformed_probe_reasons_are_a_readout_error_naming_the_record(ev, match, tmp_path):
    with pytest.raises(ReadoutError, match=match) as err:
        _check_eval(ev, 2, tmp_path / "records.jsonl", 3)
    assert "records.jsonl:3" in str(err.value)


# ---------------------------------------------------------------- the failed balance check decides the verdict

FAULTS = 4  # of N_PROBES: 10% of each evaluation's probe verdicts


def _faulted(seed: int, rnd: int) -> set[int]:
    """The probes whose verdicts an injected fault turns into `wall_limit` in (seed, round): the same
    items for every arm, drawn with a seeded RNG."""
    rng = np.random.default_rng([20261301, seed, rnd])
    return {int(i) for i in rng.choice(N_PROBES, FAULTS, replace=False)}


def _inject(arms: str):
    """edit_round: every round of `arms` gets 10% of its probe verdicts marked `wall_limit` (failed
    twice: retried, then kept; a failed probe's bit is 0); every arm's rounds record their reasons."""
    def edit(arm, seed, rnd, rec):
        ev = rec["eval"]
        hit = _faulted(seed, rnd) if arm in arms else set()
        bits = "".join("0" if i in hit else b for i, b in enumerate(ev["probe_passed"]))
        ev.update(probe_passed=bits, probe_pass_rate=bits.count("1") / len(bits), probe_retried=len(hit),
                  probe_reasons=["wall_limit" if i in hit else "pass" if b == "1" else "wrong_answer"
                                 for i, b in enumerate(bits)])
    return edit


def _faulted_finals(arms: str) -> dict:
    """The final round's probe outcomes of OUTCOMES['keep_both'] after `_inject(arms)`, per arm and seed."""
    out = {}
    for arm, per_seed in OUTCOMES["keep_both"].items():
        hit = {s: _faulted(s, ROUNDS - 1) if arm in arms else set() for s in per_seed}
        out[arm] = {s: "".join("0" if i in hit[s] else "1" if i < k else "0" for i in range(N_PROBES))
                    for s, k in per_seed.items()}
    return out


def _read(root, arms: str, tree_out: list | None = None):
    tree = build_tree(root, OUTCOMES["keep_both"], edit_round=_inject(arms))
    out = readout(tree.protocol_dir, tree.results_dir)
    if tree_out is not None:
        tree_out.append(tree)
    return json.loads((out / "verdict.json").read_text()), (out / "report.md").read_text(), _verdict_line(out)


def _verdict_section(text: str) -> str:
    return text[text.index("## Verdict"):text.index("\n## ", text.index("## Verdict") + 1)]


def test_infrastructure_failures_in_one_arm_fail_the_balance_and_the_verdict_says_so(tmp_path):
    """10% of B's probe verdicts (every round, both seeds) are infrastructure failures, none of A's or C's:
    the balance check fails (gap 10 pts > 1 pt) and the verdict is `infrastructure_imbalanced`, in
    verdict.json, the report's verdict section and the command's last lines; what the rule alone
    would have said is reported beside it."""
    trees: list = []
    verdict, text, log = _read(tmp_path, "B", trees)
    vr, v = verdict["verdict_reasons"], verdict["verdict"]
    assert {arm: (row["n"], row["infrastructure"], row["retried"]) for arm, row in vr["probes"].items()} == {
        "A": (160, 0.0, 0), "B": (160, 0.1, 16), "C": (160, 0.0, 0)}  # 2 seeds x 2 rounds x 40; the base unrecorded
    assert vr["balance"]["probes"] == {"gap": 0.1, "arms": ["B", "A"], "flagged": True, "max_rate_gap": 0.01}
    assert (v["outcome"], v["decided_by"]) == ("infrastructure_imbalanced", "infrastructure balance")
    assert v["reason"] == ("probe verdicts failed for infrastructure (sandbox_error, wall_limit) at unequal rates: B's at "
                           "10.0% (16 of 160), A's at 0.0% (0 of 160), a gap of +10.0 pts > the registered maximum "
                           "+1.0 pts")
    assert v["sentence"] == (f"Verdict: infrastructure_imbalanced, decided by the infrastructure balance check. "
                             f"P{v['reason'][1:]}. {v['clause']}.")
    assert v["rule_alone"].startswith("What the decision rule alone would have said (not read, the infrastructure "
                                      f"balance check overrides it): {v['rule_outcome']}.")
    section = _verdict_section(text)
    assert section.startswith("## Verdict\n\n**Verdict: infrastructure_imbalanced**, decided by the infrastructure "
                              "balance check. Probe verdicts failed")
    assert "FAIL: infrastructure-rate balance, largest gap +10.0 pts between B and A" in text
    assert "If the balance check fails on either table, the pre-registered outcome is `infrastructure_imbalanced`" in text
    assert log.splitlines()[:2] == [v["sentence"], v["rule_alone"]]
    ok, message = audit(trees[0].protocol_dir, trees[0].results_dir)  # the audit reproduces this verdict too
    assert ok and message.startswith("reproduced: verdict.json, report.md and items.html are byte-identical"), message


def test_the_same_infrastructure_failures_in_every_arm_pass_the_balance_and_the_rule_decides(tmp_path):
    """The same 10% of probe verdicts fail for infrastructure in every arm: the rates are equal, the
    balance check passes, and the verdict is the decision rule's on the outcomes as recorded (the
    faulted probes failed): exactly the verdict of the same outcomes recorded without any reason.
    In the final round the faulted items take 0 to 2 passes from each arm x seed (A 10/9, B 20/19, C 28/29
    of 40 left), not enough to move a contrast across a criterion: the rule still says keep_both."""
    verdict, text, log = _read(tmp_path / "all", "ABC")
    vr, v = verdict["verdict_reasons"], verdict["verdict"]
    assert {arm: row["infrastructure"] for arm, row in vr["probes"].items()} == {"A": 0.1, "B": 0.1, "C": 0.1}
    assert vr["balance"]["probes"]["gap"] == 0.0 and not vr["balance"]["probes"]["flagged"]
    assert (v["outcome"], v["decided_by"], v["rule_alone"], v["failed_checks"]) == (
        v["rule_outcome"], "decision rule", None, [])
    assert "PASS: infrastructure-rate balance" in text and log.splitlines()[0] == v["sentence"]
    plain = build_tree(tmp_path / "plain", _faulted_finals("ABC"))
    same = json.loads((readout(plain.protocol_dir, plain.results_dir) / "verdict.json").read_text())
    assert verdict["analysis"] == same["analysis"]
    assert v["outcome"] == same["verdict"]["outcome"] == "keep_both"
    # and the faults did take passes: the analysis read fewer passes than the unfaulted outcomes hold
    assert sum(m["passed"] for m in verdict["analysis"]["arms"].values()) < sum(
        sum(per_seed.values()) for per_seed in OUTCOMES["keep_both"].values())


def test_an_infrastructure_imbalance_registered_to_warn_leaves_the_rules_verdict_with_the_reason(tmp_path, monkeypatch):
    reason = "a pipeline check whose arms share one machine and no decision rests on it"
    monkeypatch.setitem(fixtures_runs.SHRINK, "decision.yaml",
                        {**fixtures_runs.SHRINK["decision.yaml"], "infrastructure_override": reason})
    verdict, text, log = _read(tmp_path, "B")
    v = verdict["verdict"]
    assert (v["outcome"], v["decided_by"], v["rule_alone"]) == (v["rule_outcome"], "decision rule", None)
    (warning,) = v["warnings"]
    assert warning.startswith("the infrastructure balance check failed: probe verdicts failed for infrastructure")
    assert f"(decision.yaml infrastructure_override: {reason})" in warning
    assert warning.endswith("without that it would make the verdict `infrastructure_imbalanced`")
    assert "> **Warning:** the infrastructure balance check failed\n" in _verdict_section(text)
    assert "WARNING: the infrastructure balance check failed" in log.splitlines()
    assert warning[1:] in text[text.index("## Warnings"):]  # in full, below the verdict


def test_the_balance_decides_before_the_controls():
    """Failed balance and failed controls: the balance decides, each control's failure is a warning."""
    rule = RuleDecision(outcome="keep_both", clause="keep both.", clauses_held={},
                        contrasts={"B-A": ContrastSays("not_supported", "")})
    none = Paired(mean_hi=0.5, mean_lo=0.5, gap=0.0, n_items=40, hi_only=0, lo_only=0, sign_p_greater=1.0,
                  sign_p_less=1.0)
    row = ControlCheck(arm="P", versus="base", margin=0.03, alpha=0.05, paired=none, beats=False, ok=False)
    checks = ControlChecks(positive=[row], positive_ok=False, negative=[replace(row, arm="N", versus="B")],
                           negative_ok=False)
    row_of = lambda infra: {"n": 100, "rates": {"wall_limit": infra}, "infrastructure": infra, "retried": 0,  # noqa: E731
                            "unrecorded": 0}
    table = {"A": row_of(0.0), "B": row_of(0.05)}
    reasons = {"probes": table, "rollouts": {}, "infrastructure_reasons": ["wall_limit"],
               "balance": {"probes": {"gap": 0.05, "arms": ["B", "A"], "flagged": True, "max_rate_gap": 0.01},
                           "rollouts": {"gap": None, "arms": [], "flagged": False, "max_rate_gap": 0.01}}}
    v = final_verdict(rule, checks, {}, reasons, {})
    assert (v.outcome, v.decided_by) == ("infrastructure_imbalanced", "infrastructure balance")
    assert [w.split(":")[0] for w in v.warnings] == ["the positive control check failed too",
                                                     "the negative control check failed too"]
    assert "B's at 5.0% (5 of 100), A's at 0.0% (0 of 100)" in v.reason
    no_balance = final_verdict(rule, checks, {}, {**reasons, "balance": {
        k: {**b, "flagged": False} for k, b in reasons["balance"].items()}}, {})
    assert no_balance.outcome == "instrument_insensitive"

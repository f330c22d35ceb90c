"""Verdict reasons in the records and the readout: per-arm reason rates, the registered
infrastructure-balance check, and the report's table."""
import pytest

from harness.readout.analyzer import ReadoutError, RunData, _check_eval, verdict_reasons
from harness.readout.report import render_sections, verdict_reasons_section
from harness.spec.protocol import load_protocol


def _ev(reasons: list[str], retried: int = 0) -> dict:
    return {"probe_passed": "".join("1" if x == "pass" else "0" for x in reasons), "probe_reasons": reasons,
            "probe_retried": retried}


def _run(arm: str, seed: int, evals: list[dict], ledger: list[dict] = ()) -> RunData:
    return RunData(arm, seed, f"{arm}/seed{seed}", {}, "", {"base_eval": evals[0]},
                   [{"kind": "round", "round": i, "eval": ev} for i, ev in enumerate(evals[1:])], list(ledger))


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
    text = render_sections([verdict_reasons_section({"verdict_reasons": vr})])
    assert "## Verifier reasons per arm" in text and "`wall_limit`" in text and "| B | 8 |" in text
    assert "FAIL: infrastructure-rate balance, largest gap +12.5 pts between B and A" in text


def test_equal_infrastructure_rates_pass_and_records_without_reasons_are_counted_apart():
    protocol = load_protocol("smoke")
    old = {"probe_passed": "10"}
    runs = [_run("A", 0, [_ev(["pass", "sandbox_error"]), old]), _run("B", 0, [_ev(["wall_limit", "pass"]), old])]
    vr = verdict_reasons(protocol, runs)
    assert vr["probes"]["A"]["unrecorded"] == 2 and vr["probes"]["A"]["n"] == 2
    assert vr["balance"]["probes"]["gap"] == 0.0 and not vr["balance"]["probes"]["flagged"]
    assert "PASS: infrastructure-rate balance" in render_sections([verdict_reasons_section({"verdict_reasons": vr})])
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

"""The pilot: what it measures on the calibration split, that freeze reuses its base and records it
in the lock, and that freeze refuses a protocol the pilot finds miscalibrated, naming the number."""
import json

import pytest

from harness.core import paths, records
from harness.freeze.freeze import freeze
from harness.freeze.pilot import ArmSummary, Pilot, arm_summary, check, run_pilot
from harness.freeze.sets import materialise
from harness.spec import lock
from harness.spec.protocol import ProtocolError, load_protocol
from families.code import program_class
from harness.stats.design.model import VarianceComponents
from harness.tasks.splits import class_mix
from tests.tiny_protocol import make_tiny_protocol


@pytest.fixture(scope="module")
def piloted(tmp_path_factory):
    root = tmp_path_factory.mktemp("pilot")
    proto = make_tiny_protocol(root)
    results = root / "results"
    lines = []
    data = run_pilot(str(proto), results, out=lines.append)
    return proto, results, data, "\n".join(lines)


def test_the_pilot_measures_the_calibration_split_and_never_the_probes(piloted):
    proto, results, data, text = piloted
    p = load_protocol(proto)
    splits = materialise(p)
    calib, n = splits["calibration"], p.tasks.calibration.size
    assert data["calibration"]["n_items"] == n == len(data["base"]["passed"])
    assert data["calibration"]["strata"] == ["/".join(map(str, t.stratum)) for t in calib]
    per = data["base"]["per_stratum"]
    assert sum(v["n"] for v in per.values()) == n and sum(v["passed"] for v in per.values()) == data["base"]["passed"].count("1")
    assert data["base"]["pass_rate"] == data["base"]["passed"].count("1") / n
    # the same per program class
    cls = data["base"]["per_class"]
    assert {c: v["n"] for c, v in cls.items()} == {c: k for c, k in class_mix(p.family, calib).items()}
    assert {c: v["passed"] for c, v in cls.items()} == {
        c: sum(int(b) for t, b in zip(calib, data["base"]["passed"]) if program_class(t) == c) for c in cls}
    assert "base per program class: " + ", ".join(f"{c} {v['passed']}/{v['n']}" for c, v in cls.items()) in text
    G = p.budget.G
    assert len(data["base"]["item_pass_probability"]) == n and all(0 <= x <= 1 and (x * G).is_integer()
                                                                    for x in data["base"]["item_pass_probability"])
    assert sum(data["k_over_G"]["calibration"].values()) == n and set(data["k_over_G"]["calibration"]) == {str(k) for k in range(G + 1)}
    # every arm x the first two seeds, on the same footing as the real runs: every arm (the contrasts'
    # A, B, C and every control, P, N, D) through the last registered round, with the runs' evaluation;
    # the moments and the printed lines say which round each arm's figures are from
    seeds = p.run_seeds[:p.seeds.pilot_seeds]
    assert sorted(data["arms"]) == p.arm_names
    final = p.budget.rounds - 1
    assert final > 0 and data["measured_rounds"] == dict.fromkeys(p.arm_names, final)
    assert all(data["arms"][a]["round"] == r for a, r in data["measured_rounds"].items())
    a_rates = [s["pass_rate"] for s in data["arms"]["A"]["seeds"].values()]
    assert data["variance_components"]["pass_rates"]["A"] == pytest.approx(min(max(sum(a_rates) / len(a_rates), 0.5 / n), 1 - 0.5 / n))
    for arm in p.arm_names:
        assert f"arm {arm}: pass rate after round {final} " in text
    # every round's per-seed pass rate, each on the probes the runs score then: the registered subset
    # before the last round, all of them after it (whose rates are the arm's final figures)
    subset = p.budget.intermediate_eval_probes
    assert subset < n and data["registered"]["rounds"] == p.budget.rounds
    for arm in p.arm_names:
        rows = data["round_pass_rates"][arm]
        assert [r["round"] for r in rows] == list(range(p.budget.rounds))
        assert [(r["n_items"], r["scored"]) for r in rows] == [(subset, "subset")] * final + [(n, "all")]
        assert rows[-1]["pass_rates"] == {s: v["pass_rate"] for s, v in data["arms"][arm]["seeds"].items()}
        assert all(sorted(r["pass_rates"]) == sorted(map(str, seeds)) and all((x * r["n_items"]).is_integer()
                                                                            for x in r["pass_rates"].values()) for r in rows)
    assert "seed SD of the pass rate by round" in text
    for arm, a in data["arms"].items():
        assert sorted(a["seeds"]) == sorted(map(str, seeds)) and all(len(s["passed"]) == n for s in a["seeds"].values())
    # B and C explore alike in round 0: the proposals are counted once per seed
    assert data["k_over_G"]["n_proposals"] == len(seeds) * p.budget.tasks_per_round
    reuse = data["reuse"]
    adm = data["band"]["admission_rate_proposals"]
    assert reuse["rows_per_round"] == p.budget.learner_steps_per_round * p.budget.batch_size
    if adm > 0:
        assert reuse["expected_epochs"] == pytest.approx(reuse["rows_per_round"] / (p.budget.tasks_per_round * adm * G))
    v = data["variance"]
    assert v["item_p_base"] == data["base"]["item_pass_probability"] and set(v["seed_spread"]) == set(p.arm_names)
    assert all(v["between_seed_discordance"][a] == pytest.approx(1 - v["within_item_agreement"][a]) for a in p.arm_names)
    assert "expected reuse" in text and "base pass rate on the calibration split" in text
    written = paths.pilot_path(results, p.name)
    assert json.loads(written.read_text()) == data and written.read_text() == records.canonical_json(data) + "\n"
    assert Pilot.from_dict(data).to_dict() == data  # its one reader gives back what its one writer wrote
    assert not (results / p.name / "A").exists()  # the arms' rounds ran on a scratch tree, not in the results


def test_arm_summary_spread_agreement_and_discordance():
    s = arm_summary({1: "1100", 2: "1010"}, [1, 0, 0, 0], 2)
    assert s.seed_spread == 0.0 and s.within_item_agreement == 0.5 and s.discordant_items == 2
    assert s.vs_base_discordance == pytest.approx(0.25) and s.vs_base == pytest.approx(0.25)
    assert s.seeds["2"].passed == "1010" and s.round == 2
    assert ArmSummary.from_dict(s.to_dict()) == s and list(s.to_dict())[:3] == ["round", "seeds", "pass_rate_mean"]
    one = arm_summary({1: "10"}, [1, 1], 0)
    assert one.seed_spread is None and one.within_item_agreement is None


def test_freeze_reuses_the_pilots_base_and_records_the_pilot_in_the_lock(piloted, tmp_path):
    proto, results, data, _ = piloted
    p = load_protocol(proto)
    base = paths.set_paths(results, p.name)["base"]
    before = base.read_bytes()
    lines = []
    freeze(str(proto), results, out=lines.append)
    text = "\n".join(lines)
    assert "reused" in text and "building the base" not in text and "running the pilot" not in text
    assert base.read_bytes() == before and data["inputs"]["base_sha256"] == records.sha256_bytes(before)
    entries = lock.read_lock(paths.lock_path(results, p.name))["entries"]
    assert entries["frozen/pilot.json"] == records.sha256_file(paths.pilot_path(results, p.name))
    assert "design analysis" in text.lower() or "P(keep_both)" in text
    # the design analysis says which round it read of each arm, pools the run spread over every arm and
    # round the pilot ran, and freeze prints the positive control's pilot gain beside the sesoi
    final, arms = p.budget.rounds - 1, p.arm_names
    assert ("design: variance components from the pilot; rounds read: " + ", ".join(f"{a} {final}" for a in arms)
            + f" of rounds 0-{final}\n") in text
    groups = len(arms) * p.budget.rounds
    assert (f"design: run spread pooled over arms {', '.join(arms)} x rounds "
            + ", ".join(map(str, range(p.budget.rounds))) + f" ({groups} groups, {groups} df)") in text
    vc = VarianceComponents.from_pilot(data)
    assert vc.rounds_read == data["measured_rounds"] and vc.rounds == p.budget.rounds and len(vc.spread_groups) == groups
    gain = data["arms"]["P"]["vs_base"]
    assert (f"[freeze] positive control: pilot P - base on the calibration split {100 * gain:+.1f} pts (after round "
            f"{final}, mean of 2 seeds), {'below' if gain < p.decision.sesoi else 'at least'} the sesoi 5.0 pts") in text


def test_freeze_runs_a_missing_pilot_and_refuses_excess_reuse_naming_the_number(tmp_path):
    proto = make_tiny_protocol(tmp_path, gates={"band": {"max_reuse_epochs": 0.01}})
    results = tmp_path / "results"
    lines = []
    with pytest.raises(ProtocolError, match=r"gates.yaml: key 'band.max_reuse_epochs': the pilot expects each admitted "
                                            r"rollout to be trained on (\d+\.\d+ epochs|no admitted rollout at all) per round"):
        freeze(str(proto), results, out=lines.append)
    assert any("running the pilot first" in line for line in lines)
    assert paths.pilot_path(results, "tiny").exists() and not paths.lock_path(results, "tiny").exists()


def test_check_refuses_a_base_outside_its_range(piloted):
    proto, _, data, _ = piloted
    p = load_protocol(proto)
    ok = json.loads(json.dumps(data))
    ok["reuse"]["expected_epochs"] = 1.0
    check(p, ok)  # in range and within the reuse maximum: accepted
    low = json.loads(json.dumps(ok))
    low["base"]["pass_rate"] = -0.5
    with pytest.raises(ProtocolError, match=r"model.yaml: key 'base_pass_range': the base passes -0.500 of the pilot's calibration"):
        check(p, low)

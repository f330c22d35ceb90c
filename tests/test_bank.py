"""The dedup bank: duplicates, constant-difference duplicates, leak guard, duplicate-rate figures,
and a resume round trip."""
import dataclasses
import json

import pytest

from harness.tasks.bank import VERDICTS, Bank, held_out_hashes
from families.code import CodeFamily, Difficulty, Task, with_expected


def task(ops, inputs=(1, 2, 3), template="arith", phrasing=None):
    ops = tuple(ops)
    return with_expected(Task(template, ops, phrasing or (0,) * len(ops), tuple(inputs)))


A = task([("add", 3)])
A_OTHER_CONST = task([("add", 5)])
A_OTHER_INPUTS = task([("add", 3)], inputs=(7, 8))
B = task([("mul", 2), ("neg", None)])
C = task([("square", None)])
D = task([("sub", 4)])
PROBE = task([("mod", 4), ("add", 2)])
CONFIRM = task([("abs", None), ("mul", 3)])


def fresh_bank():
    return Bank({"probe": held_out_hashes([PROBE]), "confirm": held_out_hashes([CONFIRM])})


def test_exact_duplicate_including_other_test_inputs():
    bank = fresh_bank()
    assert bank.check(A, 0) == "new"
    bank.add(A, 0)
    assert bank.check(A, 0) == "duplicate"  # same round counts too
    assert bank.check(A_OTHER_INPUTS, 1) == "duplicate"  # inputs are not part of identity
    with pytest.raises(ValueError, match="duplicate"):
        bank.add(A_OTHER_INPUTS, 1)


def test_constant_difference_is_a_shape_duplicate():
    bank = fresh_bank()
    bank.add(A, 0)
    assert bank.check(A_OTHER_CONST, 1) == "shape_duplicate"
    other_phrasing = task([("add", 5)], phrasing=(1,))
    assert bank.check(other_phrasing, 1) == "new"  # shape includes the phrasing


def test_probe_leak_is_the_program_whatever_the_docstring_or_inputs():
    bank = fresh_bank()
    assert bank.check(PROBE, 0) == "leak_probe"
    assert bank.check(dataclasses.replace(PROBE, inputs=(-5, 40)), 0) == "leak_probe"
    other_docstring = task([("mod", 4), ("add", 2)], phrasing=(2, 1))
    assert other_docstring.canonical_hash != PROBE.canonical_hash and other_docstring.shape_hash != PROBE.shape_hash
    assert bank.check(other_docstring, 0) == "leak_probe"  # same reference code, other docstring
    with pytest.raises(ValueError, match="leak_probe"):
        bank.add(PROBE, 0)
    with pytest.raises(ValueError, match="leak_probe"):
        bank.add(other_docstring, 0)


def test_same_steps_other_constants_follow_the_registered_guard():
    other_constants = task([("mod", 7), ("add", 1)])
    assert fresh_bank().check(other_constants, 0) == "new"  # "program" guard: other constants may be trained on
    strict = Bank({"probe": held_out_hashes([PROBE], guard="ops"), "confirm": held_out_hashes([CONFIRM], guard="ops")})
    assert strict.check(other_constants, 0) == "leak_probe"
    assert strict.check(task([("mod", 4), ("sub", 2)]), 0) == "new"  # other steps
    with pytest.raises(ValueError, match="leak guard 'shape'"):
        held_out_hashes([PROBE], guard="shape")


def test_the_bank_knows_the_seed_set_and_a_retested_seed_task_is_a_duplicate():
    from harness.tasks.proposer import propose
    seed_set = [A, B]
    bank = Bank.for_run([PROBE], [CONFIRM], seed_set)
    retested = propose(CodeFamily(Difficulty(max_depth=3)), seed_set, 6, seed=1, round=0, operators=["inputs"])
    parents = {t.canonical_hash: t for t in seed_set}
    assert all(p.mutation == "inputs" and p.task.inputs != parents[p.parent].inputs for p in retested)
    assert [bank.check(p.task, 0) for p in retested] == ["duplicate"] * 6
    assert bank.check(A_OTHER_CONST, 0) == "shape_duplicate"  # a constant mutation of a seed task
    assert bank.check(C, 0) == "new"
    report = bank.round_report(0)
    assert report["admitted"] == 0 and report["duplicate"] == 6 and report["new"] == 1
    assert report["cross_round_duplicate_rate"] == pytest.approx(7 / 8)  # the seed set counts as an earlier round
    with pytest.raises(ValueError, match="duplicate"):
        bank.add(retested[0].task, 0)
    assert Bank.from_dict(json.loads(json.dumps(bank.to_dict()))).check(A, 1) == "duplicate"  # survives a resume
    with pytest.raises(ValueError, match="held-out program"):
        Bank.for_run([PROBE], [CONFIRM], [task([("mod", 4), ("add", 2)], phrasing=(1, 1))])


def test_confirm_leak_and_leak_checks_come_first():
    bank = fresh_bank()
    assert bank.check(CONFIRM, 0) == "leak_confirm"
    assert bank.check(with_expected(dataclasses.replace(CONFIRM, inputs=(100,))), 0) == "leak_confirm"
    both = Bank({"probe": held_out_hashes([A]), "confirm": held_out_hashes([A])})
    assert both.check(A, 0) == "leak_probe"
    # A task admitted before a held-out set was registered still reads as a leak, not a duplicate.
    bank.add(A, 0)
    state = bank.to_dict()
    state["forbidden"]["confirm"].append(A.canonical_hash)
    assert Bank.from_dict(state).check(A, 1) == "leak_confirm"


def test_the_calibration_split_is_guarded_too():
    calib = task([("div", 7), ("neg", None)])
    bank = Bank.for_run([PROBE], [CONFIRM], [A], calibration=[calib])
    assert bank.check(calib, 0) == "leak_calibration"
    assert bank.check(task([("div", 7), ("neg", None)], phrasing=(2, 1), inputs=(40,)), 0) == "leak_calibration"
    with pytest.raises(ValueError, match="leak_calibration"):
        bank.add(calib, 0)
    assert Bank.from_dict(json.loads(json.dumps(bank.to_dict()))).check(calib, 1) == "leak_calibration"
    with pytest.raises(ValueError, match="held-out program"):
        Bank.for_run([PROBE], [CONFIRM], [calib], calibration=[calib])


def test_round_report_counts_and_cross_round_duplicate_rate():
    bank = fresh_bank()
    for t in (A, B, PROBE):
        bank.check(t, 0)
    bank.add(A, 0)
    bank.add(B, 0)
    r0 = bank.round_report(0)
    assert r0 == {"round": 0, "checked": 3, "admitted": 2, "new": 2, "duplicate": 0, "shape_duplicate": 0,
                  "leak_probe": 1, "leak_confirm": 0, "leak_calibration": 0, "cross_round_duplicate_rate": 0.0}

    verdicts = [bank.check(t, 1) for t in (A, A_OTHER_CONST, C)]
    assert verdicts == ["duplicate", "shape_duplicate", "new"]
    bank.add(C, 1)
    assert bank.check(C, 1) == "duplicate"  # a duplicate of this round, not of an earlier one
    r1 = bank.round_report(1)
    assert (r1["checked"], r1["duplicate"], r1["shape_duplicate"], r1["new"], r1["admitted"]) == (4, 2, 1, 1, 1)
    assert r1["cross_round_duplicate_rate"] == pytest.approx(2 / 4)

    for t in (C, D):
        bank.check(t, 2)
    r2 = bank.round_report(2)
    assert r2["cross_round_duplicate_rate"] == pytest.approx(1 / 2)  # C was admitted in round 1
    assert bank.round_report(9)["checked"] == 0 and bank.round_report(9)["cross_round_duplicate_rate"] == 0.0
    assert set(VERDICTS) <= set(r2)


def test_rounds_only_move_forward_and_default_to_the_open_round():
    bank = fresh_bank()
    bank.check(A, 3)
    assert bank.check(B) == "new" and bank.round_report(3)["checked"] == 2
    with pytest.raises(ValueError, match="current round 4"):
        bank.check(C, 2)


def test_a_loop_that_checks_without_a_round_counts_each_check_in_its_own_round():
    bank = fresh_bank()
    for r, tasks in enumerate([(A, B), (A, C), (C, D)]):  # check without a round, add with it, report
        for t in tasks:
            if bank.check(t) == "new":
                bank.add(t, r)
        bank.round_report(r)
    assert [bank.round_report(r)["checked"] for r in range(3)] == [2, 2, 2]
    assert [bank.round_report(r)["admitted"] for r in range(3)] == [2, 1, 1]
    assert [bank.round_report(r)["cross_round_duplicate_rate"] for r in range(3)] == [0.0, 0.5, 0.5]
    with pytest.raises(ValueError, match="round must be an int >= the current round 3"):
        bank.add(task([("neg", None)]), 2)  # round 2 was reported, hence closed


def test_unknown_held_out_name_is_refused():
    with pytest.raises(ValueError, match="'probes'"):
        Bank({"probes": set()})


def test_state_round_trips_through_json():
    bank = fresh_bank()
    bank.check(A, 0)
    bank.add(A, 0)
    bank.check(A_OTHER_CONST, 1)
    bank.check(PROBE, 1)
    bank.add(B, 1)
    text = json.dumps(bank.to_dict(), sort_keys=True)
    again = Bank.from_dict(json.loads(text))
    assert json.dumps(again.to_dict(), sort_keys=True) == text
    for r in (0, 1):
        assert again.round_report(r) == bank.round_report(r)
    for t in (A, A_OTHER_CONST, A_OTHER_INPUTS, B, C, PROBE, CONFIRM):
        assert again.classify(t) == bank.classify(t)
    assert again.check(A, 2) == "duplicate" and again.round_report(2)["cross_round_duplicate_rate"] == 1.0


def test_malformed_state_names_the_field():
    state = fresh_bank().to_dict()
    del state["shape"]
    with pytest.raises(ValueError, match="'shape'"):
        Bank.from_dict(state)
    with pytest.raises(ValueError, match="version"):
        Bank.from_dict({"canonical": {}})

"""Arm B's explore step with each registered advantage (Dr.GRPO, AnchorLoop, GMAE) on a real
frozen tiny protocol: every group is forced into the band so the advantage code really runs."""
import pytest
import torch

from arms import b_selfplay
from harness.bank import Bank
from harness.freeze import load_base, load_sets
from harness.protocol import load_protocol
from harness.runner import RunContext
from harness.training import make_optimizer
from tests.tiny_protocol import freeze_tiny


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    proto, results = freeze_tiny(tmp_path_factory.mktemp("arms"))
    return load_protocol(proto), results


def context(protocol, results, tmp_path):
    sets = load_sets(results, protocol.name)
    model = load_base(results, protocol, "cpu")
    return RunContext(protocol, "B", 1, "cpu", model, make_optimizer(model, 1e-3, 0.0), sets["seed_set"], sets["probe"],
                      sets["confirm"], Bank.for_run(sets["probe"], sets["confirm"], sets["seed_set"], protocol.guard),
                      None, tmp_path, results, state={"admitted_parents": []})


@pytest.mark.parametrize("advantage", ["dr_grpo", "anchor", "gmae"])
def test_explore_runs_every_registered_advantage(frozen, tmp_path, monkeypatch, advantage):
    protocol, results = frozen
    monkeypatch.setattr(b_selfplay.frontier, "admits", lambda *a, **k: True)
    ctx = context(protocol, results, tmp_path)
    settings = dict(protocol.arms["B"], advantage=advantage)
    out = b_selfplay.explore(ctx, 0, settings)
    b = protocol.budget
    assert out["budget"]["learner_steps"] == b["learner_steps_per_round"]
    assert out["budget"]["solver_rollouts"] == b["tasks_per_round"] * b["G"]
    assert out["budget"]["anchor_rollouts"] == (b["tasks_per_round"] * b["G"] if advantage == "anchor" else 0)
    assert out["band"]["admitted"] == b["tasks_per_round"] and len(ctx.state["admitted_parents"]) == b["tasks_per_round"]
    solver = [e for e in out["ledger"] if e["solver"]]
    assert len(solver) == b["tasks_per_round"] and all(e["admitted"] for e in solver)


def test_anchor_rewards_come_from_the_frozen_previous_iteration(frozen, tmp_path):
    protocol, results = frozen
    ctx = context(protocol, results, tmp_path)
    tasks = ctx.seed_set[:3]
    first = b_selfplay._anchor_rewards(ctx, 0, tasks)
    assert len(first) == 3 and all(len(g) == protocol.budget["G"] and set(g) <= {0.0, 1.0} for g in first)
    base = load_base(results, protocol, "cpu").state_dict()
    for r in (0, 1):  # the previous iteration of rounds 0 and 1 is the base, whatever the policy is now
        anchor = ctx.anchor_model(r).state_dict()
        assert all(torch.equal(anchor[k], base[k]) for k in base)

"""Arm B's explore step with each registered advantage (Dr.GRPO, AnchorLoop, GMAE) on a real
frozen tiny protocol: every group is forced into the band so the advantage code really runs.
And the control arms built on it: the negative control's seeded shuffle, the positive control's
fresh tasks without a held-out program."""
import dataclasses

import pytest

from harness.core.paths import set_paths
import torch

from arms import b_selfplay, n_shuffled, p_fresh_sft
from harness.core.seeds import derive_seed
from harness.learning.checkpoint import load_base
from harness.learning.training import make_optimizer
from harness.running.contract import RunContext
from harness.spec.frozen import load_sets
from harness.spec.kinds import Needs
from harness.spec.protocol import load_protocol
from harness.tasks.bank import Bank
from families.code import TEMPLATES
from tests.tiny_protocol import freeze_tiny


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    proto, results = freeze_tiny(tmp_path_factory.mktemp("arms"))
    return load_protocol(proto), results


def context(protocol, results, tmp_path, arm="B", needs=Needs(rollouts=True, anchor=True)):
    sets = load_sets(results, protocol)
    model = load_base(results, protocol, "cpu")
    return RunContext(protocol=protocol, arm=arm, seed=1, device="cpu", model=model,
                      optimizer=make_optimizer(model, 1e-3, 0.0),
                      seed_set=sets["seed_set"], probes=sets["probe"],
                      held_out={"probe": sets["probe"], "confirm": sets["confirm"]},
                      bank=Bank.for_run(sets["probe"], sets["confirm"], sets["seed_set"], protocol.guard),
                      run_dir=tmp_path, base_path=set_paths(results, protocol.name)["base"], needs=needs,
                      state=b_selfplay.State())


@pytest.mark.parametrize("advantage", ["dr_grpo", "anchor", "gmae"])
def test_explore_runs_every_registered_advantage(frozen, tmp_path, monkeypatch, advantage):
    protocol, results = frozen
    monkeypatch.setattr(b_selfplay.frontier, "admits", lambda *a, **k: True)
    ctx = context(protocol, results, tmp_path)
    settings = dataclasses.replace(protocol.arms["B"], advantage=advantage)
    out, material = b_selfplay.explore(ctx, 0, settings)
    b = protocol.budget
    assert out.budget.learner_steps == out.budget.update_steps == b.learner_steps_per_round
    assert out.budget.solver_rollouts == b.tasks_per_round * b.G
    assert out.budget.anchor_rollouts == (b.tasks_per_round * b.G if advantage == "anchor" else 0)
    assert out.budget.generated_tasks == b.tasks_per_round and out.budget.recovery_steps == 0
    assert out.sections["band"]["admitted"] == b.tasks_per_round and len(ctx.state.admitted) == b.tasks_per_round
    # the rollouts are grouped once: group i holds task i's G rollouts, and every admitted rollout is an example
    assert [g.task.canonical_hash for g in material.groups] == [e["task"] for e in out.proposals if e["solver"]]
    assert [g.k for g in material.groups] == [e["k"] for e in out.proposals if e["solver"]]
    assert all(len(g.completions) == len(g.verdicts) == b.G for g in material.groups)
    assert len(material.examples) == len(material.advantages) == b.tasks_per_round * b.G
    assert [ex[1] for ex in material.examples] == [t for g in material.groups for t in g.texts]
    solver = [e for e in out.proposals if e["solver"]]
    assert len(solver) == b.tasks_per_round and all(e["admitted"] for e in solver)


def test_anchor_rewards_come_from_the_frozen_previous_iteration(frozen, tmp_path):
    protocol, results = frozen
    ctx = context(protocol, results, tmp_path)
    tasks = ctx.seed_set[:3]
    first, spend = b_selfplay._anchor_rewards(ctx, 0, tasks)
    assert spend.anchor_rollouts == 3 * protocol.budget.G and spend.solver_rollouts == 0
    assert len(first) == 3 and all(len(g) == protocol.budget.G and set(g) <= {0.0, 1.0} for g in first)
    base = load_base(results, protocol, "cpu").state_dict()
    for r in (0, 1):  # the previous iteration of rounds 0 and 1 is the base, whatever the policy is now
        anchor = ctx.anchor_model(r).state_dict()
        assert all(torch.equal(anchor[k], base[k]) for k in base)


# ---------------------------------------------------------------- the control arms

def test_negative_control_shuffles_the_rounds_advantages_with_a_seeded_permutation(frozen, tmp_path, monkeypatch):
    """N's round is B's round (same proposals and rollouts) except that the advantages trained on
    are B's, permuted across the whole round by a permutation seeded from (run seed, round)."""
    protocol, results = frozen
    monkeypatch.setattr(b_selfplay.frontier, "admits", lambda *a, **k: True)
    # distinct advantages, so that any permutation is visible (the tiny base rarely passes)
    monkeypatch.setattr(b_selfplay, "ADVANTAGES", {"dr_grpo": lambda groups, anchor: [
        [float(10 * i + j) for j in range(len(g))] for i, g in enumerate(groups)]})
    trained = {}

    class Recording:  # the round's planned update: records what it would train on, takes no real step
        empty = False

        def __init__(self, model, optimizer, examples, n_steps, batch_size, seed, advantages=None, **kw):
            trained.setdefault(arm, []).append((list(advantages), [e[1] for e in examples]))

        def take(self, n):
            return {"steps": n, "mean_loss": 0.0, "tokens": 0, "loss_tokens": 0}
    monkeypatch.setattr(b_selfplay, "PlannedSteps", Recording)
    for arm in ("B", "N"):
        out = n_shuffled.run_round(context(protocol, results, tmp_path / arm, arm=arm), 0) if arm == "N" else \
            b_selfplay.run_round(context(protocol, results, tmp_path / arm, arm=arm), 0)
    (b_adv, b_texts), (n_adv, n_texts) = trained["B"][0], trained["N"][0]
    assert n_texts == b_texts  # the same rollouts, in the same order
    assert n_adv == n_shuffled.shuffle_within_round(b_adv, derive_seed(1, 0, "shuffle-advantages"))
    assert sorted(n_adv) == sorted(b_adv) and n_adv != b_adv
    G = protocol.budget.G
    assert any(a // 10 != i // G for i, a in enumerate(n_adv))  # advantages move across groups, within the round
    assert out.sections["shuffle"] == {"advantages": len(b_adv), "moved": sum(x != y for x, y in zip(b_adv, n_adv))}
    # seeded: the same seed gives the same permutation, another round another one
    assert n_shuffled.shuffle_within_round(b_adv, 7) == n_shuffled.shuffle_within_round(b_adv, 7)
    assert n_shuffled.shuffle_within_round(b_adv, 7) != n_shuffled.shuffle_within_round(b_adv, 8)


def test_positive_control_tasks_hold_no_held_out_program(frozen):
    """The positive control's fresh tasks (the probe distribution, a dedicated seed) contain no
    probe or confirm task or program, on the real frozen sets; the guard works at the program level:
    a held-out task with the same code behind another docstring still keeps that program out."""
    protocol, results = frozen
    sets = load_sets(results, protocol)
    held_out = {k: v for k, v in sets.items() if k not in ("warmup", "seed_set")}
    assert {"probe", "confirm"} <= set(held_out)
    fam, n, seed, guard = protocol.family, 60, protocol.seeds.task_seed, protocol.guard
    diff = fam.difficulty
    rounds = [p_fresh_sft.fresh_tasks(seed, r, n, fam, sets["probe"], held_out, guard) for r in (0, 1)]
    programs = {t.program_hash for ts in held_out.values() for t in ts}
    references = {t.reference for ts in held_out.values() for t in ts}
    canonical = {t.canonical_hash for ts in held_out.values() for t in ts}
    for tasks in rounds:
        assert len(tasks) == n
        assert not [t for t in tasks if t.program_hash in programs or t.reference in references or t.canonical_hash in canonical]
        assert all(diff.min_depth <= t.depth <= diff.max_depth for t in tasks)
        assert {t.stratum for t in tasks} <= {t.stratum for t in sets["probe"]}  # the probe distribution's strata
    assert {t.canonical_hash for t in rounds[0]} != {t.canonical_hash for t in rounds[1]}  # fresh each round
    assert rounds[0] == p_fresh_sft.fresh_tasks(seed, 0, n, fam, sets["probe"], held_out, guard)  # deterministic

    # program level: hold out some of the unguarded draws' programs, each under another phrasing
    unguarded = p_fresh_sft.fresh_tasks(seed, 0, n, fam, sets["probe"], {}, guard)
    victims = unguarded[:5]
    disguised = [dataclasses.replace(t, phrasing=tuple((k + 1) % len(TEMPLATES[t.template][1][op][1])
                                                       for (op, _), k in zip(t.ops, t.phrasing))) for t in victims]
    assert all(d.reference == v.reference and d.prompt != v.prompt for d, v in zip(disguised, victims))
    guarded = p_fresh_sft.fresh_tasks(seed, 0, n, fam, sets["probe"], {"probe": disguised}, guard)
    assert len(guarded) == n and not {t.reference for t in guarded} & {v.reference for v in victims}

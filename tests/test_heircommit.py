"""HeirCommit: the confirm rule on paired counts, and arm C's round with controlled successors —
it retains the root (weights and optimizer restored) when the successor is worse on the confirm
probes, commits when it is better, and archives the round's verified material either way."""
from types import SimpleNamespace

import pytest

from harness.core.paths import set_paths
import torch

from arms import b_selfplay, c_heircommit
from harness.core.settings import Speed
from harness.learning.checkpoint import load_base
from harness.learning.model import SIZES, Transformer
from harness.learning.training import make_optimizer
from harness.running import heircommit
from harness.running.contract import RoundResult, RunContext
from harness.running.experience import Experience
from harness.running.heircommit import confirm, paired_counts
from harness.spec.accounting import Spend
from harness.spec.frozen import load_sets
from harness.spec.kinds import needs_of
from harness.spec.protocol import load_protocol
from harness.tasks.bank import Bank
from families.code import Difficulty, build_tasks
from tests.tiny_protocol import freeze_tiny, make_tiny_protocol


def test_paired_counts_and_rules():
    c = paired_counts([1, 1, 0, 1, 0, 1], [1, 0, 0, 0, 1, 1])
    assert c == {"n": 6, "successor_pass": 4, "root_pass": 3, "successor_only": 2, "root_only": 1}
    assert confirm(c, "not_worse", 0, 0.1)["decision"] == "commit"
    assert confirm(dict(c, successor_pass=2), "not_worse", 0, 0.1)["decision"] == "retain"
    assert confirm(dict(c, successor_pass=2), "not_worse", 1, 0.1)["decision"] == "commit"  # margin
    # superior: one-sided exact sign test on the discordant probes; 2 vs 1 is far from significant
    d = confirm(c, "superior", 0, 0.1)
    assert d["decision"] == "retain" and d["sign_test_p"] == pytest.approx(0.5)
    big = {"n": 100, "successor_pass": 60, "root_pass": 45, "successor_only": 20, "root_only": 5}
    d = confirm(big, "superior", 0, 0.1)
    assert d["decision"] == "commit" and d["sign_test_p"] < 0.01 and 0 < d["mde"] < 0.25
    assert confirm(c, "not_worse", 0, 0.1)["mde"] is None  # 6 probes resolve nothing
    with pytest.raises(ValueError, match="unknown confirm rule"):
        confirm(c, "vibes", 0, 0.1)
    with pytest.raises(ValueError, match="3 successor outcomes vs 2 root outcomes"):
        paired_counts([1, 0, 1], [1, 0])


@pytest.fixture
def ctx(tmp_path):
    proto = load_protocol(make_tiny_protocol(tmp_path))
    model = Transformer(SIZES["tiny"], seed=3)
    tasks = build_tasks(5, 16, Difficulty(1, 2, 9, 0.0))
    return SimpleNamespace(protocol=proto, arm_settings=proto.arms["C"], seed=1, device="cpu", model=model,
                           optimizer=make_optimizer(model, 1e-3, 0.0), experience=Experience(tmp_path / "experience.jsonl", proto.family),
                           confirm_batches=lambda r: (tasks[:8], tasks[8:]), verified_task=tasks[0], speed=Speed())


def controlled(monkeypatch, ctx, successor_better: bool):
    """Explore = a weight perturbation (the 'successor'); greedy_pass = the root passes half the
    probes, the successor all or none of them; recovery and the continued update take no real step."""
    def explore(c, r, settings, n_steps=None, transform=None):
        with torch.no_grad():
            for p in c.model.parameters():
                p.add_(0.01)
        c.model.is_successor = True
        material = b_selfplay.Exploration([], [], [], [], [(c.verified_task, c.verified_task.reference, 0.5)])
        return RoundResult(train={"steps": n_steps}, budget=Spend(update_steps=n_steps, solver_rollouts=16)), material

    def greedy_pass(model, tasks, max_bytes, device, speed=None):
        if getattr(model, "is_successor", False):
            return [1 if successor_better else 0] * len(tasks), 0
        return [i % 2 for i in range(len(tasks))], 0
    monkeypatch.setattr(c_heircommit.b_selfplay, "explore", explore)
    monkeypatch.setattr(c_heircommit.b_selfplay, "take", lambda plan, n: {"steps": n})
    monkeypatch.setattr(c_heircommit, "greedy_pass", greedy_pass)
    monkeypatch.setattr(c_heircommit, "recover", lambda c, r, s, current: (
        {"ran": True, "steps": 2, "failed": 1, "rehearsed": 0, "checked": 1}, Spend(recovery_steps=2, forgetting_rollouts=1)))


@pytest.mark.parametrize("better", [True, False])
def test_c_commits_a_better_successor_and_retains_the_root_otherwise(monkeypatch, ctx, better):
    root_weights = {k: v.clone() for k, v in ctx.model.state_dict().items()}
    controlled(monkeypatch, ctx, better)
    out = c_heircommit.run_round(ctx, 0)
    hc = out.sections["heircommit"]
    assert hc["confirm"]["decision"] == ("commit" if better else "retain")
    assert hc["confirm"]["successor_pass"] == (8 if better else 0) and hc["confirm"]["root_pass"] == 4
    assert hc["recovery"]["ran"] is (not better)  # recovery runs only when the screen finds it worse
    same = all(torch.equal(v, root_weights[k]) for k, v in ctx.model.state_dict().items())
    assert same is (not better)  # retained -> the root's exact weights are back
    entries = ctx.experience.entries()  # the store keeps the round's material either way
    assert len(entries) == 1 and entries[0]["kept"] is better
    steps, recovery = ctx.protocol.budget.learner_steps_per_round, ctx.arm_settings.recovery_steps
    # recovery comes out of the round's steps: unused, they continue the update instead
    assert out.budget.learner_steps == steps
    assert out.budget.recovery_steps == (0 if better else recovery)
    assert out.budget.update_steps == (steps if better else steps - recovery)
    assert (hc["continued_update"] is None) is (not better)
    assert out.budget.screen_rollouts == out.budget.confirm_rollouts == 2 * 8
    assert out.budget.confirm_tasks == 8 + 8


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    proto, results = freeze_tiny(tmp_path_factory.mktemp("heircommit"))
    return load_protocol(proto), results


def real_context(protocol, results, tmp_path, arm="C"):
    sets = load_sets(results, protocol)
    model = load_base(results, protocol, "cpu")
    return RunContext(protocol=protocol, arm=arm, seed=1, device="cpu", model=model,
                      optimizer=make_optimizer(model, 1e-3, 0.0),
                      seed_set=sets["seed_set"], probes=sets["probe"],
                      held_out={"probe": sets["probe"], "confirm": sets["confirm"]},
                      bank=Bank.for_run(sets["probe"], sets["confirm"], sets["seed_set"], protocol.guard),
                      experience=Experience(tmp_path / "experience.jsonl", protocol.family), run_dir=tmp_path,
                      base_path=set_paths(results, protocol.name)["base"], needs=needs_of(protocol, arm),
                      state=c_heircommit.State())


def optimizer_steps(optimizer) -> list[int]:
    """A live count of every optimizer.step() taken from now on."""
    n = [0]
    optimizer.register_step_post_hook(lambda *_: n.__setitem__(0, n[0] + 1))
    return n


@pytest.mark.parametrize("forgets", [True, False])
def test_recovery_comes_out_of_the_rounds_steps(frozen, tmp_path, monkeypatch, forgets):
    """A real C round on the tiny protocol, with the screen forced to find the successor worse:
    every optimizer step taken (update, recovery, continued update) adds up to exactly the
    registered learner steps. Recovery steps added on top of a full update would fail this."""
    protocol, results = frozen
    monkeypatch.setattr(b_selfplay.frontier, "admits", lambda *a, **k: True)  # examples to train on
    real_greedy = c_heircommit.greedy_pass

    def screen_finds_it_worse(model, tasks, max_bytes, device, speed=None):
        passed, n_bytes = real_greedy(model, tasks, max_bytes, device, speed)
        return ([1] * len(tasks) if model is not ctx.model else [0] * len(tasks)), n_bytes
    monkeypatch.setattr(c_heircommit, "greedy_pass", screen_finds_it_worse)
    real_forgotten = heircommit.forgotten
    monkeypatch.setattr(heircommit, "forgotten", lambda m, pool, b, d, speed=None: (
        (pool, [], real_forgotten(m, pool, b, d)[2]) if forgets else ([], pool, real_forgotten(m, pool, b, d)[2])))
    ctx = real_context(protocol, results, tmp_path)
    earlier = build_tasks(11, 3, Difficulty(1, 2, 9, 0.0))  # verified material of an earlier round
    for t in earlier:
        ctx.experience.add(t, t.reference, 0, 0.5, True)
    taken = optimizer_steps(ctx.optimizer)
    out = c_heircommit.run_round(ctx, 1)
    steps, recovery = protocol.budget.learner_steps_per_round, protocol.arms["C"].recovery_steps
    hc = out.sections["heircommit"]
    assert taken[0] == out.budget.learner_steps == steps
    assert hc["recovery"]["ran"] is forgets
    assert out.budget.recovery_steps == (recovery if forgets else 0)
    assert out.budget.update_steps == steps - out.budget.recovery_steps
    # the pool is C's own verified material (this round's rollouts, then the store's), never the seed set's references
    solver = {e["task"] for e in out.proposals if e["solver"]}
    verified = sum(e["k"] > 0 for e in out.proposals if e["solver"])
    pool = hc["recovery"]["checked"]
    assert pool == min(verified + len(earlier), protocol.arms["C"].recovery_pool)
    assert out.budget.forgetting_rollouts == out.budget.experience_tasks == pool
    new = ctx.experience.entries()[len(earlier):]
    assert len(new) == verified and all(e["round"] == 1 and e["task_hash"] in solver for e in new)


def test_recovery_pool_is_this_rounds_material_then_the_store_one_per_task():
    a, b, c = build_tasks(9, 3, Difficulty(1, 1, 9, 0.0))
    pool = c_heircommit.recovery_pool([(a, "new-a", 0.5), (b, "new-b", 1.0)], [(a, "old-a"), (c, "old-c")], limit=3)
    assert pool == [(a, "new-a"), (b, "new-b"), (c, "old-c")]
    assert c_heircommit.recovery_pool([(a, "new-a", 0.5)], [(c, "old-c")], limit=1) == [(a, "new-a")]


def test_confirm_probes_never_intersect_the_probe_set(frozen, tmp_path):
    proto, results = frozen
    sets = load_sets(results, proto)
    ctx = RunContext(protocol=proto, arm="C", seed=1, device="cpu", model=None, optimizer=None,
                     seed_set=sets["seed_set"], probes=sets["probe"],
                     held_out={"probe": sets["probe"], "confirm": sets["confirm"]}, bank=None, run_dir=tmp_path,
                     base_path=set_paths(results, proto.name)["base"], needs=needs_of(proto, "C"))
    probe_ids = {t.canonical_hash for t in sets["probe"]} | {t.program_hash for t in sets["probe"]}
    seen = []
    for r in range(proto.budget.rounds):
        screen, conf = ctx.confirm_batches(r)
        assert len(screen) == len(conf) == proto.tasks.confirm.per_round
        for t in screen + conf:
            assert t.canonical_hash not in probe_ids and t.program_hash not in probe_ids  # program-disjoint
        seen += [t.canonical_hash for t in screen + conf]
    assert len(seen) == len(set(seen))  # fresh probes every round, never reused


def test_c_without_recovery_is_d_bit_for_bit_and_a_retained_round_records_its_lr_lag(frozen, tmp_path, monkeypatch):
    """When no recovery runs, C's reserved steps continue the round's planned update (same batch
    order, same trust region): on the same rollouts its weights and optimizer state equal D's bit for
    bit. A retained round restores the root's optimizer; its record says how far its lr warm-up lags."""
    from arms import d_commit_gate
    protocol, results = frozen
    monkeypatch.setattr(b_selfplay.frontier, "admits", lambda *a, **k: True)  # examples to train on
    monkeypatch.setattr(c_heircommit, "recover", lambda ctx, r, settings, current: (dict(c_heircommit.NO_RECOVERY), Spend()))
    real_confirm = heircommit.confirm
    verdict = {"decision": "commit"}
    monkeypatch.setattr(heircommit, "confirm", lambda *a, **k: {**real_confirm(*a, **k), **verdict})
    steps = protocol.budget.learner_steps_per_round
    assert 0 < protocol.arms["C"].recovery_steps < steps
    out = {}
    for arm, module in (("C", c_heircommit), ("D", d_commit_gate)):
        ctx = real_context(protocol, results, tmp_path / arm, arm)
        (tmp_path / arm).mkdir()
        res = module.run_round(ctx, 0)
        out[arm] = (ctx, res)
    (c, rc), (d, rd) = out["C"], out["D"]
    assert rc.sections["heircommit"]["continued_update"]["steps"] == protocol.arms["C"].recovery_steps
    assert rc.budget.update_steps == rd.budget.update_steps == steps
    for (k, a), (_, b) in zip(c.model.state_dict().items(), d.model.state_dict().items()):
        assert torch.equal(a, b), k
    for i, st in c.optimizer.state_dict()["state"].items():
        for k, v in st.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(d.optimizer.state_dict()["state"][i][k])), (i, k)
    assert rc.sections["heircommit"]["lr_schedule"] == {"optimizer_step": steps, "run_steps": steps, "behind": 0}
    verdict["decision"] = "retain"
    retained = real_context(protocol, results, tmp_path / "D2", "D")
    (tmp_path / "D2").mkdir()
    hc = d_commit_gate.run_round(retained, 0).sections["heircommit"]
    assert hc["lr_schedule"] == {"optimizer_step": 0, "run_steps": steps, "behind": steps}

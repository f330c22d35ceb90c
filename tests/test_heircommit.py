"""HeirCommit: the confirm rule on paired counts, and arm C's round with controlled successors —
it retains the root (weights and optimizer restored) when the successor is worse on the confirm
probes, commits when it is better, and archives the round's verified material either way."""
from types import SimpleNamespace

import pytest
import torch

from arms import c_heircommit
from harness.archive import Archive
from harness.freeze import freeze, load_sets
from harness.heircommit import confirm, paired_counts
from harness.model import SIZES, Transformer
from harness.protocol import load_protocol
from harness.runner import RunContext
from harness.tasks import Difficulty, build_tasks
from harness.training import make_optimizer
from tests.tiny_protocol import make_tiny_protocol


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
                           optimizer=make_optimizer(model, 1e-3, 0.0), archive=Archive(tmp_path / "archive.jsonl"),
                           confirm_batches=lambda r: (tasks[:8], tasks[8:]), verified_task=tasks[0])


def controlled(monkeypatch, ctx, successor_better: bool):
    """Explore = a weight perturbation (the 'successor'); greedy_pass = the root passes half the
    probes, the successor all or none of them."""
    def explore(c, r, settings):
        with torch.no_grad():
            for p in c.model.parameters():
                p.add_(0.01)
        c.model.is_successor = True
        return {"verified": [(c.verified_task, c.verified_task.reference, 0.5)], "ledger": [], "train": {},
                "budget": {"learner_steps": 3, "solver_rollouts": 16, "solver_bytes": 0, "recovery_steps": 0,
                           "confirm_rollouts": 0, "anchor_rollouts": 0}}

    def greedy_pass(model, tasks, max_bytes, device):
        if getattr(model, "is_successor", False):
            return [1 if successor_better else 0] * len(tasks), 0
        return [i % 2 for i in range(len(tasks))], 0
    monkeypatch.setattr(c_heircommit.b_selfplay, "explore", explore)
    monkeypatch.setattr(c_heircommit, "greedy_pass", greedy_pass)
    monkeypatch.setattr(c_heircommit, "recover", lambda c, r, s: {"ran": True, "steps": 2, "failed": 1, "rehearsed": 0, "checked": 1})


@pytest.mark.parametrize("better", [True, False])
def test_c_commits_a_better_successor_and_retains_the_root_otherwise(monkeypatch, ctx, better):
    root_weights = {k: v.clone() for k, v in ctx.model.state_dict().items()}
    controlled(monkeypatch, ctx, better)
    out = c_heircommit.run_round(ctx, 0)
    hc = out["heircommit"]
    assert hc["confirm"]["decision"] == ("commit" if better else "retain")
    assert hc["confirm"]["successor_pass"] == (8 if better else 0) and hc["confirm"]["root_pass"] == 4
    assert hc["recovery"]["ran"] is (not better)  # recovery runs only when the screen finds it worse
    same = all(torch.equal(v, root_weights[k]) for k, v in ctx.model.state_dict().items())
    assert same is (not better)  # retained -> the root's exact weights are back
    entries = ctx.archive.entries()  # the archive keeps the round's material either way
    assert len(entries) == 1 and entries[0]["kept"] is better
    assert out["budget"]["recovery_steps"] == (0 if better else 2)
    assert out["budget"]["confirm_rollouts"] == 2 * (8 + 8)


def test_confirm_probes_never_intersect_the_probe_set(tmp_path):
    proto_dir = make_tiny_protocol(tmp_path)
    results = tmp_path / "results"
    freeze(str(proto_dir), results, out=lambda *a: None)
    proto = load_protocol(proto_dir)
    sets = load_sets(results, proto.name)
    ctx = RunContext(proto, "C", 1, "cpu", None, None, sets["seed_set"], sets["probe"], sets["confirm"], None, None,
                     tmp_path, results)
    probe_ids = {t.canonical_hash for t in sets["probe"]} | {t.shape_hash for t in sets["probe"]}
    seen = []
    for r in range(proto.budget["rounds"]):
        screen, conf = ctx.confirm_batches(r)
        assert len(screen) == len(conf) == proto.tasks["confirm"]["per_round"]
        for t in screen + conf:
            assert t.canonical_hash not in probe_ids and t.shape_hash not in probe_ids
        seen += [t.canonical_hash for t in screen + conf]
    assert len(seen) == len(set(seen))  # fresh probes every round, never reused

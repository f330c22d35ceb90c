import dataclasses
import math

import pytest
import torch

from harness.learning.model import SIZES, Transformer
from harness.learning.sampling import sample
from harness.learning.training import (
    advantage_weighted_loss,
    batch_order,
    bits_per_byte,
    clipped_advantage_loss,
    collate,
    completion_bits_per_byte,
    encode,
    make_optimizer,
    masked_ce_loss,
    sequence_nll,
    signed_batch_order,
    token_nll,
    train_steps,
)
from harness.sandbox.verifier import verify
from families.code import build_tasks
from harness.tasks.contract import END


def tiny(seed=0, dtype=torch.float64, **overrides):
    return Transformer(dataclasses.replace(SIZES["tiny"], **overrides), seed=seed).to(dtype)


PAIRS = [("def f(x):\n", "    return x\n"), ("P:", "abc"), ("a longer prompt here >", "z")]


def test_encode_layout():
    ids, mask = encode("ab", "xyz", max_seq=64)
    assert bytes(ids.tolist()) == b"abxyz" + END.encode()
    assert mask.tolist() == [False, False, True, True, True, True]
    ids, mask = encode("ab", "xyz", max_seq=64, add_end=False)
    assert bytes(ids.tolist()) == b"abxyz" and mask.tolist() == [False, False, True, True, True]
    ids, mask = encode("é", "ü", max_seq=64)  # bytes, not characters
    assert len(ids) == 5 and mask.tolist() == [False, False, True, True, True]


def test_encode_refuses_bad_input():
    with pytest.raises(ValueError, match="empty prompt"):
        encode("", "x", max_seq=64)
    with pytest.raises(ValueError, match="max_seq"):
        encode("a" * 10, "b" * 10, max_seq=19)
    assert len(encode("a" * 10, "b" * 9, max_seq=19)[0]) == 20  # model reads 19 = max_seq bytes


def test_collate_shifts_and_pads():
    batch = collate([encode("ab", "c", 64), encode("abcd", "ef", 64)])
    assert batch["input"].shape == batch["target"].shape == batch["mask"].shape == (2, 6)
    assert bytes(batch["target"][0, :3].tolist()) == b"bc\x00"
    assert batch["mask"][0].tolist() == [False, True, True, False, False, False]   # scored: "c", END
    assert batch["mask"][1].tolist() == [False, False, False, True, True, True]    # scored: "e", "f", END


def test_prompt_targets_carry_no_loss():
    model = tiny()
    batch = collate([encode(p, c, 512) for p, c in PAIRS])
    prompt_slot = ~batch["mask"] & (torch.arange(batch["mask"].shape[1]) < 8)
    changed = dict(batch, target=torch.where(prompt_slot, (batch["target"] + 1) % 256, batch["target"]))
    assert torch.equal(changed["target"] != batch["target"], prompt_slot)  # the change hit prompt slots
    assert masked_ce_loss(model, changed) == masked_ce_loss(model, batch)
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    assert advantage_weighted_loss(model, changed, adv) == advantage_weighted_loss(model, batch, adv)
    # changing a scored target does change the loss
    scored = dict(batch, target=torch.where(batch["mask"], (batch["target"] + 1) % 256, batch["target"]))
    assert masked_ce_loss(model, scored) != masked_ce_loss(model, batch)


def test_gradient_reaches_only_scored_positions():
    model = tiny()
    captured = {}

    def keep(_module, _inputs, logits):
        logits.retain_grad()
        captured["logits"] = logits
    handle = model.lm_head.register_forward_hook(keep)
    batch = collate([encode(p, c, 512) for p, c in PAIRS])
    masked_ce_loss(model, batch).backward()
    handle.remove()
    per_slot = captured["logits"].grad.abs().sum(-1)   # (B, T)
    assert torch.all(per_slot[~batch["mask"]] == 0)
    assert torch.all(per_slot[batch["mask"]] > 0)


def test_padding_does_not_change_an_example():
    model = tiny()
    alone, _ = token_nll(model, collate([encode("P:", "abc", 512)]))
    padded, _ = token_nll(model, collate([encode("P:", "abc", 512), encode("a much longer prompt:", "zzzz", 512)]))
    assert torch.allclose(padded[0, :alone.shape[1]], alone[0], atol=1e-12)
    assert torch.all(padded[0, alone.shape[1]:] == 0)


def _grads(model, loss):
    model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_advantage_zero_gives_zero_gradient_and_sign_flips():
    model = tiny()
    batch = collate([encode(p, c, 512) for p, c in PAIRS])
    zero = _grads(model, advantage_weighted_loss(model, batch, torch.zeros(3)))
    assert torch.all(zero == 0)
    adv = torch.tensor([1.0, -2.0, 0.5])
    plus = _grads(model, advantage_weighted_loss(model, batch, adv))
    minus = _grads(model, advantage_weighted_loss(model, batch, -adv))
    assert plus.abs().max() > 0
    assert torch.allclose(minus, -plus, atol=1e-14)
    double = _grads(model, advantage_weighted_loss(model, batch, 2 * adv))
    assert torch.allclose(double, 2 * plus, atol=1e-14)


def test_advantage_loss_uses_a_fixed_normaliser():
    model = tiny()
    batch = collate([encode(p, c, 512) for p, c in PAIRS])
    n_scored = int(batch["mask"].sum())
    ones = advantage_weighted_loss(model, batch, torch.ones(3), norm_bytes=256)
    # all advantages 1: total NLL / (B * 256), i.e. the mean CE rescaled by scored bytes / (B * 256)
    assert torch.isclose(ones, masked_ce_loss(model, batch) * n_scored / (3 * 256))
    # normalised by the constant, not by each sequence's length
    assert torch.isclose(advantage_weighted_loss(model, batch, torch.ones(3), norm_bytes=128), 2 * ones)


def test_advantage_sign_moves_likelihood():
    examples = [("Q:", "yes")]
    batch = collate([encode(p, c, 512) for p, c in examples])
    with torch.no_grad():
        before = float(token_nll(tiny(), batch)[0].sum())
    after = {}
    for sign in (1.0, -1.0):
        model = tiny()
        train_steps(model, torch.optim.SGD(model.parameters(), lr=1.0), examples, n_steps=1, batch_size=1,
                    seed=0, advantages=[sign], grad_clip=0, norm_bytes=256)
        with torch.no_grad():
            after[sign] = float(token_nll(model, batch)[0].sum())
    assert after[1.0] < before < after[-1.0]


def test_train_steps_exact_steps_and_deterministic():
    def run(seed):
        model = tiny(dtype=torch.float32)
        opt = make_optimizer(model, 1e-3, 0.1)
        stats = train_steps(model, opt, PAIRS * 3, n_steps=7, batch_size=4, seed=seed)
        steps = {int(s["step"]) for s in opt.state.values()}
        return model, stats, steps

    a, stats, steps = run(0)
    assert steps == {7} and stats["steps"] == 7
    assert stats["loss_tokens"] < stats["tokens"] and math.isfinite(stats["mean_loss"])
    b, stats_b, _ = run(0)
    c, stats_c, _ = run(1)
    assert stats_b == stats
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


def _lrs(opt) -> list:
    seen = []
    opt.register_step_post_hook(lambda o, *_: seen.append(o.param_groups[0]["lr"]))
    return seen


def test_lr_warmup_is_linear_and_a_restored_optimizer_continues_it():
    model = tiny(dtype=torch.float32)
    opt = make_optimizer(model, 1e-3, 0.0, warmup_steps=4)
    seen = _lrs(opt)
    train_steps(model, opt, PAIRS, n_steps=3, batch_size=2, seed=0)
    assert seen == pytest.approx([2.5e-4, 5e-4, 7.5e-4])
    state = opt.state_dict()  # what a checkpoint keeps
    resumed = make_optimizer(model, 1e-3, 0.0, warmup_steps=4)
    resumed.load_state_dict(state)
    seen2 = _lrs(resumed)
    train_steps(model, resumed, PAIRS, n_steps=3, batch_size=2, seed=1)
    assert seen2 == pytest.approx([1e-3, 1e-3, 1e-3])
    plain = make_optimizer(model, 1e-3, 0.0)  # no warm-up: the registered lr from the first step
    seen3 = _lrs(plain)
    train_steps(model, plain, PAIRS, n_steps=2, batch_size=2, seed=0)
    assert seen3 == [1e-3, 1e-3]


def test_train_steps_refuses_bad_input():
    model = tiny()
    opt = make_optimizer(model, 1e-3, 0.0)
    with pytest.raises(ValueError, match="2 advantages for 3 examples"):
        train_steps(model, opt, PAIRS, n_steps=1, batch_size=2, seed=0, advantages=[1.0, 2.0], norm_bytes=256)
    with pytest.raises(ValueError, match="needs norm_bytes = the byte budget"):  # never a silent 256
        train_steps(model, opt, PAIRS, n_steps=1, batch_size=2, seed=0, advantages=[1.0, 2.0, 0.5])
    with pytest.raises(ValueError, match="no examples"):
        train_steps(model, opt, [], n_steps=1, batch_size=2, seed=0)


def test_unended_example_scores_no_end():
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    ended = train_steps(model, opt, [("P:", "abc")], n_steps=1, batch_size=1, seed=0)
    cut = train_steps(model, opt, [("P:", "abc", False)], n_steps=1, batch_size=1, seed=0)
    assert (ended["loss_tokens"], cut["loss_tokens"]) == (4, 3)


def test_batch_order_covers_epochs_and_groups_lengths():
    lengths = torch.randint(10, 200, (64,), generator=torch.Generator().manual_seed(0)).tolist()
    order = batch_order(lengths, n_steps=32, batch_size=4, seed=5, window=16)
    assert len(order) == 32 and all(len(b) == 4 for b in order)
    assert sorted(i for b in order for i in b) == sorted(list(range(64)) * 2)   # two epochs, each once
    assert order == batch_order(lengths, n_steps=32, batch_size=4, seed=5, window=16)
    assert order != batch_order(lengths, n_steps=32, batch_size=4, seed=6, window=16)

    def padding(batches):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)
    assert padding(order) < 0.3 * padding(batch_order(lengths, n_steps=32, batch_size=4, seed=5, window=1))
    # fewer examples than the batch size: every batch holds all of them
    assert all(sorted(b) == [0, 1, 2] for b in batch_order([5, 6, 7], n_steps=3, batch_size=8, seed=0))
    # windows stay within an epoch: sorting never packs repeats of one example into a batch
    assert all(len(set(b)) == 4 for b in batch_order([3, 9, 4, 8, 5, 7, 6, 2], n_steps=20, batch_size=4, seed=0))


def test_signed_batches_mix_the_signs_in_every_batch_whatever_the_lengths():
    # positives short, negatives long: length bucketing alone would make one-signed batches
    advantages = [0.75] * 12 + [-0.25] * 36 + [0.0] * 16
    lengths = [20 + i for i in range(12)] + [200 + i for i in range(36)] + [100] * 16
    assert any(len({advantages[i] > 0 for i in b}) == 1 for b in batch_order(lengths, 24, 16, seed=3))
    order = signed_batch_order(lengths, advantages, n_steps=24, batch_size=16, seed=3)
    assert len(order) == 24 and all(len(b) == 16 for b in order)
    assert {sum(advantages[i] > 0 for i in b) for b in order} == {3}    # 12/64 of 16 rows, every batch
    assert {sum(advantages[i] < 0 for i in b) for b in order} == {9}
    assert order == signed_batch_order(lengths, advantages, n_steps=24, batch_size=16, seed=3)
    seen = sorted(i for b in order for i in b)
    assert all(seen.count(i) == 6 for i in range(12))                  # every positive once per epoch
    rare = signed_batch_order([10] * 40, [1.0] + [-1.0] * 39, n_steps=10, batch_size=8, seed=0)
    assert all(0 in b for b in rare)  # a lone positive still appears in every batch: no batch is one-signed
    assert all(len(set(b)) == 8 for b in rare)


def test_clipped_surrogate_matches_the_plain_loss_at_ratio_one_and_stops_beyond_the_clip():
    model = tiny()
    encoded = [encode(p, c, 512) for p, c in PAIRS]
    batch = collate(encoded)
    adv = torch.tensor([1.0, -2.0, 0.5])
    old = torch.zeros(batch["target"].shape, dtype=torch.float64)
    for r, t in enumerate(sequence_nll(model, encoded)):
        old[r, :len(t)] = t.double()
    plain = _grads(model, advantage_weighted_loss(model, batch, adv))
    clipped = _grads(model, clipped_advantage_loss(model, batch, adv, old, clip_eps=0.2))
    assert torch.allclose(clipped, plain, atol=1e-12)  # first step: ratio 1, same gradient
    # every byte already 3x likelier than under the sampling policy: a positive advantage gains
    # nothing more (ratio above 1 + eps), a negative one still pulls it back down
    far = (old + math.log(3.0)) * batch["mask"]
    assert torch.all(_grads(model, clipped_advantage_loss(model, batch, torch.ones(3), far, 0.2)) == 0)
    assert _grads(model, clipped_advantage_loss(model, batch, -torch.ones(3), far, 0.2)).abs().max() > 0


def test_clipped_training_cannot_drive_failed_completions_to_zero():
    """Many steps on one round's rollouts with negative advantages: the plain loss keeps pushing,
    the clipped surrogate stops once each byte has moved by the clip."""
    examples = [("Q:", "wrong answer"), ("Q:", "right")]
    batch = collate([encode(p, c, 512) for p, c in examples[:1]])
    nll = {}
    for clip in (None, 0.2):
        model = tiny()
        train_steps(model, torch.optim.SGD(model.parameters(), lr=0.5), examples, n_steps=40, batch_size=2,
                    seed=0, advantages=[-1.0, 1.0], clip_eps=clip, grad_clip=0, norm_bytes=256)
        with torch.no_grad():
            nll[clip] = float(token_nll(model, batch)[0].sum())
    assert nll[0.2] < nll[None]


def test_completion_bits_per_byte_scores_only_the_completion():
    model = tiny(dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight.zero_()   # uniform: 8 bits for every scored byte
    assert completion_bits_per_byte(model, PAIRS) == pytest.approx(8.0, abs=1e-6)
    model = tiny()
    a = completion_bits_per_byte(model, [("prompt one", "abc")])
    assert completion_bits_per_byte(model, [("prompt one", "abc")] * 3, batch_size=2) == pytest.approx(a)



def test_completion_bits_per_byte_is_the_byte_weighted_mean_whatever_the_order_and_batching():
    """Batching by length must not change what is measured: the mean over all scored bytes equals
    each pair scored alone, weighted by its scored bytes, for any order of the pairs and any batch."""
    model = tiny(dtype=torch.float64)
    pairs = [("def f(x):", "return x + 1"), ("p", "abcdefghijklmnop"), ("a longer prompt here", "z"),
             ("q?", "yes"), ("another prompt", "with a medium answer")]
    alone = [(completion_bits_per_byte(model, [pc]), len(pc[1].encode()) + 1) for pc in pairs]  # + END
    weighted = sum(b * n for b, n in alone) / sum(n for _, n in alone)
    for order, bs in ((pairs, 16), (pairs[::-1], 2), (pairs[2:] + pairs[:2], 1)):
        assert completion_bits_per_byte(model, order, batch_size=bs) == pytest.approx(weighted, rel=1e-12)
    assert max(b for b, _ in alone) - min(b for b, _ in alone) > 0.1   # the pairs differ: weighting matters

def test_bits_per_byte():
    model = tiny(dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight.zero_()   # uniform over 256 bytes: exactly 8 bits
    assert bits_per_byte(model, ["hello world", "ab"]) == pytest.approx(8.0, abs=1e-6)
    with pytest.raises(ValueError, match="no predicted byte"):
        bits_per_byte(model, ["a", ""])


def test_bits_per_byte_windows_long_text():
    model = tiny(max_seq=16)
    text = "".join(chr(97 + (i * 7) % 26) for i in range(40))
    # windows of max_seq + 1 = 17 bytes, overlapping by one: [0,17) [16,33) [32,40); 39 predictions
    pieces = [text[0:17], text[16:33], text[32:40]]
    combined = sum(bits_per_byte(model, [p]) * (len(p) - 1) for p in pieces) / 39
    assert bits_per_byte(model, [text], batch_size=2) == pytest.approx(combined, rel=1e-12)
    assert bits_per_byte(model, [text]) != pytest.approx(bits_per_byte(model, [text[:17]]))


def test_tiny_model_learns_tasks_until_greedy_passes():
    """From scratch, masked CE on six tasks' reference solutions until greedy decoding passes
    every one of them in the exec verifier (at most 10 rounds of 40 steps; 2 are needed)."""
    tasks = build_tasks(0, 6)
    model = Transformer(SIZES["tiny"], seed=0)
    opt = make_optimizer(model, 5e-3, 0.0)
    examples = [(t.prompt, t.reference) for t in tasks]

    def greedy_passes():
        completions = sample(model, [t.prompt for t in tasks], max_bytes=128, temperature=0)
        return [verify(t, c.text).passed for t, c in zip(tasks, completions)]

    assert not any(greedy_passes())
    for rnd in range(10):
        for group in opt.param_groups:
            group["lr"] = 5e-3 * 0.5 ** (rnd / 2)
        train_steps(model, opt, examples, n_steps=40, batch_size=6, seed=rnd)
        passed = greedy_passes()
        if all(passed):
            break
    assert all(passed), passed

"""Group advantages: hand-computed values and the properties each definition promises."""
import numpy as np
import pytest
import torch

from harness.learning.advantages import ADVANTAGES, anchor_relative, dr_grpo, gmae, is_degenerate


def test_dr_grpo_worked_example_from_the_seed():
    # four challenger rewards from SPICE's table (k = 4, 7, 8, 1 of 8); group mean 0.447
    adv = dr_grpo([1.000, 0.372, 0.044, 0.372])
    assert adv == pytest.approx([0.553, -0.075, -0.403, -0.075], abs=1e-12)
    assert adv.sum() == pytest.approx(0.0, abs=1e-12)


def test_dr_grpo_has_no_std_division_and_keeps_sign():
    adv = dr_grpo([1, 0, 0, 0])
    assert adv == pytest.approx([0.75, -0.25, -0.25, -0.25])  # std-normalised would be +-1.73/0.58
    assert (np.sign(adv) == np.array([1, -1, -1, -1])).all()


@pytest.mark.parametrize("group", [[1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]])
def test_degenerate_groups_are_flagged_and_get_zero_advantage(group):
    assert is_degenerate(group)
    assert (dr_grpo(group) == 0).all()


def test_mixed_group_is_not_degenerate():
    assert not is_degenerate([1, 0, 1])


def test_anchor_relative_fills_the_hole_and_shifts_by_the_mean_difference():
    # all-pass group; the frozen anchor solved the task 2 of 4 times
    assert anchor_relative([1, 1, 1, 1], [1, 0, 0, 1]) == pytest.approx([0.5] * 4)
    # all-fail group against an anchor that solved it 3 of 4 times: pushed down
    assert anchor_relative([0, 0], [1, 1, 1, 0]) == pytest.approx([-0.75, -0.75])
    r, a = np.array([1.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0, 0.0, 0.0])
    assert anchor_relative(r, a) == pytest.approx(dr_grpo(r) + (r.mean() - a.mean()))


def test_gmae_hand_computed_two_groups():
    # group means 1 and 0.25 -> batch marginal m = 0.625; n0 = 2, G = 4
    # all-pass: mu = (3 + 1.25) / 5 = 0.85 -> 3/4 * 0.15 = 0.1125
    # [1,0,0,0]: the pass sees mu = 1.25/5 = 0.25 -> 0.5625; a fail sees mu = 2.25/5 = 0.45 -> -0.3375
    out = gmae([[1, 1, 1, 1], [1, 0, 0, 0]], prior_strength=2.0)
    assert out[0] == pytest.approx([0.1125] * 4)
    assert out[1] == pytest.approx([0.5625, -0.3375, -0.3375, -0.3375])
    assert sum(a.sum() for a in out) == pytest.approx(0.0, abs=1e-12)  # equal-sized groups


def test_gmae_without_prior_is_dr_grpo():
    groups = [[1, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]]
    for got, g in zip(gmae(groups, prior_strength=0.0), groups):
        assert got == pytest.approx(dr_grpo(g))


def test_gmae_on_one_group_is_scaled_dr_grpo():
    g = [1, 0, 0, 0, 1, 1, 0, 1]
    G, n0 = 8, 2.0
    (got,) = gmae([g], prior_strength=n0)
    assert got == pytest.approx((G - 1) * (G + n0) / (G * (G - 1 + n0)) * dr_grpo(g))
    assert got.sum() == pytest.approx(0.0, abs=1e-12)


def test_gmae_strong_prior_tends_to_a_batch_baseline():
    groups = [np.array([1.0, 1.0, 0.0]), np.array([0.0, 0.0, 0.0])]
    m = (2 / 3 + 0) / 2
    out = gmae(groups, prior_strength=1e9)
    for got, r in zip(out, groups):
        assert got == pytest.approx(2 / 3 * (r - m), abs=1e-6)


def test_gmae_degenerate_group_sign_follows_the_batch():
    easy, hard, mixed = [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]
    out = gmae([easy, hard, mixed])
    assert (out[0] > 0).all() and (out[1] < 0).all()


def test_torch_in_torch_out():
    t = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    adv = dr_grpo(t)
    assert isinstance(adv, torch.Tensor)
    assert adv.tolist() == pytest.approx([0.4, -0.6, -0.6, 0.4, 0.4])
    out = gmae([t, torch.tensor([1, 1, 1, 1, 1])])
    assert all(isinstance(a, torch.Tensor) for a in out)
    assert out[0].tolist() == pytest.approx(gmae([t.numpy(), np.ones(5)])[0].tolist())


def test_registry_batch_functions():
    groups = [[1, 0], [1, 1]]
    anchors = [[0, 0, 1], [1, 0]]
    assert [a.tolist() for a in ADVANTAGES["dr_grpo"](groups)] == [[0.5, -0.5], [0.0, 0.0]]
    got = ADVANTAGES["anchor"](groups, anchors)
    assert got[0] == pytest.approx([2 / 3, -1 / 3]) and got[1] == pytest.approx([0.5, 0.5])
    assert ADVANTAGES["gmae"](groups, prior_strength=0.0)[1].tolist() == [0.0, 0.0]


def test_registry_errors_are_clear():
    with pytest.raises(KeyError, match="unknown advantage 'grpo'.*anchor, dr_grpo, gmae"):
        ADVANTAGES["grpo"]
    with pytest.raises(ValueError, match="needs anchor_rewards_by_group"):
        ADVANTAGES["anchor"]([[1, 0]])
    with pytest.raises(ValueError, match="1 groups.*2"):
        ADVANTAGES["anchor"]([[1, 0], [0, 0]], [[1]])


def test_bad_rewards_raise():
    with pytest.raises(ValueError, match="1-D"):
        dr_grpo([[1, 0], [0, 1]])
    with pytest.raises(ValueError, match="non-empty"):
        dr_grpo([])
    with pytest.raises(ValueError, match="finite"):
        dr_grpo([1.0, float("nan")])
    with pytest.raises(ValueError, match="rewards_by_group\\[1\\]"):
        gmae([[1, 0], []])

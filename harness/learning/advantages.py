"""Group advantages for the self-play update: Dr.GRPO, anchor-relative (AnchorLoop), GMAE.

A group is the G rollouts of one task; its rewards are a 1-D float array (numpy or torch) of
shape [G], here the verifier's 0/1 pass outcomes. Every function returns advantages of the same
shape and array type. No std division anywhere (Dr.GRPO): an advantage is in reward units.

The protocol names the advantage an arm uses; `ADVANTAGES[name]` gives the batch-level function
with the uniform signature ``f(rewards_by_group, anchor_rewards_by_group=None, **params)``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

Array = Any  # np.ndarray or torch.Tensor, shape [G]


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _as_rewards(x, what: str = "rewards") -> Array:
    """A non-empty, finite, 1-D float array (torch tensors stay torch, all else becomes numpy)."""
    if _is_torch(x):
        if x.dim() != 1 or x.numel() == 0:
            raise ValueError(f"{what} must be a non-empty 1-D tensor [G], got shape {tuple(x.shape)}")
        x = x if x.is_floating_point() else x.double()
        if not bool(x.isfinite().all()):
            raise ValueError(f"{what} must be finite, got {x.tolist()}")
        return x
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D array [G], got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{what} must be finite, got {arr.tolist()}")
    return arr


def is_degenerate(rewards: Array) -> bool:
    """True when every rollout of the group got the same reward (all pass or all fail):
    Dr.GRPO gives such a group all-zero advantages, so it carries no learning signal."""
    r = _as_rewards(rewards)
    return bool((r == r[0]).all())


def dr_grpo(rewards: Array) -> Array:
    """Dr.GRPO advantage: rewards[G] minus the group mean, no std division. Sums to zero."""
    r = _as_rewards(rewards)
    return r - r.mean()


def anchor_relative(rewards: Array, anchor_rewards: Array) -> Array:
    """AnchorLoop advantage: rewards[G] minus a frozen previous-iteration model's mean reward
    on the same task (anchor_rewards[G'], G' may differ from G).

    An all-pass group whose task the anchor solved half the time gets +0.5 per rollout: the
    degenerate-group hole of Dr.GRPO is filled by comparing against the anchor instead.
    """
    r = _as_rewards(rewards)
    baseline = float(_as_rewards(anchor_rewards, "anchor_rewards").mean())
    return r - baseline


def gmae(rewards_by_group: Sequence[Array], prior_strength: float = 2.0) -> list[Array]:
    """Group-context-marginalised advantage (our definition after 2609.36750's idea).

    Dr.GRPO scores rollout i against one realised group context, the other G-1 rollouts:
    a_i = r_i - (r_i + sum(C)) / G. GMAE takes the expectation of that advantage over the
    contexts the task could have produced. The companions are drawn from the task's success
    rate q, whose posterior given the other G-1 rewards and a Beta prior centred on the batch
    marginal m (mean of the group means) with strength n0 = prior_strength pseudo-rollouts has
    mean  mu_-i = (sum_{j != i} r_j + n0 * m) / (G - 1 + n0).  Hence

        gmae_i = E_C[r_i - (r_i + sum(C)) / G] = (G - 1) / G * (r_i - mu_-i).

    Properties (tested): n0 = 0 gives Dr.GRPO exactly; on a single group (m = its own mean) it
    is Dr.GRPO times (G-1)(G+n0) / (G(G-1+n0)), zero mean; a degenerate group is no longer
    all-zero but pulled toward how far the task sits from the batch (all-pass in a batch with
    m < 1 gets a positive advantage); over equal-sized groups the batch sums to zero; as
    n0 -> inf it becomes (G-1)/G * (r_i - m), a batch-mean baseline. A group of one gets 0.

    rewards_by_group: list of B arrays of shapes [G_b]. Returns a list of B arrays [G_b].
    """
    if prior_strength < 0:
        raise ValueError(f"gmae prior_strength must be >= 0, got {prior_strength}")
    groups = [_as_rewards(g, f"rewards_by_group[{b}]") for b, g in enumerate(rewards_by_group)]
    if not groups:
        raise ValueError("gmae needs at least one group, got an empty list")
    marginal = float(np.mean([float(g.mean()) for g in groups]))
    out = []
    for r in groups:
        G = r.shape[0]
        if G == 1 or G - 1 + prior_strength == 0:
            out.append(r * 0.0)
            continue
        mu_loo = (r.sum() - r + prior_strength * marginal) / (G - 1 + prior_strength)
        out.append((G - 1) / G * (r - mu_loo))
    return out


# ---- batch-level registry -------------------------------------------------------------------

def _check_same_length(rewards_by_group, anchor_rewards_by_group, name):
    if anchor_rewards_by_group is None:
        raise ValueError(f"advantage {name!r} needs anchor_rewards_by_group (the frozen anchor's "
                         f"rewards per task), got None")
    if len(anchor_rewards_by_group) != len(rewards_by_group):
        raise ValueError(f"anchor_rewards_by_group has {len(anchor_rewards_by_group)} groups, "
                         f"rewards_by_group has {len(rewards_by_group)}; expected one per task")


def batch_dr_grpo(rewards_by_group: Sequence[Array], anchor_rewards_by_group=None) -> list[Array]:
    """Dr.GRPO per group (the anchor, if given, is ignored)."""
    return [dr_grpo(g) for g in rewards_by_group]


def batch_anchor(rewards_by_group: Sequence[Array], anchor_rewards_by_group=None) -> list[Array]:
    """anchor_relative per group, group b against anchor_rewards_by_group[b]."""
    _check_same_length(rewards_by_group, anchor_rewards_by_group, "anchor")
    return [anchor_relative(g, a) for g, a in zip(rewards_by_group, anchor_rewards_by_group)]


def batch_gmae(rewards_by_group: Sequence[Array], anchor_rewards_by_group=None,
               prior_strength: float = 2.0) -> list[Array]:
    """gmae over the batch (the anchor, if given, is ignored)."""
    return gmae(rewards_by_group, prior_strength=prior_strength)


class _Advantages(dict):
    def __missing__(self, name):
        raise KeyError(f"unknown advantage {name!r}; known: {', '.join(sorted(self))}")


ADVANTAGES: dict[str, Callable[..., list[Array]]] = _Advantages(
    dr_grpo=batch_dr_grpo,
    anchor=batch_anchor,
    gmae=batch_gmae,
)

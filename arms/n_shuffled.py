"""The negative control: arm B with its advantages shuffled within each round.

Everything else is B's round (the same proposals, rollouts, band and steps); only the link
between a rollout and its advantage is cut, by a seeded permutation of the round's advantages
across all its admitted rollouts. Trained on noise with B's statistics, it must not beat B: if it
does, B's gain is not the learning signal's.
"""
from __future__ import annotations

import random

from arms import b_selfplay
from harness.core.seeds import derive_seed
from harness.running.contract import RoundResult, RunContext

State = b_selfplay.State                  # B's parents
round_metrics = b_selfplay.round_metrics  # B's sections (its own, "shuffle", is not charted)


def shuffle_within_round(advantages: list[float], seed: int) -> list[float]:
    """A seeded permutation of one round's advantages (same seed -> same permutation)."""
    order = list(range(len(advantages)))
    random.Random(seed).shuffle(order)
    return [advantages[i] for i in order]


def run_round(ctx: RunContext, r: int) -> RoundResult:
    seen: dict = {}

    def shuffled(advs: list[float]) -> list[float]:
        out = shuffle_within_round(advs, derive_seed(ctx.seed, r, "shuffle-advantages"))
        seen.update(advantages=len(advs), moved=sum(a != b for a, b in zip(advs, out)))
        return out

    result, _ = b_selfplay.explore(ctx, r, ctx.arm_settings, transform=shuffled)
    result.sections["shuffle"] = seen
    return result

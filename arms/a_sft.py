"""Arm A, the control: masked-CE SFT on the seed task set's reference solutions.

Same learner steps per round as the self-play arms; no proposer, no rollouts, no self-play.
"""
from __future__ import annotations

from harness.core.seeds import derive_seed
from harness.core.timing import stage
from harness.learning.training import train_steps
from harness.running.contract import RoundResult, RunContext
from harness.spec.accounting import Spend


def run_round(ctx: RunContext, r: int) -> RoundResult:
    budget = ctx.protocol.budget
    examples = [(t.prompt, t.reference) for t in ctx.seed_set]
    with stage("update"):
        stats = train_steps(ctx.model, ctx.optimizer, examples, n_steps=budget.learner_steps_per_round,
                            batch_size=budget.batch_size, seed=derive_seed(ctx.seed, r, "sft"), speed=ctx.speed)
    return RoundResult(train=stats, budget=Spend(update_steps=stats["steps"], seed_tasks=len(examples)))

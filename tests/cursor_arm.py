"""An arm kind that lives in the tests alone (tests/test_arm_contract.py registers it with one line):
SFT on a window of the seed set's references that slides by `window` tasks each round.

It uses every part of the contract a new kind may: its own State (where the window stands, which a
resume must restore or round 1 would train on round 0's window again), its own record section
("cursor") and its own metrics (cursor/start). Nothing in harness/ knows it."""
from __future__ import annotations

from dataclasses import dataclass

from harness.core.seeds import derive_seed
from harness.learning.training import train_steps
from harness.running.contract import RoundResult, RunContext
from harness.spec.accounting import Spend


@dataclass
class State:
    """The index in the seed set where the next round's window starts."""
    start: int = 0

    def to_dict(self) -> dict:
        return {"cursor": self.start}

    @classmethod
    def from_dict(cls, d: dict, family) -> State:
        return cls(start=d["cursor"])


def window(ctx: RunContext) -> list:
    """The arm's next `window` seed tasks, wrapping around the seed set."""
    n = ctx.registered_settings["window"]
    return [ctx.seed_set[(ctx.state.start + i) % len(ctx.seed_set)] for i in range(n)]


def run_round(ctx: RunContext, r: int) -> RoundResult:
    tasks, budget = window(ctx), ctx.protocol.budget
    stats = train_steps(ctx.model, ctx.optimizer, [(t.prompt, t.reference) for t in tasks],
                        n_steps=budget.learner_steps_per_round, batch_size=budget.batch_size,
                        seed=derive_seed(ctx.seed, ctx.arm, r, "cursor"), speed=ctx.speed)
    section = {"start": ctx.state.start, "tasks": [t.canonical_hash for t in tasks]}
    ctx.state.start = (ctx.state.start + len(tasks)) % len(ctx.seed_set)
    return RoundResult(train=stats, budget=Spend(update_steps=stats["steps"], seed_tasks=len(tasks)),
                       sections={"cursor": section})


def round_metrics(sections: dict) -> dict[str, float]:
    return {"cursor/start": float(sections["cursor"]["start"])}

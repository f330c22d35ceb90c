"""The positive control: masked-CE SFT on fresh tasks drawn from the probe distribution.

Each round draws learner_steps_per_round x batch_size new tasks with the splits' own builder
(harness.tasks.splits.build_stratified) from the probe distribution (the protocol's task family with
its settings), stratified like the probe set's mix, i.i.d. (a small stratum may repeat a task, as
the distribution does), from a seed derived for this control alone (task seed, "positive-control",
round), so every example is seen once. No task of a held-out set (probe, confirm, calibration: every
frozen set that is not training data) is among them, neither as a task nor as a program (the
reference code with its constants, whatever the docstring says), under the protocol's registered
leak guard (tasks.yaml leak_guard). Same optimizer as A, and A's steps and lr unless arms.yaml
registers the control's own `learner_steps_per_round` and `lr` (a control, not a contender: sized so
that the pilot shows it gaining at least the sesoi over the base; the compute ledger shows both).

If the instrument can see an improvement at all, this arm must beat the base and A by the
registered margin; if it does not, the readout's verdict is `instrument_insensitive`.
"""
from __future__ import annotations

from collections import Counter

from harness.core.errors import BudgetError
from harness.core.seeds import derive_seed
from harness.core.timing import stage
from harness.learning.training import train_steps
from harness.running.contract import RoundResult, RunContext
from harness.spec.accounting import Spend
from harness.spec.kinds import learner_steps
from harness.tasks.contract import Task, TaskFamily
from harness.tasks.splits import build_stratified, held_out_keys, mix


def fresh_tasks(task_seed: int, r: int, n: int, family: TaskFamily, probes: list[Task],
                held_out: dict[str, list[Task]], guard: str) -> list[Task]:
    """Round r's `n` fresh tasks: i.i.d. draws from the probe distribution (the family, stratified
    like the probe set's mix), none a held-out task or program under the
    registered leak guard. The same arguments give the same list."""
    exclude = frozenset(held_out_keys([t for ts in held_out.values() for t in ts], guard))
    try:
        return build_stratified(family, derive_seed(task_seed, "positive-control", r), n, like=mix(probes),
                                exclude=exclude, distinct=False, what=f"positive control, round {r}")
    except ValueError as err:
        raise BudgetError(f"{err}; the registered steps cannot be spent on fresh tasks") from None


def run_round(ctx: RunContext, r: int) -> RoundResult:
    budget, steps = ctx.protocol.budget, learner_steps(ctx.protocol, ctx.arm)
    n = steps * budget.batch_size
    with stage("propose"):
        tasks = fresh_tasks(ctx.task_seed, r, n, ctx.family, ctx.probes, ctx.held_out, ctx.protocol.guard)
    with stage("update"):
        stats = train_steps(ctx.model, ctx.optimizer, [(t.prompt, t.reference) for t in tasks],
                            n_steps=steps, batch_size=budget.batch_size,
                            seed=derive_seed(ctx.seed, r, "sft"), speed=ctx.speed)
    strata = Counter("/".join(map(str, t.stratum)) for t in tasks)
    return RoundResult(train=stats, budget=Spend(update_steps=stats["steps"], generated_tasks=len(tasks)),
                       sections={"fresh": {"tasks": len(tasks), "distinct": len({t.canonical_hash for t in tasks}),
                                           "mix": dict(sorted(strata.items()))}})

"""Arm B, gated self-play. One round, top to bottom:

    propose (mutate parents) -> determinism gate -> dedup bank -> G solver rollouts per task
    -> sandboxed exec verifier -> difficulty band (frontier score on k/G) -> group advantage
    -> advantage-weighted update on the solver's own verified rollouts (exactly the registered steps)

The successor is always inherited. Every proposal lands in the round's task ledger. `explore` is
the round itself; the arms built on B (C, the negative control, the commit-gate decomposition)
call it with fewer steps or a transform of the advantages, and keep B's State (the admitted
parents) and B's record sections (band, verdict_reasons, monitors) with their metrics.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harness.core.errors import BudgetError
from harness.core.seeds import derive_seed
from harness.core.timing import stage
from harness.learning import frontier, monitors
from harness.learning.advantages import ADVANTAGES, is_degenerate
from harness.learning.training import PlannedSteps
from harness.running.contract import RoundResult, RunContext
from harness.running.evaluation import Group, reason_fields, sample_groups
from harness.sandbox import gate
from harness.spec.accounting import Spend
from harness.spec.protocol import Arm
from harness.tasks.contract import Task, TaskFamily
from harness.tasks.proposer import propose


@dataclass
class State:
    """B's own state: the tasks its band admitted in earlier rounds, in order, which later rounds
    mutate beside the seed set (recorded in every checkpoint as "admitted_parents")."""
    admitted: list[Task] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"admitted_parents": [t.to_dict() for t in self.admitted]}

    @classmethod
    def from_dict(cls, d: dict, family: TaskFamily) -> State:
        return cls([family.task_from_dict(t) for t in d["admitted_parents"]])


def round_metrics(sections: dict) -> dict[str, float]:
    """B's record sections as MLflow metrics: monitor/<name> for every numeric collapse monitor,
    band/<key> for the band's counts."""
    m = {f"monitor/{k}": v for k, v in sections["monitors"].items() if isinstance(v, (int, float))}
    m.update({f"band/{k}": v for k, v in sections["band"].items()})
    return m


@dataclass
class Exploration:
    """A round's self-play material, for the arms built on B."""
    groups: list[Group]                      # one per solver task, G rollouts each
    admitted: list[int]                      # indices of the groups inside the band
    examples: list[tuple[str, str, bool]]    # (prompt, completion, ended) of every admitted rollout
    advantages: list[float]                  # one per example
    verified: list[tuple]                    # (task, one verified rollout's text, win rate) per task with a pass
    pending: PlannedSteps | None = None      # the round's update: the registered steps, planned at once; what is left of it


def select_tasks(ctx: RunContext, r: int, settings: Arm) -> tuple[list, list[dict]]:
    """Propose in batches until `tasks_per_round` proposals pass the gate and the bank.
    Returns (tasks for the solver, ledger entries for every proposal)."""
    budget, gates = ctx.protocol.budget, ctx.protocol.gates
    parents = ctx.seed_set + ctx.state.admitted
    gate_rng = random.Random(derive_seed(ctx.seed, r, "gate-leak"))
    chosen, ledger = [], []
    for batch in range(budget.max_proposal_batches):
        with stage("propose"):
            proposals = propose(ctx.family, parents, budget.proposals_per_batch,
                                seed=derive_seed(ctx.task_seed, ctx.seed, batch), round=r, operators=settings.operators)
        with stage("gate"):
            verdicts = gate.admit_many([p.task for p in proposals], epsilon=gates.determinism.epsilon, rng=gate_rng,
                                       protocol_seed=ctx.task_seed)
        for p, gv in zip(proposals, verdicts):
            entry = {"round": r, "task": p.task.canonical_hash, "shape": p.task.shape_hash,
                     "program": p.task.program_hash, "parent": p.parent,
                     "mutation": p.mutation, "gate": gv.admitted, "gate_reason": gv.reason, "bank": None,
                     "solver": False}
            if gv.admitted and len(chosen) < budget.tasks_per_round:
                if gv.outputs is not None:  # what the verifier's settings give, not this process's hash secret
                    p = replace(p, task=replace(p.task, expected=gv.outputs))
                with stage("bank"):
                    entry["bank"] = ctx.bank.check(p.task, r)
                    if entry["bank"] == "new":
                        ctx.bank.add(p.task, r)
                        entry["solver"] = True
                        chosen.append((p.task, entry))
            ledger.append(entry)
        if len(chosen) == budget.tasks_per_round:
            return chosen, ledger
    raise BudgetError(f"round {r}: only {len(chosen)} of {budget.tasks_per_round} registered tasks survived gate "
                      f"and bank after {budget.max_proposal_batches} proposal batches; the registered rollouts "
                      f"cannot be spent exactly (raise max_proposal_batches in a new protocol)")


def explore(ctx: RunContext, r: int, settings: Arm, n_steps: int | None = None,
            transform: Callable[[list[float]], list[float]] | None = None) -> tuple[RoundResult, Exploration]:
    """One gated self-play round on ctx.model (updated in place): the round's update is planned for
    the registered learner_steps_per_round and `n_steps` of them (default: all) are taken here; the
    rest stay in `material.pending`, for an arm to continue inside the same update (same batch
    order, same trust region). `transform` maps the round's advantages (one per admitted rollout,
    in order) to the ones trained on. Returns the round and its material."""
    budget, band = ctx.protocol.budget, ctx.protocol.gates.band
    G = budget.G
    chosen, ledger = select_tasks(ctx, r, settings)
    tasks = [t for t, _ in chosen]

    # solver rollouts: every task x G in one batched decode
    # rows are verified on a background thread while the batch decodes; "verify" is what is left after
    groups, spend = sample_groups(ctx.model, tasks, G=G, max_bytes=budget.max_bytes,
                                  temperature=budget.temperature, seed=derive_seed(ctx.seed, r, "rollouts"),
                                  device=ctx.device, purpose="solver", stages=("sampling", "verify"),
                                  speed=ctx.speed)

    # band, then group advantages over the admitted groups
    admitted = []
    for i, ((task, entry), grp) in enumerate(zip(chosen, groups)):
        ok = frontier.admits(band.frontier, grp.k, G, **band.params())
        entry.update({"G": G, "temperature": budget.temperature, "k": grp.k, "win_rate": grp.k / G,
                      **reason_fields(list(grp.verdicts)),  # each rollout's verdict reason, retries
                      "frontier_score": frontier.score(band.frontier, grp.k, G, **band.params()),
                      "admitted": ok})
        if ok:
            admitted.append(i)
            ctx.state.admitted.append(task)
    with stage("advantage"):
        anchor, anchor_verdicts = None, []
        if settings.advantage == "anchor":
            anchor_groups, anchor_spend = _anchor_groups(ctx, r, [tasks[i] for i in admitted])
            anchor = [g.rewards for g in anchor_groups]
            anchor_verdicts = [v for g in anchor_groups for v in g.verdicts]
            spend = spend + anchor_spend
        advs_by_group = ADVANTAGES[settings.advantage]([groups[i].rewards for i in admitted], anchor)
    # a rollout cut off by the byte budget is trained without an END byte after it
    examples = [(groups[i].task.prompt, c.text, c.ended) for i in admitted for c in groups[i].completions]
    advs = [float(a) for grp in advs_by_group for a in grp]
    if transform is not None:
        advs = transform(advs)
    verified = [(g.task, next(c.text for c, v in zip(g.completions, g.verdicts) if v.passed), g.k / G)
                for g in groups if g.k]
    material = Exploration(groups, admitted, examples, advs, verified)

    n_steps = budget.learner_steps_per_round if n_steps is None else n_steps
    with stage("update"):
        material.pending = plan_update(ctx, r, material, settings, budget.learner_steps_per_round, "update")
        stats = take(material.pending, n_steps)
    bank_report = ctx.bank.round_report(r)
    seed_hashes = {t.canonical_hash for t in ctx.seed_set}
    parents = {e["parent"] for e in ledger} | ({ctx.seed_set[0].canonical_hash} if stats.get("empty") else set())
    spend = spend + Spend(update_steps=stats["steps"], seed_tasks=len(parents & seed_hashes), generated_tasks=len(tasks))
    rewards = [g.rewards for g in groups]
    result = RoundResult(
        train=stats, budget=spend, proposals=ledger,
        sections={"band": {"solver_tasks": len(tasks), "admitted": len(admitted),
                           "zero_spread": sum(is_degenerate(x) for x in rewards)},
                  "verdict_reasons": {"solver": reason_counts(v for g in groups for v in g.verdicts),
                                      "anchor": reason_counts(anchor_verdicts)},
                  "monitors": monitors.round_monitors([g.texts for g in groups], rewards, bank_report)},
        progress={"kept": len(admitted)})
    return result, material


def plan_update(ctx: RunContext, r: int, material: Exploration, settings: Arm, n_steps: int, tag: str) -> PlannedSteps:
    """`n_steps` advantage-weighted steps on the round's admitted rollouts (batch order seeded by
    (run seed, round, tag)), planned, none taken yet; zero-advantage steps when no group reached the band."""
    budget = ctx.protocol.budget
    if not material.examples:
        return _empty_steps(ctx, r, n_steps, tag)
    return PlannedSteps(ctx.model, ctx.optimizer, material.examples, n_steps=n_steps, batch_size=budget.batch_size,
                        seed=derive_seed(ctx.seed, r, tag), advantages=material.advantages, clip_eps=settings.clip,
                        norm_bytes=budget.max_bytes, speed=ctx.speed)


def take(plan: PlannedSteps, n_steps: int) -> dict:
    """The next `n_steps` of a planned update: train_steps's stats, with "empty" when the plan is
    the zero-advantage one (no group reached the band)."""
    stats = plan.take(n_steps)
    return {**stats, "empty": True} if plan.empty else stats



def reason_counts(verdicts) -> dict:
    """{"reasons": verdicts per verifier reason (those that occur, sorted by name), "retried": how
    many were run twice after an infrastructure failure}."""
    verdicts = list(verdicts)
    return {"reasons": dict(sorted(Counter(v.reason for v in verdicts).items())),
            "retried": sum(v.retried for v in verdicts)}


def _anchor_rewards(ctx: RunContext, r: int, tasks: list) -> tuple[list[list[float]], Spend]:
    """The anchor groups' rewards (G per task) and their charge (`_anchor_groups`)."""
    groups, spend = _anchor_groups(ctx, r, tasks)
    return [g.rewards for g in groups], spend


def _anchor_groups(ctx: RunContext, r: int, tasks: list) -> tuple[list[Group], Spend]:
    """AnchorLoop: G rollouts per task from the frozen previous-iteration model (the weights this
    round's policy started from one round earlier; the base in rounds 0 and 1), with their
    verdicts, and their charge."""
    G, budget = ctx.protocol.budget.G, ctx.protocol.budget
    if not tasks:
        return [], Spend()
    groups, spend = sample_groups(ctx.anchor_model(r), tasks, G=G, max_bytes=budget.max_bytes,
                                  temperature=budget.temperature, seed=derive_seed(ctx.seed, r, "anchor"),
                                  device=ctx.device, purpose="anchor", speed=ctx.speed)
    return groups, spend


def _empty_steps(ctx: RunContext, r: int, n_steps: int, tag: str) -> PlannedSteps:
    """No group reached the band: the registered steps are still taken, with zero advantage, so
    every arm consumes exactly the same number of optimizer steps (Adam momentum still moves)."""
    examples = [(t.prompt, t.reference) for t in ctx.seed_set[:1]]
    plan = PlannedSteps(ctx.model, ctx.optimizer, examples, n_steps=n_steps, batch_size=1,
                        seed=derive_seed(ctx.seed, r, tag), advantages=[0.0], norm_bytes=ctx.protocol.budget.max_bytes,
                        speed=ctx.speed)
    plan.empty = True  # the round trained on nothing it sampled: its record says so
    return plan


def run_round(ctx: RunContext, r: int) -> RoundResult:
    return explore(ctx, r, ctx.arm_settings)[0]

"""Arm B, gated self-play. One round, top to bottom:

    propose (mutate parents) -> determinism gate -> dedup bank -> G solver rollouts per task
    -> sandboxed exec verifier -> difficulty band (frontier score on k/G) -> group advantage
    -> advantage-weighted update on the solver's own verified rollouts (exactly the registered steps)

The successor is always inherited. Every proposal lands in the round's task ledger.
"""
from __future__ import annotations

import random

from harness import frontier, gate, monitors
from harness.advantages import ADVANTAGES, is_degenerate
from harness.errors import HarnessError
from harness.evaluation import sample_verified
from harness.proposer import propose
from harness.seeds import derive_seed
from harness.timing import stage
from harness.training import train_steps


class BudgetError(HarnessError):
    pass


def select_tasks(ctx, r: int, settings: dict) -> tuple[list, list[dict]]:
    """Propose in batches until `tasks_per_round` proposals pass the gate and the bank.
    Returns (tasks for the solver, ledger entries for every proposal)."""
    budget, gates = ctx.protocol.budget, ctx.protocol.gates
    parents = ctx.seed_set + ctx.state["admitted_parents"]
    gate_rng = random.Random(derive_seed(ctx.seed, r, "gate-leak"))
    chosen, ledger = [], []
    for batch in range(budget["max_proposal_batches"]):
        with stage("propose"):
            proposals = propose(parents, budget["proposals_per_batch"], seed=derive_seed(ctx.task_seed, ctx.seed, batch),
                                round=r, operators=settings["operators"], difficulty_cap=ctx.difficulty_cap)
        with stage("gate"):
            verdicts = gate.admit_many([p.task for p in proposals], epsilon=gates["determinism"]["epsilon"], rng=gate_rng)
        for p, gv in zip(proposals, verdicts):
            entry = {"round": r, "task": p.task.canonical_hash, "shape": p.task.shape_hash,
                     "program": p.task.program_hash, "parent": p.parent,
                     "mutation": p.mutation, "gate": gv.admitted, "gate_reason": gv.reason, "bank": None,
                     "solver": False}
            if gv.admitted and len(chosen) < budget["tasks_per_round"]:
                with stage("bank"):
                    entry["bank"] = ctx.bank.check(p.task, r)
                    if entry["bank"] == "new":
                        ctx.bank.add(p.task, r)
                        entry["solver"] = True
                        chosen.append((p.task, entry))
            ledger.append(entry)
        if len(chosen) == budget["tasks_per_round"]:
            return chosen, ledger
    raise BudgetError(f"round {r}: only {len(chosen)} of {budget['tasks_per_round']} registered tasks survived gate "
                      f"and bank after {budget['max_proposal_batches']} proposal batches; the registered rollouts "
                      f"cannot be spent exactly (raise max_proposal_batches in a new protocol)")


def explore(ctx, r: int, settings: dict) -> dict:
    """One gated self-play round on ctx.model (updated in place). Returns the round's data."""
    budget, band = ctx.protocol.budget, ctx.protocol.gates["band"]
    G = budget["G"]
    chosen, ledger = select_tasks(ctx, r, settings)
    tasks = [t for t, _ in chosen]

    # solver rollouts: every task x G in one batched decode
    # rows are verified on a background thread while the batch decodes; "verify" is what is left after
    comps, verdicts = sample_verified(ctx.model, tasks, max_bytes=budget["max_bytes"], repeats=G,
                                      temperature=budget["temperature"], seed=derive_seed(ctx.seed, r, "rollouts"),
                                      device=ctx.device, stages=("sampling", "verify"))
    rewards = [[float(verdicts[i * G + j].passed) for j in range(G)] for i in range(len(tasks))]

    # band, then group advantages over the admitted groups
    admitted_idx = []
    for i, (task, entry) in enumerate(chosen):
        k = int(sum(rewards[i]))
        admitted = frontier.admits(band["frontier"], k, G, **_band_params(band))
        entry.update({"G": G, "temperature": budget["temperature"], "k": k, "win_rate": k / G,
                      "frontier_score": frontier.score(band["frontier"], k, G, **_band_params(band)),
                      "admitted": admitted})
        if admitted:
            admitted_idx.append(i)
            ctx.state["admitted_parents"].append(task)
    with stage("advantage"):
        anchor = _anchor_rewards(ctx, r, [tasks[i] for i in admitted_idx]) if settings["advantage"] == "anchor" else None
        advs_by_group = ADVANTAGES[settings["advantage"]]([rewards[i] for i in admitted_idx], anchor)
    # a rollout cut off by the byte budget is trained without an END byte after it
    examples = [(tasks[i].prompt, comps[i * G + j].text, comps[i * G + j].ended) for i in admitted_idx for j in range(G)]
    advs = [float(a) for grp in advs_by_group for a in grp]
    verified = [(t, next(comps[i * G + j].text for j in range(G) if rewards[i][j]), sum(rewards[i]) / G)
                for i, t in enumerate(tasks) if any(rewards[i])]

    with stage("update"):
        stats = train_steps(ctx.model, ctx.optimizer, examples, n_steps=budget["learner_steps_per_round"],
                            batch_size=budget["batch_size"], seed=derive_seed(ctx.seed, r, "update"),
                            advantages=advs, clip_eps=settings["clip"], norm_bytes=budget["max_bytes"]
                            ) if examples else _empty_steps(ctx, r)
    bank_report = ctx.bank.round_report(r)
    groups = [[comps[i * G + j].text for j in range(G)] for i in range(len(tasks))]
    return {
        "ledger": ledger,
        "verified": verified,
        "train": stats,
        "band": {"solver_tasks": len(tasks), "admitted": len(admitted_idx),
                 "zero_spread": sum(is_degenerate(x) for x in rewards)},
        "monitors": monitors.round_monitors(groups, rewards, bank_report),
        "budget": {"learner_steps": stats["steps"], "solver_rollouts": len(comps),
                   "solver_bytes": sum(c.n_bytes for c in comps), "recovery_steps": 0, "confirm_rollouts": 0,
                   "anchor_rollouts": G * len(admitted_idx) if settings["advantage"] == "anchor" else 0},
    }


def _band_params(band: dict) -> dict:
    return {"lo": band["low"], "hi": band["high"]} if band["frontier"] == "flat_top" else {}


def _anchor_rewards(ctx, r: int, tasks: list) -> list[list[float]]:
    """AnchorLoop: G rollouts per task from the frozen previous-iteration model (the weights this
    round's policy started from one round earlier; the base in rounds 0 and 1)."""
    G, budget = ctx.protocol.budget["G"], ctx.protocol.budget
    if not tasks:
        return []
    anchor = ctx.anchor_model(r)
    _, verdicts = sample_verified(anchor, tasks, max_bytes=budget["max_bytes"], repeats=G,
                                  temperature=budget["temperature"], seed=derive_seed(ctx.seed, r, "anchor"),
                                  device=ctx.device)
    return [[float(verdicts[i * G + j].passed) for j in range(G)] for i in range(len(tasks))]


def _empty_steps(ctx, r: int) -> dict:
    """No group reached the band: the registered steps are still taken, with zero advantage, so
    every arm consumes exactly the same number of optimizer steps (Adam momentum still moves)."""
    examples = [(t.prompt, t.reference) for t in ctx.seed_set[:1]]
    budget = ctx.protocol.budget
    stats = train_steps(ctx.model, ctx.optimizer, examples, n_steps=budget["learner_steps_per_round"],
                        batch_size=1, seed=derive_seed(ctx.seed, r, "update"), advantages=[0.0],
                        norm_bytes=budget["max_bytes"])
    return {**stats, "empty": True}


def run_round(ctx, r: int) -> dict:
    return explore(ctx, r, ctx.arm_settings)

"""Arm C, B plus the HeirCommit round gate. One round, inside the registered learner steps S
(recovery_steps R of them reserved for recovery):

    explore  one B round with S - R update steps                -> successor
    screen   successor vs root on fresh confirm probes (never the primary probe set)
    recover  if the screen finds it worse and it forgot verified material: R steps of fine-tuning
             on the verified solutions it now fails, rehearsing those it passes (EvoHeir);
             otherwise the R steps continue the round's own self-play update: the same planned
             update (batch order and trust region of D's), so with no recovery C's weights are D's
    confirm  successor vs root on a second fresh batch, with the registered paired rule
    commit the successor, or retain the root; the experience store keeps the round's verified
    material either way

Recovery draws only on C's own verified rollouts (this round's, then the experience store's):
never on the seed set's references, which are arm A's training data. With R = 0 there is no
screen and no recovery: B's round plus the commit gate (the decomposition arm). The state is B's
(the admitted parents); the record holds B's sections and C's own, "heircommit".
"""
from __future__ import annotations

import copy

from arms import b_selfplay
from harness.core.seeds import derive_seed
from harness.core.timing import stage
from harness.learning.training import optimizer_step, train_steps
from harness.running import heircommit
from harness.running.contract import RoundResult, RunContext
from harness.running.evaluation import greedy_pass
from harness.spec.accounting import Spend
from harness.spec.protocol import Arm

NO_RECOVERY = {"ran": False, "steps": 0, "failed": 0, "rehearsed": 0, "checked": 0}
State = b_selfplay.State  # B's round: B's parents


def round_metrics(sections: dict) -> dict[str, float]:
    """B's metrics, and the gate's: heircommit/commit (1.0 when the successor was committed) and
    heircommit/sign_test_p (the confirm batch's one-sided sign test)."""
    confirm = sections["heircommit"]["confirm"]
    return {**b_selfplay.round_metrics(sections), "heircommit/commit": float(confirm["decision"] == "commit"),
            "heircommit/sign_test_p": confirm["sign_test_p"]}


def recovery_pool(current: list[tuple], stored: list[tuple], limit: int) -> list[tuple]:
    """At most `limit` (task, verified solution) pairs, one per task: this round's verified
    rollouts (found by the root, which sampled them) first, then the store's, most recent first."""
    seen, out = set(), []
    for task, solution in [(t, s) for t, s, _ in current] + stored:
        if task.canonical_hash not in seen and len(out) < limit:
            seen.add(task.canonical_hash)
            out.append((task, solution))
    return out


def recover(ctx: RunContext, r: int, settings: Arm, current: list[tuple]) -> tuple[dict, Spend]:
    """EvoHeir: re-check the successor on its verified material; if it fails some, take the
    reserved recovery steps on the solutions of those it fails, rehearsing those it still passes.
    Returns what was done and what it cost (forgetting checks, recovery steps)."""
    stored = ctx.experience.recovery_candidates() if ctx.experience is not None else []
    pool = recovery_pool(current, stored, settings.recovery_pool)
    failed, passed, n_bytes = heircommit.forgotten(ctx.model, pool, ctx.protocol.budget.max_bytes, ctx.device,
                                                   ctx.speed)
    spend = Spend(forgetting_rollouts=len(pool), forgetting_bytes=n_bytes, experience_tasks=len(pool))
    if not failed:
        return {**NO_RECOVERY, "checked": len(pool)}, spend
    stats = train_steps(ctx.model, ctx.optimizer, [(t.prompt, sol) for t, sol in failed + passed],
                        n_steps=settings.recovery_steps, batch_size=ctx.protocol.budget.batch_size,
                        seed=derive_seed(ctx.seed, r, "recover"), speed=ctx.speed)
    return ({"ran": True, "steps": stats["steps"], "failed": len(failed), "rehearsed": len(passed), "checked": len(pool)},
            spend + Spend(recovery_steps=stats["steps"]))


def paired(ctx: RunContext, root, probes: list, purpose: str) -> tuple[dict, Spend]:
    """Greedy outcomes of the successor (ctx.model) and the root on the same probes, and their charge."""
    max_bytes = ctx.protocol.budget.max_bytes
    root_passed, root_bytes = greedy_pass(root, probes, max_bytes, ctx.device, ctx.speed)
    succ_passed, succ_bytes = greedy_pass(ctx.model, probes, max_bytes, ctx.device, ctx.speed)
    spend = Spend.sampled(purpose, 2 * len(probes), root_bytes + succ_bytes) + Spend(confirm_tasks=len(probes))
    return heircommit.paired_counts(succ_passed, root_passed), spend


def gated_round(ctx: RunContext, r: int, settings: Arm, recovery_steps: int) -> RoundResult:
    """One round of B under the commit gate, with `recovery_steps` of the round's steps reserved
    for recovery (0: no screen, no recovery)."""
    rule = ctx.protocol.gates.confirm
    root = copy.deepcopy(ctx.model).eval()
    root_optim = copy.deepcopy(ctx.optimizer.state_dict())
    steps = ctx.protocol.budget.learner_steps_per_round

    result, material = b_selfplay.explore(ctx, r, settings, n_steps=steps - recovery_steps)  # ctx.model: the successor
    screen_probes, confirm_probes = ctx.confirm_batches(r)
    spend, screen, recovery, continued = result.budget, None, dict(NO_RECOVERY), None
    if recovery_steps > 0:
        with stage("heircommit_screen"):
            screen, cost = paired(ctx, root, screen_probes, "screen")
        spend = spend + cost
        if screen["successor_pass"] < screen["root_pass"]:
            with stage("heircommit_recover"):
                recovery, cost = recover(ctx, r, settings, material.verified)
            spend = spend + cost
        if not recovery["ran"]:  # the reserved steps continue the round's own update, inside the same plan
            with stage("update"):
                continued = b_selfplay.take(material.pending, recovery_steps)
            spend = spend + Spend(update_steps=continued["steps"])

    with stage("heircommit_confirm"):
        counts, cost = paired(ctx, root, confirm_probes, "confirm")
        decision = heircommit.confirm(counts, rule.rule, rule.margin, rule.alpha, ctx.protocol.decision.power)
    spend = spend + cost
    kept = decision["decision"] == "commit"
    if not kept:
        ctx.model.load_state_dict(root.state_dict())
        ctx.optimizer.load_state_dict(root_optim)
    # a retained round restores the root's optimizer, step count included: its lr warm-up stands where
    # it stood before the round, `behind` steps behind every other arm's (which take `steps` a round)
    schedule = {"optimizer_step": optimizer_step(ctx.optimizer), "run_steps": (r + 1) * steps}
    schedule["behind"] = schedule["run_steps"] - schedule["optimizer_step"]
    if ctx.experience is not None:
        for task, solution, win_rate in material.verified:
            ctx.experience.add(task, solution, r, win_rate, kept)

    result.budget = spend
    result.sections["heircommit"] = {"screen": screen, "recovery": recovery, "continued_update": continued,
                                     "confirm": decision, "lr_schedule": schedule}
    result.progress["gate"] = decision["decision"]
    return result


def run_round(ctx: RunContext, r: int) -> RoundResult:
    return gated_round(ctx, r, ctx.arm_settings, ctx.arm_settings.recovery_steps)

"""Arm C, B plus the HeirCommit round gate. One round:

    explore (exactly one B round)  -> successor
    screen   successor vs root on fresh confirm probes (never the primary probe set)
    recover  if the screen finds it worse: fine-tune on archived verified solutions of the tasks it
             now fails, with rehearsal of those it passes (EvoHeir); extra steps counted as recovery
    confirm  successor vs root on a second fresh batch, with the registered paired rule
    commit the successor, or retain the root; the archive keeps the round's verified material either way
"""
from __future__ import annotations

import copy

from arms import b_selfplay
from harness import heircommit
from harness.evaluation import greedy_pass
from harness.seeds import derive_seed
from harness.timing import stage
from harness.training import train_steps


def recover(ctx, r: int, settings: dict) -> dict:
    """EvoHeir: re-check the successor on archived tasks; train on the verified solutions of those it
    fails, rehearsing those it still passes. Returns what was done (steps are counted as overhead)."""
    pool = ctx.archive.recovery_candidates(settings["recovery_pool"])
    failed, passed = heircommit.forgotten(ctx.model, pool, ctx.protocol.budget["max_bytes"], ctx.device)
    if not failed:
        return {"ran": False, "steps": 0, "failed": 0, "rehearsed": 0, "checked": len(pool)}
    stats = train_steps(ctx.model, ctx.optimizer, [(t.prompt, sol) for t, sol in failed + passed],
                        n_steps=settings["recovery_steps"], batch_size=ctx.protocol.budget["batch_size"],
                        seed=derive_seed(ctx.seed, r, "recover"))
    return {"ran": True, "steps": stats["steps"], "failed": len(failed), "rehearsed": len(passed), "checked": len(pool)}


def run_round(ctx, r: int) -> dict:
    budget, rule = ctx.protocol.budget, ctx.protocol.gates["confirm"]
    settings, max_bytes = ctx.arm_settings, budget["max_bytes"]
    root = copy.deepcopy(ctx.model).eval()
    root_optim = copy.deepcopy(ctx.optimizer.state_dict())

    out = b_selfplay.explore(ctx, r, settings)                      # ctx.model is now the successor
    screen_probes, confirm_probes = ctx.confirm_batches(r)

    with stage("heircommit_screen"):
        root_screen, _ = greedy_pass(root, screen_probes, max_bytes, ctx.device)
        succ_screen, _ = greedy_pass(ctx.model, screen_probes, max_bytes, ctx.device)
        screen = heircommit.paired_counts(succ_screen, root_screen)

    recovery = {"ran": False, "steps": 0, "failed": 0, "rehearsed": 0, "checked": 0}
    if screen["successor_pass"] < screen["root_pass"] and settings["recovery_steps"] > 0:
        with stage("heircommit_recover"):
            recovery = recover(ctx, r, settings)

    with stage("heircommit_confirm"):
        root_confirm, _ = greedy_pass(root, confirm_probes, max_bytes, ctx.device)
        succ_confirm, _ = greedy_pass(ctx.model, confirm_probes, max_bytes, ctx.device)
        decision = heircommit.confirm(heircommit.paired_counts(succ_confirm, root_confirm), rule["rule"],
                                      rule["margin"], rule["alpha"], ctx.protocol.decision["power"])
    kept = decision["decision"] == "commit"
    if not kept:
        ctx.model.load_state_dict(root.state_dict())
        ctx.optimizer.load_state_dict(root_optim)

    for task, solution, win_rate in out["verified"]:
        ctx.archive.add(task, solution, r, win_rate, kept)

    out["heircommit"] = {"screen": screen, "recovery": recovery, "confirm": decision}
    out["budget"].update(recovery_steps=recovery["steps"],
                         confirm_rollouts=2 * (len(screen_probes) + len(confirm_probes)))
    return out

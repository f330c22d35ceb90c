"""The decomposition arm: B's round under C's commit gate, with no screen and no recovery.

Its update is exactly B's (all the registered steps, the same seeds); the successor is then
confirmed against the root on the round's confirm batch and committed or retained. So C - D
is what recovery adds and D - B what the commit gate alone adds.
"""
from __future__ import annotations

from arms import c_heircommit
from arms.c_heircommit import gated_round
from harness.running.contract import RoundResult, RunContext

State = c_heircommit.State                  # B's parents
round_metrics = c_heircommit.round_metrics  # B's sections and the gate's


def run_round(ctx: RunContext, r: int) -> RoundResult:
    return gated_round(ctx, r, ctx.arm_settings, recovery_steps=0)

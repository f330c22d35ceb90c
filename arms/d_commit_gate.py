"""The decomposition arm: B's round under C's commit gate, with no screen and no recovery.

Its update is exactly B's (all the registered steps, the same seeds); the successor is then
confirmed against the root on the round's confirm batch and committed or retained. So C - D
is what recovery adds and D - B what the commit gate alone adds.
"""
from __future__ import annotations

from arms.c_heircommit import gated_round
from harness.running.contract import RoundResult


def run_round(ctx, r: int) -> RoundResult:
    return gated_round(ctx, r, ctx.arm_settings, recovery_steps=0)

"""The arm contract: what an arm kind's module exposes and returns.

    run_round(ctx, r) -> RoundResult

trains ctx.model (harness.running.runner.RunContext) in place for round r and says what it spent
(a typed `Spend`). Which module runs which kind, and what each kind needs, is the registry's
(harness.spec.kinds).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.spec.accounting import Spend


@dataclass
class RoundResult:
    """What one round did. `budget` is what it spent (the runner adds the shared evaluation);
    `proposals` are its task-ledger entries (ledger.jsonl); `sections` are recorded as extra keys
    of the round record (band, monitors, heircommit, ...); `progress` is shown on the progress bar."""
    train: dict
    budget: Spend
    proposals: list[dict] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)

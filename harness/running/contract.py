"""The arm contract: the context a round gets, what it returns, and what an arm kind's module exposes.

An arm kind is a module, named by its line in the registry (harness.spec.kinds.KINDS) and loaded by
that name (`load_arm`); the runner knows no kind by name. The module exposes

    run_round(ctx: RunContext, r: int) -> RoundResult   required: train ctx.model in place for
                                                         round r and say what it spent
    State                                                optional: the class of what the arm keeps
                                                         across rounds besides the weights (ArmState);
                                                         an arm without one keeps nothing (NoState)
    round_metrics(sections: dict) -> dict[str, float]    optional: its own record sections, as
                                                         recorded, to MLflow metrics "<section>/<name>"

So each arm owns its state (the runner stores it in every checkpoint and hands it back on resume
without reading it) and its record sections (the runner writes them and passes them to the arm's
round_metrics without reading them).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
import typing
from typing import Any, ClassVar

from harness.core.errors import HarnessError
from harness.core.settings import Speed
from harness.learning.checkpoint import load_model, load_model_tensors, read_checkpoint
from harness.running.experience import Experience
from harness.spec.accounting import Spend
from harness.spec.kinds import Needs
from harness.spec.protocol import Arm, Protocol
from harness.tasks.bank import Bank
from harness.tasks.contract import Task, TaskFamily


class RunError(HarnessError):
    """A run refuses: an unregistered arm or seed, a sealed run, a broken budget or checkpoint, an
    arm module that breaks its contract."""


class ArmState(typing.Protocol):
    """What an arm keeps across rounds besides the weights, the optimizer and the task bank. Its
    `to_dict` (JSON values, keys other than the runner's CHECKPOINT_KEYS) is stored in every round's
    checkpoint; `from_dict` rebuilds it on resume, reading any task it holds with the protocol's task
    family; `State()` is the state before round 0."""

    def to_dict(self) -> dict: ...

    @classmethod
    def from_dict(cls, d: dict, family: TaskFamily) -> ArmState: ...


@dataclass
class NoState:
    """The state of an arm that keeps none. It records the empty parent list every checkpoint
    carried when the runner kept self-play's parents for all arms, so that the checkpoints of the
    arms without state (whose sha256 the round records hold) keep their bytes."""
    RECORDED: ClassVar[dict] = {"admitted_parents": []}

    def to_dict(self) -> dict:
        return {k: list(v) for k, v in self.RECORDED.items()}

    @classmethod
    def from_dict(cls, d: dict, family: TaskFamily) -> NoState:
        if d != cls.RECORDED:
            raise ValueError(f"an arm without state found state {sorted(d)} in its checkpoint")
        return cls()


@dataclass
class RoundResult:
    """What one round did. `budget` is what it spent (the runner adds the shared evaluation);
    `proposals` are its task-ledger entries (ledger.jsonl); `sections` are recorded as extra keys
    of the round record (band, monitors, heircommit, ...: the arm's own); `progress` is shown on
    the progress bar."""
    train: dict
    budget: Spend
    proposals: list[dict] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class RunContext:
    """What an arm's round may use, built by keyword. `held_out` maps every frozen set that is not
    training data (probe, confirm, ...) to its tasks; `experience`, `confirm_batches` and
    `anchor_model` are offered only to an arm whose Needs declare them. `state` is the arm's own
    (its module's State) and survives a resume."""
    protocol: Protocol
    arm: str
    seed: int
    device: str
    model: Any                       # harness.learning.model.Transformer, trained in place
    optimizer: Any                   # its torch optimizer (harness.learning.training.make_optimizer)
    seed_set: list[Task]
    probes: list[Task]
    held_out: dict[str, list[Task]]
    bank: Bank | None
    run_dir: Path
    base_path: Path                  # the frozen base checkpoint this run started from
    experience: Experience | None = None
    needs: Needs = field(default_factory=Needs)
    state: ArmState = field(default_factory=NoState)
    speed: Speed = field(default_factory=Speed)  # how fast, never what: autocast, compile, the plain path

    @property
    def arm_settings(self) -> Arm:
        """The arm's typed settings (the ones harness.spec.protocol.Arm names)."""
        return self.protocol.arms[self.arm]

    @property
    def registered_settings(self) -> dict:
        """The arm's arms.yaml mapping as registered and validated by its kind (`kind` included):
        where a kind reads settings that the typed view does not name."""
        return self.protocol.raw["arms.yaml"][self.arm]

    @property
    def task_seed(self) -> int:
        return self.protocol.seeds.task_seed

    @property
    def family(self) -> TaskFamily:
        """The protocol's task family: what the proposer mutates and fresh tasks are drawn from."""
        return self.protocol.family

    def _need(self, what: str) -> None:
        if not getattr(self.needs, what):
            raise RunError(f"arm '{self.arm}' (kind {self.arm_settings.kind!r}) asked for '{what}', which its kind "
                           f"does not declare in harness/spec/kinds.py")

    def anchor_model(self, r: int):
        """The frozen previous-iteration model for AnchorLoop: the weights round r-1 started from
        (round r-2's checkpoint; the base for r < 2)."""
        self._need("anchor")
        model = load_model(self.base_path, self.protocol.model.size, self.device)
        if r >= 2:
            load_model_tensors(model, read_checkpoint(self.run_dir / "checkpoints" / f"round{r - 2}.pt")[0])
        return model.eval()

    def confirm_batches(self, r: int) -> tuple[list[Task], list[Task]]:
        """Round r's fresh probes from the confirm stream: (screen batch, confirm batch)."""
        self._need("confirm")
        n, stream = self.protocol.tasks.confirm.per_round, self.held_out["confirm"]
        return stream[2 * n * r: 2 * n * r + n], stream[2 * n * r + n: 2 * n * (r + 1)]


def no_metrics(sections: dict) -> dict[str, float]:
    return {}


@dataclass(frozen=True)
class ArmModule:
    """An arm kind's module as the runner uses it (see the module docstring)."""
    name: str
    run_round: Callable[[RunContext, int], RoundResult]
    state: type                                          # an ArmState class
    round_metrics: Callable[[dict], dict[str, float]]


def load_arm(module: str) -> ArmModule:
    """The arm kind's module named `module` (a registry line's dotted path). RunError when it does
    not fill the contract."""
    mod = importlib.import_module(module)
    if not callable(getattr(mod, "run_round", None)):
        raise RunError(f"arm module {module} ({mod.__file__}) has no run_round(ctx, r): every arm kind's module "
                       f"exposes one (harness/running/contract.py)")
    state = getattr(mod, "State", NoState)
    missing = [m for m in ("to_dict", "from_dict") if not callable(getattr(state, m, None))]
    if not isinstance(state, type) or missing:
        raise RunError(f"arm module {module}: State must be a class with to_dict() and from_dict(d, family) "
                       f"(harness.running.contract.ArmState); missing {missing or 'a class'}")
    return ArmModule(module, mod.run_round, state, getattr(mod, "round_metrics", no_metrics))

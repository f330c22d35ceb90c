"""The compute ledger: what a run spends, charged where it is spent and checked against what the
protocol registers.

Every record of a run carries one `Spend` under "budget" (the start record: the base evaluation;
each round record: the arm's round plus the shared evaluation after it), and the manifest holds
their sum. A Spend counts, in whole units:

    optimizer steps     update_steps (the arm's own update: SFT or self-play), recovery_steps (C's
                        EvoHeir recovery); learner_steps = their sum is what the protocol registers
                        per round for EVERY arm, so recovery comes out of a round's steps
    forward rollouts    per purpose: solver, anchor, screen, confirm, forgetting, probe, monitor;
                        with the bytes each generated (`<purpose>_rollouts`, `<purpose>_bytes`)
    labelled tasks      seed_tasks (seed-set tasks read: A's data, the proposer's parents),
                        generated_tasks (generated tasks trained on: the solver's tasks, the
                        positive control's fresh tasks), confirm_tasks (confirm-stream probes),
                        experience_tasks (experience-store entries re-checked for forgetting)

What is registered as equal (`registered_round`): learner steps for every arm (budget.yaml's, except a
positive control registered with its own in arms.yaml: a control, not a contender), the solver rollouts
of every arm whose kind spends them (tasks_per_round x G), and the shared evaluation's probe and
monitor rollouts. The runner refuses a record that breaks them (`violations`) or whose charges
differ from the optimizer steps and sampler rows it counted itself (`charge_violations`); the
readout checks the equalities again across arms and prints every field side by side.
This module imports no torch: reading sealed records must not need the training stack.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from harness.spec.kinds import kind_of, learner_steps, learning_rate

PURPOSES = ("solver", "anchor", "screen", "confirm", "forgetting", "probe", "monitor")
STEP_FIELDS = ("update_steps", "recovery_steps")
ROLLOUT_FIELDS = tuple(f"{p}_rollouts" for p in PURPOSES)
BYTE_FIELDS = tuple(f"{p}_bytes" for p in PURPOSES)
TASK_FIELDS = ("seed_tasks", "generated_tasks", "confirm_tasks", "experience_tasks")
# every key of a recorded budget, in the order the report prints them
FIELDS = ("learner_steps",) + STEP_FIELDS + ROLLOUT_FIELDS + BYTE_FIELDS + TASK_FIELDS


@dataclass(frozen=True)
class Spend:
    """One record's compute (all counts >= 0). Add two with `+`; `learner_steps` is derived."""
    update_steps: int = 0
    recovery_steps: int = 0
    solver_rollouts: int = 0
    anchor_rollouts: int = 0
    screen_rollouts: int = 0
    confirm_rollouts: int = 0
    forgetting_rollouts: int = 0
    probe_rollouts: int = 0
    monitor_rollouts: int = 0
    solver_bytes: int = 0
    anchor_bytes: int = 0
    screen_bytes: int = 0
    confirm_bytes: int = 0
    forgetting_bytes: int = 0
    probe_bytes: int = 0
    monitor_bytes: int = 0
    seed_tasks: int = 0
    generated_tasks: int = 0
    confirm_tasks: int = 0
    experience_tasks: int = 0

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"Spend.{f.name} must be an integer >= 0, got {v!r}")

    @property
    def learner_steps(self) -> int:
        """Every optimizer step of the record: the quantity registered per round for every arm."""
        return self.update_steps + self.recovery_steps

    @property
    def rollouts(self) -> int:
        return sum(getattr(self, k) for k in ROLLOUT_FIELDS)

    @property
    def bytes(self) -> int:
        return sum(getattr(self, k) for k in BYTE_FIELDS)

    @classmethod
    def sampled(cls, purpose: str, rollouts: int, n_bytes: int) -> "Spend":
        """The charge for `rollouts` forward rollouts of one purpose that generated `n_bytes` bytes."""
        if purpose not in PURPOSES:
            raise ValueError(f"Spend.sampled: unknown purpose {purpose!r}; expected one of {list(PURPOSES)}")
        return cls(**{f"{purpose}_rollouts": rollouts, f"{purpose}_bytes": n_bytes})

    def __add__(self, other: "Spend") -> "Spend":
        return Spend(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def to_dict(self) -> dict[str, int]:
        """The recorded form: every field of FIELDS, learner_steps included."""
        d = asdict(self)
        return {k: self.learner_steps if k == "learner_steps" else d[k] for k in FIELDS}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "Spend":
        """Parse a recorded budget; ValueError names `where`, the key and what was expected."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: budget must be a mapping of {list(FIELDS)}, got {type(d).__name__}")
        missing, extra = [k for k in FIELDS if k not in d], sorted(set(d) - set(FIELDS))
        if missing or extra:
            raise ValueError(f"{where}: budget keys differ from the ledger's: missing {missing}, unexpected {extra}")
        for k in FIELDS:
            if isinstance(d[k], bool) or not isinstance(d[k], int) or d[k] < 0:
                raise ValueError(f"{where}: budget.{k} must be an integer >= 0, got {d[k]!r}")
        spend = cls(**{k: d[k] for k in FIELDS if k != "learner_steps"})
        if spend.learner_steps != d["learner_steps"]:
            raise ValueError(f"{where}: budget.learner_steps is {d['learner_steps']}, but update_steps + recovery_steps "
                             f"= {spend.learner_steps}: every optimizer step counts toward the registered total")
        return spend


def total(spends) -> Spend:
    out = Spend()
    for s in spends:
        out = out + s
    return out


# ---------------------------------------------------------------- what the protocol registers

def eval_spend_per_evaluation(protocol, full: bool = True) -> dict[str, int]:
    """Rollouts of one shared evaluation (harness.running.evaluation.evaluate): greedy on every probe
    (`full`: the base's and the last round's) or on the registered subset (every other round), and
    monitor_samples samples on each of the first monitor_probes of them."""
    b = protocol.budget
    n_probes = protocol.tasks.probe.size if full else min(b.intermediate_eval_probes, protocol.tasks.probe.size)
    return {"probe_rollouts": n_probes, "monitor_rollouts": min(b.monitor_probes, n_probes) * b.monitor_samples}


def registered_round(protocol, arm: str, full_eval: bool = True) -> dict[str, int]:
    """The per-round quantities registered as equal, for one arm of `protocol` (a round record
    includes the evaluation after it: on every probe when `full_eval`, else on the registered subset)."""
    b = protocol.budget
    spends_rollouts = kind_of(protocol, arm).solver_rollouts
    return {"learner_steps": learner_steps(protocol, arm),
            "solver_rollouts": b.tasks_per_round * b.G if spends_rollouts else 0,
            **eval_spend_per_evaluation(protocol, full_eval)}


def registered_run(protocol, arm: str) -> dict:
    """The per-run registration written into the start record and the manifest: every round's, plus
    the base's one evaluation; the base and the last round evaluate every probe, the others the subset."""
    b, per_round = protocol.budget, registered_round(protocol, arm)
    full, between = eval_spend_per_evaluation(protocol), eval_spend_per_evaluation(protocol, full=False)
    return {"rounds": b.rounds, "learner_steps": per_round["learner_steps"] * b.rounds, "lr": learning_rate(protocol, arm),
            "solver_rollouts": per_round["solver_rollouts"] * b.rounds,
            **{k: 2 * full[k] + (b.rounds - 1) * between[k] for k in full},
            "max_bytes": b.max_bytes, "wall_clock_s": b.wall_clock_s_per_run}


def registered_base(protocol) -> dict[str, int]:
    """The start record's registration: one shared evaluation of the base, nothing else."""
    return {"learner_steps": 0, "solver_rollouts": 0, **eval_spend_per_evaluation(protocol)}


def violations(want: dict[str, int], spend: Spend, max_bytes: int) -> list[str]:
    """Why a record's spend breaks its registration `want` (registered_round / registered_base)
    or the byte budget ([] when it does not)."""
    got = spend.to_dict()
    out = [f"consumed {got[k]} {k}, registered {v}" for k, v in want.items() if got[k] != v]
    return out + [f"{got[f'{p}_bytes']} {p} bytes exceed the byte budget of {max_bytes} x {got[f'{p}_rollouts']} rollouts"
                  for p in PURPOSES if got[f"{p}_bytes"] > max_bytes * got[f"{p}_rollouts"]]


def charge_violations(spend: Spend, observed: dict[str, int]) -> list[str]:
    """Where the ledger's charges differ from what the process was seen to do: `observed` holds
    'optimizer_steps' (every optimizer.step()), 'sampled_rollouts' and 'sampled_bytes' (every
    sampler row), counted independently of the arm."""
    out = []
    for key, charged, what in (("optimizer_steps", spend.learner_steps, "optimizer steps"),
                               ("sampled_rollouts", spend.rollouts, "rollouts"),
                               ("sampled_bytes", spend.bytes, "generated bytes")):
        if observed[key] != charged:
            out.append(f"{observed[key]} {what} were taken but {charged} were charged to the ledger")
    return out

"""Pieces a task family may build from, the same for every family: settings checks in the words
tasks.yaml's errors use, phrasing strata and other-words draws, cycling over sub-kinds, running a
reference in this process, and `TabledFamily`, a TaskFamily whose settings are one frozen dataclass
and whose proposer operators are two tables. None of them knows a family; each draws from the
`random.Random` it is given, in a fixed order (the same seed draws the same tasks)."""
from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from harness.tasks.contract import Setting, Task, TaskFamily

PHRASINGS = ("plain", "alt")  # a stratum's phrasing part: every step said the plain way, or some other way


# ---- settings ----------------------------------------------------------------------------------

def int_setting(lo: int, hi: int) -> Setting:
    """A SETTINGS entry: an integer in [lo, hi] (a bool is not one)."""
    return (lambda v: type(v) is int and lo <= v <= hi), f"an integer >= {lo} <= {hi}"


def number_setting(lo: float, hi: float) -> Setting:
    """A SETTINGS entry: an integer or a float in [lo, hi] (a bool is not one)."""
    return (lambda v: type(v) in (int, float) and lo <= v <= hi), f"a number >= {lo} <= {hi}"


# ---- phrasing ----------------------------------------------------------------------------------

def phrasing_strata(alt_phrasing: float) -> list[str]:
    """The phrasing parts a distribution can produce: "plain" unless every step is said in other
    words (alt_phrasing 1), "alt" unless none is (alt_phrasing 0)."""
    return [p for p, ok in zip(PHRASINGS, (alt_phrasing < 1, alt_phrasing > 0)) if ok]


def phrasing_index(rng: random.Random, n_phrasings: int, other: bool) -> int:
    """A step's phrasing: 0 (the plain one), or for `other` one of the n_phrasings - 1 others."""
    return rng.randint(1, n_phrasings - 1) if other else 0


def other_words_flags(rng: random.Random, n: int, alt_phrasing: float, alt: bool,
                      counted: Sequence[int] | None = None) -> list[bool]:
    """n flags (is part k said in other words?) for a task drawn in a stratum: all False for "plain";
    for "alt" (`alt`), each True with probability alt_phrasing, redrawn until one of the `counted`
    parts (default: all) is set. Rejection sampling: each try succeeds with P >= alt_phrasing > 0."""
    counted = range(n) if counted is None else counted
    flags = [False] * n
    while alt and not any(flags[k] for k in counted):
        flags = [rng.random() < alt_phrasing for _ in range(n)]
    return flags


# ---- cycling over sub-kinds --------------------------------------------------------------------

def cycled(names, i: int) -> str:
    """The sub-kind of draw `i` when draws cycle over `names` in sorted order (TaskFamily.sample's `i`)."""
    names = sorted(names)
    return names[i % len(names)]


def cycle_counts(names, n: int) -> dict[str, int]:
    """How many of draws 0..n-1 fall on each name when they cycle (`cycled`)."""
    names = sorted(names)
    return {name: n // len(names) + (k < n % len(names)) for k, name in enumerate(names)}


# ---- the reference, run in this process --------------------------------------------------------

def reference_outputs(task: Task) -> tuple:
    """The reference program's outputs on the task's inputs, run in this process: the family's own
    rendering, never a model's. Each call gets its own copy of its input, so a reference that edits
    its argument cannot change the task."""
    scope: dict[str, Any] = {}
    exec(task.prompt + task.reference, scope)  # noqa: S102 - the family's rendering, never a model's
    return tuple(scope[task.func_name](copy.deepcopy(x)) for x in task.inputs)


def with_expected(task: Task) -> Task:
    """`task` (a dataclass) with `expected` set to `reference_outputs(task)`."""
    return dataclasses.replace(task, expected=reference_outputs(task))


# ---- a family of dataclasses and operator tables -----------------------------------------------

Mutation = Callable[[Any, random.Random, Any], Any]  # (task, rng, settings) -> the mutated task
Applies = Callable[[Any, Any], bool]                  # (task, settings) -> can the operator mutate it?


class TabledFamily(TaskFamily):
    """A TaskFamily whose settings are one frozen dataclass (`self.knob`; `settings()` is its fields),
    whose tasks are dataclasses of `task_type` (read back by its `from_dict`) with their expected
    outputs from `with_expected`, and whose proposer operators are the tables MUTATE and APPLIES,
    keyed by operator name. A subclass still says how to draw, its classes and its key spaces."""
    task_type: ClassVar[type]
    MUTATE: ClassVar[dict[str, Mutation]]
    APPLIES: ClassVar[dict[str, Applies]]

    def __init__(self, knob: Any):
        self.knob = knob

    def settings(self) -> dict[str, Any]:
        return dataclasses.asdict(self.knob)

    def with_expected(self, task: Task) -> Task:
        return with_expected(task)

    def task_from_dict(self, d: dict) -> Task:
        return self.task_type.from_dict(d)

    def applies(self, op: str, task: Task) -> bool:
        return self.APPLIES[op](task, self.knob)

    def mutate(self, op: str, task: Task, rng: random.Random) -> Task:
        return self.MUTATE[op](task, rng, self.knob)

"""The proposer: deterministic mutations of parent tasks, by the family's own operators.

Each proposal copies one parent (a seed-set task, later an admitted one) and applies one named
mutation operator of the protocol's family (harness.tasks.contract.TaskFamily.operators; which ones
an arm uses is registered in arms.yaml). Parents and operators are drawn with
``random.Random(f"propose/{seed}/{round}")``, so the same (family, protocol seed, round, parents,
operators) always gives the same proposals. The proposer never sees solver answers: nothing here
takes a completion or a model.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from harness.tasks.contract import Task, TaskFamily


@dataclass(frozen=True)
class Proposal:
    """A mutated task with its lineage: `parent` is the parent's canonical hash, `mutation` the
    operator name."""
    task: Task
    parent: str
    mutation: str


def check_operators(family: TaskFamily, operators: list[str]) -> None:
    """Raise ValueError unless `operators` is a non-empty list of the family's operator names."""
    if isinstance(operators, str) or not operators:
        raise ValueError(f"proposer operators must be a non-empty list of names from {list(family.operators)} "
                         f"(family {family.name}), got {operators!r}")
    unknown = sorted({o for o in operators if o not in family.operators})
    if unknown:
        raise ValueError(f"unknown proposer operator(s) {unknown}; the family {family.name} has {list(family.operators)}")


def propose(family: TaskFamily, parents: list[Task], n: int, seed: int, round: int,
            operators: list[str]) -> list[Proposal]:
    """`n` proposals, each one operator applied to one parent. An operator is drawn uniformly from
    those in `operators` that apply to at least one parent (a name listed twice is drawn twice as
    often), then a parent uniformly among those it applies to. Every task carries expected outputs
    from `family.with_expected` (the family's reference; the gate re-checks determinism in the
    sandbox)."""
    check_operators(family, operators)
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"propose: n must be a non-negative int, got {n!r}")
    if n == 0:
        return []
    if not parents:
        raise ValueError("propose: no parent tasks to mutate (parents is empty)")
    eligible = {op: [p for p in parents if family.applies(op, p)] for op in set(operators)}
    usable = [op for op in operators if eligible[op]]
    if not usable:
        raise ValueError(f"propose: none of the operators {list(operators)} applies to any of the "
                         f"{len(parents)} parents under {family!r}")
    rng = random.Random(f"propose/{seed}/{round}")
    out = []
    for _ in range(n):
        op = rng.choice(usable)
        parent = rng.choice(eligible[op])
        child = family.mutate(op, parent, rng)
        out.append(Proposal(family.with_expected(child), parent.canonical_hash, op))
    return out

"""The proposer: deterministic mutations of parent tasks.

Each proposal copies one parent (a seed-set task, later an admitted one) and applies one named
mutation operator. Parents and operators are drawn with ``random.Random(f"propose/{seed}/{round}")``,
so the same (protocol seed, round, parents, operators, cap) always gives the same proposals. The
proposer never sees solver answers: nothing here takes a completion or a model.

Operators (their names are registered per arm in the protocol):

    constant      change one step's constant (a fresh draw of the same kind, never the old value)
    phrasing      change one step's docstring phrasing to another index
    inputs        redraw the test inputs (same canonical hash as the parent, by design)
    op            replace one step by another op of the same template (fresh constant if it takes one)
    depth         add or remove one step, staying within [difficulty_cap.min_depth, difficulty_cap.max_depth]
    unsorted_set  (string tasks) render a "uniq" step with the unsorted-set line, inserting one if
                  needed; its output depends on the hash seed, so the determinism gate must stop it
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Callable

from harness.tasks.family import (
    NONDETERMINISTIC_LINES,
    TEMPLATES,
    Difficulty,
    Task,
    _const,
    random_input,
    with_expected,
)

OPERATORS = ("constant", "phrasing", "inputs", "op", "depth", "unsorted_set")
_MAX_REDRAWS = 200  # rejection-sampling bound for "draw something different"; never hit in practice


@dataclass(frozen=True)
class Proposal:
    """A mutated task with its lineage: `parent` is the parent's canonical hash, `mutation` the
    operator name."""
    task: Task
    parent: str
    mutation: str


def check_operators(operators: list[str]) -> None:
    """Raise ValueError unless `operators` is a non-empty list of known operator names."""
    if isinstance(operators, str) or not operators:
        raise ValueError(f"proposer operators must be a non-empty list of names from {list(OPERATORS)}, got {operators!r}")
    unknown = sorted({o for o in operators if o not in OPERATORS})
    if unknown:
        raise ValueError(f"unknown proposer operator(s) {unknown}; known operators: {list(OPERATORS)}")


def propose(parents: list[Task], n: int, seed: int, round: int, operators: list[str],
            difficulty_cap: Difficulty) -> list[Proposal]:
    """`n` proposals, each one operator applied to one parent. An operator is drawn uniformly from
    those in `operators` that apply to at least one parent (a name listed twice is drawn twice as
    often), then a parent uniformly among those it applies to. Every task carries expected outputs
    from `with_expected` (trusted reference; the gate re-checks determinism in the sandbox)."""
    check_operators(operators)
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"propose: n must be a non-negative int, got {n!r}")
    if n == 0:
        return []
    if not parents:
        raise ValueError("propose: no parent tasks to mutate (parents is empty)")
    eligible = {op: [p for p in parents if _APPLIES[op](p, difficulty_cap)] for op in set(operators)}
    usable = [op for op in operators if eligible[op]]
    if not usable:
        raise ValueError(f"propose: none of the operators {list(operators)} applies to any of the "
                         f"{len(parents)} parents under {difficulty_cap}")
    rng = random.Random(f"propose/{seed}/{round}")
    out = []
    for _ in range(n):
        op = rng.choice(usable)
        parent = rng.choice(eligible[op])
        child = _MUTATE[op](parent, rng, difficulty_cap)
        out.append(Proposal(with_expected(child), parent.canonical_hash, op))
    return out


# ---- step editing (keeps `nondeterministic` step indices consistent) -------------------------

def _ops_table(task: Task) -> dict[str, tuple[str, tuple[str, ...], str | None]]:
    return TEMPLATES[task.template][1]


def _fresh_step(task: Task, rng: random.Random, cap: Difficulty, op: str | None = None) -> tuple[str, Any, int]:
    """(op, constant, phrasing index) drawn the way `tasks.sample_task` draws a step."""
    table = _ops_table(task)
    op = op or rng.choice(sorted(table))
    kind = table[op][2]
    const = _const(kind, rng, cap.max_const) if kind else None
    n_phr = len(table[op][1])
    phr = rng.randint(1, n_phr - 1) if rng.random() < cap.alt_phrasing else 0
    return op, const, phr


def _edit(task: Task, ops: list, phrasing: list, nondet: list[int]) -> Task:
    return dataclasses.replace(task, ops=tuple(tuple(o) for o in ops), phrasing=tuple(phrasing),
                               nondeterministic=tuple(sorted(nondet)), expected=())


def _insert_step(task: Task, pos: int, step: tuple[str, Any, int]) -> Task:
    op, const, phr = step
    ops, phrasing = list(task.ops), list(task.phrasing)
    ops.insert(pos, (op, const))
    phrasing.insert(pos, phr)
    return _edit(task, ops, phrasing, [i + (i >= pos) for i in task.nondeterministic])


def _remove_step(task: Task, pos: int) -> Task:
    ops, phrasing = list(task.ops), list(task.phrasing)
    del ops[pos], phrasing[pos]
    return _edit(task, ops, phrasing, [i - (i > pos) for i in task.nondeterministic if i != pos])


def _replace_step(task: Task, pos: int, step: tuple[str, Any, int]) -> Task:
    op, const, phr = step
    ops, phrasing = list(task.ops), list(task.phrasing)
    ops[pos], phrasing[pos] = (op, const), phr
    return _edit(task, ops, phrasing, [i for i in task.nondeterministic if i != pos])


def _draw_different(draw: Callable[[], Any], old: Any, what: str) -> Any:
    for _ in range(_MAX_REDRAWS):
        new = draw()
        if new != old:
            return new
    raise RuntimeError(f"proposer: could not draw a {what} different from {old!r} in {_MAX_REDRAWS} tries")


# ---- operators -------------------------------------------------------------------------------

def _constant_steps(task: Task) -> list[int]:
    table = _ops_table(task)
    return [i for i, (op, _) in enumerate(task.ops) if table[op][2] is not None]


def _mutate_constant(task: Task, rng: random.Random, cap: Difficulty) -> Task:
    pos = rng.choice(_constant_steps(task))
    op, old = task.ops[pos]
    kind = _ops_table(task)[op][2]
    new = _draw_different(lambda: _const(kind, rng, cap.max_const), old, f"{kind!r} constant")
    ops = list(task.ops)
    ops[pos] = (op, new)
    return _edit(task, ops, list(task.phrasing), list(task.nondeterministic))


def _mutate_phrasing(task: Task, rng: random.Random, cap: Difficulty) -> Task:
    table = _ops_table(task)
    pos = rng.choice([i for i, (op, _) in enumerate(task.ops) if len(table[op][1]) > 1])
    n_phr = len(table[task.ops[pos][0]][1])
    phrasing = list(task.phrasing)
    phrasing[pos] = rng.choice([k for k in range(n_phr) if k != phrasing[pos]])
    return _edit(task, list(task.ops), phrasing, list(task.nondeterministic))


def _mutate_inputs(task: Task, rng: random.Random, cap: Difficulty) -> Task:
    draw = lambda: tuple(random_input(task.template, rng) for _ in task.inputs)  # noqa: E731
    return dataclasses.replace(task, inputs=_draw_different(draw, task.inputs, "set of test inputs"), expected=())


def _mutate_op(task: Task, rng: random.Random, cap: Difficulty) -> Task:
    table = _ops_table(task)
    pos = rng.randrange(task.depth)
    old_op = task.ops[pos][0]
    new_op = rng.choice([o for o in sorted(table) if o != old_op])
    _, const, _ = _fresh_step(task, rng, cap, op=new_op)
    phr = min(task.phrasing[pos], len(table[new_op][1]) - 1)  # keep the phrasing style of the step
    return _replace_step(task, pos, (new_op, const, phr))


def _mutate_depth(task: Task, rng: random.Random, cap: Difficulty) -> Task:
    can_add = task.depth + 1 <= cap.max_depth
    can_remove = cap.min_depth < task.depth <= cap.max_depth + 1
    if can_add and (not can_remove or rng.random() < 0.5):
        return _insert_step(task, rng.randint(0, task.depth), _fresh_step(task, rng, cap))
    return _remove_step(task, rng.randrange(task.depth))


def _mutate_unsorted_set(task: Task, rng: random.Random, cap: Difficulty) -> Task:
    sorted_uniq = [i for i, (op, _) in enumerate(task.ops) if op == "uniq" and i not in task.nondeterministic]
    if sorted_uniq:
        pos = rng.choice(sorted_uniq)
        return _edit(task, list(task.ops), list(task.phrasing), [*task.nondeterministic, pos])
    step = _fresh_step(task, rng, cap, op="uniq")
    if task.depth + 1 <= cap.max_depth:
        pos = rng.randint(0, task.depth)
        child = _insert_step(task, pos, step)
    else:  # at the depth cap: turn an existing step into the uniq step
        pos = rng.randrange(task.depth)
        child = _replace_step(task, pos, step)
    return _edit(child, list(child.ops), list(child.phrasing), [*child.nondeterministic, pos])


def _unsorted_set_applies(task: Task, cap: Difficulty) -> bool:
    if (task.template, "uniq") not in NONDETERMINISTIC_LINES:
        return False
    has_sorted_uniq = any(op == "uniq" and i not in task.nondeterministic for i, (op, _) in enumerate(task.ops))
    return has_sorted_uniq or not task.nondeterministic


_MUTATE: dict[str, Callable[[Task, random.Random, Difficulty], Task]] = {
    "constant": _mutate_constant,
    "phrasing": _mutate_phrasing,
    "inputs": _mutate_inputs,
    "op": _mutate_op,
    "depth": _mutate_depth,
    "unsorted_set": _mutate_unsorted_set,
}
_APPLIES: dict[str, Callable[[Task, Difficulty], bool]] = {
    "constant": lambda t, cap: bool(_constant_steps(t)),
    "phrasing": lambda t, cap: any(len(_ops_table(t)[op][1]) > 1 for op, _ in t.ops),
    "inputs": lambda t, cap: len(t.inputs) > 0,
    "op": lambda t, cap: len(_ops_table(t)) > 1 and t.depth > 0,
    "depth": lambda t, cap: t.depth + 1 <= cap.max_depth or cap.min_depth < t.depth <= cap.max_depth + 1,
    "unsorted_set": _unsorted_set_applies,
}
assert set(_MUTATE) == set(_APPLIES) == set(OPERATORS)

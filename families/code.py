"""The code family (registered as `code`): straight-line Python functions from three templates
(arith, string, list), rendered from parameters.

A task is a straight-line function: the docstring names a sequence of steps, the body applies
one statement per step and returns the variable. The candidate program is
``task.prompt + completion``; the reference completion is ``task.reference``.

    def f(x):
        '''Multiply x by 3, then add 7; return x.'''
        x = x * 3
        x = x + 7
        return x

Settings (tasks.yaml `family: {name: code, ...}`, the `Difficulty` knob): composition depth
(min_depth, max_depth), the range of constants (max_const), and how often a step is described with an
alternative phrasing (alt_phrasing: a docstring that does not spell out the code the plain way). A
task's *stratum* is (depth, template, phrasing), phrasing being "plain" when every step uses the
plain phrasing and "alt" otherwise; its capacity cell is (depth, template): phrasing does not change
the program.

Identities, from the finest to the coarsest:

    canonical_hash   prompt + reference: the task as the model sees it (test inputs excluded)
    program_hash     the reference program with its constants, whatever the docstring says
    shape_hash       step names + phrasing, constants ignored ("same task, other numbers")
    ops_hash         step names only

Program class (`program_class`): how many programs share a task's steps, i.e. the program's mass
under the distribution. "constant_free": no step takes a constant, so the steps are the only program
(34 at depth 2); "small_constants": every constant is a count in [1, SMALL_MAX]; "large_constants":
some constant is a number up to max_const or one of the WORDS.

Proposer operators (their names are registered per arm in the protocol):

    constant      change one step's constant (a fresh draw of the same kind, never the old value)
    phrasing      change one step's docstring phrasing to another index
    inputs        redraw the test inputs (same canonical hash as the parent, by design)
    op            replace one step by another op of the same template (fresh constant if it takes one)
    depth         add or remove one step, staying within [min_depth, max_depth]
    unsorted_set  (string tasks) render a "uniq" step with the unsorted-set line, inserting one if
                  needed; its output depends on the hash seed, so the determinism gate must stop it

Only phrasing, op and depth can yield a task for the solver: a constant-only change is the bank's
shape_duplicate, a re-tested task its duplicate, and the unsorted set the gate's rejection.
"""
from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.tasks.contract import sha
from harness.tasks.kit import (TabledFamily, cycle_counts, cycled, int_setting, number_setting, other_words_flags,
                               phrasing_index, phrasing_strata, reference_outputs, with_expected)

# op name -> (code line with {v} for the variable and {c} for the constant,
#             phrasings: index 0 is the plain one, the rest are alternatives,
#             constant kind or None)
ARITH_OPS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "add": ("{v} = {v} + {c}", ("add {c}", "increase it by {c}", "raise it by {c}"), "pos"),
    "sub": ("{v} = {v} - {c}", ("subtract {c}", "decrease it by {c}", "take away {c}"), "pos"),
    "mul": ("{v} = {v} * {c}", ("multiply by {c}", "scale it by {c}", "make it {c} times larger"), "mult"),
    "mod": ("{v} = {v} % {c}", ("take it modulo {c}", "keep the remainder after dividing by {c}", "reduce it mod {c}"), "mult"),
    "div": ("{v} = {v} // {c}", ("floor-divide by {c}", "split it into {c} equal parts and keep one, rounding down", "integer-divide it by {c}"), "mult"),
    "square": ("{v} = {v} * {v}", ("square it", "multiply it by itself", "raise it to the second power"), None),
    "neg": ("{v} = -{v}", ("negate it", "flip its sign", "turn it into its opposite"), None),
    "abs": ("{v} = abs({v})", ("take its absolute value", "drop its sign", "make it non-negative by dropping the sign"), None),
}
STRING_OPS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "upper": ("{v} = {v}.upper()", ("uppercase it", "convert it to capital letters", "make every letter a capital"), None),
    "lower": ("{v} = {v}.lower()", ("lowercase it", "convert it to small letters", "make every letter small"), None),
    "reverse": ("{v} = {v}[::-1]", ("reverse it", "read it backwards", "flip its order"), None),
    "append": ("{v} = {v} + {c}", ("append {c}", "put {c} at the end", "extend it with {c}"), "word"),
    "prepend": ("{v} = {c} + {v}", ("prepend {c}", "put {c} at the front", "start it with {c}"), "word"),
    "repeat": ("{v} = {v} * {c}", ("repeat it {c} times", "write it out {c} times in a row", "concatenate {c} copies of it"), "small"),
    "take": ("{v} = {v}[:{c}]", ("keep the first {c} characters", "cut it to length {c}", "truncate it after {c} characters"), "small"),
    "drop": ("{v} = {v}[{c}:]", ("drop the first {c} characters", "remove {c} characters from the front", "skip its first {c} characters"), "small"),
    "uniq": ('{v} = "".join(sorted(set({v})))', ("keep each distinct character once, sorted", "sort its distinct characters", "list its unique characters in order"), None),
}
LIST_OPS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "sort": ("{v} = sorted({v})", ("sort it", "put it in ascending order", "order it from smallest to largest"), None),
    "reverse": ("{v} = {v}[::-1]", ("reverse it", "flip its order", "read it backwards"), None),
    "addeach": ("{v} = [e + {c} for e in {v}]", ("add {c} to each element", "raise every element by {c}", "shift each item up by {c}"), "pos"),
    "muleach": ("{v} = [e * {c} for e in {v}]", ("multiply each element by {c}", "scale every element by {c}", "make each item {c} times larger"), "mult"),
    "keepgt": ("{v} = [e for e in {v} if e > {c}]", ("keep elements greater than {c}", "drop elements not above {c}", "filter to items exceeding {c}"), "signed"),
    "take": ("{v} = {v}[:{c}]", ("keep the first {c} elements", "cut it to length {c}", "truncate it after {c} items"), "small"),
    "drop": ("{v} = {v}[{c}:]", ("drop the first {c} elements", "remove {c} items from the front", "skip its first {c} elements"), "small"),
    "uniq": ("{v} = sorted(set({v}))", ("keep each distinct value once, sorted", "sort its distinct values", "list its unique values in order"), None),
}
TEMPLATES = {"arith": ("x", ARITH_OPS), "string": ("s", STRING_OPS), "list": ("xs", LIST_OPS)}
# The nondeterministic rendering a mutation can pick (iteration order of a set of strings depends on
# the hash seed); the determinism gate must stop it. Maps (template, op) -> unsorted code line.
NONDETERMINISTIC_LINES = {("string", "uniq"): '{v} = "".join(set({v}))'}
# String constants. Enough of them that the leak guard, holding out every probe / confirm /
# calibration program, leaves most depth-1 string programs to train on (see `program_space`).
WORDS = tuple("abcdefghijklmnopqrstuvwxyz") + tuple(a + b for a in "abcxyz" for b in "abcxyz")
SMALL_MAX = 6  # "small" constants (repeat / take / drop counts) lie in [1, min(SMALL_MAX, max_const)]
Stratum = tuple[int, str, str]  # (depth, template, "plain" | "alt")
VERSION = "1"  # the family's draws as of the three templates above; bump on any change to what a seed draws


@dataclass(frozen=True)
class Difficulty:
    """The difficulty knob. Depth is the number of steps; `max_const` bounds numeric constants;
    `alt_phrasing` is the probability that a step uses an alternative (non-plain) phrasing."""
    min_depth: int = 1
    max_depth: int = 2
    max_const: int = 9
    alt_phrasing: float = 0.0

    def __post_init__(self):
        if not 1 <= self.min_depth <= self.max_depth <= 6:
            raise ValueError(f"Difficulty: need 1 <= min_depth <= max_depth <= 6, got {self.min_depth}, {self.max_depth}")
        if not 2 <= self.max_const <= 99:
            raise ValueError(f"Difficulty: max_const must be in [2, 99], got {self.max_const}")
        if not 0.0 <= self.alt_phrasing <= 1.0:
            raise ValueError(f"Difficulty: alt_phrasing must be in [0, 1], got {self.alt_phrasing}")


@dataclass(frozen=True)
class Task:
    """One code task. `ops` is ((op, const), ...); `phrasing` gives each step's phrasing index.
    `inputs` are the test arguments (one value each; the function has one parameter) and
    `expected` the reference outputs. Only `inputs` ever reach the sandbox."""
    template: str
    ops: tuple[tuple[str, Any], ...]
    phrasing: tuple[int, ...]
    inputs: tuple[Any, ...]
    expected: tuple[Any, ...] = field(default=())
    nondeterministic: tuple[int, ...] = ()  # indices of steps rendered with the unsorted set line

    @property
    def var(self) -> str:
        return TEMPLATES[self.template][0]

    @property
    def func_name(self) -> str:
        return "f"

    @property
    def depth(self) -> int:
        return len(self.ops)

    @property
    def prompt(self) -> str:
        table = TEMPLATES[self.template][1]
        steps = [table[op][1][k].format(c=_lit(c)) for (op, c), k in zip(self.ops, self.phrasing)]
        text = ", then ".join(steps)
        doc = f"{text[0].upper()}{text[1:]}; return {self.var}."
        return f"def f({self.var}):\n    \"\"\"{doc}\"\"\"\n"

    @property
    def reference(self) -> str:
        table = TEMPLATES[self.template][1]
        lines = []
        for i, (op, c) in enumerate(self.ops):
            code = NONDETERMINISTIC_LINES[(self.template, op)] if i in self.nondeterministic else table[op][0]
            lines.append("    " + code.format(v=self.var, c=_lit(c)) + "\n")
        return "".join(lines) + f"    return {self.var}\n"

    @property
    def canonical_hash(self) -> str:
        """Identity of the task as the model sees it: prompt and reference. Test inputs are not part
        of it, so re-testing a probe task with other inputs is still caught as the same task."""
        return sha({"template": self.template, "prompt": self.prompt, "reference": self.reference})

    @property
    def shape_hash(self) -> str:
        """Same task up to constants and test inputs: template, step names and phrasing."""
        return sha({"template": self.template, "ops": [op for op, _ in self.ops], "phrasing": list(self.phrasing)})

    @property
    def program(self) -> str:
        """The reference program with its constants, every step in its deterministic rendering:
        the unsorted-set variant of a program is the same program here."""
        table = TEMPLATES[self.template][1]
        body = "".join("    " + table[op][0].format(v=self.var, c=_lit(c)) + "\n" for op, c in self.ops)
        return f"def f({self.var}):\n{body}    return {self.var}\n"

    @property
    def program_hash(self) -> str:
        """Identity of the program, whatever the docstring and test inputs: the leak guard's unit."""
        return sha({"program": self.program})

    @property
    def ops_hash(self) -> str:
        """Same steps, whatever the constants, phrasing and inputs: template and step names."""
        return sha({"template": self.template, "op_sequence": [op for op, _ in self.ops]})

    @property
    def stratum(self) -> Stratum:
        """(depth, template, "plain" | "alt"): the cell the split-mix table counts."""
        return self.depth, self.template, "alt" if any(self.phrasing) else "plain"

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["ops"] = [list(o) for o in self.ops]
        d["phrasing"], d["inputs"], d["expected"] = list(self.phrasing), list(self.inputs), list(self.expected)
        d["nondeterministic"] = list(self.nondeterministic)
        d["canonical_hash"] = self.canonical_hash
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        try:
            task = cls(template=d["template"], ops=tuple((o[0], o[1]) for o in d["ops"]),
                       phrasing=tuple(d["phrasing"]), inputs=tuple(_freeze(x) for x in d["inputs"]),
                       expected=tuple(_freeze(x) for x in d.get("expected", ())),
                       nondeterministic=tuple(d.get("nondeterministic", ())))
        except (KeyError, TypeError, IndexError) as e:
            raise ValueError(f"not a task record (missing or malformed field: {e}): {str(d)[:200]}") from None
        if task.template not in TEMPLATES:
            raise ValueError(f"unknown template {task.template!r}; expected one of {sorted(TEMPLATES)}")
        return task


def _lit(c: Any) -> str:
    return json.dumps(c) if isinstance(c, str) else str(c)


def _freeze(x: Any) -> Any:
    return x  # inputs are ints, strings or lists; lists stay lists (JSON-native)


# Expected outputs: the reference run in this (trusted) process (harness.tasks.kit); nondeterministic
# variants are only judged by the determinism gate, in the sandbox.
run_reference = reference_outputs


def _const(kind: str, rng: random.Random, max_const: int) -> Any:
    if kind == "pos":
        return rng.randint(1, max_const)
    if kind == "mult":
        return rng.randint(2, max_const)
    if kind == "small":
        return rng.randint(1, min(SMALL_MAX, max_const))
    if kind == "signed":
        return rng.randint(-max_const, max_const)
    if kind == "word":
        return rng.choice(WORDS)
    raise ValueError(kind)


def random_input(template: str, rng: random.Random) -> Any:
    if template == "arith":
        return rng.randint(-20, 20)
    if template == "string":
        return "".join(rng.choice("abcdeXYZ") for _ in range(rng.randint(0, 7)))
    return [rng.randint(-9, 9) for _ in range(rng.randint(0, 6))]


def _draw_ops(rng: random.Random, table: dict, depth: int, max_const: int) -> list[tuple[str, Any]]:
    ops = []
    for _ in range(depth):
        op = rng.choice(sorted(table))
        kind = table[op][2]
        ops.append((op, _const(kind, rng, max_const) if kind else None))
    return ops



def _sample_bare(rng: random.Random, difficulty: Difficulty, template: str | None = None, n_inputs: int = 5) -> Task:
    """`sample_task` without running the reference."""
    template = template or rng.choice(sorted(TEMPLATES))
    table = TEMPLATES[template][1]
    depth = rng.randint(difficulty.min_depth, difficulty.max_depth)
    ops, phrasing = [], []
    for _ in range(depth):
        op = rng.choice(sorted(table))
        kind = table[op][2]
        ops.append((op, _const(kind, rng, difficulty.max_const) if kind else None))
        phrasing.append(phrasing_index(rng, len(table[op][1]), rng.random() < difficulty.alt_phrasing))
    inputs = tuple(random_input(template, rng) for _ in range(n_inputs))
    return Task(template, tuple(ops), tuple(phrasing), inputs)


def sample_task(rng: random.Random, difficulty: Difficulty, template: str | None = None, n_inputs: int = 5) -> Task:
    """One task from the difficulty's distribution: depth uniform in [min_depth, max_depth], each
    step an op drawn uniformly, alternatively phrased with probability `alt_phrasing`."""
    return with_expected(_sample_bare(rng, difficulty, template, n_inputs))


def _in_stratum_bare(rng: random.Random, difficulty: Difficulty, stratum: Stratum, n_inputs: int = 5) -> Task:
    """`sample_in_stratum` without running the reference."""
    depth, template, phr_class = stratum
    if stratum not in strata(difficulty):
        raise ValueError(f"stratum {stratum} is not in the distribution of {difficulty}")
    table = TEMPLATES[template][1]
    ops = _draw_ops(rng, table, depth, difficulty.max_const)
    flags = other_words_flags(rng, depth, difficulty.alt_phrasing, phr_class == "alt")
    phrasing = tuple(phrasing_index(rng, len(table[op][1]), f) for (op, _), f in zip(ops, flags))
    inputs = tuple(random_input(template, rng) for _ in range(n_inputs))
    return Task(template, tuple(ops), phrasing, inputs)


def sample_in_stratum(rng: random.Random, difficulty: Difficulty, stratum: Stratum, n_inputs: int = 5) -> Task:
    """One task from the difficulty's distribution conditioned on its stratum (depth, template,
    phrasing): ops and constants as in `sample_task`; for "alt", each step's alternative-phrasing
    flag is drawn with probability `alt_phrasing` given that at least one step is alternative."""
    return with_expected(_in_stratum_bare(rng, difficulty, stratum, n_inputs))


def build_tasks(seed: int, n: int, difficulty: Difficulty = Difficulty(), exclude: set[str] | frozenset = frozenset(),
                distinct_programs: bool = False) -> list[Task]:
    """`n` tasks with distinct canonical hashes (with `distinct_programs`, distinct program hashes),
    drawn deterministically from `seed` (templates cycle evenly), none whose canonical, shape,
    program or ops hash is in `exclude`. Same arguments -> same list. (Tests and benchmarks draw
    task lists with it; a protocol's splits come from harness.tasks.splits.)"""
    rng = random.Random(f"tasks/{seed}")
    templates = sorted(TEMPLATES)
    out: list[Task] = []
    seen = set(exclude)
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 200 * n + 1000:
            raise ValueError(f"build_tasks(seed={seed}, n={n}): task space too small for {difficulty} after excluding {len(exclude)} hashes")
        task = _sample_bare(rng, difficulty, templates[len(out) % len(templates)])
        if task.canonical_hash in seen or {task.canonical_hash, task.shape_hash, task.program_hash, task.ops_hash} & exclude \
                or (distinct_programs and task.program_hash in seen):
            continue
        seen.add(task.canonical_hash)
        if distinct_programs:
            seen.add(task.program_hash)
        out.append(with_expected(task))
    return out


# ---- program classes and key spaces ------------------------------------------------------------

PROGRAM_CLASSES = ("constant_free", "small_constants", "large_constants")  # by mass, the highest first


def _step_class(kind: str | None) -> int:
    """A step's index in PROGRAM_CLASSES: 0 without a constant, 1 with a count in [1, SMALL_MAX],
    2 with a wider constant (a number up to max_const, a word)."""
    return 0 if kind is None else 1 if kind == "small" else 2


def program_class(task: Task) -> str:
    """The class of the task's program by how many programs share its steps (its mass under the
    distribution): "constant_free" when no step takes a constant (the steps are the only program:
    34 at depth 2 over the three templates), "small_constants" when every constant is a count in
    [1, SMALL_MAX] (repeat, take, drop: at most SMALL_MAX programs per step), "large_constants" when
    some step's constant is a number up to max_const or one of the WORDS. Decided by the steps' constant
    kinds, whatever the constants' values and max_const."""
    table = TEMPLATES[task.template][1]
    return PROGRAM_CLASSES[max((_step_class(table[op][2]) for op, _ in task.ops), default=0)]


def _n_constants(kind: str | None, max_const: int) -> int:
    return {None: 1, "pos": max_const, "mult": max_const - 1, "small": min(SMALL_MAX, max_const),
            "signed": 2 * max_const + 1, "word": len(WORDS)}[kind]


def class_space(template: str, depth: int, cls: str, difficulty: Difficulty, guard: str = "program") -> int:
    """How many of the guard's keys at (template, depth) are in program class `cls`: programs, or op
    sequences for guard "ops". The three classes add up to `program_space`."""
    if cls not in PROGRAM_CLASSES:
        raise ValueError(f"program class {cls!r}: expected one of {list(PROGRAM_CLASSES)}")
    per_step = [0, 0, 0]  # keys per step in each class
    for _, _, kind in TEMPLATES[template][1].values():
        per_step[_step_class(kind)] += 1 if guard == "ops" else _n_constants(kind, difficulty.max_const)
    k = PROGRAM_CLASSES.index(cls)
    # a program is in class k or lower when every step is: count those, less those in class k-1 or lower
    return sum(per_step[: k + 1]) ** depth - (sum(per_step[:k]) ** depth if k else 0)


def program_space(template: str, depth: int, difficulty: Difficulty, guard: str = "program") -> int:
    """How many distinct keys the guard's unit has at (template, depth): programs (ops with their
    constants) for guard "program", op sequences for "ops"."""
    table = TEMPLATES[template][1]
    per_step = len(table) if guard == "ops" else sum(_n_constants(kind, difficulty.max_const) for _, _, kind in table.values())
    return per_step ** depth


def strata(difficulty: Difficulty) -> list[Stratum]:
    """Every stratum the difficulty's distribution can produce, sorted."""
    return sorted((d, t, p) for d in range(difficulty.min_depth, difficulty.max_depth + 1) for t in TEMPLATES
                  for p in phrasing_strata(difficulty.alt_phrasing))


# ---- the proposer's operators (step editing keeps `nondeterministic` step indices consistent) ----

OPERATORS = ("constant", "phrasing", "inputs", "op", "depth", "unsorted_set")
SOLVER_OPERATORS = ("phrasing", "op", "depth")
_MAX_REDRAWS = 200  # rejection-sampling bound for "draw something different"; never hit in practice


def _ops_table(task: Task) -> dict[str, tuple[str, tuple[str, ...], str | None]]:
    return TEMPLATES[task.template][1]


def _fresh_step(task: Task, rng: random.Random, cap: Difficulty, op: str | None = None) -> tuple[str, Any, int]:
    """(op, constant, phrasing index) drawn the way `sample_task` draws a step."""
    table = _ops_table(task)
    op = op or rng.choice(sorted(table))
    kind = table[op][2]
    const = _const(kind, rng, cap.max_const) if kind else None
    return op, const, phrasing_index(rng, len(table[op][1]), rng.random() < cap.alt_phrasing)


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


# ---- the family --------------------------------------------------------------------------------

class CodeFamily(TabledFamily):
    """The code family for one `Difficulty` (its settings: min_depth, max_depth, max_const, alt_phrasing)."""
    name = "code"
    version = VERSION
    SETTINGS = {"min_depth": int_setting(1, 6), "max_depth": int_setting(1, 6), "max_const": int_setting(2, 99),
                "alt_phrasing": number_setting(0, 1)}
    DEFAULTS = {"min_depth": 1, "max_depth": 3, "max_const": 99, "alt_phrasing": 0.4}
    classes = PROGRAM_CLASSES
    stratum_fields = ("depth", "template", "phrasing")
    cell_fields = ("depth", "template")
    operators = OPERATORS
    solver_operators = SOLVER_OPERATORS
    task_type = Task
    MUTATE, APPLIES = _MUTATE, _APPLIES

    @property
    def difficulty(self) -> Difficulty:
        return self.knob

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> "CodeFamily":
        if settings["min_depth"] > settings["max_depth"]:
            raise ValueError(f"key 'family.min_depth': min_depth {settings['min_depth']} > max_depth {settings['max_depth']}")
        return cls(Difficulty(settings["min_depth"], settings["max_depth"], settings["max_const"],
                              float(settings["alt_phrasing"])))

    def strata(self) -> list[Stratum]:
        return strata(self.difficulty)

    def sample(self, rng: random.Random, i: int) -> Task:
        return _sample_bare(rng, self.difficulty, cycled(TEMPLATES, i))

    def draw(self, rng: random.Random, stratum: Stratum) -> Task:
        return _in_stratum_bare(rng, self.difficulty, stratum)

    def rephrase(self, task: Task, rng: random.Random) -> Task | None:
        return _mutate_phrasing(task, rng, self.difficulty) if _APPLIES["phrasing"](task, self.difficulty) else None

    def program_class(self, task: Task) -> str:
        return program_class(task)

    def cell_of(self, stratum: Stratum) -> tuple[int, str]:
        return stratum[0], stratum[1]

    def class_space(self, cell: tuple[int, str], cls: str, guard: str) -> int:
        return class_space(cell[1], cell[0], cls, self.difficulty, guard)

    def expected_draws(self, n: int) -> dict[tuple[int, str], float]:
        d = self.difficulty
        n_depths = d.max_depth - d.min_depth + 1
        return {(depth, t): n_t / n_depths for t, n_t in cycle_counts(TEMPLATES, n).items()
                for depth in range(d.min_depth, d.max_depth + 1)}

    def describe_cell(self, cell: tuple[int, str]) -> str:
        return f"{cell[1]} tasks at depth {cell[0]}"

    def stratum_label(self, stratum: Stratum) -> str:
        depth, template, phrasing = stratum
        return f"d{depth}/{template}/{phrasing}"


FAMILY = CodeFamily

"""The code task family: three templates (arith, string, list), rendered from parameters.

A task is a straight-line function: the docstring names a sequence of steps, the body applies
one statement per step and returns the variable. The candidate program is
``task.prompt + completion``; the reference completion is ``task.reference``.

    def f(x):
        '''Multiply x by 3, then add 7; return x.'''
        x = x * 3
        x = x + 7
        return x

Difficulty knob (`Difficulty`): composition depth, the range of constants, and how often a step
is described with an alternative phrasing (a docstring that does not spell out the code the plain
way). A task's *stratum* is (depth, template, phrasing), phrasing being "plain" when every step
uses the plain phrasing and "alt" otherwise.

Identities, from the finest to the coarsest:

    canonical_hash   prompt + reference: the task as the model sees it (test inputs excluded)
    program_hash     the reference program with its constants, whatever the docstring says
    shape_hash       step names + phrasing, constants ignored ("same task, other numbers")
    ops_hash         step names only

Program class (`program_class`): how many programs share a task's steps, i.e. the program's mass
under the distribution. "constant_free": no step takes a constant, so the steps are the only
program (34 at depth 2); "small_constants": every constant is a count in [1, SMALL_MAX];
"large_constants": some constant is a number up to max_const or one of the WORDS.

Splits (`build_splits`): the held-out splits (probe, confirm, calibration) are drawn first, as one
pool from the probe distribution, program-disjoint: no program (template, steps and constants,
whatever the docstring) is in two held-out tasks, within a split or across splits. The pool is then
dealt at random to the splits, stratified by (program class, stratum), so that the splits are
exchangeable: drawn one after another, the split drawn first took more than twice as many of the few
high-mass constant-free programs as the one drawn last. The leak guard then holds out every held-out
*program* from the training splits (seed set, warm-up), and with `guard="ops"` also every held-out
op sequence (no training on the same steps with other constants). The training splits are stratified
to the probe set's mix, so they look like the probes.

Capacity (`split_capacity`): per (template, depth), the guard's key space, what the registered
fraction of it may hold out, and what the held-out splits need there in expectation; `build_splits`
refuses before drawing when a need exceeds its capacity, and after drawing when the draw took more.
The same fraction caps each (template, depth, program class) as the pool is drawn (`class_capacity`):
a class too small for its share of the draws (constant-free) is held out up to the cap, never whole.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.core.seeds import derive_seed

END = "\x00"  # end-of-completion byte: the sampler stops on it, training appends it

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
PHRASING_STRATA = ("plain", "alt")
GUARDS = ("program", "ops")  # what the leak guard holds out of training (see build_splits)
Stratum = tuple[int, str, str]  # (depth, template, "plain" | "alt")


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
        return _sha({"template": self.template, "prompt": self.prompt, "reference": self.reference})

    @property
    def shape_hash(self) -> str:
        """Same task up to constants and test inputs: template, step names and phrasing."""
        return _sha({"template": self.template, "ops": [op for op, _ in self.ops], "phrasing": list(self.phrasing)})

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
        return _sha({"program": self.program})

    @property
    def ops_hash(self) -> str:
        """Same steps, whatever the constants, phrasing and inputs: template and step names."""
        return _sha({"template": self.template, "op_sequence": [op for op, _ in self.ops]})

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


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def run_reference(task: Task) -> tuple[Any, ...]:
    """Expected outputs by executing the reference in this (trusted) process. The reference is
    our own template code, never a model completion; nondeterministic variants are only judged
    by the determinism gate, in the sandbox."""
    scope: dict[str, Any] = {}
    exec(task.prompt + task.reference, scope)  # noqa: S102 - template code, not untrusted input
    return tuple(scope["f"](_copy(x)) for x in task.inputs)


def _copy(x: Any) -> Any:
    return list(x) if isinstance(x, list) else x


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


def sample_task(rng: random.Random, difficulty: Difficulty, template: str | None = None, n_inputs: int = 5) -> Task:
    """One task from the difficulty's distribution: depth uniform in [min_depth, max_depth], each
    step an op drawn uniformly, alternatively phrased with probability `alt_phrasing`."""
    template = template or rng.choice(sorted(TEMPLATES))
    table = TEMPLATES[template][1]
    depth = rng.randint(difficulty.min_depth, difficulty.max_depth)
    ops, phrasing = [], []
    for _ in range(depth):
        op = rng.choice(sorted(table))
        kind = table[op][2]
        ops.append((op, _const(kind, rng, difficulty.max_const) if kind else None))
        n_phr = len(table[op][1])
        phrasing.append(rng.randint(1, n_phr - 1) if rng.random() < difficulty.alt_phrasing else 0)
    inputs = tuple(random_input(template, rng) for _ in range(n_inputs))
    return with_expected(Task(template, tuple(ops), tuple(phrasing), inputs))


def sample_in_stratum(rng: random.Random, difficulty: Difficulty, stratum: Stratum, n_inputs: int = 5) -> Task:
    """One task from the difficulty's distribution conditioned on its stratum (depth, template,
    phrasing): ops and constants as in `sample_task`; for "alt", each step's alternative-phrasing
    flag is drawn with probability `alt_phrasing` given that at least one step is alternative."""
    depth, template, phr_class = stratum
    if stratum not in strata(difficulty):
        raise ValueError(f"stratum {stratum} is not in the distribution of {difficulty}")
    table = TEMPLATES[template][1]
    ops = _draw_ops(rng, table, depth, difficulty.max_const)
    flags = [False] * depth
    while phr_class == "alt" and not any(flags):  # rejection: P(accept) >= alt_phrasing > 0
        flags = [rng.random() < difficulty.alt_phrasing for _ in range(depth)]
    phrasing = tuple(rng.randint(1, len(table[op][1]) - 1) if f else 0 for (op, _), f in zip(ops, flags))
    inputs = tuple(random_input(template, rng) for _ in range(n_inputs))
    return with_expected(Task(template, tuple(ops), phrasing, inputs))


def with_expected(task: Task) -> Task:
    return dataclasses.replace(task, expected=run_reference(task))


def _blocked(task: Task, exclude: set[str] | frozenset) -> bool:
    return bool({task.canonical_hash, task.shape_hash, task.program_hash, task.ops_hash} & exclude)


def build_tasks(seed: int, n: int, difficulty: Difficulty = Difficulty(), exclude: set[str] | frozenset = frozenset(),
                distinct_programs: bool = False) -> list[Task]:
    """`n` tasks with distinct canonical hashes (with `distinct_programs`, distinct program hashes),
    drawn deterministically from `seed` (templates cycle evenly), none whose canonical, shape,
    program or ops hash is in `exclude`. Same arguments -> same list."""
    rng = random.Random(f"tasks/{seed}")
    templates = sorted(TEMPLATES)
    out: list[Task] = []
    seen = set(exclude)
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 200 * n + 1000:
            raise ValueError(f"build_tasks(seed={seed}, n={n}): task space too small for {difficulty} after excluding {len(exclude)} hashes")
        task = sample_task(rng, difficulty, templates[len(out) % len(templates)])
        if task.canonical_hash in seen or _blocked(task, exclude) or (distinct_programs and task.program_hash in seen):
            continue
        seen.add(task.canonical_hash)
        if distinct_programs:
            seen.add(task.program_hash)
        out.append(task)
    return out


# ---- program classes ---------------------------------------------------------------------------

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


def class_capacity(held_out: list[Task], difficulty: Difficulty, guard: str = "program",
                   max_held_out_fraction: float = 1.0) -> list[dict]:
    """Per (template, depth, program class) of the distribution: the guard's keys there (`space`), the
    most the held-out splits may take (`capacity`: floor(fraction x space)) and how many they took
    (`held_out`). Sorted by depth, template and class."""
    rows = []
    for depth in range(difficulty.min_depth, difficulty.max_depth + 1):
        for template in sorted(TEMPLATES):
            for cls in PROGRAM_CLASSES:
                keys = {t.ops_hash if guard == "ops" else t.program_hash for t in held_out
                        if t.template == template and t.depth == depth and program_class(t) == cls}
                space = class_space(template, depth, cls, difficulty, guard)
                rows.append({"template": template, "depth": depth, "class": cls, "space": space,
                             "capacity": int(max_held_out_fraction * space), "held_out": len(keys)})
    return rows


def class_mix(tasks: list[Task]) -> Counter:
    """program class -> number of tasks in it."""
    return Counter(program_class(t) for t in tasks)


# ---- strata and stratified splits ----------------------------------------------------------------

def strata(difficulty: Difficulty) -> list[Stratum]:
    """Every stratum the difficulty's distribution can produce, sorted."""
    phr = [c for c, ok in (("plain", difficulty.alt_phrasing < 1), ("alt", difficulty.alt_phrasing > 0)) if ok]
    return sorted((d, t, p) for d in range(difficulty.min_depth, difficulty.max_depth + 1) for t in TEMPLATES for p in phr)


def mix(tasks: list[Task]) -> Counter:
    """stratum -> number of tasks in it."""
    return Counter(t.stratum for t in tasks)


def allocate(n: int, weights: Counter) -> dict[Stratum, int]:
    """`n` split over the strata of `weights` in proportion to their counts (largest remainder,
    ties broken by stratum order): every stratum with weight gets its share, rounded."""
    total = sum(weights.values())
    if n < 0 or total <= 0:
        raise ValueError(f"allocate: need n >= 0 and a non-empty mix, got n={n}, mix of {total}")
    keys = sorted(k for k, w in weights.items() if w > 0)
    exact = {k: n * weights[k] / total for k in keys}
    out = {k: int(exact[k]) for k in keys}
    for k in sorted(keys, key=lambda k: (-(exact[k] - out[k]), k))[: n - sum(out.values())]:
        out[k] += 1
    return out


def build_stratified(seed: int, n: int, difficulty: Difficulty, like: Counter, exclude: set[str] | frozenset = frozenset(),
                     distinct: bool = True, what: str = "split", distinct_programs: bool = False) -> list[Task]:
    """`n` tasks whose stratum counts are `allocate(n, like)`, each drawn from the difficulty's
    distribution conditioned on its stratum, none blocked by `exclude` (canonical, shape, program
    or ops hashes). `distinct=False` allows repeats of a task (i.i.d. draws, as a large training
    set from a small stratum has); `distinct_programs` forbids two tasks with one program (a
    held-out split's). Order is shuffled, deterministic in `seed`."""
    rng = random.Random(f"stratified/{seed}")
    out: list[Task] = []
    programs: set[str] = set()  # across strata: one program may be phrased plainly in one and not in another
    for stratum, quota in sorted(allocate(n, like).items()):
        seen: set[str] = set()
        got, attempts = 0, 0
        while got < quota:
            attempts += 1
            if attempts > 200 * quota + 2000:
                raise ValueError(f"{what}: stratum (depth, template, phrasing) = {stratum}: found {got} of {quota} "
                                 f"{'distinct ' if distinct else ''}tasks outside the {len(exclude)} excluded hashes; "
                                 f"the task space of {difficulty} is too small for this split")
            task = sample_in_stratum(rng, difficulty, stratum)
            if _blocked(task, exclude) or (distinct and task.canonical_hash in seen) or (distinct_programs and task.program_hash in programs):
                continue
            seen.add(task.canonical_hash)
            if distinct_programs:
                programs.add(task.program_hash)
            out.append(task)
            got += 1
    rng.shuffle(out)
    return out


def held_out_keys(tasks: list[Task], guard: str = "program") -> set[str]:
    """What the leak guard keeps out of training for these held-out tasks: their canonical and
    program hashes, and with guard "ops" their op sequences too (no same steps, other constants)."""
    if guard not in GUARDS:
        raise ValueError(f"leak guard {guard!r}: expected one of {list(GUARDS)}")
    keys = {h for t in tasks for h in (t.canonical_hash, t.program_hash)}
    return keys | ({t.ops_hash for t in tasks} if guard == "ops" else set())


def _n_constants(kind: str | None, max_const: int) -> int:
    return {None: 1, "pos": max_const, "mult": max_const - 1, "small": min(SMALL_MAX, max_const),
            "signed": 2 * max_const + 1, "word": len(WORDS)}[kind]


def program_space(template: str, depth: int, difficulty: Difficulty, guard: str = "program") -> int:
    """How many distinct keys the guard's unit has at (template, depth): programs (ops with their
    constants) for guard "program", op sequences for "ops"."""
    table = TEMPLATES[template][1]
    per_step = len(table) if guard == "ops" else sum(_n_constants(kind, difficulty.max_const) for _, _, kind in table.values())
    return per_step ** depth


def guard_capacity(held_out: list[Task], difficulty: Difficulty, guard: str = "program") -> list[dict]:
    """Per (template, depth) of the distribution: the guard's key space, how many keys the
    held-out tasks take, and the fraction held out of training. Sorted by fraction, largest first."""
    rows = []
    for depth in range(difficulty.min_depth, difficulty.max_depth + 1):
        for template in sorted(TEMPLATES):
            keys = {t.ops_hash if guard == "ops" else t.program_hash for t in held_out
                    if t.template == template and t.depth == depth}
            space = program_space(template, depth, difficulty, guard)
            rows.append({"template": template, "depth": depth, "space": space, "held_out": len(keys),
                         "fraction": len(keys) / space})
    return sorted(rows, key=lambda r: (-r["fraction"], r["depth"], r["template"]))


def _template_counts(n: int) -> dict[str, int]:
    """How many of `n` tasks drawn with templates cycling evenly (build_tasks) fall in each template."""
    names = sorted(TEMPLATES)
    return {t: n // len(names) + (i < n % len(names)) for i, t in enumerate(names)}


def split_capacity(sizes: dict[str, int], difficulty: Difficulty, guard: str = "program",
                   max_held_out_fraction: float = 1.0) -> list[dict]:
    """Per (template, depth) of the distribution: `space` (the guard's keys: programs, or op
    sequences), `capacity` (the most keys the held-out splits may take: floor(fraction x space)) and
    `need` (the keys the held-out splits of `sizes` take there in expectation: every held-out task is
    its own program; depth is uniform and templates cycle evenly over the held-out pool;
    under the "ops" guard, the expected number of distinct op sequences among them). Sorted by
    need / capacity, largest first."""
    held = sum(sizes.get(name, 0) for name in HELD_OUT_SPLITS)
    n_depths = difficulty.max_depth - difficulty.min_depth + 1
    rows = []
    for template, n_t in _template_counts(held).items():
        for depth in range(difficulty.min_depth, difficulty.max_depth + 1):
            space = program_space(template, depth, difficulty, guard)
            tasks = n_t / n_depths
            need = tasks if guard == "program" else space * (1 - (1 - 1 / space) ** tasks)
            cap = int(max_held_out_fraction * space)
            rows.append({"template": template, "depth": depth, "space": space, "capacity": cap, "need": need})
    return sorted(rows, key=lambda r: (-r["need"] / max(r["capacity"], 1e-9), r["depth"], r["template"]))


def check_capacity(sizes: dict[str, int], difficulty: Difficulty, guard: str = "program",
                   max_held_out_fraction: float = 1.0) -> list[dict]:
    """`split_capacity`'s rows, or ValueError naming the first (template, depth) whose expected
    need exceeds its capacity and the sizes that make the need."""
    rows = split_capacity(sizes, difficulty, guard, max_held_out_fraction)
    worst = rows[0]
    if worst["need"] > worst["capacity"]:
        unit = "op sequences" if guard == "ops" else "programs"
        raise ValueError(f"task space: {worst['template']} tasks at depth {worst['depth']} hold {worst['space']} {unit}; "
                         f"the registered max_held_out_fraction {max_held_out_fraction:.0%} lets the held-out splits take "
                         f"{worst['capacity']}, but probe.size {sizes.get('probe', 0)} + calibration.size "
                         f"{sizes.get('calibration', 0)} + the confirm stream {sizes.get('confirm', 0)} (2 x confirm.per_round "
                         f"x budget rounds) need about {worst['need']:.0f} there; widen the probe distribution "
                         f"(max_const, min_depth) or shrink the held-out splits")
    return rows


def capacity_lines(rows: list[dict]) -> list[str]:
    """`split_capacity`'s rows as printable lines, one per (template, depth)."""
    out = [f"{'template':<8} {'depth':>5} {'space':>12} {'capacity':>12} {'need':>8} {'used':>6}"]
    for r in sorted(rows, key=lambda r: (r["depth"], r["template"])):
        out.append(f"{r['template']:<8} {r['depth']:>5} {r['space']:>12} {r['capacity']:>12} {r['need']:>8.0f} "
                   f"{r['need'] / max(r['capacity'], 1):>5.0%}")
    return out


HELD_OUT_SPLITS = ("probe", "confirm", "calibration")  # never trained on, drawn first, as one pool
TRAINING_SPLITS = ("seed_set", "warmup")               # stratified to the probe mix, guarded
SPLIT_ORDER = HELD_OUT_SPLITS + TRAINING_SPLITS


def draw_held_out(seed: int, n: int, difficulty: Difficulty, guard: str = "program",
                  max_held_out_fraction: float = 1.0) -> list[Task]:
    """The held-out pool: `n` tasks from the probe distribution (templates cycling evenly), one per
    program, taking at most floor(max_held_out_fraction x its keys) of any (template, depth, program
    class)'s guard keys (`class_capacity`). A draw into a full class is drawn again: the
    distribution's mass on a class too small for its share (constant-free) is capped there, so the
    training splits always hold some of its programs. Deterministic in `seed`."""
    rng = random.Random(f"held-out/{seed}")
    templates = sorted(TEMPLATES)
    out: list[Task] = []
    programs: set[str] = set()
    keys: dict[tuple, set[str]] = {}  # (template, depth, class) -> the guard's keys taken there
    caps: dict[tuple, int] = {}
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 200 * n + 1000:
            raise ValueError(f"held-out pool (seed {seed}): found {len(out)} of {n} tasks with distinct programs within "
                             f"each class's {max_held_out_fraction:.0%} of {difficulty}; widen the task space (max_const) "
                             f"or shrink the held-out splits")
        task = sample_task(rng, difficulty, templates[len(out) % len(templates)])
        if task.program_hash in programs:
            continue
        cell = (task.template, task.depth, program_class(task))
        key = task.ops_hash if guard == "ops" else task.program_hash
        taken = keys.setdefault(cell, set())
        if cell not in caps:
            caps[cell] = int(max_held_out_fraction * class_space(task.template, task.depth, cell[2], difficulty, guard))
        if key not in taken and len(taken) >= caps[cell]:
            continue
        taken.add(key)
        programs.add(task.program_hash)
        out.append(task)
    return out


def deal(tasks: list[Task], sizes: dict, seed: int) -> dict:
    """`tasks` dealt at random to splits of `sizes` (split -> count, adding up to len(tasks)), alike in
    their mix of program class and stratum. Cell by cell ((class, stratum), sorted), in shuffled order
    within the cell, each task goes to the split with room left that is furthest below its share of the
    tasks dealt so far, summed over the task's cell, class, stratum and all tasks; ties go in a random
    order. Every split so gets its share of each class, stratum and cell to within a task or two, and
    which task goes where is random. Each split's order is shuffled. Deterministic in `seed`."""
    n = len(tasks)
    if sum(sizes.values()) != n or min(sizes.values(), default=0) < 0:
        raise ValueError(f"deal: split sizes {sizes} must be non-negative and add up to the {n} tasks dealt")
    rng = random.Random(f"deal/{seed}")
    names = list(sizes)
    cells: dict[tuple, list[Task]] = {}
    for t in tasks:
        cells.setdefault((program_class(t), t.stratum), []).append(t)
    seen: Counter = Counter()        # level -> tasks dealt there so far
    got: dict = {}                   # level -> split -> tasks dealt to it there
    out: dict = {name: [] for name in names}
    for (cls, stratum), members in sorted(cells.items(), key=lambda kv: (PROGRAM_CLASSES.index(kv[0][0]), kv[0][1])):
        levels = (("cell", cls, stratum), ("class", cls), ("stratum", stratum), ("all",))
        members = sorted(members, key=lambda t: t.canonical_hash)  # the pool's draw order plays no part
        rng.shuffle(members)
        for t in members:
            # n x (share of the dealt tasks - tasks got), summed over the levels: integers, so no rounding decides
            def lag(name):
                return sum((seen[lv] + 1) * sizes[name] - n * got.get(lv, {}).get(name, 0) for lv in levels)
            name = max((x for x in rng.sample(names, len(names)) if len(out[x]) < sizes[x]), key=lag)
            out[name].append(t)
            for lv in levels:
                seen[lv] += 1
                got.setdefault(lv, Counter())[name] += 1
    for name in names:
        rng.shuffle(out[name])
    return out


def build_splits(seed: int, sizes: dict[str, int], difficulty: Difficulty, guard: str = "program",
                 max_held_out_fraction: float = 1.0, confirm_batch: int = 0) -> dict[str, list[Task]]:
    """Named splits from disjoint seeds, all from the probe distribution `difficulty`:

        probe, confirm, calibration   one held-out pool (`draw_held_out`: one task per program, each
                     (template, depth, program class) capped at `max_held_out_fraction`) dealt at random
                     (`deal`), stratified by program class and stratum, so the three are exchangeable.
                     With `confirm_batch`, the confirm stream is dealt as consecutive batches of that
                     size (C's per-round screen and confirm batches), each alike too.
        seed_set     stratified to the probe set's mix, distinct, no held-out key (`held_out_keys`)
        warmup       stratified to the probe set's mix, repeats allowed, no held-out key, no seed task

    Refuses (ValueError naming the stratum) before drawing when the held-out splits would need more
    than `max_held_out_fraction` of some (template, depth) key space (`check_capacity`), and after
    drawing when they took more: training there would see a distorted remainder, or nothing."""
    unknown = set(sizes) - set(SPLIT_ORDER)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; expected a subset of {list(SPLIT_ORDER)}")
    if "probe" not in sizes:
        raise ValueError("build_splits: the probe split is required (every other split follows its mix)")
    check_capacity(sizes, difficulty, guard, max_held_out_fraction)
    held_sizes = {name: sizes[name] for name in HELD_OUT_SPLITS if name in sizes}
    pool = draw_held_out(split_seed(seed, "held_out"), sum(held_sizes.values()), difficulty, guard, max_held_out_fraction)
    hands = dict(held_sizes)
    n_confirm = hands.pop("confirm", 0)
    if confirm_batch and n_confirm:
        if confirm_batch < 0 or n_confirm % confirm_batch:
            raise ValueError(f"build_splits: the confirm stream of {n_confirm} tasks is not a whole number of "
                             f"batches of confirm_batch {confirm_batch}")
        hands.update({("confirm", i): confirm_batch for i in range(n_confirm // confirm_batch)})
    elif "confirm" in held_sizes:
        hands[("confirm", 0)] = n_confirm
    dealt = deal(pool, hands, split_seed(seed, "deal"))
    s = {name: dealt[name] for name in held_sizes if name != "confirm"}
    if "confirm" in held_sizes:
        s["confirm"] = [t for hand in sorted(h for h in dealt if isinstance(h, tuple)) for t in dealt[hand]]
    held_out = [t for name in HELD_OUT_SPLITS for t in s.get(name, [])]
    worst = guard_capacity(held_out, difficulty, guard)[0]
    if worst["fraction"] > max_held_out_fraction:
        raise ValueError(f"leak guard ({guard}): the held-out splits take {worst['held_out']} of the {worst['space']} "
                         f"{'op sequences' if guard == 'ops' else 'programs'} of {worst['template']} tasks at depth "
                         f"{worst['depth']} ({worst['fraction']:.0%} > the registered {max_held_out_fraction:.0%}); "
                         f"widen the task space (max_const) or shrink the held-out splits")
    like = mix(s["probe"])
    forbid = held_out_keys(held_out, guard)
    if "seed_set" in sizes:
        s["seed_set"] = build_stratified(split_seed(seed, "seed"), sizes["seed_set"], difficulty, like,
                                         exclude=frozenset(forbid), what="seed_set")
        forbid |= {t.canonical_hash for t in s["seed_set"]}
    if "warmup" in sizes:
        s["warmup"] = build_stratified(split_seed(seed, "warmup"), sizes["warmup"], difficulty, like,
                                       exclude=frozenset(forbid), distinct=False, what="warmup")
    return {name: s[name] for name in SPLIT_ORDER if name in s}


def mix_table(splits: dict[str, list[Task]]) -> list[str]:
    """The split-mix table: one row per stratum (depth, template, phrasing) present in any split,
    one column per split with its count and share, then the totals and each split's coverage of
    the probe strata. Returns printable lines."""
    names = list(splits)
    counts = {n: mix(ts) for n, ts in splits.items()}
    rows = sorted(set().union(*counts.values()))
    head = f"{'depth':>5} {'template':<8} {'phrasing':<8} |" + "".join(f" {n:>17}" for n in names)
    lines = ["split mix by depth, template and phrasing (count, share of the split):", head, "-" * len(head)]
    for st in rows:
        cells = "".join(f" {counts[n][st]:>9} {100 * counts[n][st] / max(len(splits[n]), 1):5.1f}% " for n in names)
        lines.append(f"{st[0]:>5} {st[1]:<8} {st[2]:<8} |{cells}")
    lines.append(f"{'total':<23} |" + "".join(f" {len(splits[n]):>9}        " for n in names))
    if "probe" in counts:
        for n in names:
            missing = sorted(set(counts["probe"]) - set(counts[n]))
            if n != "probe":
                lines.append(f"{n}: covers {len(counts['probe']) - len(missing)} of {len(counts['probe'])} probe strata"
                             + (f"; missing {missing}" if missing else ""))
    return lines


def class_table(splits: dict[str, list[Task]]) -> list[str]:
    """The split-mix table by program class: one row per class, one column per split with its count
    and share of the split. Returns printable lines."""
    names = list(splits)
    counts = {n: class_mix(ts) for n, ts in splits.items()}
    head = f"{'program class':<23} |" + "".join(f" {n:>17}" for n in names)
    lines = ["split mix by program class (count, share of the split):", head, "-" * len(head)]
    for cls in PROGRAM_CLASSES:
        cells = "".join(f" {counts[n][cls]:>9} {100 * counts[n][cls] / max(len(splits[n]), 1):5.1f}% " for n in names)
        lines.append(f"{cls:<23} |{cells}")
    return lines


def split_seed(seed: int, name: str) -> int:
    return derive_seed(seed, name, bits=48)


def tasks_jsonl(tasks: list[Task]) -> str:
    """One task per line, keys sorted: the bytes of a materialised set."""
    return "".join(json.dumps(t.to_dict(), sort_keys=True) + "\n" for t in tasks)


def save_tasks(path, tasks: list[Task]) -> None:
    with open(path, "w") as f:
        f.write(tasks_jsonl(tasks))


def load_tasks(path) -> list[Task]:
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Task.from_dict(json.loads(line)))
            except (json.JSONDecodeError, ValueError) as e:
                raise ValueError(f"{path}:{i}: {e}") from None
    return out

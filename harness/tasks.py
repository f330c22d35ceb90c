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
is described with an alternative phrasing (a docstring that does not spell out the code the way
the warm-up data did). Splits are drawn from disjoint seeds and made disjoint by canonical hash.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from harness.seeds import derive_seed

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
WORDS = ("a", "b", "z", "ab", "xy", "cat", "q", "no")


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
        return rng.randint(1, min(4, max_const))
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


def sample_task(rng: random.Random, difficulty: Difficulty, template: str | None = None, n_inputs: int = 5) -> Task:
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


def with_expected(task: Task) -> Task:
    return dataclasses.replace(task, expected=run_reference(task))


def build_tasks(seed: int, n: int, difficulty: Difficulty = Difficulty(), exclude: set[str] | frozenset = frozenset()) -> list[Task]:
    """`n` tasks with distinct canonical hashes, drawn deterministically from `seed` (templates
    cycle evenly), none whose canonical or shape hash is in `exclude`. Same arguments -> same list."""
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
        if task.canonical_hash in seen or task.shape_hash in exclude:
            continue
        seen.add(task.canonical_hash)
        out.append(task)
    return out


SPLIT_ORDER = ("probe", "confirm", "seed", "warmup")  # earlier splits are excluded from later ones


def build_splits(seed: int, sizes: dict[str, int], difficulties: dict[str, Difficulty]) -> dict[str, list[Task]]:
    """Named splits from disjoint seeds, disjoint by canonical hash. Held-out splits (probe,
    confirm) come first; the seed set also avoids their shapes (as the bank's leak guard does for
    proposals), while the warm-up set only avoids their exact tasks."""
    unknown = set(sizes) - set(SPLIT_ORDER)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; expected a subset of {list(SPLIT_ORDER)}")
    splits: dict[str, list[Task]] = {}
    canon: set[str] = set()
    shapes: set[str] = set()
    for name in (s for s in SPLIT_ORDER if s in sizes):
        exclude = canon | (shapes if name != "warmup" else set())
        tasks = build_tasks(split_seed(seed, name), sizes[name], difficulties[name], exclude=frozenset(exclude))
        splits[name] = tasks
        canon.update(t.canonical_hash for t in tasks)
        if name in ("probe", "confirm"):
            shapes.update(t.shape_hash for t in tasks)
    return splits


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

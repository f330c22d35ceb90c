"""The loops family (registered as `loops`): integer functions of one argument `n` with a loop, up to
a few conditions and an accumulator.

    def f(n):
        '''Add up i * 3 for i from 0 to n - 1 where i is odd; return the total.'''
        t = 0
        for i in range(n):
            if i % 2 == 1:
                t = t + i * 3
        return t

Why a second family, and this one: the code family's programs are straight-line, so a model can pass
them by rewriting each step of the docstring as one line. Here the docstring names a whole loop: its
range (from 0, from a start, by a step), its filter (conditions joined by `and`) and what it folds
(a sum, a count or an exclusive or of a term of `i`), and the answer is the fold, which the model must
compute through control flow it writes itself. The program's identity is structural (the rendered
loop, whatever the docstring says), its classes count its constants (how many programs share its
structure), and a reference that loops is exactly what the conformance suite's hostile basics and
the sandbox's time limits must hold in check.

Settings: the number of conditions (min_conds, max_conds in [0, 3]), the largest constant (max_const),
and how often a part of the docstring is said in other words (alt_phrasing). A task's stratum is
(conditions, fold, phrasing); its capacity cell (conditions, fold).

Identities: canonical_hash (prompt + reference), program_hash (the rendered program without its
docstring), ops_hash (the structure: fold, term, range and condition kinds, constants dropped),
shape_hash (the structure with its phrasing). Conditions are distinct kinds in a fixed order, so two
orders of one filter are one program.

Proposer operators: `constant` (one constant redrawn), `phrasing` (one part said otherwise),
`inputs` (other test inputs), `term` (another term), `condition` (a condition replaced by another
kind), `conditions` (one condition added or removed, within the settings), `fold` (another fold).
The solver operators are phrasing, term, condition, conditions and fold: a constant-only change is the
bank's shape duplicate of its parent, new inputs its duplicate.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from harness.tasks.contract import sha
from harness.tasks.kit import (TabledFamily, cycle_counts, cycled, int_setting, number_setting, other_words_flags,
                               phrasing_index, phrasing_strata, reference_outputs)
from harness.tasks.kit import with_expected  # noqa: F401 - a task with its outputs, by this module's name too

VERSION = "1"
N_INPUTS = 5
MAX_N = 24  # inputs n are drawn in [0, MAX_N]: at most MAX_N iterations, small integer outputs

# constant kinds: the least value each takes (up to max_const M), and so how many values at M. A divisor
# of a condition starts at 3: "i % 2 == 0" is the even condition's own text, one program either way.
LEAST = {"pos": 1, "mult": 2, "divisor": 3}
KINDS = {kind: (lambda m, lo=lo: m - lo + 1) for kind, lo in LEAST.items()}


def _const(kind: str, rng: random.Random, m: int) -> int:
    return rng.randint(LEAST[kind], m)


# part -> kind -> (code with {c}, phrasings (index 0 the plain one), constant kind or None)
FOLDS = {  # the accumulator's update; count takes no term
    "sum": ("t = t + {term}", ("add up {term}", "total {term}", "accumulate the sum of {term}"), None),
    "count": ("t = t + 1", ("count the i", "count how many i there are", "tally the i"), None),
    "xor": ("t = t ^ {term}", ("xor together {term}", "fold {term} with exclusive or", "combine {term} by bitwise xor"), None),
}
RESULT = {"sum": "the total", "count": "the count", "xor": "the result"}
TERMS = {
    "i": ("i", ("i", "each i", "the values of i"), None),
    "square": ("i * i", ("i * i", "the square of i", "i squared"), None),
    "scaled": ("i * {c}", ("i * {c}", "{c} times i", "i scaled by {c}"), "mult"),
    "shifted": ("i + {c}", ("i + {c}", "{c} more than i", "i increased by {c}"), "pos"),
    "mod": ("i % {c}", ("i % {c}", "the remainder of i divided by {c}", "i modulo {c}"), "mult"),
}
RANGES = {
    "upto": ("range(n)", ("for i from 0 to n - 1", "for each i below n", "over every i in range(n)"), None),
    "from": ("range({c}, n)", ("for i from {c} to n - 1", "for each i at least {c} and below n", "over range({c}, n)"), "pos"),
    "step": ("range(0, n, {c})", ("for i from 0 to n - 1 in steps of {c}", "for every {c}th i below n, from 0",
                                  "over range(0, n, {c})"), "mult"),
}
CONDS = {
    "odd": ("i % 2 == 1", ("i is odd", "i leaves remainder 1 when halved", "i is not even"), None),
    "even": ("i % 2 == 0", ("i is even", "i leaves no remainder when halved", "i is not odd"), None),
    "small": ("i * i < n", ("i * i < n", "the square of i is below n", "i squared stays under n"), None),
    "multiple": ("i % {c} == 0", ("i is a multiple of {c}", "{c} divides i", "i % {c} is zero"), "divisor"),
    "other": ("i % {c} != 0", ("i is not a multiple of {c}", "{c} does not divide i", "i % {c} is not zero"), "divisor"),
    "above": ("i > {c}", ("i > {c}", "i is greater than {c}", "i exceeds {c}"), "pos"),
    "below": ("i < {c}", ("i < {c}", "i is less than {c}", "i stays under {c}"), "pos"),
}
PARTS = {"fold": FOLDS, "term": TERMS, "range": RANGES, "cond": CONDS}
EXCLUSIVE = frozenset({"odd", "even"})  # never in one filter: together they keep nothing


def allowed(kinds) -> bool:
    """Whether condition kinds can share a filter: distinct, and not both parities."""
    kinds = list(kinds)
    return len(set(kinds)) == len(kinds) and not EXCLUSIVE <= set(kinds)
PROGRAM_CLASSES = ("constant_free", "one_constant", "more_constants")  # by mass per program, the highest first
Stratum = tuple[int, str, str]  # (conditions, fold, "plain" | "alt")


@dataclass(frozen=True)
class Settings:
    """The loops family's knob: how many conditions, how large a constant, how often other words."""
    min_conds: int = 0
    max_conds: int = 2
    max_const: int = 9
    alt_phrasing: float = 0.0

    def __post_init__(self):
        if not 0 <= self.min_conds <= self.max_conds <= 3:
            raise ValueError(f"key 'family.min_conds': need 0 <= min_conds <= max_conds <= 3, "
                             f"got {self.min_conds}, {self.max_conds}")
        if not 3 <= self.max_const <= 99:
            raise ValueError(f"key 'family.max_const': expected 3..99, got {self.max_const}")
        if not 0 <= self.alt_phrasing <= 1:
            raise ValueError(f"key 'family.alt_phrasing': expected 0..1, got {self.alt_phrasing}")


@dataclass(frozen=True)
class Task:
    """One loop task. Each part is (kind, constant or None, phrasing index); `term` is None for a
    count; `conds` are distinct kinds in CONDS order. `inputs` are values of n."""
    fold: tuple[str, None, int]
    term: tuple[str, Any, int] | None
    range: tuple[str, Any, int]
    conds: tuple[tuple[str, Any, int], ...]
    inputs: tuple[int, ...]
    expected: tuple[Any, ...] = field(default=())
    nondeterministic: tuple[int, ...] = ()  # the family has no hash-dependent rendering

    func_name = "f"

    # -- rendering --
    def _code(self, part: str, step) -> str:
        kind, c, _ = step
        return PARTS[part][kind][0].replace("{c}", str(c))

    def _words(self, part: str, step) -> str:
        kind, c, k = step
        return PARTS[part][kind][1][k].replace("{c}", str(c))

    @property
    def prompt(self) -> str:
        fold = self._words("fold", self.fold)
        if self.term is not None:
            fold = fold.replace("{term}", self._words("term", self.term))
        text = f"{fold} {self._words('range', self.range)}"
        if self.conds:
            text += " where " + " and ".join(self._words("cond", c) for c in self.conds)
        doc = f"{text[0].upper()}{text[1:]}; return {RESULT[self.fold[0]]}."
        return f"def f(n):\n    \"\"\"{doc}\"\"\"\n"

    @property
    def reference(self) -> str:
        update = self._code("fold", self.fold)
        if self.term is not None:
            update = update.replace("{term}", self._code("term", self.term))
        lines = ["    t = 0\n", f"    for i in {self._code('range', self.range)}:\n"]
        if self.conds:
            lines.append(f"        if {' and '.join(self._code('cond', c) for c in self.conds)}:\n")
            lines.append(f"            {update}\n")
        else:
            lines.append(f"        {update}\n")
        return "".join(lines) + "    return t\n"

    # -- identities --
    def _parts(self) -> list:
        return [self.fold, self.term, self.range, *self.conds]

    @property
    def canonical_hash(self) -> str:
        return sha({"family": "loops", "prompt": self.prompt, "reference": self.reference})

    @property
    def program_hash(self) -> str:
        return sha({"family": "loops", "program": self.reference})

    @property
    def ops_hash(self) -> str:
        return sha({"family": "loops", "structure": [None if p is None else p[0] for p in self._parts()]})

    @property
    def shape_hash(self) -> str:
        return sha({"family": "loops", "shape": [None if p is None else [p[0], p[2]] for p in self._parts()]})

    @property
    def n_constants(self) -> int:
        return sum(p is not None and p[1] is not None for p in self._parts())

    @property
    def stratum(self) -> Stratum:
        alt = any(p is not None and p[2] for p in self._parts())
        return len(self.conds), self.fold[0], "alt" if alt else "plain"

    def to_dict(self) -> dict:
        return {"fold": list(self.fold), "term": None if self.term is None else list(self.term),
                "range": list(self.range), "conds": [list(c) for c in self.conds], "inputs": list(self.inputs),
                "expected": list(self.expected), "nondeterministic": list(self.nondeterministic),
                "canonical_hash": self.canonical_hash}

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        try:
            task = cls(fold=tuple(d["fold"]), term=None if d["term"] is None else tuple(d["term"]),
                       range=tuple(d["range"]), conds=tuple(tuple(c) for c in d["conds"]), inputs=tuple(d["inputs"]),
                       expected=tuple(d.get("expected", ())), nondeterministic=tuple(d.get("nondeterministic", ())))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a loops task record (missing or malformed field: {e}): {str(d)[:200]}") from None
        problem = _malformed(task)
        if problem:
            raise ValueError(f"not a loops task record ({problem}): {str(d)[:200]}")
        return task


def _malformed(task: Task) -> str | None:
    """Why `task` is not a task of this family, or None."""
    for part, step in (("fold", task.fold), ("term", task.term), ("range", task.range), *(("cond", c) for c in task.conds)):
        if step is None:
            continue
        if len(step) != 3 or step[0] not in PARTS[part] or not 0 <= step[2] < len(PARTS[part][step[0]][1]):
            return f"{part} {list(step)!r}"
        if (step[1] is None) != (PARTS[part][step[0]][2] is None):
            return f"{part} {list(step)!r}: constant"
    if (task.term is None) != (task.fold[0] == "count"):
        return "a count has no term, a sum or xor one"
    kinds = [c[0] for c in task.conds]
    if kinds != [k for k in CONDS if k in kinds] or not allowed(kinds):
        return "conditions must be distinct kinds in CONDS order, not both parities"
    return None


run_reference = reference_outputs  # the reference's outputs, run in this process (the family's own code)


# ---- drawing -----------------------------------------------------------------------------------

def _phrasing(rng: random.Random, table: dict, kind: str, alt: bool) -> int:
    return phrasing_index(rng, len(table[kind][1]), alt)


def _step(rng: random.Random, part: str, kind: str, s: Settings, alt: bool) -> tuple[str, Any, int]:
    table = PARTS[part]
    ckind = table[kind][2]
    return kind, (_const(ckind, rng, s.max_const) if ckind else None), _phrasing(rng, table, kind, alt)


def _inputs(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.randint(0, MAX_N) for _ in range(N_INPUTS))


def _assemble(rng: random.Random, s: Settings, n_conds: int, fold: str, flags: list[bool]) -> Task:
    """A task with `n_conds` conditions and fold `fold`; flags[k] says whether part k (fold, term,
    range, conditions...) is said in other words."""
    cond_kinds = rng.sample(sorted(CONDS), n_conds)
    while not allowed(cond_kinds):  # rejection: most draws are allowed
        cond_kinds = rng.sample(sorted(CONDS), n_conds)
    cond_kinds = sorted(cond_kinds, key=list(CONDS).index)
    term = None if fold == "count" else _step(rng, "term", rng.choice(sorted(TERMS)), s, flags[1])
    rng_kind = rng.choice(sorted(RANGES))
    return Task(fold=(fold, None, _phrasing(rng, FOLDS, fold, flags[0])), term=term,
                range=_step(rng, "range", rng_kind, s, flags[2]),
                conds=tuple(_step(rng, "cond", k, s, f) for k, f in zip(cond_kinds, flags[3:])), inputs=_inputs(rng))


def sample(rng: random.Random, s: Settings, fold: str) -> Task:
    """A task of fold `fold`: conditions uniform in [min_conds, max_conds], each part said in other
    words with probability alt_phrasing."""
    n_conds = rng.randint(s.min_conds, s.max_conds)
    flags = [rng.random() < s.alt_phrasing for _ in range(3 + n_conds)]
    return _assemble(rng, s, n_conds, fold, flags)


def in_stratum(rng: random.Random, s: Settings, stratum: Stratum) -> Task:
    """A task conditioned on its stratum; for "alt", the other-words flags are redrawn until one is
    set (a count's term flag does not count: it has no term)."""
    n_conds, fold, phr = stratum
    if stratum not in strata(s):
        raise ValueError(f"stratum {stratum} is not in the distribution of {s}")
    used = [k for k in range(3 + n_conds) if not (k == 1 and fold == "count")]
    flags = other_words_flags(rng, 3 + n_conds, s.alt_phrasing, phr == "alt", used)
    if fold == "count":
        flags[1] = False
    return _assemble(rng, s, n_conds, fold, flags)


def strata(s: Settings) -> list[Stratum]:
    return sorted((k, f, p) for k in range(s.min_conds, s.max_conds + 1) for f in FOLDS
                  for p in phrasing_strata(s.alt_phrasing))


# ---- classes and key spaces --------------------------------------------------------------------

def _choices(part: str, s: Settings, guard: str) -> list[tuple[int, int]]:
    """Per kind of `part`: (constants it takes, keys it contributes: values under "program", 1 under "ops")."""
    out = []
    for _, _, ckind in PARTS[part].values():
        out.append((0, 1) if ckind is None else (1, KINDS[ckind](s.max_const) if guard == "program" else 1))
    return out


def class_space(cell: tuple[int, str], cls: str, s: Settings, guard: str) -> int:
    """Keys of program class `cls` in the cell (conditions, fold): every choice of term, range and a
    set of distinct condition kinds, counted by how many constants the program takes."""
    if cls not in PROGRAM_CLASSES:
        raise ValueError(f"program class {cls!r}: expected one of {list(PROGRAM_CLASSES)}")
    n_conds, fold = cell
    by_constants: dict[int, int] = {}
    terms = [(0, 1)] if fold == "count" else _choices("term", s, guard)
    conds = dict(zip(CONDS, _choices("cond", s, guard)))
    subsets = [[conds[k] for k in kinds] for kinds in itertools.combinations(CONDS, n_conds) if allowed(kinds)]
    for term, rng_ in itertools.product(terms, _choices("range", s, guard)):
        for subset in subsets:
            k = term[0] + rng_[0] + sum(c[0] for c in subset)
            keys = term[1] * rng_[1]
            for c in subset:
                keys *= c[1]
            by_constants[k] = by_constants.get(k, 0) + keys
    k = PROGRAM_CLASSES.index(cls)
    return sum(v for n, v in by_constants.items() if min(n, 2) == k)


def program_class(task: Task) -> str:
    return PROGRAM_CLASSES[min(task.n_constants, 2)]


# ---- the proposer's operators ------------------------------------------------------------------

OPERATORS = ("constant", "phrasing", "inputs", "term", "condition", "conditions", "fold")
SOLVER_OPERATORS = ("phrasing", "term", "condition", "conditions", "fold")


def _slots(task: Task) -> list[tuple[str, int]]:
    """(part, index) of every part present: index into conds for "cond"."""
    out = [("fold", 0), ("range", 0)] + ([("term", 0)] if task.term is not None else [])
    return out + [("cond", i) for i in range(len(task.conds))]


def _get(task: Task, slot: tuple[str, int]):
    part, i = slot
    return task.conds[i] if part == "cond" else getattr(task, part)


def _set(task: Task, slot: tuple[str, int], step) -> Task:
    part, i = slot
    if part == "cond":
        conds = list(task.conds)
        conds[i] = step
        return dataclasses.replace(task, conds=tuple(sorted(conds, key=lambda c: list(CONDS).index(c[0]))), expected=())
    return dataclasses.replace(task, **{part: step}, expected=())


def _const_slots(task: Task, s: Settings) -> list:
    """The parts whose constant can take another value."""
    return [sl for sl in _slots(task) if _get(task, sl)[1] is not None
            and KINDS[PARTS[sl[0]][_get(task, sl)[0]][2]](s.max_const) > 1]


def _redraw_const(task: Task, rng: random.Random, s: Settings) -> Task:
    slot = rng.choice(_const_slots(task, s))
    kind, old, k = _get(task, slot)
    ckind, new = PARTS[slot[0]][kind][2], old
    while new == old:  # the slot's kind takes at least two values (_const_slots)
        new = _const(ckind, rng, s.max_const)
    return _set(task, slot, (kind, new, k))


def _rephrase(task: Task, rng: random.Random, s: Settings) -> Task:
    slot = rng.choice(_slots(task))
    kind, c, k = _get(task, slot)
    n = len(PARTS[slot[0]][kind][1])
    return _set(task, slot, (kind, c, rng.choice([x for x in range(n) if x != k])))


def _new_inputs(task: Task, rng: random.Random, s: Settings) -> Task:
    new = task.inputs
    while new == task.inputs:
        new = _inputs(rng)
    return dataclasses.replace(task, inputs=new, expected=())


def _other_term(task: Task, rng: random.Random, s: Settings) -> Task:
    kind = rng.choice([k for k in sorted(TERMS) if k != task.term[0]])
    return _set(task, ("term", 0), _step(rng, "term", kind, s, bool(task.term[2])))


def _replacements(task: Task, i: int) -> list[str]:
    """Condition kinds that can take condition i's place."""
    rest = [c[0] for j, c in enumerate(task.conds) if j != i]
    return [k for k in sorted(CONDS) if k != task.conds[i][0] and allowed([*rest, k])]


def _additions(task: Task) -> list[str]:
    kinds = [c[0] for c in task.conds]
    return [k for k in sorted(CONDS) if allowed([*kinds, k])]


def _other_condition(task: Task, rng: random.Random, s: Settings) -> Task:
    i = rng.choice([j for j in range(len(task.conds)) if _replacements(task, j)])
    kind = rng.choice(_replacements(task, i))
    return _set(task, ("cond", i), _step(rng, "cond", kind, s, bool(task.conds[i][2])))


def _more_or_fewer(task: Task, rng: random.Random, s: Settings) -> Task:
    n = len(task.conds)
    grow = n < s.max_conds and (n <= s.min_conds or rng.random() < 0.5)
    if grow:
        kind = rng.choice(_additions(task))
        step = _step(rng, "cond", kind, s, rng.random() < s.alt_phrasing)
        conds = sorted([*task.conds, step], key=lambda c: list(CONDS).index(c[0]))
    else:
        conds = list(task.conds)
        del conds[rng.randrange(n)]
    return dataclasses.replace(task, conds=tuple(conds), expected=())


def _other_fold(task: Task, rng: random.Random, s: Settings) -> Task:
    fold = rng.choice([f for f in sorted(FOLDS) if f != task.fold[0]])
    phr = min(task.fold[2], len(FOLDS[fold][1]) - 1)
    term = task.term
    if fold == "count":
        term = None
    elif term is None:
        term = _step(rng, "term", rng.choice(sorted(TERMS)), s, rng.random() < s.alt_phrasing)
    return dataclasses.replace(task, fold=(fold, None, phr), term=term, expected=())


_MUTATE = {"constant": _redraw_const, "phrasing": _rephrase, "inputs": _new_inputs, "term": _other_term,
           "condition": _other_condition, "conditions": _more_or_fewer, "fold": _other_fold}
_APPLIES = {
    "constant": lambda t, s: bool(_const_slots(t, s)),
    "phrasing": lambda t, s: True,
    "inputs": lambda t, s: True,
    "term": lambda t, s: t.term is not None,
    "condition": lambda t, s: any(_replacements(t, j) for j in range(len(t.conds))),
    "conditions": lambda t, s: s.min_conds < len(t.conds) or (len(t.conds) < s.max_conds and bool(_additions(t))),
    "fold": lambda t, s: True,
}
assert set(_MUTATE) == set(_APPLIES) == set(OPERATORS)


# ---- the family --------------------------------------------------------------------------------

class LoopsFamily(TabledFamily):
    """The loops family for one `Settings` (min_conds, max_conds, max_const, alt_phrasing)."""
    name = "loops"
    version = VERSION
    SETTINGS = {"min_conds": int_setting(0, 3), "max_conds": int_setting(0, 3), "max_const": int_setting(3, 99),
                "alt_phrasing": number_setting(0, 1)}
    DEFAULTS = {"min_conds": 1, "max_conds": 2, "max_const": 9, "alt_phrasing": 0.4}
    classes = PROGRAM_CLASSES
    stratum_fields = ("conditions", "fold", "phrasing")
    cell_fields = ("conditions", "fold")
    operators = OPERATORS
    solver_operators = SOLVER_OPERATORS
    task_type = Task
    MUTATE, APPLIES = _MUTATE, _APPLIES

    @property
    def s(self) -> Settings:
        return self.knob

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> "LoopsFamily":
        return cls(Settings(settings["min_conds"], settings["max_conds"], settings["max_const"],
                            float(settings["alt_phrasing"])))

    def strata(self) -> list[Stratum]:
        return strata(self.s)

    def sample(self, rng: random.Random, i: int) -> Task:
        return sample(rng, self.s, cycled(FOLDS, i))

    def draw(self, rng: random.Random, stratum: Stratum) -> Task:
        return in_stratum(rng, self.s, stratum)

    def rephrase(self, task: Task, rng: random.Random) -> Task:
        return _rephrase(task, rng, self.s)

    def program_class(self, task: Task) -> str:
        return program_class(task)

    def cell_of(self, stratum: Stratum) -> tuple[int, str]:
        return stratum[0], stratum[1]

    def class_space(self, cell: tuple[int, str], cls: str, guard: str) -> int:
        return class_space(cell, cls, self.s, guard)

    def expected_draws(self, n: int) -> dict[tuple[int, str], float]:
        k = self.s.max_conds - self.s.min_conds + 1
        return {(c, f): n_f / k for f, n_f in cycle_counts(FOLDS, n).items()
                for c in range(self.s.min_conds, self.s.max_conds + 1)}

    def describe_cell(self, cell: tuple[int, str]) -> str:
        return f"{cell[1]} loops with {cell[0]} condition{'' if cell[0] == 1 else 's'}"

    def stratum_label(self, stratum: Stratum) -> str:
        return f"c{stratum[0]}/{stratum[1]}/{stratum[2]}"


FAMILY = LoopsFamily

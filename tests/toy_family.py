"""A task family defined only in tests/: affine integer functions, maybe wrapped (abs, negated,
doubled), and variants of it with one planted fault each, for the conformance suite to find. A
protocol registers it by module (`family: {name: affine, module: tests.toy_family, ...}`); a variant
by `module: tests.toy_family:<Class>`.

    def f(x):
        '''Multiply x by 3, then add 7; negate it; return it.'''
        return -(x * 3 + 7)
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from harness.tasks.contract import TaskFamily, sha
from harness.tasks.kit import cycle_counts, cycled, int_setting, number_setting, with_expected

# form -> (code with {a} and {b}, phrasings (index 0 plain), does it take a?)
FORMS = {
    "mul_add": ("x * {a} + {b}", ("Multiply x by {a}, then add {b}", "Scale x by {a} and raise it by {b}",
                                  "Take {a} times x plus {b}"), True),
    "add_mul": ("(x + {b}) * {a}", ("Add {b} to x, then multiply by {a}", "Raise x by {b} and scale it by {a}",
                                    "Take {a} times the sum of x and {b}"), True),
    "square_add": ("x * x + {b}", ("Square x, then add {b}", "Multiply x by itself and raise it by {b}",
                                   "Take x squared plus {b}"), False),
}
# every form a task may render; the narrow variant draws `add_small` too
ALL_FORMS = {**FORMS, "add_small": ("x + {b}", ("Add {b} to x", "Raise x by {b}", "Take x plus {b}"), False)}
# wrapper -> (code around {e}, phrasings (index 0 plain; "" for none))
WRAPPERS = {"none": ("{e}", ("", "", "")), "abs": ("abs({e})", ("; take its absolute value", "; drop its sign",
                                                               "; make it non-negative")),
            "neg": ("-({e})", ("; negate it", "; flip its sign", "; turn it into its opposite")),
            "double": ("2 * ({e})", ("; double it", "; multiply it by 2", "; take twice that"))}
CLASSES = ("one_constant", "two_constants")


@dataclass(frozen=True)
class Task:
    form: str
    a: int | None
    b: int
    phrasing: int
    wrapper: str
    wrap_phrasing: int
    inputs: tuple
    expected: tuple = field(default=())
    nondeterministic: tuple = ()
    func_name = "f"

    @property
    def prompt(self) -> str:
        words = ALL_FORMS[self.form][1][self.phrasing].format(a=self.a, b=self.b)
        return f"def f(x):\n    \"\"\"{words}{WRAPPERS[self.wrapper][1][self.wrap_phrasing]}; return it.\"\"\"\n"

    def expression(self) -> str:
        return WRAPPERS[self.wrapper][0].format(e=ALL_FORMS[self.form][0].format(a=self.a, b=self.b))

    @property
    def reference(self) -> str:
        return f"    return {self.expression()}\n"

    @property
    def canonical_hash(self) -> str:
        return sha({"affine": [self.prompt, self.reference]})

    @property
    def program_hash(self) -> str:
        return sha({"affine-program": self.reference})

    @property
    def ops_hash(self) -> str:
        return sha({"affine-form": [self.form, self.wrapper]})

    @property
    def shape_hash(self) -> str:
        return sha({"affine-shape": [self.form, self.phrasing, self.wrapper, self.wrap_phrasing]})

    @property
    def stratum(self) -> tuple:
        return self.form, "plain" if self.phrasing == 0 and self.wrap_phrasing == 0 else "alt"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "inputs": list(self.inputs), "expected": list(self.expected),
                "nondeterministic": list(self.nondeterministic)}


class Affine(TaskFamily):
    """Affine functions of x; settings max_const (constants a in [2, max_const], b in [1, max_const]) and
    alt_phrasing."""
    name = "affine"
    version = "1"
    SETTINGS = {"max_const": int_setting(2, 99), "alt_phrasing": number_setting(0, 1)}
    DEFAULTS = {"max_const": 40, "alt_phrasing": 0.5}
    classes = CLASSES
    stratum_fields = ("form", "phrasing")
    cell_fields = ("form",)
    operators = ("phrasing", "form", "wrapper", "constant")
    solver_operators = ("phrasing", "form", "wrapper")
    forms = FORMS

    def __init__(self, max_const: int, alt_phrasing: float):
        self.max_const, self.alt_phrasing = max_const, alt_phrasing

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> "Affine":
        return cls(settings["max_const"], float(settings["alt_phrasing"]))

    def settings(self) -> dict[str, Any]:
        return {"max_const": self.max_const, "alt_phrasing": self.alt_phrasing}

    def strata(self) -> list[tuple]:
        return sorted((f, p) for f in self.forms for p in ("plain", "alt"))

    def _task(self, rng: random.Random, form: str, alt: bool) -> Task:
        a = rng.randint(2, self.max_const) if self.forms[form][2] else None
        wrapper = rng.choice(sorted(WRAPPERS))
        phr, wphr = (rng.choice([(1, 0), (0, 1), (1, 1), (2, 2)]) if wrapper != "none" else (rng.randint(1, 2), 0)) \
            if alt else (0, 0)
        return Task(form, a, rng.randint(1, self.max_const), phr, wrapper, wphr,
                    tuple(rng.randint(-9, 9) for _ in range(4)))

    def sample(self, rng: random.Random, i: int) -> Task:
        return self._task(rng, cycled(self.forms, i), rng.random() < self.alt_phrasing)

    def draw(self, rng: random.Random, stratum: tuple) -> Task:
        if stratum not in self.strata():
            raise ValueError(f"stratum {stratum} is not in the affine family's distribution")
        return self._task(rng, stratum[0], stratum[1] == "alt")

    def with_expected(self, task: Task) -> Task:
        return with_expected(task)

    def rephrase(self, task: Task, rng: random.Random) -> Task:
        return dataclasses.replace(task, phrasing=rng.choice([k for k in range(3) if k != task.phrasing]), expected=())

    def task_from_dict(self, d: dict) -> Task:
        try:
            return Task(d["form"], d["a"], d["b"], d["phrasing"], d["wrapper"], d["wrap_phrasing"], tuple(d["inputs"]),
                        tuple(d["expected"]), tuple(d["nondeterministic"]))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not an affine task ({e})") from None

    def program_class(self, task: Task) -> str:
        return "two_constants" if task.a is not None else "one_constant"

    def cell_of(self, stratum: tuple) -> tuple:
        return (stratum[0],)

    def class_space(self, cell: tuple, cls: str, guard: str) -> int:
        two = self.forms[cell[0]][2]
        if cls != ("two_constants" if two else "one_constant"):
            return 0
        return len(WRAPPERS) * (1 if guard == "ops" else self.max_const * ((self.max_const - 1) if two else 1))

    def expected_draws(self, n: int) -> dict[tuple, float]:
        return {(f,): k for f, k in cycle_counts(self.forms, n).items()}

    def applies(self, op: str, task: Task) -> bool:
        return op in self.operators

    def mutate(self, op: str, task: Task, rng: random.Random) -> Task:
        if op == "phrasing":
            return self.rephrase(task, rng)
        if op == "constant":
            return dataclasses.replace(task, b=rng.choice([b for b in range(1, self.max_const + 1) if b != task.b]),
                                       expected=())
        if op == "wrapper":
            wrapper = rng.choice([w for w in sorted(WRAPPERS) if w != task.wrapper])
            return dataclasses.replace(task, wrapper=wrapper, wrap_phrasing=0 if wrapper == "none" else rng.randint(0, 2),
                                       expected=())
        form = rng.choice([f for f in sorted(self.forms) if f != task.form])
        a = (task.a or rng.randint(2, self.max_const)) if self.forms[form][2] else None
        return dataclasses.replace(task, form=form, a=a, phrasing=min(task.phrasing, 2), expected=())


FAMILY = Affine


# ---- planted faults: each variant breaks one property ------------------------------------------

class Planted(Affine):
    """A variant whose tasks render through `task_type`, a Task subclass that plants the fault (a
    task's other members, and so its draws, are the affine family's)."""
    task_type: type = Task

    def _task(self, rng, form, alt):
        return self.task_type(**dataclasses.asdict(super()._task(rng, form, alt)))

    def task_from_dict(self, d):
        return self.task_type(**dataclasses.asdict(super().task_from_dict(d)))


@dataclass(frozen=True)
class _HashTask(Task):
    @property
    def reference(self) -> str:
        return f"    return {self.expression()} + hash('salt') % 1000\n"


class Nondeterministic(Planted):
    """The reference's output depends on the interpreter's hash seed (a string's hash)."""
    name = "affine_nondeterministic"
    task_type = _HashTask


@dataclass(frozen=True)
class _SetOrderTask(Task):
    @property
    def reference(self) -> str:  # the order of a set of strings: the process's hash seed decides it
        return f"    return list({{str({self.expression()}), 'alpha', 'beta', 'gamma', 'delta', 'epsilon'}})\n"


class SetOrder(Planted):
    """The reference returns a set of strings as a list: the same in every run of one process, and
    in another order in a process under another hash seed."""
    name = "affine_set_order"
    task_type = _SetOrderTask


@dataclass(frozen=True)
class _UnseededTask(Task):
    @property
    def reference(self) -> str:  # random's state, not the hash seed: the gate's runs seed it apart
        return f"    import random\n    return {self.expression()} + random.randrange(1000000)\n"


class Unseeded(Planted):
    """The reference adds an unseeded random number: it differs between runs whatever the hash seed."""
    name = "affine_unseeded"
    task_type = _UnseededTask


@dataclass(frozen=True)
class _WordyTask(Task):
    @property
    def program_hash(self) -> str:  # the prompt's words leak into the program's identity
        return sha({"affine-program": self.prompt + self.reference})


class PhrasedIdentity(Planted):
    """The program identity changes with the docstring's words."""
    name = "affine_phrased_identity"
    task_type = _WordyTask


class SingletonClass(Affine):
    """Half of the square_add draws add nothing (`x * x + 0`): a program class of one program with a
    sixth of the mass. The held-out splits can hold none of it (or, with every program held out,
    training none)."""
    name = "affine_singleton"
    classes = ("constant_free", *CLASSES)

    def _task(self, rng, form, alt):
        task = super()._task(rng, form, alt)
        if form == "square_add" and rng.random() < 0.5:
            return dataclasses.replace(task, b=0, wrapper="none", wrap_phrasing=0, phrasing=task.phrasing and 1)
        return task

    def program_class(self, task):
        return "constant_free" if task.b == 0 else super().program_class(task)

    def class_space(self, cell, cls, guard):
        if cls == "constant_free":
            return self.singleton_space(guard) if cell == ("square_add",) else 0
        return super().class_space(cell, cls, guard)

    def singleton_space(self, guard):
        return 1


class Understated(SingletonClass):
    """The same one-program class, declared as forty programs: the cap lets the held-out pool take
    the one there is, and training draws find none left."""
    name = "affine_understated"

    def singleton_space(self, guard):
        return 40


class NarrowForm(Affine):
    """`add_small` takes b in {1, 2}: its cell holds two programs, far fewer than the held-out splits need."""
    name = "affine_narrow"
    forms = ALL_FORMS

    def _task(self, rng, form, alt):
        task = super()._task(rng, form, alt)
        return dataclasses.replace(task, b=1 + task.b % 2, wrapper="none", wrap_phrasing=0) if form == "add_small" else task

    def class_space(self, cell, cls, guard):
        if cell == ("add_small",):
            return 0 if cls != "one_constant" else (1 if guard == "ops" else 2)
        return super().class_space(cell, cls, guard)


@dataclass(frozen=True)
class _EscapeTask(Task):
    @property
    def reference(self) -> str:
        return "    open('/usr/escaped', 'w').write('out')\n    return x\n"


class Escapes(Planted):
    """Every reference writes outside its sandbox's working directory."""
    name = "affine_escapes"
    task_type = _EscapeTask


@dataclass(frozen=True)
class _FloodTask(Task):
    @property
    def reference(self) -> str:
        return "    print('x' * 3000000)\n    return x\n"


class Floods(Planted):
    """Every reference floods stdout."""
    name = "affine_floods"
    task_type = _FloodTask


@dataclass(frozen=True)
class _SpinTask(Task):
    @property
    def reference(self) -> str:
        if self.form != "square_add":
            return super().reference
        return "    while True:\n        x = x + 1\n"


class Hangs(Planted):
    """The square_add references never return."""
    name = "affine_hangs"
    task_type = _SpinTask

"""The task-family contract: what the library asks of a family of tasks and of one of its tasks.

A *family* is a plug-in: a class registered by name (harness.tasks.registry) that a protocol chooses
in tasks.yaml (`family: {name: <name>, ...its settings}`). The library (splits and the leak guard,
the bank, the proposer, the determinism gate, the verifier, the runner, the readout) knows no family:
it uses only what this module names. docs/extending.md walks through writing one.

A task (`Task`, structural: any class with these members) is what the model sees and what the
sandbox runs:

    prompt          the text the model continues (a function header and its description)
    reference       the reference completion; prompt + reference is the reference program
    func_name       the function the sandbox calls, once per test input
    inputs          the test inputs (one argument each), plain data
    expected        the reference's outputs on them (empty until `TaskFamily.with_expected`)
    nondeterministic truthy only for a task rendered with a deliberately hash-dependent line (the
                    determinism gate's tests): its `expected` is not trusted, the gate's run 1 is
    canonical_hash  the task as the model sees it (prompt + reference; inputs excluded)
    program_hash    the program's identity, whatever its phrasing: what the leak guard holds out
                    and what makes the held-out splits program-disjoint
    ops_hash        the program's structure with its constants abstracted: what the "hold_out"
                    leak guard (same steps, other constants) also holds out
    shape_hash      the task up to its constants (the bank's shape_duplicate)
    stratum         a tuple of ints and strings (sortable) naming its cell of the distribution
    to_dict()       a JSON-ready dict; `TaskFamily.task_from_dict` reads it back

How a completion is checked is the library's, the same for every family: the candidate program
`task.prompt + completion` runs in the sandbox (harness.sandbox), `task.func_name` is called on
each input, and the task passes when every output equals `task.expected` exactly (type included).
A family decides what is checked through its prompts, inputs and expected outputs.

What the family answers (`TaskFamily`): its strata; a task drawn from the distribution or in a
stratum from a seeded `random.Random` (its only source of randomness); the reference's run; a
task's program class (how many programs share its structure: its mass); the key space of each
capacity cell per class under each leak guard; the proposer's mutation operators; and, for the
conformance suite (harness.freeze.conformance), another phrasing of a task's program.
"""
from __future__ import annotations

import hashlib
import json
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

END = "\x00"  # end-of-completion byte: the sampler stops on it, training appends it
GUARDS = ("program", "ops")  # the leak guard's unit: program_hash, or also ops_hash (same steps, other constants)

Stratum = tuple  # a family's stratum: ints and strings, sortable; TaskFamily.stratum_fields names its parts
Cell = tuple     # a capacity cell: the strata sharing one key space (TaskFamily.cell_of); cell_fields names its parts
Setting = tuple[Callable[[Any], bool], str]  # a setting's check and what it expects, as tasks.yaml's errors say it


@runtime_checkable
class Task(Protocol):
    """A task of any family (see the module docstring for each member's meaning)."""
    prompt: str
    reference: str
    func_name: str
    inputs: tuple
    expected: tuple
    nondeterministic: Any
    canonical_hash: str
    program_hash: str
    ops_hash: str
    shape_hash: str
    stratum: Stratum

    def to_dict(self) -> dict: ...


class TaskFamily(ABC):
    """A family of tasks with its settings. Subclasses set the class attributes and implement the
    abstract methods; an instance is one registration (its validated settings).

    Every draw is a function of the `random.Random` it is given (and the settings): the same seed
    gives the same tasks in any process, whatever its hash seed (the conformance suite checks it)."""

    name: ClassVar[str]                        # the name tasks.yaml registers it by
    version: ClassVar[str]                     # changes whenever the same settings and seed would draw other tasks
    SETTINGS: ClassVar[dict[str, Setting]]     # tasks.yaml family settings besides name: key -> (check, expected)
    DEFAULTS: ClassVar[dict[str, Any]]         # settings `make conformance` uses without a protocol
    classes: ClassVar[tuple[str, ...]]         # program classes, by mass per program, the highest first
    stratum_fields: ClassVar[tuple[str, ...]]  # the names of a stratum's parts (tables' columns)
    cell_fields: ClassVar[tuple[str, ...]]     # the names of a capacity cell's parts
    operators: ClassVar[tuple[str, ...]]       # the proposer's mutation operators, by name
    solver_operators: ClassVar[tuple[str, ...]]  # those that can yield a task for the solver (new, deterministic):
                                               # what a protocol registers; the others exist to test the gate or bank

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: dict[str, Any]) -> TaskFamily:
        """The family for settings that passed SETTINGS' checks; ValueError naming the key for a
        combination they cannot see (e.g. a minimum above a maximum)."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """The settings as registered (JSON-ready): what the lock and the readout name."""

    # ---- drawing ----------------------------------------------------------------------------

    @abstractmethod
    def strata(self) -> list[Stratum]:
        """Every stratum the distribution can produce, sorted."""

    @abstractmethod
    def sample(self, rng: random.Random, i: int) -> Task:
        """A task from the distribution, without expected outputs; `i` is the draw's index in its
        pool, so a family may balance sub-kinds by cycling over them."""

    @abstractmethod
    def draw(self, rng: random.Random, stratum: Stratum) -> Task:
        """A task from the distribution conditioned on `stratum`, without expected outputs;
        ValueError for a stratum not in `strata()`."""

    @abstractmethod
    def with_expected(self, task: Task) -> Task:
        """`task` with `expected` set to its reference's outputs, run in this process (the family's own
        code, never a model's; the conformance suite first runs a sample of references in the sandbox)."""

    @abstractmethod
    def rephrase(self, task: Task, rng: random.Random) -> Task | None:
        """The same program described in other words (another prompt, same program_hash), or None
        when the task has no other phrasing."""

    @abstractmethod
    def task_from_dict(self, d: dict) -> Task:
        """Inverse of `task.to_dict()`; ValueError naming what is missing or malformed."""

    # ---- program classes and capacity -------------------------------------------------------

    @abstractmethod
    def program_class(self, task: Task) -> str:
        """One of `classes`: how many programs share the task's structure, decided by its structure."""

    @abstractmethod
    def cell_of(self, stratum: Stratum) -> Cell:
        """The capacity cell of a stratum: strata whose tasks share one key space (e.g. strata that
        differ only in phrasing hold the same programs)."""

    @abstractmethod
    def class_space(self, cell: Cell, cls: str, guard: str) -> int:
        """How many of the guard's keys (programs for "program", op structures for "ops") the cell
        holds in program class `cls`."""

    @abstractmethod
    def expected_draws(self, n: int) -> dict[Cell, float]:
        """How many of `n` draws `sample(rng, 0..n-1)` fall in each cell, in expectation."""

    def cells(self) -> list[Cell]:
        """Every capacity cell of the distribution, sorted."""
        return sorted({self.cell_of(s) for s in self.strata()})

    def space(self, cell: Cell, guard: str) -> int:
        """The guard's keys in the cell, over every class."""
        return sum(self.class_space(cell, c, guard) for c in self.classes)

    def describe_cell(self, cell: Cell) -> str:
        """The cell in words, for refusals ("depth 1, template arith")."""
        return ", ".join(f"{f} {v}" for f, v in zip(self.cell_fields, cell))

    def stratum_label(self, stratum: Stratum) -> str:
        """The stratum as a key of the readout's tables."""
        return "/".join(map(str, stratum))

    # ---- the proposer -----------------------------------------------------------------------

    @abstractmethod
    def applies(self, op: str, task: Task) -> bool:
        """Whether operator `op` can mutate `task` within the settings."""

    @abstractmethod
    def mutate(self, op: str, task: Task, rng: random.Random) -> Task:
        """`task` mutated by operator `op` (which applies to it), without expected outputs."""

    # ---- what the lock and the readout name -------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """{name, version, settings}: the registration as the lock hashes it and the readout names it."""
        return {"name": self.name, "version": self.version, "settings": self.settings()}

    def __repr__(self) -> str:
        return f"{self.name} v{self.version} {self.settings()}"


def sha(obj: Any) -> str:
    """sha256 of `obj` as canonical JSON: the hashes a family's identities are built from."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

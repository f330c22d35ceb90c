"""The conformance suite: the properties a task family must have for the experiment's guarantees to
hold, checked on the registered family (its settings, the protocol's split sizes and leak guard)
before freeze draws anything. Freeze refuses a family that fails one, in one line naming it;
`make conformance FAMILY=<name> [PROTOCOL=<protocol>]` runs the suite alone and prints its report.

The suite draws its own sample (harness.tasks.fingerprint.draw_sample: a few tasks in every stratum and
from the distribution, from `random.Random("conformance/<task seed>")`), never the protocol's splits,
and checks, in order (PROPERTIES):

    draws_deterministic       the same seed draws the same tasks (canonical, program and op-structure
                              hashes, program class and stratum) in another process under another
                              hash seed; every task reads back from its record with the same identities
    identity_ignores_phrasing a task described in other words (`rephrase`) keeps its program_hash and
                              ops_hash and changes its canonical_hash (its prompt)
    hostile_basics            every sampled reference runs cleanly in the sandbox: one that escapes
                              (forbidden), hangs (timeout, idle), floods (output_limit, memory) or
                              fails otherwise is refused
    reference_deterministic   every reference gives the same outputs in the determinism gate's runs,
                              sandboxed processes under other PYTHONHASHSEEDs (the verifier's and two
                              derived from the task seed), random seeds, heap noise and working
                              directories, and the same as the family's own run (`with_expected`) in
                              this process; a reference that differs is run again in processes that
                              differ in their hash seed alone, and one that changes with it (a set or
                              dict of strings iterated, `hash()`) is refused as depending on the hash seed
    strata_capacity           every stratum can be drawn (draws stay in it) and every capacity cell
                              holds what the registered held-out splits need under the leak guard
                              (harness.tasks.splits.check_capacity)
    class_not_exhaustible     every program class with programs in a cell is held out only in part:
                              the cap floor(max_held_out_fraction x its keys) is at least 1 (the probes
                              can hold it) and below its keys (training keeps some), no class holds more
                              keys than the family declares, and a held-out pool of the registered
                              size, drawn as freeze draws it, leaves programs of every class it took
                              from to the training draws of that cell
    operators_yield_solver_tasks  every operator the family declares a solver operator yields, from
                              the sample, a task the gate admits and the bank calls new; every arm
                              registers at least one (the others are named in the report)

The held-out splits are drawn exchangeably by construction (harness.tasks.splits.deal); what the
suite checks is that no class is small enough for the pool itself to exhaust.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

from harness import PROJECT_ROOT
from harness.core.errors import HarnessError
from harness.sandbox import gate
from harness.sandbox.pool import Program, Sandbox, plain_equal
from harness.spec.protocol import Protocol
from harness.tasks import registry
from harness.tasks.bank import Bank
from harness.tasks.contract import Task, TaskFamily
from harness.tasks.fingerprint import SAMPLE_PER_STRATUM, draw_sample, fingerprint
from harness.tasks.splits import HELD_OUT_SPLITS, check_capacity, draw_held_out, guard_key, held_out_keys

PROPERTIES = ("draws_deterministic", "identity_ignores_phrasing", "hostile_basics", "reference_deterministic",
              "strata_capacity", "class_not_exhaustible", "operators_yield_solver_tasks")
TRAINING_DRAWS = 100        # draws per stratum that look for a held-out class's remaining programs
CHILDREN_PER_OPERATOR = 16  # proposals per solver operator
SECOND_PROCESS_TIMEOUT_S = 300
# Without a protocol (`make conformance FAMILY=<name>`): the family's DEFAULTS against the smoke
# protocol's registration, a small experiment's.
NOMINAL = {"sizes": {"probe": 128, "confirm": 192, "calibration": 128, "seed_set": 96, "warmup": 3000},
           "guard": "program", "max_held_out_fraction": 0.5, "task_seed": gate.DEFAULT_PROTOCOL_SEED}


class ConformanceError(HarnessError):
    """The registered task family fails a conformance property."""


@dataclass(frozen=True)
class Registration:
    """What the suite checks a family against: the family with its settings, the held-out split sizes,
    the leak guard, the task seed (the gate's hash seeds) and each arm's proposer operators."""
    family: TaskFamily
    sizes: dict
    guard: str
    max_held_out_fraction: float
    task_seed: int
    operators: dict = field(default_factory=dict)  # arm -> its registered operators
    module: str | None = None                      # a family registered by its module (tasks.yaml family.module)

    @classmethod
    def of(cls, protocol: Protocol) -> "Registration":
        ops = {a: list(arm.operators) for a, arm in protocol.arms.items() if arm.operators}
        return cls(protocol.family, protocol.split_sizes(), protocol.guard, protocol.tasks.leak_guard.max_held_out_fraction,
                   protocol.seeds.task_seed, ops, protocol.tasks.family.get("module"))

    @classmethod
    def nominal(cls, name: str, module: str | None = None) -> "Registration":
        fam = registry.family_class(name, module)
        return cls(fam.from_settings(dict(fam.DEFAULTS)), NOMINAL["sizes"], NOMINAL["guard"],
                   NOMINAL["max_held_out_fraction"], NOMINAL["task_seed"], {"nominal": list(fam.solver_operators)}, module)


@dataclass(frozen=True)
class Check:
    """One property's outcome: `detail` is one line (what was measured, or why it fails)."""
    prop: str
    ok: bool
    detail: str


@dataclass
class Report:
    family: dict                  # the family's identity (name, version, settings)
    checks: list[Check]

    @property
    def failed(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    def lines(self) -> list[str]:
        fam = self.family
        out = [f"conformance of the task family '{fam['name']}' version {fam['version']} {fam['settings']}:"]
        out += [f"  {'pass' if c.ok else 'FAIL'}  {c.prop}: {c.detail}" for c in self.checks]
        return out

    def to_dict(self) -> dict:
        return {"family": self.family, "checks": [{"property": c.prop, "ok": c.ok, "detail": c.detail} for c in self.checks]}

    def refusal(self) -> str:
        c = self.failed
        return f"task family '{self.family['name']}' fails the conformance suite: {c.prop}: {c.detail}"


# ---- the sample in a second process ------------------------------------------------------------

def _child_fingerprint(reg: Registration, hash_seed: int) -> list[list]:
    """The sample's fingerprint computed in a fresh interpreter with PYTHONHASHSEED=hash_seed
    (harness.tasks.fingerprint.main), the family found there by its registration."""
    spec = {"name": reg.family.name, "module": reg.module, "settings": reg.family.settings(), "seed": reg.task_seed}
    code = "import sys\nfrom harness.tasks import fingerprint\nfingerprint.main(sys.argv[1:])\n"
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        res = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], cwd=PROJECT_ROOT, env=env,
                             capture_output=True, text=True, timeout=SECOND_PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ConformanceError(f"the conformance suite's second process drew nothing in {SECOND_PROCESS_TIMEOUT_S} s") from None
    if res.returncode != 0:
        raise ConformanceError(f"the conformance suite's second process failed: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout)


# ---- the properties ----------------------------------------------------------------------------

def check_draws(reg: Registration, sample: list[Task]) -> Check:
    fam = reg.family
    here = json.loads(json.dumps(fingerprint(fam, sample)))
    for i, t in enumerate(sample):
        back = fam.task_from_dict(json.loads(json.dumps(t.to_dict())))
        if fingerprint(fam, [back]) != [here[i]]:
            return Check("draws_deterministic", False, f"task {i} of the sample reads back from its record with other "
                                                       f"identities (stratum {t.stratum})")
    other = _child_fingerprint(reg, hash_seed=1 + (reg.task_seed % 1000))
    diff = next((i for i, (a, b) in enumerate(zip(here, other)) if a != b), None)
    if diff is not None or len(here) != len(other):
        return Check("draws_deterministic", False, f"the same seed drew another task {diff} in a second process with "
                                                   f"another hash seed ({here[diff] if diff is not None else len(here)} "
                                                   f"against {other[diff] if diff is not None else len(other)})")
    return Check("draws_deterministic", True, f"{len(sample)} tasks drawn alike in a second process (other hash seed), "
                                              f"identities kept through their records")


def check_phrasing(reg: Registration, sample: list[Task]) -> Check:
    rng = random.Random(f"conformance/rephrase/{reg.task_seed}")
    n = 0
    for i, t in enumerate(sample):
        other = reg.family.rephrase(t, rng)
        if other is None:
            continue
        n += 1
        if other.prompt == t.prompt or other.canonical_hash == t.canonical_hash:
            return Check("identity_ignores_phrasing", False, f"task {i}'s rephrasing has the same prompt: rephrase must "
                                                             f"describe the program in other words")
        if (other.program_hash, other.ops_hash) != (t.program_hash, t.ops_hash):
            return Check("identity_ignores_phrasing", False, f"task {i} ({t.stratum}) described in other words has "
                                                             f"another program identity: program_hash must not "
                                                             f"depend on the prompt's words")
    return Check("identity_ignores_phrasing", True, f"{n} of {len(sample)} tasks rephrased, program identity kept"
                 + ("" if n else " (the family has no other phrasings)"))


def check_references(reg: Registration, sample: list[Task]) -> tuple[Check, Check, list[Task]]:
    """hostile_basics and reference_deterministic from one pass of the determinism gate; the sample
    with expected outputs (the family's own run, made only after the sandbox ran every reference)."""
    g = gate.default_gate(reg.task_seed)
    verdicts = g.admit_sources([(t.prompt + t.reference, tuple(t.inputs)) for t in sample],
                               funcs=[t.func_name for t in sample])
    for i, v in enumerate(verdicts):
        if v.reason == "reference_fails":
            return (Check("hostile_basics", False, f"the reference of task {i} ({sample[i].stratum}) does not run "
                                                   f"cleanly in the sandbox: {v.detail}"),
                    Check("reference_deterministic", False, "not checked: a reference fails in the sandbox"), [])
    hostile = Check("hostile_basics", True, f"{len(sample)} references ran cleanly in the sandbox (no escape, hang "
                                            f"or flood)")
    for i, v in enumerate(verdicts):
        if v.reason != "deterministic":
            why = hash_seed_dependence(reg, sample[i]) or f"differs between the gate's runs: {v.detail}"
            return hostile, Check("reference_deterministic", False, f"the reference of task {i} ({sample[i].stratum}) "
                                                                    f"{why}"), []
    full = [reg.family.with_expected(t) for t in sample]
    for i, (t, v) in enumerate(zip(full, verdicts)):
        if len(t.expected) != len(t.inputs) or not all(plain_equal(a, b) for a, b in zip(v.outputs, t.expected)):
            return hostile, Check("reference_deterministic", False, f"task {i} ({t.stratum}): the family's own run of "
                                                                    f"its reference gives other outputs than the sandbox's "
                                                                    f"({list(t.expected)!r:.60} against {list(v.outputs)!r:.60})"), []
    return hostile, Check("reference_deterministic", True, f"{len(sample)} references: the gate's {gate.RUNS} runs and "
                                                           f"the family's own run agree"), full


def hash_seed_dependence(reg: Registration, task: Task) -> str | None:
    """How the task's reference changes with the hash seed alone (one line), or None when it does
    not: the reference run in one sandboxed process per gate hash seed, alike in everything else
    (the verifier's random seed, heap and working directory)."""
    seeds = gate.gate_hash_seeds(reg.task_seed)
    outs = []
    for seed in seeds:
        with Sandbox(1, hash_seed=seed) as box:
            run = box.run(Program(task.prompt + task.reference, tuple(task.inputs), task.func_name))
        reason, out, _ = gate.compare_runs([run])
        if reason != "deterministic":
            return None  # it fails here: the gate's own detail says how
        outs.append(out)
    for k in range(1, len(seeds)):
        for j, (a, b) in enumerate(zip(outs[0], outs[k])):
            if not plain_equal(a, b):
                return (f"depends on the hash seed: test {j} gave {a!r:.60} under PYTHONHASHSEED {seeds[0]} and "
                        f"{b!r:.60} under {seeds[k]}, all else alike (a set or dict of strings iterated, or hash())")
    return None


def check_capacity_of(reg: Registration) -> Check:
    fam, rng = reg.family, random.Random(f"conformance/strata/{reg.task_seed}")
    for s in fam.strata():
        for _ in range(SAMPLE_PER_STRATUM):
            t = fam.draw(rng, s)
            if t.stratum != s:
                return Check("strata_capacity", False, f"a task drawn in stratum {s} is in stratum {t.stratum}")
    try:
        rows = check_capacity(fam, reg.sizes, reg.guard, reg.max_held_out_fraction)
    except ValueError as e:
        return Check("strata_capacity", False, str(e))
    worst = rows[0]
    return Check("strata_capacity", True, f"{len(fam.strata())} strata in {len(rows)} cells; the tightest, "
                                          f"{fam.describe_cell(worst['cell'])}, needs {worst['need']:.0f} of its "
                                          f"{worst['capacity']} held-out keys")


def check_classes(reg: Registration, sample: list[Task]) -> tuple[Check, list[Task]]:
    """class_not_exhaustible; the held-out pool it drew (for the bank of the operators' check)."""
    fam, frac, guard = reg.family, reg.max_held_out_fraction, reg.guard
    seen: dict[tuple, set[str]] = {}
    for t in sample:
        seen.setdefault((fam.cell_of(t.stratum), fam.program_class(t)), set()).add(guard_key(t, guard))
    for (cell, cls), keys in sorted(seen.items()):
        declared = fam.class_space(cell, cls, guard)
        if len(keys) > declared:
            return Check("class_not_exhaustible", False, f"class {cls} in {fam.describe_cell(cell)}: the sample holds "
                                                         f"{len(keys)} of its keys, the family declares {declared}"), []
    for cell in fam.cells():
        for cls in fam.classes:
            space = fam.class_space(cell, cls, guard)
            cap = int(frac * space)
            if space and not 1 <= cap < space:
                why = ("the held-out splits could take none of them: the probes would miss a class the training "
                       "splits hold" if cap < 1 else "the held-out splits could take all of them: training would hold "
                                                         "none")
                return Check("class_not_exhaustible", False, f"class {cls} in {fam.describe_cell(cell)} holds {space} "
                                                             f"keys; the leak guard's {frac:.0%} caps the held-out splits "
                                                             f"at {cap}: {why}"), []
    n_held = sum(reg.sizes.get(s, 0) for s in HELD_OUT_SPLITS)
    try:
        pool = draw_held_out(fam, reg.task_seed + 1, n_held, guard, frac)  # never the splits' own seed
    except ValueError as e:
        return Check("class_not_exhaustible", False, str(e)), []
    held = held_out_keys(pool, guard)
    took = {(fam.cell_of(t.stratum), fam.program_class(t)) for t in pool}
    drawn: Counter = Counter()  # (cell, class) -> training draws there, and those outside the pool's keys
    left: Counter = Counter()
    rng = random.Random(f"conformance/training/{reg.task_seed}")
    for s in fam.strata():
        for _ in range(TRAINING_DRAWS):
            t = fam.draw(rng, s)
            where = (fam.cell_of(s), fam.program_class(t))
            drawn[where] += 1
            left[where] += guard_key(t, guard) not in held and t.program_hash not in held
    for cell, cls in sorted(took & set(drawn)):
        if not left[(cell, cls)]:
            return Check("class_not_exhaustible", False, f"class {cls} in {fam.describe_cell(cell)}: a held-out pool of "
                                                         f"{n_held} tasks took every program of it that "
                                                         f"{TRAINING_DRAWS} training draws per stratum found"), []
    return Check("class_not_exhaustible", True, f"{len(took)} (cell, class) pairs in a held-out pool of {n_held}: each "
                                                f"capped below its keys, training draws find programs of each"), pool


def check_operators(reg: Registration, parents: list[Task], pool: list[Task]) -> Check:
    fam = reg.family
    undeclared = sorted(set(fam.solver_operators) - set(fam.operators))
    if undeclared:
        return Check("operators_yield_solver_tasks", False, f"solver operators {undeclared} are not among the family's "
                                                            f"operators {list(fam.operators)}")
    for arm, ops in sorted(reg.operators.items()):
        if not set(ops) & set(fam.solver_operators):
            return Check("operators_yield_solver_tasks", False, f"arm {arm} registers {ops}, none of which can yield a "
                                                                f"solver task (the family's solver operators: "
                                                                f"{list(fam.solver_operators)})")
    rng = random.Random(f"conformance/operators/{reg.task_seed}")
    children: list[tuple[str, Task]] = []
    for op in fam.solver_operators:
        eligible = [p for p in parents if fam.applies(op, p)]
        for _ in range(CHILDREN_PER_OPERATOR if eligible else 0):
            children.append((op, fam.with_expected(fam.mutate(op, rng.choice(eligible), rng))))
    verdicts = gate.default_gate(reg.task_seed).admit_many([c for _, c in children]) if children else []
    forbidden = held_out_keys(pool, reg.guard)
    bank = Bank({"probe": forbidden}, known=[p for p in parents if not {p.canonical_hash, p.program_hash} & forbidden])
    yielded: Counter = Counter()
    for (op, child), v in zip(children, verdicts):
        if v.admitted and not child.nondeterministic and bank.check(child, 0) == "new":
            yielded[op] += 1
    dead = [op for op in fam.solver_operators if not yielded[op]]
    if dead:
        return Check("operators_yield_solver_tasks", False, f"operator(s) {dead} yielded no solver task (admitted by the "
                                                            f"gate, new to the bank) in {CHILDREN_PER_OPERATOR} proposals "
                                                            f"from the sample")
    other = sorted({op for ops in reg.operators.values() for op in ops} - set(fam.solver_operators))
    return Check("operators_yield_solver_tasks", True, ", ".join(f"{op} {yielded[op]}/{CHILDREN_PER_OPERATOR}"
                                                                 for op in fam.solver_operators)
                 + (f"; registered, declared unable to yield one: {other}" if other else ""))


def run_suite(reg: Registration) -> Report:
    """Every property in order; a property whose inputs an earlier failure spoiled is not run."""
    sample = draw_sample(reg.family, reg.task_seed)
    checks = [check_draws(reg, sample), check_phrasing(reg, sample)]
    hostile, determinism, full = check_references(reg, sample)
    checks += [hostile, determinism, check_capacity_of(reg)]
    classes, pool = check_classes(reg, sample)
    checks.append(classes)
    if full and classes.ok:
        checks.append(check_operators(reg, full, pool))
    else:
        checks.append(Check("operators_yield_solver_tasks", False, "not checked: the references or classes failed"))
    return Report(reg.family.identity(), checks)


def require(protocol: Protocol, out=print) -> Report:
    """Freeze's gate: the suite on the protocol's family; prints the report, raises ConformanceError
    (one line naming the first failed property) unless every property holds."""
    report = run_suite(Registration.of(protocol))
    for line in report.lines():
        out(f"[freeze] {line}")
    if report.failed:
        raise ConformanceError(f"{protocol.dir / 'tasks.yaml'}: {report.refusal()}")
    return report

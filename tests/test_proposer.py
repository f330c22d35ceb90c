"""The proposer: determinism, what each operator does, the depth cap, and that `unsorted_set`
really yields tasks whose output depends on the hash seed."""
import dataclasses
import inspect
import json
import os
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT
from families.code import (
    OPERATORS,
    SMALL_MAX,
    TEMPLATES,
    WORDS,
    Difficulty,
    CodeFamily,
    Task,
    build_tasks,
    run_reference,
    with_expected,
)
from harness.tasks.proposer import Proposal, propose

CAP = Difficulty(min_depth=1, max_depth=3, max_const=9)
PARENTS = build_tasks(11, 24, Difficulty(min_depth=1, max_depth=3))
MANY_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"


def by_hash(tasks):
    return {t.canonical_hash: t for t in tasks}


def run(op, n=40, cap=CAP, parents=PARENTS, seed=5, round=2):
    return propose(CodeFamily(cap), parents, n, seed=seed, round=round, operators=[op])


def assert_common(p: Proposal, parents):
    parent = by_hash(parents)[p.parent]
    assert p.task.template == parent.template
    assert p.task.expected == run_reference(p.task)  # expected outputs come from the child's own reference
    return parent


def test_same_args_same_proposals_and_round_changes_them():
    a = propose(CodeFamily(CAP), PARENTS, 30, seed=7, round=3, operators=list(OPERATORS))
    b = propose(CodeFamily(CAP), PARENTS, 30, seed=7, round=3, operators=list(OPERATORS))
    c = propose(CodeFamily(CAP), PARENTS, 30, seed=7, round=4, operators=list(OPERATORS))
    d = propose(CodeFamily(CAP), PARENTS, 30, seed=8, round=3, operators=list(OPERATORS))
    assert len(a) == 30 and all(isinstance(p, Proposal) for p in a)
    assert a == b
    assert [p.task.canonical_hash for p in a] != [p.task.canonical_hash for p in c]
    assert [p.task.canonical_hash for p in a] != [p.task.canonical_hash for p in d]
    assert {p.mutation for p in a} <= set(OPERATORS) and len({p.mutation for p in a}) >= 4


def test_proposals_do_not_depend_on_the_interpreter_hash_seed():
    code = ("from harness.tasks.proposer import propose\n"
            "from families.code import OPERATORS, CodeFamily, Difficulty, build_tasks\n"
            "ps = propose(CodeFamily(Difficulty(max_depth=3)), build_tasks(11, 24, Difficulty(max_depth=3)), 30, seed=7,"
            " round=3, operators=list(OPERATORS))\n"
            "print(' '.join(p.task.canonical_hash + p.mutation + p.parent for p in ps))\n")
    outs = {subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}, check=True).stdout for h in (1, 2)}
    assert len(outs) == 1 and len(outs.pop().split()) == 30


def test_proposer_takes_no_solver_input():
    assert list(inspect.signature(propose).parameters) == ["family", "parents", "n", "seed", "round", "operators"]


def test_unknown_operator_lists_known_ones():
    with pytest.raises(ValueError) as e:
        propose(CodeFamily(CAP), PARENTS, 3, seed=1, round=0, operators=["constant", "swap_args"])
    assert "swap_args" in str(e.value)
    for name in OPERATORS:
        assert name in str(e.value)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        propose(CodeFamily(CAP), PARENTS, -1, seed=1, round=0, operators=["constant"])
    with pytest.raises(ValueError, match="parents is empty"):
        propose(CodeFamily(CAP), [], 2, seed=1, round=0, operators=["constant"])
    assert propose(CodeFamily(CAP), [], 0, seed=1, round=0, operators=["constant"]) == []


def test_constant_changes_exactly_one_constant_of_the_same_kind():
    for p in run("constant"):
        parent = assert_common(p, PARENTS)
        table = TEMPLATES[parent.template][1]
        assert [o for o, _ in p.task.ops] == [o for o, _ in parent.ops]
        assert p.task.phrasing == parent.phrasing and p.task.inputs == parent.inputs
        changed = [i for i, (a, b) in enumerate(zip(p.task.ops, parent.ops)) if a[1] != b[1]]
        assert len(changed) == 1
        op, c = p.task.ops[changed[0]]
        kind = table[op][2]
        ranges = {"pos": range(1, CAP.max_const + 1), "mult": range(2, CAP.max_const + 1),
                  "small": range(1, min(SMALL_MAX, CAP.max_const) + 1), "signed": range(-CAP.max_const, CAP.max_const + 1),
                  "word": WORDS}
        assert c in ranges[kind], (op, kind, c)
        assert p.task.shape_hash == parent.shape_hash and p.task.canonical_hash != parent.canonical_hash


def test_constant_never_a_noop_even_with_two_possible_values():
    parent = with_expected(Task("string", (("take", 1),), (0,), ("abcdef",)))
    cap = Difficulty(max_depth=2, max_const=2)  # "small" constants are then 1 or 2
    for p in run("constant", n=20, cap=cap, parents=[parent]):
        assert p.task.ops == (("take", 2),)


def test_phrasing_changes_exactly_one_phrasing_index():
    for p in run("phrasing"):
        parent = assert_common(p, PARENTS)
        assert p.task.ops == parent.ops and p.task.inputs == parent.inputs
        changed = [i for i, (a, b) in enumerate(zip(p.task.phrasing, parent.phrasing)) if a != b]
        assert len(changed) == 1
        i = changed[0]
        assert 0 <= p.task.phrasing[i] < len(TEMPLATES[parent.template][1][parent.ops[i][0]][1])
        assert p.task.prompt != parent.prompt and p.task.reference == parent.reference


def test_inputs_redraws_inputs_and_keeps_the_canonical_hash():
    for p in run("inputs"):
        parent = assert_common(p, PARENTS)
        assert p.task.inputs != parent.inputs and len(p.task.inputs) == len(parent.inputs)
        assert p.task.canonical_hash == parent.canonical_hash


def test_op_replaces_one_step_by_another_op_of_the_template():
    for p in run("op"):
        parent = assert_common(p, PARENTS)
        table = TEMPLATES[parent.template][1]
        assert p.task.depth == parent.depth
        changed = [i for i, (a, b) in enumerate(zip(p.task.ops, parent.ops)) if a[0] != b[0]]
        assert len(changed) == 1
        op, c = p.task.ops[changed[0]]
        assert op in table and (c is None) == (table[op][2] is None)
        assert all(a == b for i, (a, b) in enumerate(zip(p.task.ops, parent.ops)) if i != changed[0])


def is_subsequence(short, long):
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def test_depth_moves_one_step_within_the_cap():
    seen = set()
    for p in run("depth", n=60):
        parent = assert_common(p, PARENTS)
        assert abs(p.task.depth - parent.depth) == 1
        assert 1 <= p.task.depth <= CAP.max_depth
        steps = list(zip(p.task.ops, p.task.phrasing))
        parent_steps = list(zip(parent.ops, parent.phrasing))
        shorter, longer = sorted([steps, parent_steps], key=len)
        assert is_subsequence(shorter, longer)  # the other steps are untouched
        seen.add(p.task.depth - parent.depth)
    assert seen == {-1, 1}


def test_depth_at_the_cap_only_removes_and_a_single_step_only_grows():
    deep = with_expected(Task("arith", (("add", 1), ("mul", 2), ("neg", None)), (0, 0, 0), (1, 2, 3)))
    for p in run("depth", n=10, parents=[deep]):
        assert p.task.depth == 2
    single = with_expected(Task("arith", (("add", 1),), (0,), (1, 2, 3)))
    for p in run("depth", n=10, parents=[single]):
        assert p.task.depth == 2
    with pytest.raises(ValueError, match="none of the operators"):
        run("depth", n=1, parents=[single], cap=Difficulty(max_depth=1))
    too_deep = with_expected(Task("arith", (("add", 1),) * 5, (0,) * 5, (1,)))  # 5 - 1 still beyond max_depth 3
    with pytest.raises(ValueError, match="none of the operators"):
        run("depth", n=1, parents=[too_deep])


def test_depth_never_goes_below_the_cap_min_depth():
    cap = Difficulty(min_depth=2, max_depth=3)
    two = with_expected(Task("arith", (("add", 1), ("mul", 2)), (0, 0), (1, 2, 3)))
    assert {p.task.depth for p in run("depth", n=10, parents=[two], cap=cap)} == {3}


def test_the_proposer_reaches_every_stratum_of_the_probes_from_the_seed_set():
    from harness.tasks.splits import build_splits, mix
    cap = Difficulty(min_depth=1, max_depth=3, max_const=20, alt_phrasing=0.4)
    splits = build_splits(CodeFamily(cap), 3, {"probe": 64, "seed_set": 24})
    reached = set()
    for r in range(4):
        reached |= {p.task.stratum for p in propose(CodeFamily(cap), splits["seed_set"], 200, seed=1, round=r,
                                                      operators=list(OPERATORS))}
    assert set(mix(splits["probe"])) <= reached
    single_stratum = [t for t in splits["seed_set"] if t.stratum == (1, "arith", "plain")][:1]
    assert single_stratum  # ...and even one parent's mutations travel across depth and phrasing
    grown = set()
    parents = single_stratum
    for r in range(6):
        props = propose(CodeFamily(cap), parents, 40, seed=2, round=r, operators=["depth", "phrasing", "op"])
        grown |= {p.task.stratum for p in props}
        parents = parents + [p.task for p in props]
    assert {(d, "arith", ph) for d in (1, 2, 3) for ph in ("plain", "alt")} <= grown


def test_unsorted_set_renders_a_uniq_step_unsorted_on_string_tasks_only():
    props = run("unsorted_set", n=30)
    assert props
    for p in props:
        parent = assert_common(p, PARENTS)
        assert parent.template == "string"
        assert p.task.nondeterministic and all(p.task.ops[i][0] == "uniq" for i in p.task.nondeterministic)
        assert '"".join(set(s))' in p.task.reference
        assert 1 <= p.task.depth <= max(CAP.max_depth, parent.depth)
    no_strings = [t for t in PARENTS if t.template != "string"]
    with pytest.raises(ValueError, match="none of the operators"):
        run("unsorted_set", n=1, parents=no_strings)


def test_unsorted_set_flips_an_existing_uniq_and_replaces_a_step_at_the_cap():
    has_uniq = with_expected(Task("string", (("reverse", None), ("uniq", None)), (0, 0), ("abc",)))
    for p in run("unsorted_set", n=5, parents=[has_uniq]):
        assert p.task.ops == has_uniq.ops and p.task.nondeterministic == (1,)
    full = with_expected(Task("string", (("reverse", None), ("upper", None), ("lower", None)), (0, 0, 0), ("abc",)))
    for p in run("unsorted_set", n=5, parents=[full]):
        assert p.task.depth == 3 and [o for o, _ in p.task.ops].count("uniq") == 1


def outputs_under_hash_seed(task: Task, hash_seed: int) -> list:
    """Run the task's reference in a fresh interpreter with PYTHONHASHSEED set; returns its outputs."""
    code = ("import json, sys\nscope = {}\nexec(sys.argv[1], scope)\n"
            "print(json.dumps([scope['f'](x) for x in json.loads(sys.argv[2])]))\n")
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    res = subprocess.run([os.path.realpath(sys.executable), "-c", code, task.prompt + task.reference,
                          json.dumps(list(task.inputs))], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_unsorted_set_output_depends_on_the_hash_seed():
    parent = with_expected(Task("string", (("reverse", None),), (0,), ("abc",)))
    (p,) = run("unsorted_set", n=1, parents=[parent])
    task = dataclasses.replace(p.task, inputs=(MANY_CHARS,))
    first, second = outputs_under_hash_seed(task, 1), outputs_under_hash_seed(task, 2)
    assert sorted(first[0]) == sorted(second[0]) == sorted(set(MANY_CHARS))  # same characters...
    assert first != second  # ...in an order that depends on the hash seed
    (c,) = run("constant", n=1, parents=[with_expected(Task("string", (("take", 3), ("uniq", None)), (0, 0), ("x",)))])
    control = dataclasses.replace(c.task, inputs=(MANY_CHARS,))
    assert outputs_under_hash_seed(control, 1) == outputs_under_hash_seed(control, 2)



def test_determinism_gate_rejects_unsorted_set_and_admits_constant():
    from harness.sandbox.gate import Gate

    parent = with_expected(Task("string", (("append", "xy"), ("reverse", None)), (0, 0), ("abc",)))
    (u,) = run("unsorted_set", n=1, parents=[parent])
    (c,) = run("constant", n=1, parents=[parent])
    unsorted = with_expected(dataclasses.replace(u.task, inputs=(MANY_CHARS, "hello world")))
    constant = with_expected(dataclasses.replace(c.task, inputs=(MANY_CHARS, "hello world")))
    with Gate(workers=1) as gate:
        rejected, admitted = gate.admit(unsorted), gate.admit(constant)
        counters = gate.counters
    assert (rejected.admitted, rejected.reason) == (False, "nondeterministic")
    assert (admitted.admitted, admitted.reason) == (True, "deterministic")
    assert admitted.outputs == run_reference(constant)
    assert counters["admitted"] == 1 and counters["rejected_nondeterministic"] == 1


@pytest.mark.parametrize("name", ["main", "smoke", "polygon", "polygon_powered"])
def test_every_registered_operator_yields_new_tasks_the_bank_admits(name):
    """Each operator an arm registers can yield a solver task: from the protocol's own seed set,
    some of its proposals are deterministic and "new" to the run's bank (not a held-out program,
    not a duplicate, not a shape duplicate)."""
    from harness.spec.protocol import load_protocol
    from harness.tasks.bank import Bank
    from harness.tasks.splits import build_splits
    protocol = load_protocol(name)
    sizes = {k: v for k, v in protocol.split_sizes().items() if k != "warmup"}
    splits = build_splits(protocol.family, protocol.seeds.task_seed, sizes, protocol.guard,
                          protocol.tasks.leak_guard.max_held_out_fraction)
    registered = {op for arm in protocol.arms.values() for op in (getattr(arm, "operators", None) or [])}
    assert registered
    for op in sorted(registered):
        bank = Bank.for_run(splits["probe"], splits["confirm"], splits["seed_set"], protocol.guard, splits["calibration"])
        props = propose(protocol.family, splits["seed_set"], 48, seed=protocol.seeds.task_seed, round=0, operators=[op])
        new = [p for p in props if not p.task.nondeterministic and bank.check(p.task, 0) == "new"]
        assert new, (name, op)


def test_the_dropped_operators_never_yield_a_new_task():
    """Why constant, inputs and unsorted_set are not registered: a constant change is a shape
    duplicate of its parent, new inputs are the parent itself, and unsorted_set is nondeterministic."""
    from harness.tasks.bank import Bank
    bank = Bank({}, known=PARENTS)
    assert {bank.check(p.task, 0) for p in run("constant")} == {"shape_duplicate"}
    assert {bank.check(p.task, 0) for p in run("inputs")} == {"duplicate"}
    strings = [t for t in PARENTS if t.template == "string"]
    assert all(p.task.nondeterministic for p in run("unsorted_set", parents=strings))

"""The determinism gate: deterministic references are admitted with their outputs; references whose
outputs depend on set order (hash seed), `random`, the clock or id() are rejected; failing ones are
rejected as such; the epsilon leak is seeded and counted."""
import random

import pytest

from harness import gate as gate_module
from harness.gate import Gate
from harness.sandbox import Limits
from harness.tasks import Difficulty, Task, build_tasks, run_reference, with_expected

# Strings of many distinct characters: the chance that two hash seeds order all of them alike is nil
# (and the seeds are fixed, so the test is deterministic anyway).
LONG_INPUTS = ("thequickbrownfxjmpsvlazydg", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdeXYZ0123456789")


@pytest.fixture(scope="module")
def gate():
    with Gate(workers=1, limits=Limits(wall_s=1.0, cpu_s=1), hash_seeds=(1, 2)) as g:
        yield g


def test_the_two_pools_run_with_different_hash_seeds(gate):
    assert [p.capabilities()["hash_seed"] for p in gate.pools] == ["1", "2"]
    with pytest.raises(ValueError, match="two different seeds"):
        Gate(workers=1, hash_seeds=(3, 3))


def test_deterministic_references_are_admitted_with_their_outputs(gate):
    tasks = build_tasks(21, 9) + build_tasks(22, 6, Difficulty(min_depth=3, max_depth=5))
    verdicts = gate.admit_many(tasks)
    assert all((v.admitted, v.reason) == (True, "deterministic") for v in verdicts), verdicts
    assert [v.outputs for v in verdicts] == [t.expected for t in tasks]


def test_set_of_strings_order_is_rejected(gate):
    """The task family's own nondeterministic rendering: "".join(set(s)) for the string uniq step."""
    ops = (("append", "xy"), ("uniq", None), ("upper", None))
    unsorted = Task("string", ops, (0, 0, 0), LONG_INPUTS, nondeterministic=(1,))
    assert '"".join(set(s))' in unsorted.reference
    v = gate.admit(unsorted)
    assert (v.admitted, v.reason) == (False, "nondeterministic") and v.detail.startswith("test ")
    sorted_ = Task("string", ops, (0, 0, 0), LONG_INPUTS)
    assert gate.admit(sorted_).reason == "deterministic"


@pytest.mark.parametrize("body", [
    "import random\ndef f(x):\n    return random.randint(0, 10 ** 9)\n",
    "import time\ndef f(x):\n    return time.perf_counter_ns()\n",
    "def f(x):\n    return id(object())\n",
    "def f(x):\n    return [id([]) % 9973, x]\n",
    "def f(x):\n    return sorted({'a': 1, 'b': 2, 'c': 3, 'd': 4, 'e': 5}.keys() | set('fghijklmnop'), key=hash)\n",
])
def test_randomness_clock_and_identity_are_rejected(gate, body):
    (v,) = gate.admit_sources([(body, (1, 2, 3))])
    assert (v.admitted, v.reason) == (False, "nondeterministic"), v


def test_a_locally_seeded_random_is_deterministic(gate):
    body = "import random\ndef f(x):\n    return random.Random(x).randint(0, 10 ** 9)\n"
    (v,) = gate.admit_sources([(body, (1, 2, 3))])
    assert (v.admitted, v.reason) == (True, "deterministic") and len(v.outputs) == 3


@pytest.mark.parametrize("body, why", [
    ("def f(x):\n    return 1 // 0\n", "ZeroDivisionError"),
    ("def f(x):\n    while True:\n        pass\n", "timeout"),
    ("def f(x):\n    return {x}\n", "bad_output"),
    ("def f(x):\n    return float('nan')\n", "bad_output"),
    ("def f(x) return x\n", "SyntaxError"),
])
def test_failing_references_are_rejected_as_such(gate, body, why):
    (v,) = gate.admit_sources([(body, (1,))])
    assert (v.admitted, v.reason, v.outputs) == (False, "reference_fails", None)
    assert why in v.detail


def test_epsilon_leaks_rejected_tasks_reproducibly_and_counts_them(gate):
    bad = "import random\ndef f(x):\n    return random.random()\n"
    good = "def f(x):\n    return x\n"
    sources = [(bad, (1,)), (good, (1,))] * 10
    before = gate.counters
    first = gate.admit_sources(sources, epsilon=0.5, rng=random.Random(4))
    again = gate.admit_sources(sources, epsilon=0.5, rng=random.Random(4))
    assert first == again
    leaked = [v for v in first if v.reason == "leaked"]
    assert 0 < len(leaked) < 10 and all(v.admitted and "was nondeterministic" in v.detail for v in leaked)
    assert all(v.reason == "deterministic" for v in first[1::2])
    after = gate.counters
    assert after["leaked"] - before["leaked"] == 2 * len(leaked)
    assert after["rejected_nondeterministic"] - before["rejected_nondeterministic"] == 20
    assert after["admitted"] - before["admitted"] == 20
    assert all(v.reason == "leaked" for v in gate.admit_sources(sources[:1], epsilon=1.0))
    assert gate.admit_sources(sources[:1], epsilon=0.0)[0].reason == "nondeterministic"
    for eps in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="epsilon must be a probability"):
            gate.admit_sources(sources[:1], epsilon=eps)


def test_module_level_admit_uses_a_lazily_started_gate():
    gate_module.shutdown()
    task = with_expected(Task("arith", (("mul", 3), ("add", 1)), (0, 0), (1, -4, 7)))
    v = gate_module.admit(task)
    assert (v.admitted, v.outputs) == (True, run_reference(task))
    assert [x.reason for x in gate_module.admit_many([task, task])] == ["deterministic"] * 2
    gate_module.shutdown()
    assert gate_module._default is None

"""The determinism gate: deterministic references are admitted with their outputs; references whose
outputs depend on set order (hash seed), `random`, the clock, id(), the working directory or which
hash seed runs are rejected, and so are outputs that agree with each other but not with
task.expected; failing ones are rejected as such; the epsilon leak is seeded and counted."""
import dataclasses
import os
import random
import subprocess
import sys

import pytest

from harness.sandbox import gate as gate_module
from harness.sandbox.gate import RUNS, WORKDIRS, Gate, gate_hash_seeds
from harness.sandbox.pool import Limits
from harness.sandbox.verifier import VERIFIER_HASH_SEED
from families.code import Difficulty, Task, build_tasks, run_reference, with_expected

# Strings of many distinct characters: the chance that three hash seeds order all of them alike is nil
# (and the seeds are fixed, so the test is deterministic anyway).
LONG_INPUTS = ("thequickbrownfxjmpsvlazydg", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdeXYZ0123456789")
PROTOCOL_SEED = 20261129


@pytest.fixture(scope="module")
def gate():
    with Gate(workers=1, limits=Limits(wall_s=5.0, cpu_s=1), protocol_seed=PROTOCOL_SEED) as g:
        yield g


def test_the_pools_run_with_the_verifiers_seed_and_seeds_drawn_from_the_protocol(gate):
    seeds = gate_hash_seeds(PROTOCOL_SEED)
    assert len(seeds) == RUNS >= 3 and seeds[0] == VERIFIER_HASH_SEED and len(set(seeds)) == RUNS
    assert all(s >= 1 << 16 for s in seeds[1:])  # never small fixed constants
    assert gate_hash_seeds(PROTOCOL_SEED + 1)[1:] != seeds[1:]  # another protocol, other seeds
    assert [p.capabilities()["hash_seed"] for p in gate.pools] == [str(s) for s in seeds]
    assert len({p.capabilities()["pid"] for p in gate.pools}) == RUNS  # a process of its own per run
    for bad in ((3, 3, 4), (1, 2, 3), (0, 5)):
        with pytest.raises(ValueError, match="different seeds, the first the verifier's"):
            Gate(workers=1, hash_seeds=bad)


def test_deterministic_references_are_admitted_with_their_outputs(gate):
    tasks = build_tasks(21, 9) + build_tasks(22, 6, Difficulty(min_depth=3, max_depth=5))
    verdicts = gate.admit_many(tasks)
    assert all((v.admitted, v.reason) == (True, "deterministic") for v in verdicts), verdicts
    assert [v.outputs for v in verdicts] == [t.expected for t in tasks]
    assert gate.expected_in_sandbox(tasks) == [t.expected for t in tasks]


def test_outputs_must_equal_task_expected(gate):
    """All runs agree, but on something else than the expected outputs computed outside: rejected."""
    task = build_tasks(23, 1)[0]
    wrong = dataclasses.replace(task, expected=(None,) * len(task.inputs))
    v = gate.admit(wrong)
    assert (v.admitted, v.reason) == (False, "nondeterministic") and "task.expected" in v.detail, v
    with pytest.raises(ValueError, match="expected outputs"):
        gate.admit(dataclasses.replace(task, expected=()))


def test_set_of_strings_order_is_rejected(gate):
    """The task family's own nondeterministic rendering: "".join(set(s)) for the string uniq step."""
    ops = (("append", "xy"), ("uniq", None), ("upper", None))
    unsorted = with_expected(Task("string", ops, (0, 0, 0), LONG_INPUTS, nondeterministic=(1,)))
    assert '"".join(set(s))' in unsorted.reference
    v = gate.admit(unsorted)
    assert (v.admitted, v.reason) == (False, "nondeterministic") and v.detail.startswith("test "), v
    sorted_ = with_expected(Task("string", ops, (0, 0, 0), LONG_INPUTS))
    assert gate.admit(sorted_).reason == "deterministic"


_HOST_SEED_SCRIPT = """
from harness.sandbox.gate import Gate
from harness.sandbox.pool import Limits
from families.code import Task, with_expected
tasks = [with_expected(Task("string", (("uniq", None),), (0,), (a + b,), nondeterministic=(0,)))
         for a in "abcdef" for b in "uvwxyz"]
with Gate(workers=1, limits=Limits(wall_s=5.0, cpu_s=1), protocol_seed=20261129) as g:
    for v in g.admit_many(tasks):
        print(v.admitted, v.reason, v.outputs)
"""


def test_a_hash_dependent_reference_gets_the_same_verdict_whatever_the_hosts_hash_secret():
    """Two-character strings: the gate's three fixed hash seeds order some alike (admitted), others
    not. Their `task.expected`, computed in the host, follows the host's own hash secret, so the gate
    must not compare with it: the same tasks give the same verdicts and outputs in hosts started with
    different PYTHONHASHSEEDs (a record once changed with the process that ran it)."""
    outs = {subprocess.run([sys.executable, "-c", _HOST_SEED_SCRIPT], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout for h in (1, 2, 3, 4)}
    assert len(outs) == 1, outs
    (out,) = outs
    assert "True deterministic" in out and "False nondeterministic" in out, out


def _hash_under(seed: int, text: str) -> int:
    out = subprocess.run([sys.executable, "-c", f"print(hash({text!r}))"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": str(seed)}, check=True)
    return int(out.stdout)


@pytest.mark.parametrize("body", [
    "import random\ndef f(x):\n    return random.randint(0, 10 ** 9)\n",
    "import time\ndef f(x):\n    return time.perf_counter_ns()\n",
    "import time\ndef f(x):\n    return time.time_ns() // 10 ** 6\n",      # a millisecond clock: runs are sequential
    "def f(x):\n    return id(object())\n",
    "def f(x):\n    return [id([]) % 9973, x]\n",
    "def f(x):\n    return sorted({'a': 1, 'b': 2, 'c': 3, 'd': 4, 'e': 5}.keys() | set('fghijklmnop'), key=hash)\n",
    "import os\ndef f(x):\n    return os.getcwd()\n",                     # the working directory's name
    "import sys\ndef f(x):\n    return sys.flags.hash_randomization\n",     # which hash seed is running
    "def f(x):\n    return hash('abc') % 1000\n",
])
def test_randomness_clock_identity_directory_and_seed_are_rejected(gate, body):
    (v,) = gate.admit_sources([(body, (1, 2, 3))])
    assert (v.admitted, v.reason) == (False, "nondeterministic"), v


def test_an_order_only_the_verifiers_seed_gives_is_rejected(gate):
    """Right under every gate seed but the verifier's: the verifier's own seed is among the runs."""
    h0 = _hash_under(VERIFIER_HASH_SEED, "abc")
    body = f"def f(x):\n    return 1 if hash('abc') == {h0} else 0\n"
    (v,) = gate.admit_sources([(body, (1,))])
    assert (v.admitted, v.reason) == (False, "nondeterministic") and "run 1 gave 1" in v.detail, v


def test_what_the_host_knows_is_not_there(gate):
    (v,) = gate.admit_sources([("def f(x):\n    return open('/proc/sys/kernel/random/boot_id').read()\n", (1,))])
    assert (v.admitted, v.reason) == (False, "reference_fails"), v


def test_a_locally_seeded_random_is_deterministic(gate):
    body = "import random\ndef f(x):\n    return random.Random(x).randint(0, 10 ** 9)\n"
    (v,) = gate.admit_sources([(body, (1, 2, 3))])
    assert (v.admitted, v.reason) == (True, "deterministic") and len(v.outputs) == 3


@pytest.mark.parametrize("body, why", [
    ("def f(x):\n    return 1 // 0\n", "ZeroDivisionError"),
    ("def f(x):\n    while True:\n        pass\n", "timeout"),
    ("def f(x):\n    return {x}\n", "bad_output"),
    ("def f(x):\n    return float('nan')\n", "bad_output"),
    ("import os\ndef f(x):\n    os.write(3, b'{\"i\":0,\"out\":1e400}\\n{\"done\":1}\\n')\n    os._exit(0)\n", "bad_output"),
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


def test_the_runs_use_different_working_directories():
    assert len(set(WORKDIRS)) == RUNS and WORKDIRS[0] == "work"  # run 1: the verifier's


def test_module_level_admit_uses_a_lazily_started_gate():
    gate_module.shutdown()
    task = with_expected(Task("arith", (("mul", 3), ("add", 1)), (0, 0), (1, -4, 7)))
    v = gate_module.admit(task)
    assert (v.admitted, v.outputs) == (True, run_reference(task))
    first = gate_module.default_gate()
    assert [x.reason for x in gate_module.admit_many([task, task])] == ["deterministic"] * 2
    assert gate_module.default_gate() is first
    gate_module.admit_many([task], protocol_seed=PROTOCOL_SEED + 7)  # another protocol: another gate
    assert gate_module.default_gate(PROTOCOL_SEED + 7).hash_seeds == gate_hash_seeds(PROTOCOL_SEED + 7)
    gate_module.shutdown()
    assert gate_module._default is None

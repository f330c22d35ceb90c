"""The determinism gate: a task is admitted only if its reference gives the same plain-data outputs,
equal to `task.expected`, in RUNS sandboxed executions that differ in everything a deterministic
program must not depend on. They run one after another (run k+1 starts when run k has ended), each
on its own pool (its own zygote processes):

    run 1: the verifier's own settings: PYTHONHASHSEED = VERIFIER_HASH_SEED, random.seed(0), no heap
           noise, working directory /tmp/work (so the outputs compared with task.expected are what
           the verifier will see for the reference: expected outputs as computed in the sandbox)
    run k: PYTHONHASHSEED = a seed derived from the frozen protocol's task seed (never a small fixed
           constant), random.seed(RUN_SEEDS[k]), HEAP_NOISE[k] throwaway objects, working directory
           WORKDIRS[k], and k-1 executions on its pool before the first (execution counts differ)

Different hash seeds change the iteration order of sets of strings and `hash()` itself (the
verifier's seed included: an order that two other seeds happen to share is still caught); different
`random` seeds change unseeded `random` calls; heap noise shifts id(); runs in sequence see different
clocks. Outputs are compared with exact types (1 != 1.0 != True, -0.0 != 0.0).

Residual risk: a program that reads the wall clock coarsely (time() // 60) gives the same output in
all runs whenever they fall within one tick, and may change later; the gate's window is the few
hundred milliseconds its runs take. The sandbox shows no host files, no counters of earlier
executions, no boot id, and one world to every execution (the same uid on every worker, no file
times, no load: docs/sandbox.md, "One world"), so a reference keyed on those gets one answer in
every run and is rejected when it is not task.expected. What is not one value (docs/sandbox.md, "What
is not one value of the interpreter's state"), with the rate at which this gate admitted a reference
keyed on it (200 references of one input, one bit choosing between task.expected and another
answer): the relative placement of two new objects, which alternates from one execution to the next
on a worker, in step on the gate's three pools: 100 of 200; the parity of the interpreter's
allocated block count: 45 of 200; one bit of os.urandom: 21 of 200 (1 in 8 for a fair bit); an
address bit and the parity of None's reference count: 0 of 200 (the heap noise and the pools move
them between runs). Such an admitted reference is right only some of the times the verifier runs it.

Reasons: "deterministic" (admitted), "nondeterministic" (runs differ, or agree on something other
than task.expected), "reference_fails" (an error, timeout, non-plain output... in any run), "leaked"
(rejected, but admitted anyway with probability epsilon; counted). The leak draw uses `rng` (default:
the gate's own random.Random(0)) once per rejected task when epsilon > 0, in task order, so the same
inputs give the same verdicts.
"""
from __future__ import annotations

import atexit
import hashlib
import math
import os
import random
import threading
from dataclasses import dataclass

from harness.sandbox.pool import Limits, Program, Run, Sandbox, plain_equal
from harness.sandbox.verifier import VERIFIER_HASH_SEED, exception_reason, fate_reason
from harness.tasks.contract import Task

GATE_REASONS = ("deterministic", "nondeterministic", "reference_fails", "leaked")
RUNS = 3                                  # executions per reference (at least 3)
RUN_SEEDS = (0, 1, 2)                     # random.seed() in the child of each run (run 1: the verifier's)
HEAP_NOISE = (0, 4099, 12289)             # throwaway objects allocated before each run
WORKDIRS = ("work", "gate-b7", "gate-c31")  # working directory names (run 1: the verifier's)
DEFAULT_PROTOCOL_SEED = 20261129          # for gates started without a protocol (tests, tools)


def gate_hash_seeds(protocol_seed: int, runs: int = RUNS) -> tuple[int, ...]:
    """(VERIFIER_HASH_SEED, then runs-1 seeds in [2**16, 2**32) derived from the protocol's seed)."""
    seeds = [VERIFIER_HASH_SEED]
    k = 0
    while len(seeds) < runs:
        k += 1
        digest = hashlib.sha256(f"gate-hash-seed/{protocol_seed}/{k}".encode()).digest()
        seed = int.from_bytes(digest[:4], "big")
        if seed >= 1 << 16 and seed not in seeds:
            seeds.append(seed)
    return tuple(seeds)


@dataclass(frozen=True)
class GateVerdict:
    admitted: bool
    reason: str                 # one of GATE_REASONS
    outputs: tuple | None       # outputs of the first run when they were plain data, else None
    detail: str = ""            # why it was rejected (first differing test, or the failing run's reason)


def _failure(run: Run, label: str) -> str | None:
    """None if the run reported a plain output for every test and ended cleanly; else why not."""
    if run.stage is not None:
        return f"{label}: {run.stage_name}: {run.stage.value}: {run.stage.msg}"[:300]
    for i, o in enumerate(run.outcomes):
        if o is None:
            reason, detail = fate_reason(run)
            return f"{label}: test {i}: {reason} ({detail})"[:300]
        if o.kind == "exc":
            return f"{label}: test {i}: {exception_reason(o.value, o.errno, o.msg)} ({o.value}: {o.msg})"[:300]
        if o.kind == "bad":
            return f"{label}: test {i}: bad_output ({o.msg})"[:300]
    if not run.done or run.malformed or run.fate != "ended":
        reason, detail = fate_reason(run)
        return f"{label}: {reason} ({detail})"[:300]
    return None


def compare_runs(runs: list[Run], expected: tuple | None = None) -> tuple[str, tuple | None, str]:
    """(reason, outputs of run 1 or None, detail) before any leak: every run must report plain
    outputs for every test, all runs the same, and equal to `expected` when given."""
    for k, run in enumerate(runs):
        why = _failure(run, f"run {k + 1}")
        if why is not None:
            return "reference_fails", None, why
    outs = [tuple(o.value for o in run.outcomes) for run in runs]
    for k in range(1, len(runs)):
        for i, (a, b) in enumerate(zip(outs[0], outs[k])):
            if not plain_equal(a, b):
                return "nondeterministic", outs[0], f"test {i}: run 1 gave {a!r:.60}, run {k + 1} gave {b!r:.60}"
    if expected is not None:
        for i, (a, e) in enumerate(zip(outs[0], expected)):
            if not plain_equal(a, e):
                return "nondeterministic", outs[0], (f"test {i}: every run gave {a!r:.60}, task.expected is "
                                                     f"{e!r:.60} (computed outside the sandbox)")
    return "deterministic", outs[0], ""


class Gate:
    """RUNS sandbox pools, one per hash seed (`hash_seeds`, default `gate_hash_seeds(protocol_seed)`;
    the first must be the verifier's), and counters: admitted (deterministic), rejected_<reason>,
    leaked (a leaked task also counts under its rejection reason)."""

    def __init__(self, workers: int | None = None, limits: Limits | None = None,
                 hidden_paths: list[str] | None = None, hash_seeds: tuple[int, ...] | None = None,
                 allow_degraded: bool = False, protocol_seed: int = DEFAULT_PROTOCOL_SEED):
        hash_seeds = gate_hash_seeds(protocol_seed) if hash_seeds is None else tuple(hash_seeds)
        if len(hash_seeds) != RUNS or len(set(hash_seeds)) != RUNS or hash_seeds[0] != VERIFIER_HASH_SEED:
            raise ValueError(f"Gate: hash_seeds must be {RUNS} different seeds, the first the verifier's "
                             f"({VERIFIER_HASH_SEED}), got {hash_seeds!r}")
        self.hash_seeds, self.protocol_seed = hash_seeds, protocol_seed
        self.pools: list[Sandbox] = []
        try:
            for k, seed in enumerate(hash_seeds):
                pool = Sandbox(workers, limits, hidden_paths, hash_seed=seed, allow_degraded=allow_degraded)
                self.pools.append(pool)
                pool.run_many([Program("def f(x):\n    return x\n", (k,))] * k)  # execution counts differ
        except BaseException:
            self.close()
            raise
        self.rng = random.Random(0)
        self._counts = {"admitted": 0, "rejected_nondeterministic": 0, "rejected_reference_fails": 0, "leaked": 0}
        self._lock = threading.Lock()

    @property
    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def admit(self, task: Task, epsilon: float = 0.0, rng: random.Random | None = None) -> GateVerdict:
        return self.admit_many([task], epsilon, rng)[0]

    def admit_many(self, tasks: list[Task], epsilon: float = 0.0,
                   rng: random.Random | None = None) -> list[GateVerdict]:
        """Gate each task's reference program (`task.prompt + task.reference`) on its inputs; the
        outputs must equal `task.expected`. Not for a task with a hash-dependent line
        (`task.nondeterministic`): its `expected` was computed in this process, under whatever hash
        secret this interpreter drew, so comparing with it would make the verdict depend on the host.
        Such a task must agree across the runs only; a caller that admits it uses the verdict's
        `outputs` (run 1, the verifier's settings) as its expected outputs."""
        for t in tasks:
            if not isinstance(t, Task):
                raise TypeError(f"Gate.admit_many: expected a task (harness.tasks.contract.Task), got {type(t).__name__}")
            if len(t.expected) != len(t.inputs):
                raise ValueError(f"Gate.admit_many: task {t.canonical_hash[:12]} has {len(t.inputs)} inputs but "
                                 f"{len(t.expected)} expected outputs (build it with its family's with_expected)")
        return self.admit_sources([(t.prompt + t.reference, tuple(t.inputs)) for t in tasks], epsilon, rng,
                                  func=None, expected=[None if t.nondeterministic else tuple(t.expected) for t in tasks],
                                  funcs=[t.func_name for t in tasks])

    def admit_sources(self, sources: list[tuple[str, tuple]], epsilon: float = 0.0,
                      rng: random.Random | None = None, func: str | None = "f",
                      expected: list[tuple] | None = None, funcs: list[str] | None = None) -> list[GateVerdict]:
        """Gate arbitrary (program, inputs) pairs: `func` (or funcs[i]) is called once per input; the
        outputs must equal expected[i] where given."""
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (0.0 <= epsilon <= 1.0) \
                or math.isnan(epsilon):
            raise ValueError(f"Gate: epsilon must be a probability in [0, 1], got {epsilon!r}")
        for src, inputs in sources:
            if not isinstance(src, str) or not inputs:
                raise ValueError(f"Gate: each source needs a program string and at least one input, got {src!r:.60}")
        funcs = funcs or [func] * len(sources)
        runs = []
        for k, pool in enumerate(self.pools):  # one run after another: the clock moves between them
            runs.append(pool.run_many([Program(src, tuple(inputs), fn, seed=RUN_SEEDS[k], heap_noise=HEAP_NOISE[k],
                                               workdir=WORKDIRS[k]) for (src, inputs), fn in zip(sources, funcs)]))
        rng = self.rng if rng is None else rng
        verdicts = []
        with self._lock:
            for i in range(len(sources)):
                reason, outputs, detail = compare_runs([r[i] for r in runs], expected[i] if expected else None)
                if reason == "deterministic":
                    self._counts["admitted"] += 1
                    verdicts.append(GateVerdict(True, reason, outputs))
                    continue
                self._counts[f"rejected_{reason}"] += 1
                if epsilon > 0 and rng.random() < epsilon:
                    self._counts["leaked"] += 1
                    verdicts.append(GateVerdict(True, "leaked", outputs, f"leaked (was {reason}): {detail}"[:300]))
                else:
                    verdicts.append(GateVerdict(False, reason, outputs, detail))
        return verdicts

    def expected_in_sandbox(self, tasks: list[Task]) -> list[tuple | None]:
        """Each task's reference outputs as the verifier's settings give them (run 1 of the gate), or
        None where the reference fails there: expected outputs computed inside the sandbox."""
        runs = self.pools[0].run_many([Program(t.prompt + t.reference, tuple(t.inputs), t.func_name) for t in tasks])
        return [None if _failure(r, "run 1") else tuple(o.value for o in r.outcomes) for r in runs]

    def close(self) -> None:
        for pool in self.pools:
            pool.close()

    def __enter__(self) -> "Gate":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_default: Gate | None = None
_default_lock = threading.Lock()


def default_gate(protocol_seed: int | None = None) -> Gate:
    """The module-level gate, started on first use (again in a forked child, or for another
    protocol seed)."""
    global _default
    seed = DEFAULT_PROTOCOL_SEED if protocol_seed is None else protocol_seed
    with _default_lock:
        if _default is not None and _default.pools[0].owner_pid == os.getpid() and _default.protocol_seed != seed:
            _default.close()
            _default = None
        if _default is None or _default.pools[0].owner_pid != os.getpid():
            _default = Gate(protocol_seed=seed)
        return _default


def admit(task: Task, epsilon: float = 0.0, rng: random.Random | None = None,
          protocol_seed: int | None = None) -> GateVerdict:
    return default_gate(protocol_seed).admit(task, epsilon, rng)


def admit_many(tasks: list[Task], epsilon: float = 0.0, rng: random.Random | None = None,
               protocol_seed: int | None = None) -> list[GateVerdict]:
    """Gate `tasks` with the module-level gate; `protocol_seed` (the frozen protocol's task seed)
    draws its hash seeds."""
    return default_gate(protocol_seed).admit_many(tasks, epsilon, rng)


def shutdown() -> None:
    """Close the module-level gate (registered with atexit)."""
    global _default
    with _default_lock:
        if _default is not None and _default.pools[0].owner_pid == os.getpid():
            _default.close()
        _default = None


atexit.register(shutdown)

"""The determinism gate: a task is admitted only if its reference gives the same plain-data outputs
in two sandboxed runs that differ in everything a deterministic program must not depend on.

    run 1: pool with PYTHONHASHSEED = hash_seeds[0], random.seed(RUN_SEEDS[0]), HEAP_NOISE[0] objects
    run 2: pool with PYTHONHASHSEED = hash_seeds[1], random.seed(RUN_SEEDS[1]), HEAP_NOISE[1] objects

Different hash seeds change the iteration order of sets of strings; different `random` seeds change
unseeded `random` calls; a different number of throwaway objects allocated before the run shifts
id(); two separate runs see different clocks. Outputs are compared with exact types (1 != 1.0 != True).

Reasons: "deterministic" (admitted), "nondeterministic", "reference_fails" (an error, timeout, non-
plain output... in either run), "leaked" (rejected, but admitted anyway with probability epsilon;
counted). The leak draw uses `rng` (default: the gate's own random.Random(0)) once per rejected
task when epsilon > 0, in task order, so the same inputs give the same verdicts.
"""
from __future__ import annotations

import atexit
import math
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from harness.sandbox import Limits, Program, Run, Sandbox, plain_equal
from harness.tasks import Task
from harness.verifier import exception_reason, fate_reason

GATE_REASONS = ("deterministic", "nondeterministic", "reference_fails", "leaked")
RUN_SEEDS = (1, 2)          # random.seed() in the child of run 1 and run 2
HEAP_NOISE = (0, 4099)      # throwaway objects allocated before run 1 and run 2


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


def compare_runs(run1: Run, run2: Run) -> tuple[str, tuple | None, str]:
    """(reason, outputs of run 1 or None, detail) before any leak."""
    for run, label in ((run1, "run 1"), (run2, "run 2")):
        why = _failure(run, label)
        if why is not None:
            return "reference_fails", None, why
    out1 = tuple(o.value for o in run1.outcomes)
    out2 = tuple(o.value for o in run2.outcomes)
    for i, (a, b) in enumerate(zip(out1, out2)):
        if not plain_equal(a, b):
            return "nondeterministic", out1, f"test {i}: run 1 gave {a!r:.60}, run 2 gave {b!r:.60}"
    return "deterministic", out1, ""


class Gate:
    """Two sandbox pools with different hash seeds, and counters: admitted (deterministic),
    rejected_<reason>, leaked (a leaked task also counts under its rejection reason)."""

    def __init__(self, workers: int | None = None, limits: Limits | None = None,
                 hidden_paths: list[str] | None = None, hash_seeds: tuple[int, int] = (1, 2),
                 allow_degraded: bool = False):
        if len(hash_seeds) != 2 or hash_seeds[0] == hash_seeds[1]:
            raise ValueError(f"Gate: hash_seeds must be two different seeds, got {hash_seeds!r}")
        self.pools: list[Sandbox] = []
        try:
            for seed in hash_seeds:
                self.pools.append(Sandbox(workers, limits, hidden_paths, hash_seed=seed, allow_degraded=allow_degraded))
        except BaseException:
            self.close()
            raise
        self.rng = random.Random(0)
        self._counts = {"admitted": 0, "rejected_nondeterministic": 0, "rejected_reference_fails": 0, "leaked": 0}
        self._lock = threading.Lock()
        self._both = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gate")

    @property
    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def admit(self, task: Task, epsilon: float = 0.0, rng: random.Random | None = None) -> GateVerdict:
        return self.admit_many([task], epsilon, rng)[0]

    def admit_many(self, tasks: list[Task], epsilon: float = 0.0,
                   rng: random.Random | None = None) -> list[GateVerdict]:
        """Gate each task's reference program (`task.prompt + task.reference`) on its inputs."""
        for t in tasks:
            if not isinstance(t, Task):
                raise TypeError(f"Gate.admit_many: expected harness.tasks.Task, got {type(t).__name__}")
        return self.admit_sources([(t.prompt + t.reference, tuple(t.inputs)) for t in tasks], epsilon, rng)

    def admit_sources(self, sources: list[tuple[str, tuple]], epsilon: float = 0.0,
                      rng: random.Random | None = None, func: str = "f") -> list[GateVerdict]:
        """Gate arbitrary (program, inputs) pairs: `func` is called once per input."""
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (0.0 <= epsilon <= 1.0) \
                or math.isnan(epsilon):
            raise ValueError(f"Gate: epsilon must be a probability in [0, 1], got {epsilon!r}")
        for src, inputs in sources:
            if not isinstance(src, str) or not inputs:
                raise ValueError(f"Gate: each source needs a program string and at least one input, got {src!r:.60}")
        progs = [[Program(src, tuple(inputs), func, seed=RUN_SEEDS[k], heap_noise=HEAP_NOISE[k])
                  for src, inputs in sources] for k in (0, 1)]
        second = self._both.submit(self.pools[1].run_many, progs[1])
        runs1 = self.pools[0].run_many(progs[0])
        runs2 = second.result()
        rng = self.rng if rng is None else rng
        verdicts = []
        with self._lock:
            for r1, r2 in zip(runs1, runs2):
                reason, outputs, detail = compare_runs(r1, r2)
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

    def close(self) -> None:
        if getattr(self, "_both", None) is not None:
            self._both.shutdown(wait=True)
        for pool in self.pools:
            pool.close()

    def __enter__(self) -> "Gate":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_default: Gate | None = None
_default_lock = threading.Lock()


def default_gate() -> Gate:
    """The module-level gate, started on first use (again in a forked child)."""
    global _default
    with _default_lock:
        if _default is None or _default.pools[0].owner_pid != os.getpid():
            _default = Gate()
        return _default


def admit(task: Task, epsilon: float = 0.0, rng: random.Random | None = None) -> GateVerdict:
    return default_gate().admit(task, epsilon, rng)


def admit_many(tasks: list[Task], epsilon: float = 0.0, rng: random.Random | None = None) -> list[GateVerdict]:
    return default_gate().admit_many(tasks, epsilon, rng)


def shutdown() -> None:
    """Close the module-level gate (registered with atexit)."""
    global _default
    with _default_lock:
        if _default is not None and _default.pools[0].owner_pid == os.getpid():
            _default.close()
        _default = None


atexit.register(shutdown)

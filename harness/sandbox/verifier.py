"""The exec verifier: runs `task.prompt + completion` in the sandbox on the task's inputs and compares
the outputs it reports with `task.expected` here, in the trusted process.

Every verdict has one reason (REASONS) and the verifier counts them. The reason of a failed verdict
is that of its first failing test, in input order:

    pass          every test's output equals the expected one (exact types: True != 1 != 1.0)
    wrong_answer  a plain-data output that differs from the expected one
    error         the program or a call raised (TypeError, ZeroDivisionError, RecursionError, ...)
    syntax        the program does not compile (a NUL byte included)
    timeout       the CPU limit: the execution used its CPU time (RLIMIT_CPU's kill *and* the CPU
                  time to show for it, a program that sends itself SIGXCPU or SIGKILL at once is a
                  crash; or its processes together over the limit; or the wall limit after that
                  much CPU)
    idle          the program waited out its wall limit: its own time (the wall time less the time
                  the machine kept it from a CPU it was ready to use) reached the wall limit while
                  it slept, blocked (an empty queue, a pipe nobody writes), stopped itself or
                  computed only now and then. Its own doing, like `timeout`: kept, never retried
    memory        MemoryError (the address-space limit), or killed by the OOM killer under its
                  worker's memory cgroup
    crash         killed by a signal it brought on itself (SIGSEGV, SIGABRT, its own kill())
    forbidden     the sandbox refused: permission, read-only filesystem, no network, process or file
                  limits (EACCES, EPERM, EROFS, ENETUNREACH, EAGAIN, EFBIG, ..., SIGXFSZ), or an
                  import of a module outside the sandbox's whitelist
    bad_output    an output that is not plain data (object, set, tuple, subclass, nan/inf, too big or
                  deep), or a result stream that breaks the protocol
    output_limit  stdout+stderr over the cap (the execution is killed)
    no_result     the process ended before reporting the test (sys.exit, os._exit, ...)
    sandbox_error the sandbox itself failed twice (not the program's doing: a failed worker is
                  replaced and the request rerun once on the fresh one). Only the harness can say
                  so: its set-up report travels on a pipe the program never holds.
    wall_limit    the program reached the hard wall limit (four wall limits) before its own time
                  reached the wall limit and without the CPU time for its CPU limit: it was ready to
                  run and the machine did not give it a CPU (measured: the kernel's pressure stall
                  information of its worker's cgroup, or its tasks' run-queue waits). Not the
                  program's doing.

The infrastructure reasons (INFRASTRUCTURE: sandbox_error, wall_limit) are never silently a wrong
answer: `verify_many` runs every program that got one once more and keeps the second verdict,
marked `retried` (`Verifier.retries` counts them); the records keep every verdict's reason, and
the readout reports each arm's rate of each reason with a balance check on the infrastructure rate.

Floats must be finite: nan and inf are not plain data (JSON has no such numbers), and neither is a
number that overflows to inf when parsed (1e400) -> bad_output. Floats compare as identical values:
-0.0 != 0.0 (the gate admits only outputs that reproduce bit for bit; JSON keeps the sign).
A completion is read up to its first END byte (the sampler's stop byte).
"""
from __future__ import annotations

import atexit
import errno as errno_codes
import json
import os
import signal
import threading
from dataclasses import dataclass, replace

from harness.sandbox.pool import Limits, Program, Run, Sandbox, is_plain, plain_equal
from harness.tasks.contract import END, Task

REASONS = ("pass", "wrong_answer", "error", "syntax", "timeout", "idle", "memory", "crash", "forbidden",
           "bad_output", "output_limit", "no_result", "sandbox_error", "wall_limit")
INFRASTRUCTURE = ("sandbox_error", "wall_limit")   # not the program's doing: retried once, counted
DETAIL_CHARS = 300
VERIFIER_HASH_SEED = 0   # PYTHONHASHSEED of the verifier's pool (the gate's first run uses it too)
FORBIDDEN_ERRNOS = frozenset({errno_codes.EPERM, errno_codes.EACCES, errno_codes.EROFS, errno_codes.ENETUNREACH,
                              errno_codes.ENETDOWN, errno_codes.EHOSTUNREACH, errno_codes.EADDRNOTAVAIL,
                              errno_codes.EAGAIN, errno_codes.EMFILE, errno_codes.ENFILE, errno_codes.EFBIG,
                              errno_codes.ENOSPC, errno_codes.EDQUOT})
SYNTAX_EXCEPTIONS = frozenset({"SyntaxError", "IndentationError", "TabError", "ValueError"})  # ValueError: NUL byte


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str                # one of REASONS
    tests: tuple[bool, ...]    # per-test outcome, in the order of task.inputs (all False if nothing ran)
    detail: str = ""           # short diagnostic, at most DETAIL_CHARS characters
    retried: bool = False      # the first execution ended for an INFRASTRUCTURE reason; this is the second


def exception_reason(name: str, err: int | None, msg: str = "") -> str:
    """Reason for an exception the program raised (by type name, errno and message)."""
    if name == "MemoryError":
        return "memory"
    if name == "SystemExit":
        return "no_result"
    if name in ("ImportError", "ModuleNotFoundError") or err in FORBIDDEN_ERRNOS:
        return "forbidden"
    if name == "RuntimeError" and msg.startswith("can't start new thread"):  # the process limit
        return "forbidden"
    return "error"


def fate_reason(run: Run) -> tuple[str, str]:
    """Reason (and detail) for a test the program never reported, from how the execution ended."""
    if run.malformed:
        return "bad_output", f"result stream: {run.malformed}"
    if run.fate == "timeout":   # a pool without the CPU judgement (kept for Run objects built by hand)
        return "timeout", "wall time limit"
    if run.fate == "wall_limit":
        return "wall_limit", (f"hard wall time limit after {run.wall_s:.1f} s, {_starved(run)}with "
                              f"{run.cpu_s:.2f} s of CPU (not the CPU limit)")
    if run.fate == "idle_limit":
        return "idle", (f"waited out the wall time limit: {run.wall_s:.1f} s, {_starved(run)}"
                        f"{run.cpu_s:.2f} s of CPU")
    if run.fate == "cpu_limit":
        return "timeout", f"CPU time limit ({run.cpu_s:.2f} s of CPU)"
    if run.fate == "memory_limit":
        return "memory", "killed by the OOM killer under the pool's memory cap"
    if run.fate == "output_limit":
        return "output_limit", "stdout+stderr over the limit"
    if run.fate == "result_limit":
        return "bad_output", "result stream over the limit"
    if run.fate == "sandbox_error":
        return "sandbox_error", run.output_head
    code = run.exit_code or 0
    if code == -signal.SIGXFSZ:
        return "forbidden", "file size limit (SIGXFSZ)"
    if code < 0:
        return "crash", f"killed by {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
    return "no_result", f"exited with code {code} before reporting"


def _starved(run: Run) -> str:
    return "" if run.stall_s is None else f"{run.stall_s:.2f} s of it ready to run without a CPU, "


def judge(task: Task, run: Run) -> Verdict:
    """Compare a run's reported outputs with task.expected. Pure function of (task, run)."""
    n = len(task.inputs)
    tests = tuple(o is not None and o.kind == "out" and plain_equal(o.value, e)
                  for o, e in zip(run.outcomes, task.expected))
    if all(tests) and run.done and not run.malformed and run.fate == "ended":
        return Verdict(True, "pass", tests)
    if run.fate == "sandbox_error":
        reason, detail = "sandbox_error", run.output_head
    elif run.stage is not None:
        st = run.stage
        if run.stage_name == "compile" and st.value in SYNTAX_EXCEPTIONS:
            reason = "syntax"
        elif run.stage_name == "setup":
            reason = "sandbox_error"
        elif run.stage_name == "emit":  # the program broke the child's own reporting
            reason = "bad_output"
        else:
            reason = exception_reason(st.value, st.errno, st.msg)
        detail = f"{run.stage_name}: {st.value}: {st.msg}"
    else:
        first = next((i for i, ok in enumerate(tests) if not ok), None)
        o = run.outcomes[first] if first is not None else None
        if first is None:  # every output right, but the stream did not finish cleanly
            reason, detail = fate_reason(run)
        elif o is None:
            reason, detail = fate_reason(run)
            detail = f"test {first}: {detail}"
        elif o.kind == "exc":
            reason, detail = exception_reason(o.value, o.errno, o.msg), f"test {first}: {o.value}: {o.msg}"
        elif o.kind == "bad":
            reason, detail = "bad_output", f"test {first}: {o.msg}"
        else:
            reason = "wrong_answer"
            detail = f"test {first}: got {_short(o.value)}, expected {_short(task.expected[first])}"
    if run.output_head and reason in ("no_result", "crash", "error"):
        detail += f" | output: {run.output_head!r}"
    return Verdict(False, reason, tests + (False,) * (n - len(tests)), detail[:DETAIL_CHARS])


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_task(task: Task, completion: str) -> None:
    if not isinstance(task, Task):
        raise TypeError(f"verify: expected a task (harness.tasks.contract.Task), got {type(task).__name__}")
    if not isinstance(completion, str):
        raise TypeError(f"verify: completion must be a str, got {type(completion).__name__}")
    if not task.inputs:
        raise ValueError(f"verify: task {task.canonical_hash[:12]} has no test inputs")
    if len(task.expected) != len(task.inputs):
        raise ValueError(f"verify: task {task.canonical_hash[:12]} has {len(task.inputs)} inputs but "
                         f"{len(task.expected)} expected outputs (build it with its family's with_expected)")
    if not all(is_plain(e) for e in task.expected):
        raise ValueError(f"verify: task {task.canonical_hash[:12]} has expected outputs that are not plain data: "
                         f"{task.expected!r:.100}")


class Verifier:
    """Owns a sandbox pool (fixed hash seed, so verdicts are reproducible). Context manager.
    `counters` maps every reason to the number of verdicts given with it."""

    def __init__(self, workers: int | None = None, limits: Limits | None = None,
                 hidden_paths: list[str] | None = None, allow_degraded: bool = False,
                 hash_seed: int = VERIFIER_HASH_SEED):
        self.sandbox = Sandbox(workers, limits, hidden_paths, hash_seed=hash_seed, allow_degraded=allow_degraded)
        self._counts = dict.fromkeys(REASONS, 0)
        self._retries = 0
        self._lock = threading.Lock()

    @property
    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def retries(self) -> int:
        """Programs run a second time because the first execution ended for an INFRASTRUCTURE reason."""
        with self._lock:
            return self._retries

    def verify(self, task: Task, completion: str) -> Verdict:
        return self.verify_many([(task, completion)])[0]

    def verify_many(self, pairs: list[tuple[Task, str]]) -> list[Verdict]:
        """Verdicts in the order of `pairs`; the programs run in parallel across the pool. A program
        whose execution ended for an INFRASTRUCTURE reason is run once more (all such programs of
        the batch together) and its second verdict kept, with `retried=True`."""
        pairs = list(pairs)
        for task, completion in pairs:
            _check_task(task, completion)
        programs = [Program(task.prompt + completion.split(END, 1)[0], tuple(task.inputs), task.func_name)
                    for task, completion in pairs]
        verdicts = [judge(task, run) for (task, _), run in zip(pairs, self.sandbox.run_many(programs))]
        again = [i for i, v in enumerate(verdicts) if v.reason in INFRASTRUCTURE]
        if again:
            runs = self.sandbox.run_many([programs[i] for i in again])
            for i, run in zip(again, runs):
                verdicts[i] = replace(judge(pairs[i][0], run), retried=True)
        with self._lock:
            self._retries += len(again)
            for v in verdicts:
                self._counts[v.reason] += 1
        return verdicts

    def capabilities(self) -> dict:
        return self.sandbox.capabilities()

    def close(self) -> None:
        self.sandbox.close()

    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_completions(path, tasks: list[Task], tasks_path="tasks") -> list[tuple[int, str]]:
    """Read completions JSONL: one {"completion": str} object per line, paired with a task by its
    "index", or its "canonical_hash", or else by position (line i with task i, which needs as many
    completions as tasks). Returns [(task index, completion)] in file order."""
    by_hash: dict[str, int] = {}
    for i, t in enumerate(tasks):
        by_hash.setdefault(t.canonical_hash, i)
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not JSON ({e})") from None
            if type(rec) is not dict or type(rec.get("completion")) is not str:
                raise ValueError(f'{path}:{number}: expected an object with a string "completion", '
                                 f"got {line.strip()[:80]}")
            index = rec.get("index")
            if index is not None and (type(index) is not int or not 0 <= index < len(tasks)):
                raise ValueError(f"{path}:{number}: index {index!r} is not a task index in [0, {len(tasks)}) "
                                 f"of {tasks_path}")
            if "canonical_hash" in rec:
                h = rec["canonical_hash"]
                if h not in by_hash:
                    raise ValueError(f"{path}:{number}: canonical_hash {str(h)[:20]!r} matches no task in {tasks_path}")
                if index is not None and index != by_hash[h]:
                    raise ValueError(f"{path}:{number}: index {index} and canonical_hash name different tasks "
                                     f"of {tasks_path}")
                index = by_hash[h]
            records.append((number, index, rec["completion"]))
    positional = [r for r in records if r[1] is None]
    if positional and len(records) != len(tasks):
        raise ValueError(f"{path} has {len(records)} completions but {tasks_path} has {len(tasks)} tasks; pair them "
                         f'by position with equal counts, or give each completion an "index" or "canonical_hash"')
    return [(pos if index is None else index, completion) for pos, (_, index, completion) in enumerate(records)]


_default: Verifier | None = None
_default_lock = threading.Lock()


def default_verifier() -> Verifier:
    """The module-level verifier, started on first use (again in a forked child: pools do not
    survive fork)."""
    global _default
    with _default_lock:
        if _default is None or _default.sandbox.owner_pid != os.getpid():
            _default = Verifier()
        return _default


def verify(task: Task, completion: str) -> Verdict:
    return default_verifier().verify(task, completion)


def verify_many(pairs: list[tuple[Task, str]]) -> list[Verdict]:
    return default_verifier().verify_many(pairs)


def shutdown() -> None:
    """Close the module-level verifier (registered with atexit)."""
    global _default
    with _default_lock:
        if _default is not None and _default.sandbox.owner_pid == os.getpid():
            _default.close()
        _default = None


atexit.register(shutdown)

"""The pool's request and answer as data, and the trusted side's reading of the result stream.

`Limits` bound one execution, a `Program` is one request (a program and all its test inputs), an
`Outcome` is one test as the child reported it and a `Run` one execution as the pool saw it.
`parse_results` reads the child's result stream (JSON lines, bounded, strictly in protocol order);
`plain_equal` and `is_plain` compare and check plain data with exact types. Nothing here touches a
process: `harness.sandbox.execution` produces the Runs, `harness.sandbox.pool` hands them out.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

MAX_DEPTH, MAX_NODES = 32, 100_000          # bounds on a parsed output (as in the worker)
WORKDIR_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


@dataclass(frozen=True)
class Limits:
    """Per-execution limits. Times in seconds, sizes in MiB or bytes as named."""
    wall_s: float = 10.0          # whole program with all its tests, on its own time (the wall time less the
                                  # time the machine kept it from a CPU); then everything it started is killed
                                  # ("idle_limit", or "cpu_limit" with its CPU time used). One the machine
                                  # starves runs on to execution.WALL_STRETCH times this (then "wall_limit")
    cpu_s: int = 2                # CPU seconds of the whole execution (all its processes, where the worker
                                  # has a CPU cgroup, plus CPU_GRACE_S) and RLIMIT_CPU per process, soft = hard
    memory_mb: int = 512          # RLIMIT_AS
    file_mb: int = 1              # RLIMIT_FSIZE
    nofile: int = 64              # RLIMIT_NOFILE
    nproc: int = 8                # RLIMIT_NPROC: processes and threads of the sandbox uid
    tmpfs_mb: int = 16            # size of the private /tmp (the working directory)
    output_bytes: int = 1 << 20   # stdout+stderr beyond this kills the execution ("output_limit")
    output_head: int = 300        # bytes of stdout+stderr kept for diagnostics
    result_bytes: int = 1 << 20   # result stream beyond this kills the execution ("result_limit")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
                raise ValueError(f"Limits.{f.name} must be a positive number, got {v!r}")
        for name in ("cpu_s", "memory_mb", "file_mb", "nofile", "nproc", "tmpfs_mb", "output_bytes",
                     "output_head", "result_bytes"):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"Limits.{name} must be an int, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Program:
    """One request: `source` defines `func`, which is called once per element of `inputs`
    (one argument each). `seed` seeds `random` in the child; `heap_noise` throwaway objects are
    allocated first (shifts id()); `workdir` names the working directory /tmp/<workdir>; the last
    three exist for the determinism gate (the verifier keeps the defaults: same program, same view)."""
    source: str
    inputs: tuple
    func: str = "f"
    seed: int = 0
    heap_noise: int = 0
    workdir: str = "work"


@dataclass(frozen=True)
class Outcome:
    """One test as the child reported it. kind: "out" (value = the output, plain data), "exc"
    (value = exception type name, with errno and msg) or "bad" (msg says why the output is not
    plain data)."""
    kind: str
    value: Any = None
    errno: int | None = None
    msg: str = ""


@dataclass(frozen=True)
class Run:
    """One execution. fate: "ended" (the child exited by itself), "cpu_limit" (the execution used
    its CPU time: RLIMIT_CPU's signal with the CPU time to show for it, or the execution's processes
    together over `cpu_s` in the worker's CPU cgroup, or the wall limit after that much CPU),
    "idle_limit" (its own time reached the wall limit without the CPU time for the CPU limit: it
    waited; the program's doing), "wall_limit" (it reached the hard wall limit, WALL_STRETCH wall
    limits where the worker has CPU accounting, before that: the machine kept it from a CPU; not the
    program's doing), "memory_limit" (killed by the OOM killer under its worker's memory cap),
    "output_limit", "result_limit", or "sandbox_error" (the worker failed twice; not the program's
    doing). exit_code: as subprocess reports it (negative =
    killed by that signal). stage: a compile/load failure before any test ran (from the result
    stream), or a "setup" failure (reported by the harness's own code on a pipe the program never
    holds). outcomes: one per input, None where nothing was reported. malformed: why the result
    stream broke the protocol ("" if it did not). cpu_s: the child's user+system CPU seconds
    (rusage: the child and the children it reaped). cpu_all_s: the CPU seconds of every process of
    the execution (the worker's CPU cgroup; None without one). stall_s: the seconds its processes
    were ready to run and given no CPU, as measured from the pool's first look at it (None where not
    measured: no stall meter, or it ended before the first look)."""
    fate: str
    exit_code: int | None
    stage: Outcome | None
    stage_name: str
    outcomes: tuple[Outcome | None, ...]
    done: bool
    malformed: str
    output_head: str
    wall_s: float
    cpu_s: float = 0.0
    cpu_all_s: float | None = None
    stall_s: float | None = None

    @classmethod
    def failed(cls, n: int, why: str) -> "Run":
        return cls("sandbox_error", None, None, "", (None,) * n, False, "", why[:300], 0.0)


# ----------------------------------------------------------------------------- parsing (trusted side)

STAGES = ("compile", "load", "emit")        # stage lines the result stream may carry ("setup" never)


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    """json's float hook: 1e400 would parse to inf; a non-finite number is not plain data."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite number {text[:20]}")
    return value


def _plain_depth_ok(value: Any) -> str | None:
    """None if a parsed JSON value is within MAX_DEPTH / MAX_NODES, else why not."""
    stack, nodes = [(value, 0)], 0
    while stack:
        x, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            return f"output over {MAX_NODES} values or nested deeper than {MAX_DEPTH}"
        if type(x) is list:
            stack.extend((e, depth + 1) for e in x)
        elif type(x) is dict:
            stack.extend((e, depth + 1) for e in x.values())
    return None


def _field(obj: dict, key: str, types: tuple) -> Any:
    v = obj.get(key)
    if type(v) not in types:
        raise ValueError(f"field {key!r} has type {type(v).__name__}")
    return v


def _exc_outcome(obj: dict) -> Outcome:
    return Outcome("exc", _field(obj, "exc", (str,))[:100], _field(obj, "errno", (int, type(None))),
                   _field(obj, "msg", (str,))[:200])


def parse_results(raw: bytes, n: int) -> tuple[Outcome | None, str, list[Outcome | None], bool, str]:
    """Parse the child's result stream: JSON lines, strictly in protocol order. Returns
    (stage failure or None, stage name, outcomes[n] with None for unreported tests, done, malformed)."""
    outcomes: list[Outcome | None] = [None] * n
    body, newline, _partial = raw.rpartition(b"\n")  # a partial last line (killed mid-write) is ignored
    next_i, done = 0, False
    for number, ln in enumerate(body.split(b"\n") if newline else [], 1):
        try:
            if done:
                raise ValueError("data after the final line")
            obj = json.loads(ln.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
            if type(obj) is not dict:
                raise ValueError(f"a line that is a {type(obj).__name__}, not an object")
            if "stage" in obj:
                if next_i or len(obj) != 4:
                    raise ValueError("a stage line after test lines or with extra fields")
                name = _field(obj, "stage", (str,))
                if name not in STAGES:
                    raise ValueError(f"a stage line for {name[:20]!r}, which only the harness reports")
                return _exc_outcome(obj), name, outcomes, False, ""
            if "done" in obj:
                if obj != {"done": n} or next_i != n:
                    raise ValueError(f"final line {str(obj)[:40]} after {next_i} of {n} tests")
                done = True
                continue
            if _field(obj, "i", (int,)) != next_i or next_i >= n:
                raise ValueError(f"test line {obj.get('i')!r} where {next_i} was due")
            if set(obj) == {"i", "out"}:
                why = _plain_depth_ok(obj["out"])
                if why:
                    raise ValueError(why)
                outcomes[next_i] = Outcome("out", obj["out"])
            elif set(obj) == {"i", "bad"}:
                outcomes[next_i] = Outcome("bad", None, None, _field(obj, "bad", (str,))[:200])
            elif set(obj) == {"i", "exc", "errno", "msg"}:
                outcomes[next_i] = _exc_outcome(obj)
            else:
                raise ValueError(f"a test line with fields {sorted(obj)[:6]}")
            next_i += 1
        except (ValueError, RecursionError, MemoryError) as e:
            return None, "", outcomes, False, f"result line {number}: {str(e)[:150]}"
    return None, "", outcomes, done, ""


def plain_equal(a: Any, b: Any) -> bool:
    """Equality of plain data with exact types: True != 1, 1 != 1.0, lists and dicts compared
    element-wise; floats must be identical, so -0.0 != 0.0 (a gate-admitted output is reproduced
    bit for bit, and JSON carries the sign). Iterative, so a deep value cannot exhaust the stack."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if type(x) is list:
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif type(x) is dict:
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif x != y or (type(x) is float and math.copysign(1.0, x) != math.copysign(1.0, y)):
            return False
    return True


def is_plain(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Exact-type plain data: None, bool, int, finite float, str, list, dict with str keys."""
    stack = [(value, 0)]
    while stack:
        x, depth = stack.pop()
        t = type(x)
        if depth > max_depth:
            return False
        if t is list:
            stack.extend((e, depth + 1) for e in x)
        elif t is dict:
            if any(type(k) is not str for k in x):
                return False
            stack.extend((e, depth + 1) for e in x.values())
        elif t is float:
            if not math.isfinite(x):
                return False
        elif not (x is None or t in (bool, int, str)):
            return False
    return True


def encode_request(prog: Program) -> bytes:
    """The request as the executing child reads it (JSON bytes). ValueError when the inputs are not
    JSON data or the working directory's name is not 1-40 characters of [a-z0-9_-]."""
    if not isinstance(prog.workdir, str) or not 1 <= len(prog.workdir) <= 40 or not set(prog.workdir) <= WORKDIR_CHARS:
        raise ValueError(f"Program.workdir must be 1-40 characters of [a-z0-9_-], got {prog.workdir!r:.60}")
    try:
        return json.dumps({"source": prog.source, "func": prog.func, "inputs": list(prog.inputs), "seed": prog.seed,
                           "heap_noise": prog.heap_noise, "workdir": prog.workdir}, allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise ValueError(f"Program inputs must be JSON data (numbers, strings, lists, dicts): {e}") from None

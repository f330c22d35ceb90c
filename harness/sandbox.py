"""The sandbox pool: N warm workers ("zygotes", `harness/sandbox_worker.py`), one fork per program.

A request is one program plus all its test inputs; the answer is a `Run`: how the execution ended
and what it wrote to its result pipe, parsed here (bounded) into one `Outcome` per test. Expected
outputs never leave this process. Protections (see the worker's docstring for how):

    separate process per execution, forked from a pre-imported worker (nothing leaks between runs)
    PID namespace per execution: killing its init kills every process it started (setsid() or not)
    network namespace (loopback only, down); IPC namespace with SysV IPC and POSIX queues off;
    private mount namespace, every mount read-only, the project root and `hidden_paths` under an
    empty mode-000 tmpfs, a fresh tmpfs /tmp (one directory per execution, removed after it), and
    a /proc that shows the sandbox uid only its own processes
    unprivileged uid per worker (61000+, leased with a lock file), no_new_privs, and a SIGKILL to
    everything of that uid after each execution
    rlimits: address space, CPU, file size, open files, processes, core 0; wall timeout; capped output

`capabilities()` says which of these are active. Without namespaces (non-root and no user
namespaces) the pool refuses to start unless `allow_degraded=True`: it then runs with rlimits,
setsid and (as root) the uid kill, and reports `degraded: True`.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import pwd
import queue
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from harness import PROJECT_ROOT

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_worker.py")
UID_FIRST, UID_LAST = 61000, 64999          # sandbox uids; each worker leases one
UID_LOCK_DIR = "/tmp/harness-sandbox-uids"  # flock files: a uid is held while its lock is
MAX_DEPTH, MAX_NODES = 32, 100_000          # bounds on a parsed output (as in the worker)
START_TIMEOUT_S = 60.0                      # a worker's start-up (imports, namespaces)
SLACK_S = 10.0                              # beyond the wall limit before a worker is presumed stuck
PROTECTIONS = ("pid_namespace", "net_namespace", "mount_namespace", "ipc_namespace", "readonly_fs", "private_tmp",
               "proc_hidepid", "drop_uid", "uid_kill")


@dataclass(frozen=True)
class Limits:
    """Per-execution limits. Times in seconds, sizes in MiB or bytes as named."""
    wall_s: float = 3.0           # whole program with all its tests; then everything it started is killed
    cpu_s: int = 2                # RLIMIT_CPU soft limit (SIGXCPU); the hard limit is one second more
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
    allocated first (shifts id()); both exist for the determinism gate."""
    source: str
    inputs: tuple
    func: str = "f"
    seed: int = 0
    heap_noise: int = 0


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
    """One execution. fate: "ended" (the child exited by itself), "timeout" (wall limit),
    "output_limit", "result_limit", or "sandbox_error" (the worker failed; not the program's doing).
    exit_code: as subprocess reports it (negative = killed by that signal). stage: a compile/load/
    setup failure before any test ran. outcomes: one per input, None where nothing was reported.
    malformed: why the result stream broke the protocol ("" if it did not)."""
    fate: str
    exit_code: int | None
    stage: Outcome | None
    stage_name: str
    outcomes: tuple[Outcome | None, ...]
    done: bool
    malformed: str
    output_head: str
    wall_s: float

    @classmethod
    def failed(cls, n: int, why: str) -> "Run":
        return cls("sandbox_error", None, None, "", (None,) * n, False, "", why[:300], 0.0)


# ----------------------------------------------------------------------------- parsing (trusted side)

def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name}")


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
            obj = json.loads(ln.decode("utf-8"), parse_constant=_reject_constant)
            if type(obj) is not dict:
                raise ValueError(f"a line that is a {type(obj).__name__}, not an object")
            if "stage" in obj:
                if next_i or len(obj) != 4:
                    raise ValueError("a stage line after test lines or with extra fields")
                return _exc_outcome(obj), _field(obj, "stage", (str,))[:20], outcomes, False, ""
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
    element-wise. Iterative, so a deep value cannot exhaust the stack."""
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
        elif x != y:
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


# ----------------------------------------------------------------------------- uid leases

class _UidLease:
    """Holds one sandbox uid for this process's lifetime (an flock'ed file per uid), so parallel
    pools and parallel experiments never share a uid: the uid kill after each execution, and the
    RLIMIT_NPROC count, are per uid."""

    def __init__(self):
        os.makedirs(UID_LOCK_DIR, mode=0o700, exist_ok=True)
        for uid in range(UID_FIRST, UID_LAST + 1):
            try:
                pwd.getpwuid(uid)
                continue  # a real account: never borrow it
            except KeyError:
                pass
            fd = os.open(os.path.join(UID_LOCK_DIR, f"{uid}.lock"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self.fd = uid, fd
            return
        raise RuntimeError(f"no free sandbox uid in [{UID_FIRST}, {UID_LAST}] (locks under {UID_LOCK_DIR})")

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# ----------------------------------------------------------------------------- one worker

class _Reader:
    """Buffered, deadline-bounded reads of length-prefixed frames from a worker's pipe."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, bytearray()

    def exact(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError("sandbox worker did not answer in time")
            chunk = os.read(self.fd, max(65536, n - len(self.buf)))
            if not chunk:
                raise EOFError("sandbox worker closed its pipe")
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def frame(self, deadline: float, max_bytes: int) -> bytes:
        (size,) = struct.unpack(">I", self.exact(4, deadline))
        if size > max_bytes:
            raise ValueError(f"sandbox worker sent a {size}-byte frame (max {max_bytes})")
        return self.exact(size, deadline)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Worker:
    """One zygote process and its pipes. Not thread-safe: the pool hands it to one thread at a time."""

    def __init__(self, limits: Limits, hidden: list[str], hash_seed: int, namespaces: bool):
        self.limits, self.hidden, self.hash_seed, self.namespaces = limits, hidden, hash_seed, namespaces
        self.lease = _UidLease() if os.geteuid() == 0 else None
        self.proc: subprocess.Popen | None = None
        self.caps: dict = {}

    def start(self) -> None:
        """Launch the zygote (a fresh interpreter, no site-packages); `wait_ready` reads its hello."""
        cfg = {"uid": self.lease.uid if self.lease else os.getuid(), "limits": dataclasses.asdict(self.limits),
               "hidden_paths": self.hidden, "namespaces": self.namespaces}
        env = {"PYTHONHASHSEED": str(self.hash_seed), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [os.path.realpath(sys.executable), "-S", "-s", "-B", WORKER, json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd="/",
            close_fds=True, start_new_session=True)

    def wait_ready(self) -> None:
        try:
            self.reader = _Reader(self.proc.stdout.fileno())
            hello = json.loads(self.reader.frame(time.monotonic() + START_TIMEOUT_S, 1 << 20))
            self.caps = hello["hello"]
        except (OSError, EOFError, TimeoutError, ValueError, KeyError) as e:
            err = self._stderr_tail()
            self.kill()
            raise RuntimeError(f"sandbox worker {WORKER} failed to start: {e}; stderr: {err}") from None

    def _stderr_tail(self) -> str:
        try:
            self.stderr.seek(0)
            return self.stderr.read()[-600:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def run(self, prog: Program) -> Run:
        n = len(prog.inputs)
        try:
            req = json.dumps({"source": prog.source, "func": prog.func, "inputs": list(prog.inputs),
                              "seed": prog.seed, "heap_noise": prog.heap_noise}, allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise ValueError(f"Program inputs must be JSON data (numbers, strings, lists, dicts): {e}") from None
        try:
            _write_all(self.proc.stdin.fileno(), struct.pack(">I", len(req)) + req)
            deadline = time.monotonic() + self.limits.wall_s + SLACK_S
            header = json.loads(self.reader.frame(deadline, 1 << 20))
            raw = self.reader.frame(deadline, self.limits.result_bytes + 1)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            why = f"sandbox worker failed: {e}; {self._stderr_tail()}"
            self.restart()
            return Run.failed(n, why)
        self.caps["reaper_pid"] = header.get("reaper_pid")
        stage, stage_name, outcomes, done, malformed = parse_results(raw, n)
        return Run(header["fate"], header["exit_code"], stage, stage_name, tuple(outcomes), done, malformed,
                   header["output_head"], header["wall_s"])

    def restart(self) -> None:
        self.kill()
        self.start()
        self.wait_ready()

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.stderr):
            try:
                f.close()
            except OSError:
                pass
        self.proc = None

    def close(self) -> None:
        """Close the request pipe (the zygote exits on EOF), make sure it is gone, free the uid."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.kill()
        if self.lease:
            self.lease.release()


# ----------------------------------------------------------------------------- the pool

_ALSO_HIDDEN: set[str] = set()


def hide(path) -> None:
    """Hide `path` (an existing directory) from every sandbox started from now on, like the project
    root: the runner registers its results directory, which may live outside the project."""
    if not os.path.isdir(path):
        raise ValueError(f"hide: {path!r} is not an existing directory")
    _ALSO_HIDDEN.add(os.path.realpath(path))


def registered_hidden() -> list[str]:
    """The paths registered with `hide` that still exist (a removed directory hides nothing)."""
    _ALSO_HIDDEN.difference_update([p for p in _ALSO_HIDDEN if not os.path.isdir(p)])
    return sorted(_ALSO_HIDDEN)


def hides_all_registered(sandbox: "Sandbox") -> bool:
    """Whether `sandbox` was started knowing every (still existing) path registered with `hide`."""
    return set(registered_hidden()) <= set(sandbox.hidden)


def missing_protections(caps: dict) -> list[str]:
    """Every protection a degraded pool lacks, by name: never empty when `caps["degraded"]`."""
    missing = [k for k in PROTECTIONS if not caps.get(k)]
    unhidden = sorted(set(caps.get("hidden_paths_requested", [])) - set(caps.get("hidden_paths", [])))
    missing += [f"hidden_path:{p}" for p in unhidden]
    return missing or ["unknown (capabilities report degraded with every protection present)"]


class Sandbox:
    """A pool of `workers` zygotes (default os.cpu_count()) started with PYTHONHASHSEED=`hash_seed`.
    `run_many` dispatches programs in parallel, one fork per program; order is preserved."""

    def __init__(self, workers: int | None = None, limits: Limits | None = None,
                 hidden_paths: list[str] | None = None, hash_seed: int = 0,
                 allow_degraded: bool = False, namespaces: bool = True):
        workers = (os.cpu_count() or 1) if workers is None else workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"Sandbox: workers must be a positive int, got {workers!r}")
        if isinstance(hash_seed, bool) or not isinstance(hash_seed, int) or not 0 <= hash_seed <= 4294967295:
            raise ValueError(f"Sandbox: hash_seed must be an int in [0, 2**32-1] (PYTHONHASHSEED), got {hash_seed!r}")
        self.limits = limits or Limits()
        if not isinstance(self.limits, Limits):
            raise ValueError(f"Sandbox: limits must be a Limits, got {type(limits).__name__}")
        hidden = [str(PROJECT_ROOT)] + registered_hidden() + [str(p) for p in (hidden_paths or [])]
        for p in hidden:
            if not os.path.isdir(p):
                raise ValueError(f"Sandbox: hidden path {p!r} is not an existing directory")
        self.hidden = sorted({os.path.realpath(p) for p in hidden})
        self.hash_seed, self.owner_pid = hash_seed, os.getpid()
        self._workers = [_Worker(self.limits, self.hidden, hash_seed, namespaces) for _ in range(workers)]
        try:
            for w in self._workers:
                w.start()
            for w in self._workers:
                w.wait_ready()
        except BaseException:
            self.close()
            raise
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for w in self._workers:
            self._idle.put(w)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox")
        self._closed = False
        caps = self.capabilities()
        if caps["degraded"] and not allow_degraded:
            self.close()
            missing = missing_protections(caps)
            raise RuntimeError(f"sandbox would run degraded (missing: {', '.join(missing)}; errors: "
                               f"{caps['errors']}); pass allow_degraded=True to accept rlimits, setsid "
                               f"and the uid kill only")

    def capabilities(self) -> dict:
        """Which protections are active (the same for every worker), plus the pool's settings."""
        caps = dict(self._workers[0].caps)
        caps["hidden_paths_requested"] = self.hidden
        hidden_ok = set(caps.get("hidden_paths", [])) == set(self.hidden)
        caps["degraded"] = not (all(caps.get(k) for k in PROTECTIONS) and hidden_ok)
        caps.update({"workers": len(self._workers), "uids": self.uids(), "limits": dataclasses.asdict(self.limits),
                     "helper_pids": self.helper_pids()})
        return caps

    def uids(self) -> list[int]:
        return [w.lease.uid for w in self._workers if w.lease]

    def helper_pids(self) -> list[int]:
        """The pool's own processes holding a sandbox uid (one reaper per worker)."""
        return [w.caps["reaper_pid"] for w in self._workers if w.caps.get("reaper_pid")]

    def run(self, prog: Program) -> Run:
        return self.run_many([prog])[0]

    def run_many(self, programs: list[Program]) -> list[Run]:
        if self._closed:
            raise RuntimeError("Sandbox.run_many: the pool is closed")
        if os.getpid() != self.owner_pid:
            raise RuntimeError("Sandbox.run_many: this pool belongs to another process (it was inherited by fork)")
        for p in programs:
            if not isinstance(p, Program) or not isinstance(p.source, str):
                raise ValueError(f"Sandbox.run_many: expected Program objects with str source, got {p!r:.100}")
        return list(self._pool.map(self._run_one, programs))

    def _run_one(self, prog: Program) -> Run:
        w = self._idle.get()
        try:
            return w.run(prog)
        finally:
            self._idle.put(w)

    def close(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=True)
        self._closed = True
        if os.getpid() != self.owner_pid:
            return  # a forked copy: the workers belong to the parent
        for w in self._workers:
            w.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


"""The sandbox pool: N warm workers ("zygotes", `harness/sandbox/worker.py`), one fork per program.

A request is one program plus all its test inputs; the answer is a `Run`: how the execution ended
and what it wrote to its result pipe, parsed here (bounded) into one `Outcome` per test. Expected
outputs never leave this process. The pool writes each request straight into the executing child
and reads its results and output straight from it: the zygote, which forks every execution, never
holds any of those bytes. Protections (see the worker's docstring for how):

    allow-list root of the worker's own copies (no host inode: no shared lock, flock, inotify or
    page cache): the interpreter, its shared objects and the allowed modules, read-only; a fresh
    tmpfs /tmp per execution (detached afterwards, never walked); /dev/{null,zero,full,random,urandom}
    made for the worker (random, urandom read-only); no /proc, no /sys, no /etc
    a PID namespace per execution: killing its init kills every process it started (setsid() or
    not); the worker's own mount, IPC (SysV IPC, POSIX queues off), UTS and network namespaces, the
    last with no socket in it ever: socket() and socketpair() are refused, so no socket, abstract
    name or flow label can carry a bit to the next execution
    unprivileged uid per worker (61000+, leased with a lock file), seen inside as one fixed uid and
    gid (a user namespace per worker), no capabilities, no_new_privs, a seccomp filter (keyrings,
    ptrace, mounts, namespaces, bpf, perf, io_uring, userfaultfd, modules, kexec, sockets, sync and
    what else acts on the machine, the stat family, sysinfo and what else reads the machine or the
    launcher ... refused); without PID namespaces, a SIGKILL to everything of that uid after each
    execution
    rlimits, all of them fixed and soft = hard (RLIMIT_CPU cannot be raised); capped output
    per worker: a memory cgroup capped at its share and a CPU cgroup of one CPU with CPU accounting
    (v2, else v1), weighted as the launcher's priority: a neighbour cannot take an execution's
    memory or CPU; an execution's CPU time (all its processes) is its limit; its own time (the wall
    time less what the machine kept it waiting for a CPU, measured) is its wall limit, "idle_limit"
    the same interpreter state and the same world for every execution (docs/sandbox.md, "One
    world"); nothing of the host in argv, sys.path or the code's file names

A worker that fails (dies, stalls, cannot set an execution up) is replaced and the request rerun
once on the fresh worker; only a second failure is reported, as "sandbox_error".
`capabilities()` says which protections are active. Without namespaces (non-root and no user
namespaces) the pool refuses to start unless `allow_degraded=True`: it then runs with rlimits,
setsid, seccomp and (as root) the uid kill, and reports `degraded: True`.
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
import socket
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
# The worker runs from `-c`: its code carries a neutral file name and sys.path no host directory
# (the worker clears sys.argv, where the host path and its configuration arrive, at once).
WORKER_BOOT = ("import sys\nwith open(sys.argv[1], 'rb') as _f:\n    _src = _f.read()\n"
               "del _f\nexec(compile(_src, 'sandbox_worker', 'exec'))\ndel _src\n")
UID_FIRST, UID_LAST = 61000, 64999          # sandbox uids; each worker leases one
UID_LOCK_DIR = "/tmp/harness-sandbox-uids"  # flock files: a uid is held while its lock is
MAX_DEPTH, MAX_NODES = 32, 100_000          # bounds on a parsed output (as in the worker)
START_TIMEOUT_S = 60.0                      # a worker's start-up (imports, namespaces)
SLACK_S = 10.0                              # beyond the wall limit before a worker is presumed stuck
DRAIN_S = 1.0                               # reading what the dead execution left in its pipes
TAG_BYTES = 12                              # hex characters of the nonce naming one execution
STATUS_BYTES = 4 + 144                      # wait status (int) + struct rusage (64-bit Linux)
FATES = {b"e": "ended", b"t": "timeout", b"k": "killed"}   # the zygote's word for how an execution ended
                                                            # ("timeout": the hard wall limit; judged in _to_run)
CPU_SHOWN = 0.75   # of the CPU limit, in rusage, for a SIGXCPU/SIGKILL to count as the CPU limit: rusage
                   # is tick-sampled and reads up to ~10% low on a loaded machine; a program that
                   # signals itself at once has next to none
ZYGOTE_MB = 64                              # a worker's own share of the pool's memory cap
CPU_POLL_S = 0.05                           # how often the pool reads a running execution's CPU time
CPU_GRACE_S = 0.5                           # beyond cpu_s before the pool stops a multi-process execution
WALL_STRETCH = 4                            # an execution the machine starves runs on to this many wall limits
IDLE_WINDOW_S, IDLE_CPU_S = 1.0, 0.02       # without a stall meter: past the wall limit, under 2% of a CPU
                                            # over the last second is idle
PROTECTIONS = ("pid_namespace", "net_namespace", "mount_namespace", "ipc_namespace", "uts_namespace",
               "user_namespace", "allowlist_root", "private_tmp", "proc_hidden", "drop_uid", "uid_kill", "seccomp",
               "worker_cgroups")
WORKDIR_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


@dataclass(frozen=True)
class Limits:
    """Per-execution limits. Times in seconds, sizes in MiB or bytes as named."""
    wall_s: float = 10.0          # whole program with all its tests, on its own time (the wall time less the
                                  # time the machine kept it from a CPU); then everything it started is killed
                                  # ("idle_limit", or "cpu_limit" with its CPU time used). One the machine
                                  # starves runs on to WALL_STRETCH times this (then "wall_limit")
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


# ----------------------------------------------------------------------------- memory cgroup

def _own_cgroup(kind: str) -> str | None:
    """This process's cgroup path in the v2 hierarchy ("") or the v1 memory hierarchy ("memory")."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if (kind == "" and controllers == "") or kind in controllers.split(","):
                    return path
    except (OSError, ValueError):
        pass
    return None


class _CounterFiles:
    """Cgroup counter files kept open and read again from offset 0 (a fresh value each time):
    opening a cgroup file cost more than reading it, three times per execution."""

    def __init__(self):
        self.fds: dict[str, int] = {}

    def read(self, path: str | None) -> str | None:
        if not path:
            return None
        try:
            fd = self.fds.get(path)
            if fd is None:
                fd = self.fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(fd, 4096, 0).decode("ascii", "replace")
        except OSError:
            return None

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _oom_kills(events_path: str | None, files: _CounterFiles | None = None) -> int:
    """OOM kills so far in a worker's cgroup ("oom_kill N" in memory.events / memory.oom_control)."""
    text = (files or _CounterFiles()).read(events_path)
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


class _MemoryCgroup:
    """A cgroup capping the memory of every process of one pool (its workers and all they fork):
    v2 (memory.max) where /sys/fs/cgroup is a cgroup2 hierarchy with the memory controller, else v1
    (memory.limit_in_bytes). One sub-cgroup per worker, each capped at its own share
    (`per_worker` bytes), so an execution on one worker can never take the memory of an execution
    on another, and each can tell its own OOM kills apart. `why` says why neither was available
    (the pool then runs with per-process RLIMIT_AS only)."""

    def __init__(self, per_worker: int, workers: int):
        self.path, self.kind, self.why = None, None, ""
        limit_bytes = per_worker * workers
        for kind, base, own, limit_file, events in (
                ("v2", "/sys/fs/cgroup", _own_cgroup(""), "memory.max", "memory.events"),
                ("v1", "/sys/fs/cgroup/memory", _own_cgroup("memory"), "memory.limit_in_bytes", "memory.oom_control")):
            if own is None or not os.path.isfile(os.path.join(base, own.lstrip("/"), limit_file if kind == "v1"
                                                              else "cgroup.controllers")):
                continue
            _sweep_stale(os.path.join(base, own.lstrip("/")), "harness-sandbox-")
            path = os.path.join(base, own.lstrip("/"), f"harness-sandbox-{os.getpid()}-{id(self):x}")
            try:
                os.mkdir(path, 0o700)
            except OSError as e:
                self.why += f"{kind}: {e}; "
                continue
            try:
                if kind == "v2":
                    _write(os.path.join(path, "cgroup.subtree_control"), "+memory")
                _write(os.path.join(path, limit_file), str(limit_bytes))
                for i in range(workers):
                    os.mkdir(os.path.join(path, f"w{i}"), 0o700)
                    _write(os.path.join(path, f"w{i}", limit_file), str(per_worker))
            except OSError as e:
                self.why += f"{kind}: {e}; "
                _remove_cgroup(path)
                continue
            self.path, self.kind, self.events, self.limit_bytes = path, kind, events, limit_bytes
            self.per_worker = per_worker
            return
        self.why = (self.why or "no writable cgroup v2 or v1 memory hierarchy").rstrip("; ")

    def worker_files(self, i: int) -> tuple[str | None, str | None]:
        """(cgroup.procs to join, the OOM-kill counter to read) for worker i."""
        if self.path is None:
            return None, None
        d = os.path.join(self.path, f"w{i}")
        return os.path.join(d, "cgroup.procs"), os.path.join(d, self.events)

    def close(self) -> None:
        if self.path is not None:
            _remove_cgroup(self.path)
            self.path = None


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _remove_cgroup(path: str) -> None:
    """Remove a pool's cgroup and its worker sub-cgroups (waiting briefly for the last processes)."""
    for _ in range(50):  # the last processes may take a moment to leave
        try:
            for sub in os.listdir(path):
                if os.path.isdir(os.path.join(path, sub)):
                    os.rmdir(os.path.join(path, sub))
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _sweep_stale(parent: str, prefix: str) -> None:
    """Remove the cgroups `prefix<pid>-<id>` under `parent` left by pools whose process is gone (it
    was killed before it could close them); one still holding a process stays (rmdir refuses)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split("-", 1)[0] if name.startswith(prefix) else ""
        if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            path = os.path.join(parent, name)
            try:
                for sub in os.listdir(path):
                    if os.path.isdir(os.path.join(path, sub)):
                        os.rmdir(os.path.join(path, sub))
                os.rmdir(path)
            except OSError:
                pass


def _v1_hierarchy(controller: str) -> tuple[str, str] | None:
    """(mount directory, this process's path in it) of the cgroup-v1 hierarchy holding `controller`."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    for name in (controllers, controller):
                        if os.path.isdir(f"/sys/fs/cgroup/{name}"):
                            return f"/sys/fs/cgroup/{name}", path
    except (OSError, ValueError):
        pass
    return None


CFS_PERIOD_US = 100_000   # the CPU cgroup's period: a worker may run quota/period = 1 CPU at most


def _cpu_ns(path: str | None, files: _CounterFiles | None = None) -> int | None:
    """CPU nanoseconds used so far in a worker's cgroup: v1 cpuacct.usage, or v2 cpu.stat usage_usec."""
    text = (files or _CounterFiles()).read(path)
    if text is None:
        return None
    if path.endswith("cpu.stat"):
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec" and value.strip().isdigit():
                return int(value) * 1000
        return None
    return int(text) if text.strip().isdigit() else None


# The kernel's scheduling weight of each nice value, -20 .. 19 (kernel/sched/core.c, sched_prio_to_weight);
# a SCHED_IDLE task weighs 3.
NICE_WEIGHT = (88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904,
               3906, 3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87,
               70, 56, 45, 36, 29, 23, 18, 15)
IDLE_POLICY_WEIGHT = 3


def launcher_cpu_weight() -> tuple[int, str]:
    """(scheduling weight, what it comes from) of the calling thread: the process that starts a pool.
    Its workers would weigh this much each had they stayed plain processes of the launcher."""
    if os.sched_getscheduler(0) == getattr(os, "SCHED_IDLE", -1):
        return IDLE_POLICY_WEIGHT, "SCHED_IDLE"
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    return NICE_WEIGHT[min(19, max(-20, nice)) + 20], f"nice {nice}"


def _cgroup2_mount() -> str | None:
    """Where a cgroup v2 hierarchy is mounted (the main one, or the "unified" one beside v1)."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if "-" in fields and fields[fields.index("-") + 1] == "cgroup2":
                    return fields[4]
    except (OSError, IndexError):
        pass
    return None


def _psi_full_ns(text: str) -> int | None:
    """The "full" total of a cpu.pressure file (time all of the group's runnable tasks waited for a
    CPU), in ns; the "some" total where the kernel reports no "full" line for CPU."""
    totals = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        for field in rest.split():
            if field.startswith("total=") and field[6:].isdigit():
                totals[kind] = int(field[6:]) * 1000
    return totals.get("full", totals.get("some"))


class _StallMeter:
    """How long a worker's processes were runnable but not given a CPU (nanoseconds, cumulative): the
    kernel's pressure stall information of the worker's own cgroup ("psi": cpu.pressure), or else
    the sum of the run-queue waits of its tasks ("schedstat": /proc/<tid>/schedstat of every task
    listed in the worker's CPU cgroup; a task's wait counts from when it is first seen, its whole
    wait when it is not one of the worker's own processes, `own`). What the program spends blocked,
    asleep or stopped is not in it: that time is the program's own."""

    def __init__(self, kind: str, path: str):
        self.kind, self.path = kind, path
        self.own: set[int] = set()
        self.seen: dict[int, int] = {}
        self.total = 0

    def start(self, own: set[int]) -> None:
        """A new execution: tasks other than `own` (the zygote and its helpers) are its."""
        self.own, self.seen, self.total = own, {}, 0

    def read(self) -> int | None:
        try:
            if self.kind == "psi":
                with open(self.path) as f:
                    return _psi_full_ns(f.read())
            with open(self.path) as f:
                tids = [int(t) for t in f.read().split()]
        except (OSError, ValueError):
            return None
        for tid in tids:
            try:
                with open(f"/proc/{tid}/schedstat") as f:
                    waited = int(f.read().split()[1])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            before = self.seen.get(tid, waited if tid in self.own else 0)
            self.total += max(0, waited - before)
            self.seen[tid] = waited
        return self.total

    @classmethod
    def usable(cls, kind: str, path: str) -> "_StallMeter | None":
        meter = cls(kind, path)
        return meter if os.path.exists(path) and meter.read() is not None else None


class _CpuCgroup:
    """One CPU cgroup per worker: at most one CPU (CFS quota = period), whatever the execution forks,
    so a neighbour's processes cannot take more than their worker's CPU; and CPU accounting of all
    the worker's processes, from which the pool reads each execution's own CPU time (and stops an
    execution whose processes together go over its CPU limit). The pool's own directory weighs as
    much as its workers would as plain processes of the launcher (`weight` each: the launcher's nice,
    `launcher_cpu_weight`), so a pool started at a low priority competes at that priority, and
    grouping the workers costs them nothing either. v2 (cpu.max, cpu.stat, cpu.weight) or v1 (cpu
    and cpuacct hierarchies, cpu.shares). `stall` gives each worker's measure of the time its
    processes waited for a CPU (`_StallMeter`): cpu.pressure of its v2 cgroup, on v1 a cgroup of the
    v2 hierarchy mounted beside it (made only for that), else its tasks' schedstat. `why` says why
    not, when neither CPU hierarchy was available."""

    def __init__(self, workers: int, weight: int = NICE_WEIGHT[20]):
        self.paths: list[str] = []   # the pool's directories (one per hierarchy), removed at close
        self.procs: list[list[str]] = [[] for _ in range(workers)]
        self.usage: list[str | None] = [None] * workers
        self.stall: list[_StallMeter | None] = [None] * workers
        self.why = ""
        self.weight_file, self.weight = "", 0
        name = f"harness-sandbox-cpu-{os.getpid()}-{id(self):x}"
        own2 = _own_cgroup("")
        base2 = os.path.join("/sys/fs/cgroup", (own2 or "").lstrip("/"))
        try:
            with open(os.path.join(base2, "cgroup.controllers")) as f:
                v2 = own2 is not None and "cpu" in f.read().split()
        except OSError:
            v2 = False
        try:
            if v2:
                # cpu.weight is the v1 weight scaled so that 100 is a nice-0 process (1024)
                self.weight_file, self.weight = "cpu.weight", min(10000, max(1, round(workers * weight * 100 / 1024)))
                self._make(os.path.join(base2, name), workers, "+cpu", {"cpu.max": f"{CFS_PERIOD_US} {CFS_PERIOD_US}"},
                           "cpu.stat", (self.weight_file, self.weight))
                for i in range(workers):
                    d = os.path.join(base2, name, f"w{i}")
                    self.stall[i] = (_StallMeter.usable("psi", os.path.join(d, "cpu.pressure"))
                                     or _StallMeter.usable("schedstat", os.path.join(d, "cgroup.threads")))
            else:
                cpu, acct = _v1_hierarchy("cpu"), _v1_hierarchy("cpuacct")
                if cpu is None or acct is None:
                    raise OSError("no cgroup v2 cpu controller and no v1 cpu/cpuacct hierarchies")
                cpu_dir = os.path.join(cpu[0], cpu[1].lstrip("/"), name)
                acct_dir = os.path.join(acct[0], acct[1].lstrip("/"), name)
                self.weight_file, self.weight = "cpu.shares", min(262144, max(2, workers * weight))
                self._make(cpu_dir, workers, None, {"cpu.cfs_period_us": str(CFS_PERIOD_US),
                                                    "cpu.cfs_quota_us": str(CFS_PERIOD_US)}, None,
                           (self.weight_file, self.weight))
                if acct_dir != cpu_dir:  # separate hierarchies (a shared "cpu,cpuacct" one is one directory)
                    self._make(acct_dir, workers, None, {}, None)
                self.usage = [os.path.join(acct_dir, f"w{i}", "cpuacct.usage") for i in range(workers)]
                self._v1_stall(workers, cpu_dir)
        except OSError as e:
            self.close()
            self.procs, self.usage = [[] for _ in range(workers)], [None] * workers
            self.stall = [None] * workers
            self.why = f"{'v2' if v2 else 'v1'}: {e}"

    def _v1_stall(self, workers: int, cpu_dir: str) -> None:
        """Beside v1: a directory per worker in the v2 hierarchy, if one is mounted, for its
        cpu.pressure (no controller is needed for that); else the v1 CPU cgroup's task list."""
        mount, own = _cgroup2_mount(), _own_cgroup("")
        if mount is not None and own is not None:
            path = os.path.join(mount, own.lstrip("/"), f"harness-sandbox-psi-{os.getpid()}-{id(self):x}")
            try:
                _sweep_stale(os.path.dirname(path), "harness-sandbox-psi-")
                os.mkdir(path, 0o700)
                self.paths.append(path)
                for i in range(workers):
                    d = os.path.join(path, f"w{i}")
                    os.mkdir(d, 0o700)
                    self.stall[i] = _StallMeter.usable("psi", os.path.join(d, "cpu.pressure"))
                    if self.stall[i] is not None:
                        self.procs[i].append(os.path.join(d, "cgroup.procs"))
            except OSError:
                pass  # the schedstat fallback below
        for i in range(workers):
            if self.stall[i] is None:
                self.stall[i] = _StallMeter.usable("schedstat", os.path.join(cpu_dir, f"w{i}", "tasks"))

    def _make(self, path: str, workers: int, subtree: str | None, settings: dict, usage: str | None,
              weight: tuple[str, int] | None = None) -> None:
        """The pool's directory (`weight`: its scheduling weight file and value) and one
        sub-cgroup per worker with `settings`; records the files to join and to read."""
        _sweep_stale(os.path.dirname(path), "harness-sandbox-cpu-")
        os.mkdir(path, 0o700)
        self.paths.append(path)
        if weight:
            _write(os.path.join(path, weight[0]), str(weight[1]))
        if subtree:
            _write(os.path.join(path, "cgroup.subtree_control"), subtree)
        for i in range(workers):
            d = os.path.join(path, f"w{i}")
            os.mkdir(d, 0o700)
            for key, value in settings.items():
                _write(os.path.join(d, key), value)
            self.procs[i].append(os.path.join(d, "cgroup.procs"))
            if usage:
                self.usage[i] = os.path.join(d, usage)

    @property
    def ok(self) -> bool:
        return bool(self.paths) and not self.why

    def close(self) -> None:
        for path in self.paths:
            _remove_cgroup(path)
        self.paths = []


# ----------------------------------------------------------------------------- one worker

class _WorkerFailed(Exception):
    """The worker, not the program, failed: it is replaced and the request rerun."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Reader:
    """Buffered, deadline-bounded reads of length-prefixed frames from a pipe (the benchmark's
    bare pool uses it)."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, bytearray()

    def exact(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError("worker did not answer in time")
            chunk = os.read(self.fd, max(65536, n - len(self.buf)))
            if not chunk:
                raise EOFError("worker closed its pipe")
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def frame(self, deadline: float, max_bytes: int) -> bytes:
        (size,) = struct.unpack(">I", self.exact(4, deadline))
        if size > max_bytes:
            raise ValueError(f"worker sent a {size}-byte frame (max {max_bytes})")
        return self.exact(size, deadline)


class _Stream:
    """One of an execution's pipes as read here: a byte count, a kept prefix, a limit."""

    def __init__(self, fd: int, keep: int, limit: int, over: str):
        self.fd, self.keep, self.limit, self.over = fd, keep, limit, over
        self.data, self.count, self.open = bytearray(), 0, True

    def pump(self) -> bool:
        """Read one chunk; True if the stream is now over its limit."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.open = False
            return False
        self.count += len(chunk)
        if len(self.data) < self.keep:
            self.data += chunk[: self.keep - len(self.data)]
        return self.count > self.limit


class _Worker:
    """One zygote process and its control socket. Not thread-safe: the pool hands it to one thread
    at a time."""

    def __init__(self, limits: Limits, hash_seed: int, namespaces: bool, cgroup: tuple[str | None, str | None],
                 cpu: tuple[list[str], str | None] = ([], None), stall: "_StallMeter | None" = None):
        self.limits, self.hash_seed, self.namespaces, self.cgroup = limits, hash_seed, namespaces, cgroup
        self.cpu_procs, self.cpu_usage = cpu   # the worker's CPU cgroup(s) to join, its CPU-time counter
        self.stall = stall                      # how long its processes waited for a CPU (None: unknown)
        # With CPU accounting the wall limit is on the execution's own time (the time the machine kept
        # it from a CPU does not count); one the machine starves runs on, up to WALL_STRETCH wall limits.
        self.hard_wall_s = limits.wall_s * (WALL_STRETCH if self.cpu_usage else 1)
        self.lease = _UidLease() if os.geteuid() == 0 else None
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.pidfd = -1
        self.caps: dict = {}
        self.broken = ""
        self.files = _CounterFiles()
        self.ooms_seen = _oom_kills(self.cgroup[1], self.files)  # OOM kills in this worker's cgroup so far

    def start(self) -> None:
        """Launch the zygote (a fresh interpreter, no site-packages); `wait_ready` reads its hello."""
        limits = dataclasses.asdict(self.limits)
        limits["wall_s"] = self.hard_wall_s  # the zygote's own stop; the pool stops an idle execution earlier
        cfg = {"uid": self.lease.uid if self.lease else os.getuid(), "limits": limits,
               "namespaces": self.namespaces, "cgroup_procs": [p for p in (self.cgroup[0], *self.cpu_procs) if p]}
        env = {"PYTHONHASHSEED": str(self.hash_seed), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
        self.stderr = tempfile.TemporaryFile()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [os.path.realpath(sys.executable), "-S", "-s", "-B", "-P", "-c", WORKER_BOOT, WORKER],
                stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=self.stderr, env=env, cwd="/",
                close_fds=True, start_new_session=True)
        finally:
            theirs.close()
        try:  # the configuration goes on the control socket: argv stays in the zygote's memory
            self.sock.send(json.dumps(cfg).encode())
        except OSError:
            pass  # the zygote is already gone: wait_ready says why
        # readable once the zygote has exited: its control socket may stay open in its namespace's
        # placeholder, so a zygote that dies mid-execution is seen here, not at the hard deadline
        self.pidfd = os.pidfd_open(self.proc.pid)

    def _recv(self, deadline: float) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.sock], [], [], left)[0]:
            raise TimeoutError("sandbox worker did not answer in time")
        msg = self.sock.recv(1 << 20)
        if not msg:
            raise EOFError("sandbox worker closed its socket")
        return msg

    def wait_ready(self) -> None:
        try:
            self.caps = json.loads(self._recv(time.monotonic() + START_TIMEOUT_S))["hello"]
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

    def run(self, prog: Program, req: bytes) -> Run:
        """One execution: hand the zygote four fresh pipes (request, result, output, set-up report),
        feed the request and read the result and output here until the zygote's answer says it is
        over (asking it to kill the execution if a stream goes over its limit); then read what is
        left in the pipes (every writer is dead by then). Raises _WorkerFailed."""
        if self.proc is None:
            raise _WorkerFailed("sandbox worker is not running")
        tag = os.urandom(TAG_BYTES // 2).hex().encode()  # names this execution; counts nothing
        lim = self.limits
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(4)]
        (req_r, req_w), (res_r, res_w), (out_r, out_w), (ready_r, ready_w) = pipes
        streams = {"res": _Stream(res_r, lim.result_bytes + 1, lim.result_bytes, "result_limit"),
                   "out": _Stream(out_r, lim.output_head, lim.output_bytes, "output_limit"),
                   "ready": _Stream(ready_r, 4096, 4096, "")}
        try:
            # the request goes into the pipe before the child exists (up to the pipe's size, 64 KiB,
            # the rest as it reads): it finds it there at once instead of waiting on this thread
            payload = memoryview(struct.pack(">I", len(req)) + req)
            os.set_blocking(req_w, False)
            try:
                payload = payload[os.write(req_w, payload):]
            except BlockingIOError:
                pass
            try:
                socket.send_fds(self.sock, [b"x" + tag], [req_r, res_w, out_w, ready_w])
            except OSError as e:
                raise _WorkerFailed(f"sandbox worker unreachable: {e}") from None
            finally:
                for fd in (req_r, res_w, out_w, ready_w):
                    os.close(fd)
            t0, cpu0 = time.monotonic(), _cpu_ns(self.cpu_usage, self.files)
            raw, over, stalled = self._watch(payload, req_w, streams, tag, cpu0)
            wall = time.monotonic() - t0
            cpu1 = _cpu_ns(self.cpu_usage, self.files)
            cpu_all = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / 1e9
            drain_until = time.monotonic() + DRAIN_S
            while any(st.open for st in streams.values()) and time.monotonic() < drain_until:
                live = {st.fd: st for st in streams.values() if st.open}
                for fd in select.select(list(live), [], [], max(0.0, drain_until - time.monotonic()))[0]:
                    if live[fd].pump() and over is None and live[fd].over:
                        over = live[fd].over
        finally:
            for fd in (req_w, res_r, out_r, ready_r):
                os.close(fd)
        return self._to_run(prog, over, raw, wall, streams, cpu_all, stalled)

    def _watch(self, req: memoryview, req_w: int, streams: dict, tag: bytes,
               cpu0: int | None) -> tuple[bytes, str | None, float | None]:
        """Write what is left of the (length-prefixed) request and read the streams until the zygote's
        answer for this execution arrives. Every CPU_POLL_S, where the worker has a CPU cgroup: stop the
        execution once its processes together have used more than the CPU limit (plus
        CPU_GRACE_S: a single process meets RLIMIT_CPU first), "cpu_limit"; and once its own time
        (the wall time less the time its processes were runnable but given no CPU, `_StallMeter`)
        reaches the wall limit: what it waited for (sleep, a blocked call, a stop, a duty cycle) is
        its own doing, "idle_limit" ("cpu_limit" if it used its CPU time). Without a stall meter,
        past the wall limit, an execution that used under IDLE_CPU_S in the last IDLE_WINDOW_S is
        stopped as "idle_limit" and one still computing runs on. Returns (the answer after b"h" +
        tag, the first limit gone over, the seconds it was starved, None if not measured)."""
        pending = req
        start = time.monotonic()
        deadline, soft = start + self.hard_wall_s + SLACK_S, start + self.limits.wall_s
        sock, over = self.sock.fileno(), None
        cpu_cap = None if cpu0 is None else cpu0 + int((self.limits.cpu_s + CPU_GRACE_S) * 1e9)
        samples: list[tuple[float, int]] = [(start, cpu0 or 0)]   # (time, CPU ns) over the last window
        stall0 = stalled = None   # from the first poll on: what an execution shorter than that waited is not read
        if self.stall is not None:
            self.stall.start({self.proc.pid, self.caps.get("reaper_pid") or 0})
        try:
            while True:
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    raise _WorkerFailed("sandbox worker did not answer in time")
                poll = cpu_cap is not None and over is None and now - samples[-1][0] >= CPU_POLL_S
                used = _cpu_ns(self.cpu_usage, self.files) if poll else None
                if used is not None:
                    samples.append((now, used))
                    while samples[1:] and samples[1][0] <= now - IDLE_WINDOW_S:
                        samples.pop(0)
                    # cpu.pressure is cumulative: read once for the start, then from the wall limit on
                    needed = self.stall is not None and (stall0 is None or now >= soft or self.stall.kind != "psi")
                    waited = self.stall.read() if needed else None
                    if waited is not None:
                        stall0 = waited if stall0 is None else stall0
                        stalled = (waited - stall0) / 1e9
                    if used > cpu_cap:
                        over = "cpu_limit"   # the execution's processes together used their CPU time
                    elif now >= soft and stalled is not None:
                        if now - start - stalled >= self.limits.wall_s:   # its own time is up
                            over = "cpu_limit" if used - cpu0 >= self.limits.cpu_s * 1e9 else "idle_limit"
                    elif now >= soft and samples[0][0] <= now - IDLE_WINDOW_S and \
                            used - samples[0][1] < IDLE_CPU_S * 1e9:
                        over = "idle_limit"  # no stall meter: past the wall limit, and waiting, not computing
                    if over is not None:
                        self.sock.send(b"k" + tag)
                live = {st.fd: st for st in streams.values() if st.open}
                r, w, _ = select.select([sock, self.pidfd, *live], [req_w] if pending else [], [],
                                        left if cpu_cap is None else min(left, CPU_POLL_S))
                if self.pidfd in r and sock not in r:  # an answer is sent before any exit: none is coming
                    raise _WorkerFailed(f"sandbox worker died: {self._stderr_tail()}")
                if w:
                    try:
                        pending = pending[os.write(req_w, pending[:1 << 16]):]
                    except BrokenPipeError:
                        pending = pending[:0]  # the child is gone before reading it all: its fate says why
                for fd in r:
                    if fd == self.pidfd:
                        continue
                    if fd == sock:
                        msg = self.sock.recv(1 << 16)
                        if not msg:
                            raise _WorkerFailed(f"sandbox worker died: {self._stderr_tail()}")
                        if msg.startswith(b"h" + tag):
                            if stall0 is not None and over is None:  # the whole of a run past one poll
                                waited = self.stall.read()
                                stalled = stalled if waited is None else (waited - stall0) / 1e9
                            return msg[1 + len(tag):], over, stalled
                        continue  # an answer for an earlier request (it was given up on)
                    if live[fd].pump() and live[fd].over and over is None:
                        over = live[fd].over
                        self.sock.send(b"k" + tag)  # the zygote kills the execution at once
        except OSError as e:
            raise _WorkerFailed(f"sandbox worker failed: {e}") from None

    def _to_run(self, prog: Program, over: str | None, raw: bytes, wall: float, streams: dict,
                cpu_all: float | None, stalled: float | None = None) -> Run:
        n = len(prog.inputs)
        if len(raw) < 1 + STATUS_BYTES or raw[:1] not in FATES:
            raise _WorkerFailed(f"sandbox worker sent a {len(raw)}-byte answer")
        fate, raw = FATES[raw[:1]], raw[1:]
        status = int.from_bytes(raw[:4], sys.byteorder, signed=True)
        utime_s, utime_us, stime_s, stime_us = struct.unpack("4q", raw[4:36])
        cpu = utime_s + stime_s + (utime_us + stime_us) / 1e6
        if raw[STATUS_BYTES:]:
            self.broken = raw[STATUS_BYTES:].decode("utf-8", "replace")  # this run stands; the worker goes
        setup = streams["ready"].data
        if setup[:1] != b"\x01":
            why = "the execution was never set up"
            if setup[:1] == b"\x00":
                why = f"set-up failed: {bytes(setup[1:300]).decode('utf-8', 'replace')}"
            raise _WorkerFailed(f"{why} ({fate}); {self._stderr_tail()}")
        code = os.waitstatus_to_exitcode(status)
        if over is not None:
            fate = over  # the pool asked for the kill
        elif fate == "killed":
            raise _WorkerFailed("the sandbox worker killed an execution nobody asked it to")
        if fate == "ended" and code in (-signal.SIGXCPU, -signal.SIGKILL) and cpu >= CPU_SHOWN * self.limits.cpu_s:
            fate = "cpu_limit"  # the kernel's RLIMIT_CPU signal, with the CPU time to show for it
        if fate == "timeout":   # the hard wall limit: the program's timeout only with the CPU time for it;
            # else (its own time being measured) the machine kept it from a CPU: infrastructure
            used = max(cpu, cpu_all) if cpu_all is not None else cpu
            shown = self.limits.cpu_s if cpu_all is not None else CPU_SHOWN * self.limits.cpu_s
            fate = "cpu_limit" if used >= shown else "wall_limit"
        ooms, self.ooms_seen = self.ooms_seen, _oom_kills(self.cgroup[1], self.files)
        if fate == "ended" and code == -signal.SIGKILL and self.ooms_seen > ooms:
            fate = "memory_limit"  # the kernel's OOM killer, under the pool's memory cap
        stage, stage_name, outcomes, done, malformed = parse_results(bytes(streams["res"].data), n)
        return Run(fate, code, stage, stage_name, tuple(outcomes), done, malformed,
                   bytes(streams["out"].data).decode("utf-8", "replace"), round(wall, 6), round(cpu, 6),
                   None if cpu_all is None else round(cpu_all, 6), None if stalled is None else round(stalled, 6))

    def restart(self) -> None:
        self.kill()
        self.broken = ""
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
        for f in (self.sock, self.stderr):
            try:
                f.close()
            except OSError:
                pass
        os.close(self.pidfd)
        self.proc = None

    def close(self) -> None:
        """Close the control socket (the zygote exits on EOF), make sure it is gone, free the uid."""
        if self.proc is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.kill()
        self.files.close()
        if self.lease:
            self.lease.release()


# ----------------------------------------------------------------------------- the pool

_ALSO_HIDDEN: set[str] = set()


def hide(path) -> None:
    """Kept for callers of the old deny-list: the allow-list root shows no host directory at all,
    so registering one changes nothing. `path` must still be an existing directory."""
    if not os.path.isdir(path):
        raise ValueError(f"hide: {path!r} is not an existing directory")
    _ALSO_HIDDEN.add(os.path.realpath(path))


def registered_hidden() -> list[str]:
    """The paths registered with `hide` that still exist (reported in capabilities, nothing more)."""
    _ALSO_HIDDEN.difference_update([p for p in _ALSO_HIDDEN if not os.path.isdir(p)])
    return sorted(_ALSO_HIDDEN)


def missing_protections(caps: dict) -> list[str]:
    """Every protection a degraded pool lacks, by name: never empty when `caps["degraded"]`."""
    missing = [k for k in PROTECTIONS if not caps.get(k)]
    return missing or ["unknown (capabilities report degraded with every protection present)"]


def _encode_request(prog: Program) -> bytes:
    if not isinstance(prog.workdir, str) or not 1 <= len(prog.workdir) <= 40 or not set(prog.workdir) <= WORKDIR_CHARS:
        raise ValueError(f"Program.workdir must be 1-40 characters of [a-z0-9_-], got {prog.workdir!r:.60}")
    try:
        return json.dumps({"source": prog.source, "func": prog.func, "inputs": list(prog.inputs), "seed": prog.seed,
                           "heap_noise": prog.heap_noise, "workdir": prog.workdir}, allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise ValueError(f"Program inputs must be JSON data (numbers, strings, lists, dicts): {e}") from None


class Sandbox:
    """A pool of `workers` zygotes (default os.cpu_count()) started with PYTHONHASHSEED=`hash_seed`.
    `run_many` dispatches programs in parallel, one fork per program; order is preserved.
    `hidden_paths` is accepted for the old deny-list's callers: each must be an existing directory,
    and, like every other host path, none is visible inside."""

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
        for p in hidden_paths or []:
            if not os.path.isdir(p):
                raise ValueError(f"Sandbox: hidden path {p!r} is not an existing directory")
        self.hash_seed, self.owner_pid = hash_seed, os.getpid()
        per_worker = (self.limits.memory_mb + self.limits.tmpfs_mb + ZYGOTE_MB) << 20
        root = os.geteuid() == 0
        self.cgroup = _MemoryCgroup(per_worker, workers) if root else None
        self.cpu_weight = launcher_cpu_weight()
        self.cpu_cgroup = _CpuCgroup(workers, self.cpu_weight[0]) if root else None
        files = [self.cgroup.worker_files(i) if self.cgroup else (None, None) for i in range(workers)]
        cpu = [(self.cpu_cgroup.procs[i], self.cpu_cgroup.usage[i]) if self.cpu_cgroup else ([], None)
               for i in range(workers)]
        stall = self.cpu_cgroup.stall if self.cpu_cgroup else [None] * workers
        self._workers = [_Worker(self.limits, hash_seed, namespaces, files[i], cpu[i], stall[i]) for i in range(workers)]
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
        self.replaced = 0  # workers replaced after a failure (each time, the request was rerun)
        caps = self.capabilities()
        if caps["degraded"] and not allow_degraded:
            self.close()
            raise RuntimeError(f"sandbox would run degraded (missing: {', '.join(missing_protections(caps))}; "
                               f"errors: {caps['errors']}); pass allow_degraded=True to accept rlimits, setsid, "
                               f"seccomp and the uid kill only")

    def capabilities(self) -> dict:
        """Which protections are active (the same for every worker), plus the pool's settings."""
        caps = dict(self._workers[0].caps)
        cg = self.cgroup
        caps.update({"workers": len(self._workers), "uids": self.uids(), "limits": dataclasses.asdict(self.limits),
                     "helper_pids": self.helper_pids(), "registered_hidden": registered_hidden(),
                     "pool_memory_cap": None if cg is None or cg.path is None else
                     {"cgroup": cg.kind, "path": cg.path, "bytes": cg.limit_bytes},
                     "pool_memory_cap_missing": "not root" if cg is None else cg.why})
        caps["memory_cgroup"] = caps["memory_cgroup"] and caps["pool_memory_cap"] is not None
        cc = self.cpu_cgroup
        caps["cpu_cgroup"] = bool(caps["memory_cgroup"] and cc is not None and cc.ok)  # joined with the memory one
        caps["cpu_cgroup_missing"] = "not root" if cc is None else cc.why
        caps["pool_cpu_weight"] = None if not caps["cpu_cgroup"] else \
            {"file": cc.weight_file, "value": cc.weight, "per_worker": self.cpu_weight[0], "from": self.cpu_weight[1]}
        caps["stall_meter"] = [None if w.stall is None else w.stall.kind for w in self._workers]
        caps["worker_memory_cap"] = None if cg is None or cg.path is None else cg.per_worker
        caps["worker_cgroups"] = caps["memory_cgroup"] and caps["cpu_cgroup"]
        caps["degraded"] = not all(caps.get(k) for k in PROTECTIONS)
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
        requests = [_encode_request(p) for p in programs]
        return list(self._pool.map(self._run_one, programs, requests))

    def _run_one(self, prog: Program, req: bytes) -> Run:
        """Run on an idle worker; a worker that fails is replaced and the request rerun once."""
        w = self._idle.get()
        try:
            why = ""
            for _ in range(2):
                try:
                    run = w.run(prog, req)
                    if w.broken:
                        self._replace(w)
                    return run
                except _WorkerFailed as e:
                    why = str(e)
                    try:
                        self._replace(w)
                    except RuntimeError as e2:
                        return Run.failed(len(prog.inputs), f"{why}; and its replacement failed: {e2}")
            return Run.failed(len(prog.inputs), f"sandbox worker failed twice: {why}")
        finally:
            self._idle.put(w)

    def _replace(self, w: _Worker) -> None:
        self.replaced += 1
        w.restart()

    def close(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=True)
        self._closed = True
        if os.getpid() != self.owner_pid:
            return  # a forked copy: the workers belong to the parent
        for w in self._workers:
            w.close()
        if getattr(self, "cgroup", None) is not None:
            self.cgroup.close()
        if getattr(self, "cpu_cgroup", None) is not None:
            self.cpu_cgroup.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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

This module is the pool's life (start, dispatch, replacement, close, capabilities). Its parts:
`results.py` (Limits, Program, Outcome, Run and the result stream's parser), `execution.py` (one
worker: its zygote, one execution watched to its end and judged), `cgroups.py` (the workers' memory
and CPU cgroups and the stall meter); the zygote's own source is worker.py with seccomp.py and
isolation.py, run as one.
"""
from __future__ import annotations

import dataclasses
import os
import queue
from concurrent.futures import ThreadPoolExecutor

from harness.sandbox.cgroups import CpuCgroup, MemoryCgroup, launcher_cpu_weight
from harness.sandbox.execution import Worker, WorkerFailed
from harness.sandbox.results import Limits, Outcome, Program, Run, encode_request, is_plain, parse_results, plain_equal

# the pool's public face: what its callers (the verifier, the gate, the tests) import from here
__all__ = ["Sandbox", "Limits", "Program", "Outcome", "Run", "PROTECTIONS", "hide", "registered_hidden",
           "missing_protections", "parse_results", "plain_equal", "is_plain"]

ZYGOTE_MB = 64                              # a worker's own share of the pool's memory cap
PROTECTIONS = ("pid_namespace", "net_namespace", "mount_namespace", "ipc_namespace", "uts_namespace",
               "user_namespace", "allowlist_root", "private_tmp", "proc_hidden", "drop_uid", "uid_kill", "seccomp",
               "worker_cgroups")

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
        self.cgroup = MemoryCgroup(per_worker, workers) if root else None
        self.cpu_weight = launcher_cpu_weight()
        self.cpu_cgroup = CpuCgroup(workers, self.cpu_weight[0]) if root else None
        files = [self.cgroup.worker_files(i) if self.cgroup else (None, None) for i in range(workers)]
        cpu = [(self.cpu_cgroup.procs[i], self.cpu_cgroup.usage[i]) if self.cpu_cgroup else ([], None)
               for i in range(workers)]
        stall = self.cpu_cgroup.stall if self.cpu_cgroup else [None] * workers
        self._workers = [Worker(self.limits, hash_seed, namespaces, files[i], cpu[i], stall[i]) for i in range(workers)]
        try:
            for w in self._workers:
                w.start()
            for w in self._workers:
                w.wait_ready()
        except BaseException:
            self.close()
            raise
        self._idle: queue.Queue[Worker] = queue.Queue()
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
        requests = [encode_request(p) for p in programs]
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
                except WorkerFailed as e:
                    why = str(e)
                    try:
                        self._replace(w)
                    except RuntimeError as e2:
                        return Run.failed(len(prog.inputs), f"{why}; and its replacement failed: {e2}")
            return Run.failed(len(prog.inputs), f"sandbox worker failed twice: {why}")
        finally:
            self._idle.put(w)

    def _replace(self, w: Worker) -> None:
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

"""What a pool takes of the machine beside its workers' processes: per worker, a memory cgroup capped
at its share and a CPU cgroup of one CPU with CPU accounting (v2, else v1), weighted as the launcher's
priority, and the measure of how long its processes waited for a CPU (`StallMeter`). The pool
(harness.sandbox.pool) makes them at start and removes them at close; the worker's handle
(harness.sandbox.execution) reads their counters around each execution.
"""
from __future__ import annotations

import os
import time


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


class CounterFiles:
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


def oom_kills(events_path: str | None, files: CounterFiles | None = None) -> int:
    """OOM kills so far in a worker's cgroup ("oom_kill N" in memory.events / memory.oom_control)."""
    text = (files or CounterFiles()).read(events_path)
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


class MemoryCgroup:
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
            sweep_stale(os.path.join(base, own.lstrip("/")), "harness-sandbox-")
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


def sweep_stale(parent: str, prefix: str) -> None:
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


def cpu_ns(path: str | None, files: CounterFiles | None = None) -> int | None:
    """CPU nanoseconds used so far in a worker's cgroup: v1 cpuacct.usage, or v2 cpu.stat usage_usec."""
    text = (files or CounterFiles()).read(path)
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


class StallMeter:
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
    def usable(cls, kind: str, path: str) -> "StallMeter | None":
        meter = cls(kind, path)
        return meter if os.path.exists(path) and meter.read() is not None else None


class CpuCgroup:
    """One CPU cgroup per worker: at most one CPU (CFS quota = period), whatever the execution forks,
    so a neighbour's processes cannot take more than their worker's CPU; and CPU accounting of all
    the worker's processes, from which the pool reads each execution's own CPU time (and stops an
    execution whose processes together go over its CPU limit). The pool's own directory weighs as
    much as its workers would as plain processes of the launcher (`weight` each: the launcher's nice,
    `launcher_cpu_weight`), so a pool started at a low priority competes at that priority, and
    grouping the workers costs them nothing either. v2 (cpu.max, cpu.stat, cpu.weight) or v1 (cpu
    and cpuacct hierarchies, cpu.shares). `stall` gives each worker's measure of the time its
    processes waited for a CPU (`StallMeter`): cpu.pressure of its v2 cgroup, on v1 a cgroup of the
    v2 hierarchy mounted beside it (made only for that), else its tasks' schedstat. `why` says why
    not, when neither CPU hierarchy was available."""

    def __init__(self, workers: int, weight: int = NICE_WEIGHT[20]):
        self.paths: list[str] = []   # the pool's directories (one per hierarchy), removed at close
        self.procs: list[list[str]] = [[] for _ in range(workers)]
        self.usage: list[str | None] = [None] * workers
        self.stall: list[StallMeter | None] = [None] * workers
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
                    self.stall[i] = (StallMeter.usable("psi", os.path.join(d, "cpu.pressure"))
                                     or StallMeter.usable("schedstat", os.path.join(d, "cgroup.threads")))
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
                sweep_stale(os.path.dirname(path), "harness-sandbox-psi-")
                os.mkdir(path, 0o700)
                self.paths.append(path)
                for i in range(workers):
                    d = os.path.join(path, f"w{i}")
                    os.mkdir(d, 0o700)
                    self.stall[i] = StallMeter.usable("psi", os.path.join(d, "cpu.pressure"))
                    if self.stall[i] is not None:
                        self.procs[i].append(os.path.join(d, "cgroup.procs"))
            except OSError:
                pass  # the schedstat fallback below
        for i in range(workers):
            if self.stall[i] is None:
                self.stall[i] = StallMeter.usable("schedstat", os.path.join(cpu_dir, f"w{i}", "tasks"))

    def _make(self, path: str, workers: int, subtree: str | None, settings: dict, usage: str | None,
              weight: tuple[str, int] | None = None) -> None:
        """The pool's directory (`weight`: its scheduling weight file and value) and one
        sub-cgroup per worker with `settings`; records the files to join and to read."""
        sweep_stale(os.path.dirname(path), "harness-sandbox-cpu-")
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

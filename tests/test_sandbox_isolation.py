"""Verdicts that depend on the program alone: nothing a neighbour does (CPU, memory) changes an
innocent verdict, the timeout is judged on the program's own CPU time, every execution starts from
the same interpreter state whatever the pool's age, nothing of the host is in argv or the
environment, and no kernel state an execution can mark reaches another execution (locks, flock,
inotify on the root's files, abstract unix sockets, the network namespace).

The task is f(x) = x + 3 on inputs 1, 2, 3; a completion is the body of f."""
import fcntl
import os
import subprocess
import sys
import threading

import pytest

from harness import PROJECT_ROOT
from harness.sandbox import execution
from harness.sandbox.cgroups import StallMeter, sweep_stale
from harness.sandbox.pool import Limits, Program, Sandbox
from harness.sandbox.verifier import INFRASTRUCTURE, Verifier
from families.code import Task, with_expected

TASK = with_expected(Task("arith", (("add", 3),), (0,), (1, 2, 3)))


def _f(body: str) -> str:
    return "def f(x):\n" + body


# ----------------------------------------------------------------------------- neighbours (CPU, memory)

# Innocent programs (memory written, so resident): one holds 300 MiB of its 400 MiB (more than any
# one process of the hog, so a pool-wide OOM kill would pick it), one spends CPU (well under its
# limit), one both; their outputs do not depend on time.
INNOCENT = [
    _f("    keep = b'\\x07' * (300 << 20)\n    return x + keep[-1]\n"),
    _f("    s = 0\n    for i in range(300_000):\n        s += i % 7\n    return x + s\n"),
    _f("    keep = b'\\x01' * (100 << 20)\n    s = sum(i % 3 for i in range(200_000))\n    return x + s + len(keep) // (1 << 20)\n"),
] * 2
# The hog: forks as many processes as it may, each takes 200 MiB and spins, for longer than the batch.
HOG = _f("    import os\n    for _ in range(6):\n        try:\n            if os.fork() == 0:\n                break\n"
         "        except OSError:\n            break\n    keep = b'\\x01' * (200 << 20)\n    while keep:\n"
         "        pass\n")
NEIGHBOUR_LIMITS = Limits(wall_s=30.0, cpu_s=4, memory_mb=400)


def _verdicts(runs) -> list[tuple]:
    return [(r.fate, r.stage_name, tuple(None if o is None else (o.kind, o.value) for o in r.outcomes)) for r in runs]


def test_a_hog_beside_a_batch_changes_none_of_its_verdicts():
    """The same batch alone and beside a hog (every process it may fork, each with 200 MiB, spinning)
    on another worker of the same pool: identical outcomes. Each worker is capped at its own
    memory share and one CPU, so the hog's OOM kills and CPU stay on its worker."""
    progs = [Program(src, (1, 2)) for src in INNOCENT]
    with Sandbox(workers=3, limits=NEIGHBOUR_LIMITS) as sb:
        caps = sb.capabilities()
        assert caps["worker_cgroups"] and caps["worker_memory_cap"] == (400 + 16 + 64) << 20, caps
        alone = sb.run_many(progs)
        beside = sb.run_many([Program(HOG, (1,))] + progs)
    assert all(r.fate == "ended" for r in alone), alone
    assert _verdicts(beside[1:]) == _verdicts(alone)
    hog = beside[0]
    assert hog.fate in ("cpu_limit", "memory_limit"), hog  # the hog ends by its own limits, on its own worker
    assert hog.cpu_all_s is not None and hog.cpu_all_s > hog.cpu_s  # its forked processes counted too


def test_the_timeout_is_judged_on_the_programs_own_cpu_time():
    """A busy loop uses its CPU time: `timeout`. A program that only waits uses its wall limit without
    the CPU time: `idle`, its own doing, kept as it is (not retried, not infrastructure). Processes
    it forks count: spinning in four processes hits the execution's CPU limit."""
    with Verifier(workers=1, limits=Limits(wall_s=4.0, cpu_s=1)) as v:
        busy = v.verify(TASK, "    while True:\n        pass\n")
        idle = v.verify(TASK, "    import time\n    time.sleep(60)\n")
        forks = v.verify(TASK, "    import os\n    for _ in range(3):\n        if os.fork() == 0:\n            break\n"
                               "    while True:\n        pass\n")
        assert (busy.reason, busy.retried) == ("timeout", False), busy
        assert "idle" not in INFRASTRUCTURE and (idle.reason, idle.retried) == ("idle", False), idle
        assert "waited out the wall time limit" in idle.detail
        assert (forks.reason, forks.retried) == ("timeout", False), forks
        assert v.retries == 0 and v.counters["idle"] == 1 and v.counters["wall_limit"] == 0
    with Sandbox(workers=1, limits=Limits(wall_s=4.0, cpu_s=1)) as sb:
        run = sb.run(Program(_f("    import os\n    for _ in range(3):\n        if os.fork() == 0:\n            break\n"
                                "    while True:\n        pass\n"), (1,)))
    assert run.fate == "cpu_limit" and run.cpu_all_s >= 1.0, run


# nice -20 on CPU 0, in a session of its own whose autogroup (where the kernel groups a session's
# processes) also gets nice -20: it weighs 88761 against the one-worker pool's 1024. It says when it
# spins (however long a loaded machine took to start it), then spins for 2.5 s.
HIGH_PRIORITY_HOG = ("import os, time\nos.sched_setaffinity(0, {0})\nos.nice(-20)\n"
                     "if os.path.exists('/proc/self/autogroup'):\n    open('/proc/self/autogroup', 'w').write('-20')\n"
                     "print('spinning', flush=True)\n"
                     "t = time.monotonic()\nwhile time.monotonic() - t < 2.5:\n    pass\n")


@pytest.mark.parametrize("meter", ["psi", "schedstat"])
def test_the_wall_limit_counts_the_programs_own_time(meter, monkeypatch):
    """A program that waits 1.2 s and then computes 2.5 s (3.7 s of its own time, far past its 1.5 s
    wall limit, under its 3 s CPU limit) spends its wall limit itself: stopped once 1.5 s of its own
    time are up and well before its end, `idle_limit`, however much of it was computing. A program the
    machine keeps from a CPU (for 2.5 s a process at nice -20 spins on the one CPU its worker may use)
    gets that time on top: it needs 0.3 s of CPU, takes longer than its 1.5 s wall limit to get it,
    and passes; the time it waited is measured. With the pressure stall information of the worker's
    cgroup, and with its tasks' run-queue waits (the fallback)."""
    if meter == "schedstat":
        usable = StallMeter.usable.__func__
        monkeypatch.setattr(StallMeter, "usable",
                            classmethod(lambda cls, kind, path: None if kind == "psi" else usable(cls, kind, path)))
    late = _f("    import time\n    time.sleep(1.2)\n    t = time.process_time()\n"
              "    while time.process_time() - t < 2.5:\n        pass\n    return x + 3\n")
    work = _f("    import time\n    t = time.process_time()\n    while time.process_time() - t < 0.3:\n"
              "        pass\n    return x + 3\n")
    with Sandbox(workers=1, limits=Limits(wall_s=1.5, cpu_s=3)) as sb:
        assert sb.capabilities()["cpu_cgroup"] and sb.capabilities()["stall_meter"] == [meter]
        stopped = sb.run(Program(late, (1,)))
        os.sched_setaffinity(sb.capabilities()["pid"], {0})  # the zygote, and every execution it forks
        hog = subprocess.Popen([sys.executable, "-c", HIGH_PRIORITY_HOG], start_new_session=True,
                               stdout=subprocess.PIPE, text=True)
        try:
            assert hog.stdout.readline() == "spinning\n"  # the hog spins before the program starts
            starved = sb.run(Program(work, (1,)))
        finally:
            hog.kill()
            hog.wait()
            hog.stdout.close()
    # stopped once its own time reached the limit, and at about it: its own end would be at 3.7 s
    assert stopped.fate == "idle_limit" and 1.5 <= stopped.wall_s - stopped.stall_s < 3.0, stopped
    assert starved.fate == "ended" and starved.outcomes[0].value == 4, starved
    assert starved.wall_s > 1.5 and starved.wall_s - starved.stall_s < 1.5, starved


# A program that waits is its own failure, however it waits; each would be an `idle` verdict.
WAITING = {
    "sleep": "    import time\n    time.sleep(60)\n",
    "empty_queue": "    import queue\n    queue.Queue().get()\n",
    "stops_itself": "    import os, signal\n    os.kill(os.getpid(), signal.SIGSTOP)\n    return x + 3\n",
    "reads_its_own_pipe": "    import os\n    r, w = os.pipe()\n    os.read(r, 1)\n",
    "duty_cycle": ("    import time\n    while True:\n        t = time.process_time()\n"
                   "        while time.process_time() - t < 0.009:\n            pass\n        time.sleep(0.091)\n"),
    "waits_on_a_sleeping_child": ("    import os, time\n    pid = os.fork()\n    if pid == 0:\n        time.sleep(60)\n"
                                  "        os._exit(0)\n    os.waitpid(pid, 0)\n"),
}


def test_a_program_that_waits_gets_its_own_reason_once():
    """Blocked, stopped, asleep or computing 9% of the time: each ends at about its wall limit with
    the program's reason `idle`, not retried, not infrastructure, whatever else the machine runs."""
    limits = Limits(wall_s=2.0, cpu_s=2)
    with Verifier(workers=3, limits=limits) as v:
        names = sorted(WAITING)
        verdicts = dict(zip(names, v.verify_many([(TASK, WAITING[n]) for n in names])))
        assert {n: (x.reason, x.retried) for n, x in verdicts.items()} == dict.fromkeys(names, ("idle", False)), verdicts
        assert v.retries == 0 and v.counters["wall_limit"] == 0 and v.counters["idle"] == len(names)
        duty = v.sandbox.run(Program(_f(WAITING["duty_cycle"]), (1,)))
    # at about its 2 s wall limit of its own time, far from the 8 s the machine may stretch it to
    assert duty.fate == "idle_limit" and duty.wall_s - duty.stall_s < 4.0 and duty.cpu_s > 0.05, duty


SOFT_LIMIT_TRICK = ("    import resource, signal, time\n    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)\n"
                    "    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))\n"
                    "    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
                    "    while time.process_time() < 2.0:\n        pass\n    return x + 3\n")
THREE_PROCESSES = _f("    import os, time\n    kids = []\n    for _ in range(2):\n        pid = os.fork()\n"
                     "        if pid == 0:\n            kids = None\n            break\n        kids.append(pid)\n"
                     "    while time.process_time() < 0.6:\n        pass\n    if kids is None:\n        os._exit(0)\n"
                     "    for pid in kids:\n        os.waitpid(pid, 0)\n    return x + 3\n")


def test_the_cpu_limit_cannot_be_raised_from_inside(monkeypatch):
    """RLIMIT_CPU's soft limit is its hard limit: a program that raises the soft limit and ignores
    SIGXCPU still stops at its 1 s of CPU (it used to pass: here it wants 2 s, under the pool's
    stop). The pool stops several processes only past the CPU limit plus its grace: three processes
    of 0.6 s each (1.8 s in all, far over 1 s; each far under its own 1 s) pass. The grace is widened
    to 3 s here so that no program is near a bound (the pool's stop at 4 s)."""
    monkeypatch.setattr(execution, "CPU_GRACE_S", 3.0)
    with Verifier(workers=1, limits=Limits(wall_s=10.0, cpu_s=1)) as v:
        trick = v.verify(TASK, SOFT_LIMIT_TRICK)
        three = v.sandbox.run(Program(THREE_PROCESSES, (1,)))
    assert (trick.reason, trick.retried) == ("timeout", False) and "CPU time limit" in trick.detail, trick
    # every process counted (1.8 s: far over the 1 s limit in all), and nothing else of note
    assert three.fate == "ended" and three.outcomes[0].value == 4 and 1.3 <= three.cpu_all_s < 2.5, three


def test_a_pools_cpu_weight_follows_its_launchers_priority():
    """Started from a thread at nice 10, the pool's CPU cgroup weighs what its workers would as
    processes at nice 10 (110 each, against 1024 at nice 0): a background job's pool does not
    weigh as much as the experiment's."""
    got = {}

    def start(nice: int) -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)  # this thread only
        with Sandbox(workers=2) as sb:
            caps = sb.capabilities()
            weight = caps["pool_cpu_weight"]
            path = sb.cpu_cgroup.paths[0]
            with open(os.path.join(path, weight["file"])) as f:
                got[nice] = (int(f.read()), weight["per_worker"], weight["from"])

    for nice in (0, 10):
        t = threading.Thread(target=start, args=(nice,))
        t.start()
        t.join()
    on_v2 = "cpu.weight" in str(got)
    expect = {0: 2 * 1024, 10: 2 * 110} if not on_v2 else {0: 200, 10: round(2 * 110 * 100 / 1024)}
    assert {n: g[0] for n, g in got.items()} == expect, got
    assert got[10][1:] == (110, "nice 10") and got[0][1:] == (1024, "nice 0"), got


# ----------------------------------------------------------------------------- interpreter state, argv, env

STATE = _f("    import gc, os, sys\n"
           "    return [list(gc.get_count()), [[s['collections'], s['collected'], s['uncollectable']] "
           "for s in gc.get_stats()], gc.isenabled(), sys.argv, sys.orig_argv, sorted(os.environ.items()), "
           "sys.path, getattr(sys.modules['__main__'], '__file__', None), sys._getframe(1).f_code.co_filename]\n")
STATE = STATE.replace("sorted(os.environ.items())", "sorted(map(list, os.environ.items()))")


def test_every_execution_starts_from_the_same_interpreter_state_whatever_the_pool_age():
    """The collector's counts and statistics seen by a program are the same on its pool's first
    execution, its 60th, and on another pool; argv, environment, sys.path and file names hold
    nothing of the host (no project path, no pid, no cgroup)."""
    prog = Program(STATE, (0,))
    with Sandbox(workers=1) as sb:
        first = sb.run(prog)
        for _ in range(60):
            sb.run(Program(_f("    return [object() for _ in range(x)] and x\n"), (500,)))
        later = sb.run(prog)
        harness_pid = str(os.getpid())
    with Sandbox(workers=1) as other:
        fresh = other.run(prog)
    assert [r.outcomes[0].kind for r in (first, later, fresh)] == ["out"] * 3, (first, later, fresh)
    values = [r.outcomes[0].value for r in (first, later, fresh)]
    assert first.fate == "ended" and values[0] == values[1] == values[2], values
    text = repr(values[0])
    assert str(PROJECT_ROOT) not in text and "harness" not in text and "cgroup" not in text, text
    assert harness_pid not in text and values[0][3] == [""], text


# ----------------------------------------------------------------------------- kernel state an execution can mark

# Each program returns x + 3 when it saw nothing of another execution (or of the host), else x.
LOCK_HOLDER = _f("    import fcntl, sys, time\n    fd = open(sys.executable, 'rb')\n"
                 "    fcntl.flock(fd, fcntl.LOCK_SH)\n    fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
                 "    time.sleep(2.0)\n    return x + 3\n")
LOCK_PROBE = _f("    import fcntl, struct, sys, time\n    time.sleep(0.5)\n    fd = open(sys.executable, 'rb')\n"
                "    try:\n        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    except BlockingIOError:\n"
                "        return x\n"
                "    want = struct.pack('hh4xqqi4x', fcntl.F_WRLCK, 0, 0, 0, 0)\n"
                "    got = fcntl.fcntl(fd, fcntl.F_GETLK, want)\n"
                "    return x + 3 if struct.unpack('hh4xqqi4x', got)[0] == fcntl.F_UNLCK else x\n")
INOTIFY_WATCH = _f("    import ctypes, os, sys, time\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                   "    fd = libc.inotify_init1(os.O_NONBLOCK)\n"
                   "    if fd < 0 or libc.inotify_add_watch(fd, sys.executable.encode(), 0x1 | 0x20) < 0:\n"
                   "        return x + 3\n"
                   "    time.sleep(2.0)\n    try:\n        os.read(fd, 4096)\n        return x\n"
                   "    except BlockingIOError:\n        return x + 3\n")
INOTIFY_TOUCH = _f("    import sys, time\n    time.sleep(0.5)\n    for _ in range(20):\n"
                   "        with open(sys.executable, 'rb') as fh:\n            fh.read(4096)\n"
                   "        time.sleep(0.02)\n    return x + 3\n")


def test_locks_flock_and_inotify_on_the_roots_files_are_invisible_to_a_sibling_and_the_host(tmp_path):
    """The root's files are this worker's own copies: a lock or flock one execution holds on the
    interpreter is not seen by an execution on another worker, nor one the host holds; an inotify
    watch sees no access made by an execution on another worker."""
    host = open(os.path.realpath(sys.executable), "rb")
    fcntl.flock(host, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the host's own interpreter file, exclusively
    try:
        with Sandbox(workers=2) as sb:
            runs = sb.run_many([Program(LOCK_HOLDER, (1,)), Program(LOCK_PROBE, (1,))])
            watch = sb.run_many([Program(INOTIFY_WATCH, (1,)), Program(INOTIFY_TOUCH, (1,))])
    finally:
        host.close()
    assert [r.outcomes[0].value for r in runs] == [4, 4], runs
    assert [r.outcomes[0].value for r in watch] == [4, 4], watch


SOCKET_LEAVE = _f("    import socket\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                  "    s.bind(b'\\0harness-isolation-name')\n"
                  "    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                  "    socket.send_fds(a, [b'x'], [s.fileno(), a.fileno(), b.fileno()])  # in flight: a cycle\n"
                  "    return x + 3\n")
SOCKET_PROBE = _f("    import socket\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n    try:\n"
                  "        s.bind(b'\\0harness-isolation-name')\n    except OSError:\n        return x\n    return x + 3\n")
# IPv6 flow labels (struct in6_flowlabel_req: dst, label, action, share, flags, expires, linger, pad)
_FLOWLABEL = ("    import socket, struct\n    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
              "    dst = socket.inet_pton(socket.AF_INET6, '::1')\n"
              "    req = struct.pack('=16sIBBHHHI', dst, socket.htonl(0x5A5A5), 0, 255, {flags}, 60, 60, 0)\n"
              "    try:\n        s.setsockopt(socket.IPPROTO_IPV6, 32, req)\n    except OSError as e:\n"
              "        return {failed}\n    return x + 3\n")
FLOW_LEAVE = _f(_FLOWLABEL.format(flags=1, failed="x + 3"))              # create (shared with anyone), linger 60 s
FLOW_PROBE = _f(_FLOWLABEL.format(flags=1 | 2, failed="x + 3 if e.errno != 17 else x"))  # exclusive: EEXIST if it lingers


def test_nothing_left_in_the_network_namespace_reaches_the_next_execution():
    """The worker's network namespace is shared by its executions, so nothing may be left in it: an
    abstract unix name kept bound by a socket in flight to itself, or an IPv6 flow label left to
    linger, cannot even be made (socket() and socketpair() are refused), and the next execution on
    the same worker finds neither."""
    with Sandbox(workers=1) as sb:
        left = [sb.run(Program(SOCKET_LEAVE, (1,))), sb.run(Program(FLOW_LEAVE, (1,)))]
        probes = [sb.run(Program(SOCKET_PROBE, (1,))), sb.run(Program(FLOW_PROBE, (1,)))]
    assert [(r.outcomes[0].value, r.outcomes[0].errno) for r in left + probes] == [("PermissionError", 1)] * 4, left + probes


def test_the_device_nodes_are_the_workers_own_and_random_is_read_only():
    """/dev/urandom (a node made for this worker, not the host's inode) refuses writes; a flock on
    /dev/null held on one worker is not seen on another."""
    with Verifier(workers=2) as v:
        write = v.verify(TASK, "    with open('/dev/urandom', 'wb') as fh:\n        fh.write(b'x')\n    return x + 3\n")
        held, probe = v.verify_many([
            (TASK, "    import fcntl, time\n    fh = open('/dev/null', 'rb')\n    fcntl.flock(fh, fcntl.LOCK_EX)\n"
                   "    time.sleep(1.5)\n    return x + 3\n"),
            (TASK, "    import fcntl, time\n    time.sleep(0.4)\n    fh = open('/dev/null', 'rb')\n"
                   "    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    return x + 3\n")])
    assert (write.reason, "Permission denied" in write.detail) == ("forbidden", True), write
    assert held.passed and probe.passed, (held, probe)


def test_cgroups_left_by_a_killed_pool_are_removed_by_the_next_one(tmp_path):
    """A pool killed before it could close leaves its (empty) cgroups; the next pool's start removes
    those of processes that are gone, and only those."""
    dead, live, mine = (tmp_path / f"harness-sandbox-cpu-{pid}-7f00" for pid in (999_999_999, os.getppid(), os.getpid()))
    for d in (dead, live, mine):
        (d / "w0").mkdir(parents=True)
    (tmp_path / "harness-sandbox-cpu-notapid").mkdir()
    sweep_stale(str(tmp_path), "harness-sandbox-cpu-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, mine.name, "harness-sandbox-cpu-notapid"])

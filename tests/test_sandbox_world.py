"""One world for every execution: what a program can read about where it runs is the same on every
worker (whatever its host uid), in every pool (whatever its age or who started it), after any pause
and under any host load; calls that read or act on the whole machine are refused.

WORLD reads everything an execution might key a verdict on and returns it as plain data; the tests
compare it across those conditions. KEYED are programs whose verdict used to depend on one of them
(the uid, the pool's age, the idle gap, the host's load); they now get one verdict everywhere, and
the gate, which admits a reference only if its runs agree with task.expected, rejects each."""
import ast
import json
import os
import subprocess
import sys
import time

import pytest

from harness import PROJECT_ROOT
from harness.sandbox.execution import WORKER_PARTS
from harness.sandbox.gate import Gate
from harness.sandbox.isolation import INNER_ID
from harness.sandbox.pool import Limits, Program, Sandbox
from harness.sandbox.results import encode_request
from harness.sandbox.seccomp import MADVISE_ALLOWED, SECCOMP_DENY, SYSCALLS, seccomp_verdict
from harness.sandbox.verifier import judge
from families.code import Task, with_expected

TASK = with_expected(Task("arith", (("add", 3),), (0,), (1, 2, 3)))
NR = SYSCALLS[os.uname().machine][1]

WORLD = """
import ctypes, os, resource, signal, socket, struct, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
GETDENTS64 = {"x86_64": 217, "aarch64": 61}[os.uname().machine]

def attempt(fn):
    try:
        return ["ok", fn()]
    except OSError as e:
        return ["refused", e.errno]

def tree(path):
    # names and inode numbers, by getdents64 (os.listdir needs fstat, which is refused)
    fd, buf, out = os.open(path, os.O_RDONLY | os.O_DIRECTORY), ctypes.create_string_buffer(1 << 16), []
    while True:
        n = libc.syscall(GETDENTS64, fd, buf, len(buf))
        if n <= 0:
            os.close(fd)
            return sorted(out) if n == 0 else ["refused", ctypes.get_errno()]
        at = 0
        while at < n:
            ino, _, size, kind = struct.unpack_from("=QqHB", buf.raw, at)
            out.append([buf.raw[at + 19:at + size].split(b"\\0", 1)[0].decode(), ino, kind])
            at += size

class Sysinfo(ctypes.Structure):
    _fields_ = [("uptime", ctypes.c_long), ("loads", ctypes.c_ulong * 3), ("totalram", ctypes.c_ulong),
                ("freeram", ctypes.c_ulong), ("sharedram", ctypes.c_ulong), ("bufferram", ctypes.c_ulong),
                ("totalswap", ctypes.c_ulong), ("freeswap", ctypes.c_ulong), ("procs", ctypes.c_ushort),
                ("pad", ctypes.c_char * 64)]

def sysinfo():
    s = Sysinfo()
    if libc.sysinfo(ctypes.byref(s)) != 0:
        raise OSError(ctypes.get_errno(), "sysinfo")
    return [s.uptime, list(s.loads), s.procs, s.freeram]

def prctl(option):
    return libc.prctl(option, 0, 0, 0, 0)

def interpreter():
    # what the zygote's interpreter hands every child: reference counts of common objects (None's is
    # not one: docs/sandbox.md, "What is not one value") and the collector's counts
    import gc
    common = [True, False, 0, 1, -1, 255, "", (), "f", "x", int, str, bytes, object, type, len, print, sys, os]
    return {"refcounts": [sys.getrefcount(o) for o in common], "gc": list(gc.get_count()),
            "gc_stats": gc.get_stats(), "gc_frozen": gc.get_freeze_count(), "gc_enabled": gc.isenabled()}

def f(x):
    st = lambda p: [getattr(os.stat(p), k) for k in ("st_atime", "st_mtime", "st_ctime", "st_dev", "st_ino")]
    return {
        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups(), list(os.getresuid()),
                list(os.getresgid())],
        "pids": [os.getpid(), os.getppid(), os.getpgrp(), os.getsid(0)],
        "uname": list(os.uname()), "hostname": socket.gethostname(),
        "cpus": [os.cpu_count(), os.sysconf("SC_NPROCESSORS_CONF"), os.sysconf("SC_NPROCESSORS_ONLN")],
        "umask": os.umask(0o022),
        "signals": [str(signal.getsignal(s)) for s in sorted(signal.valid_signals()) if s not in (9, 19)],
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "rlimits": [list(resource.getrlimit(r)) for r in range(16)],
        "thread_stack": threading.stack_size(),
        "prctl": [prctl(30), prctl(3), prctl(42), prctl(39), prctl(7)],  # timer slack, dumpable, THP, no_new_privs, keepcaps
        "cwd": os.getcwd(), "env": sorted(map(list, os.environ.items())),
        "tree": [tree(p) for p in ("/", "/dev", "/tmp")],
        "stat": [attempt(lambda: st(p)) for p in ("/", "/tmp", "/dev/null", sys.executable, ".")],
        "fstat": attempt(lambda: [os.fstat(fd).st_ino for fd in (0, 1, 3)]),
        "statvfs": attempt(lambda: list(os.statvfs("/tmp"))),
        "sysinfo": attempt(sysinfo),
        "rusage": attempt(lambda: list(resource.getrusage(resource.RUSAGE_SELF))[6:]),
        "affinity": attempt(lambda: sorted(os.sched_getaffinity(0))),
        "priority": attempt(lambda: [os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0)]),
        "rr_interval": attempt(lambda: os.sched_rr_get_interval(0)),
        "interpreter": interpreter(),
    }
"""


def _world(run) -> dict:
    assert run.fate == "ended" and run.outcomes[0] is not None and run.outcomes[0].kind == "out", run
    return run.outcomes[0].value


def _on(worker, prog: Program):
    """Run `prog` on one given worker of a pool (the pool hands a request to whichever is idle)."""
    return worker.run(prog, encode_request(prog))


def test_every_worker_and_every_pool_sees_the_same_world():
    """Two workers with different host uids and a worker of another pool: the same world, with the
    fixed inner uid and gid, the sandbox's host name and every machine-reading call refused."""
    prog = Program(WORLD, (0,))
    with Sandbox(workers=2) as sb, Sandbox(workers=1) as other:
        uids = sb.uids() + other.uids()
        seen = [_world(_on(w, prog)) for w in sb._workers] + [_world(other.run(prog))]
    assert len(set(uids)) == 3, uids
    assert seen[0] == seen[1] == seen[2]
    world = seen[0]
    assert world["ids"] == [INNER_ID] * 4 + [[], [INNER_ID] * 3, [INNER_ID] * 3], world["ids"]
    assert world["hostname"] == "sandbox" and world["pids"] == [2, 0, 2, 2]
    assert all(a == ["refused", 1] for a in world["stat"]), world["stat"]
    for key in ("fstat", "statvfs", "sysinfo", "rusage", "affinity", "priority", "rr_interval"):
        assert world[key] == ["refused", 1], (key, world[key])
    assert all(soft == hard for soft, hard in world["rlimits"]), world["rlimits"]


def test_a_pools_age_and_an_idle_pause_do_not_show():
    """The same world on a fresh pool's first execution, on the same worker 2.5 s later (an older
    pool, after a pause) and right after that (back to back)."""
    prog = Program(WORLD, (0,))
    with Sandbox(workers=1) as sb:
        fresh = _world(sb.run(prog))
        time.sleep(2.5)
        later = _world(sb.run(prog))
        back_to_back = _world(sb.run(prog))
    assert fresh == later == back_to_back


LOAD = ("import threading, time\nfor _ in range(1000):\n    threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
        "print('ready', flush=True)\nwhile True:\n    pass\n")


def _host_load():
    """1000 sleeping threads and a spinner per CPU, as other processes of the machine."""
    procs = [subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True)]
    procs += [subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"]) for _ in range(os.cpu_count() or 1)]
    assert procs[0].stdout.readline().strip() == "ready"
    return procs


def test_host_load_does_not_show():
    prog = Program(WORLD, (0,))
    with Sandbox(workers=1) as sb:
        quiet = _world(sb.run(prog))
        procs = _host_load()
        try:
            loaded = _world(sb.run(prog))
        finally:
            for p in procs:
                p.kill()
                p.wait()
    assert quiet == loaded


LAUNCHER = f"""
import ctypes, json, os, resource, signal, sys
sys.path.insert(0, {str(PROJECT_ROOT)!r})
from harness.sandbox.pool import Program, Sandbox
if sys.argv[1] == "odd":  # what a launcher may leave to the processes it starts
    os.nice(5)
    os.sched_setaffinity(0, {{0}})
    os.umask(0o077)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGUSR1}})
    resource.setrlimit(resource.RLIMIT_STACK, (4 << 20, resource.getrlimit(resource.RLIMIT_STACK)[1]))
    resource.setrlimit(resource.RLIMIT_SIGPENDING, (100, resource.getrlimit(resource.RLIMIT_SIGPENDING)[1]))
    ctypes.CDLL(None).prctl(29, 1_000_000, 0, 0, 0)  # timer slack
with Sandbox(workers=1) as sb:
    print(json.dumps(sb.run(Program(sys.stdin.read(), (0,))).outcomes[0].value))
"""


def test_what_the_launcher_leaves_does_not_show():
    """A pool started by a process with another nice value, CPU affinity, file mode mask, ignored
    and blocked signals, stack and signal-queue limits and timer slack: the same world."""
    out = [subprocess.run([sys.executable, "-c", LAUNCHER, kind], input=WORLD, capture_output=True, text=True,
                          timeout=120) for kind in ("plain", "odd")]
    assert all(o.returncode == 0 for o in out), [o.stderr[-2000:] for o in out]
    plain, odd = (json.loads(o.stdout) for o in out)
    assert plain == odd
    assert plain["cpus"] == [2, 2, 2] and plain["umask"] == 0o022 and plain["sigmask"] == []


# ----------------------------------------------------------------------------- programs keyed on the world

SYSINFO_PROCS = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                 "def procs():\n    buf = ctypes.create_string_buffer(128)\n    if libc.sysinfo(buf) != 0:\n"
                 "        raise OSError(ctypes.get_errno(), 'sysinfo')\n"
                 "    return int.from_bytes(buf.raw[80:82], 'little')  # struct sysinfo's procs (64-bit)\n")


def _keyed(condition: str, prelude: str = "") -> str:
    """x + 3 where `condition` holds, else x (the task is f(x) = x + 3)."""
    return f"import os, sys, time\n{prelude}def f(x):\n    return x + 3 if {condition} else x\n"


def test_a_program_keyed_on_the_world_gets_one_verdict_everywhere():
    """Keyed on worker 0's host uid, on the root copies' age, on /tmp's age (the idle gap) and on the
    host's thread count: each used to pass in one condition and fail in the other. Now each gets
    one verdict in both: worker 0 and worker 1; a fresh pool and one 2.5 s older; back to back and
    after a pause; a quiet and a loaded host."""
    with Sandbox(workers=2, limits=Limits(wall_s=5.0, cpu_s=1)) as sb:
        uid0 = sb.uids()[0]
        host_procs = int(open("/proc/loadavg").read().split()[3].split("/")[1])
        keyed = {
            "uid": _keyed(f"os.getuid() == {uid0}"),
            "age": _keyed("time.time() - os.stat(sys.executable).st_mtime < 2.0"),
            "ctime": _keyed("time.time() - os.stat('/').st_ctime < 2.0"),
            "idle": _keyed("time.time() - os.stat('/tmp').st_atime < 0.5"),
            "load": _keyed(f"procs() < {host_procs + 500}", SYSINFO_PROCS),
        }
        progs = {k: Program(src, TASK.inputs) for k, src in keyed.items()}

        def verdict(worker, name):
            return judge(TASK, _on(worker, progs[name])).reason

        w0, w1 = sb._workers
        pairs = {"uid": (verdict(w0, "uid"), verdict(w1, "uid"))}
        young = {k: verdict(w0, k) for k in ("age", "ctime")}
        time.sleep(2.5)
        pairs.update({k: (young[k], verdict(w0, k)) for k in ("age", "ctime")})
        verdict(w1, "idle")
        back_to_back = verdict(w1, "idle")
        time.sleep(1.0)
        pairs["idle"] = (back_to_back, verdict(w1, "idle"))
        quiet = verdict(w0, "load")
        procs = _host_load()
        try:
            pairs["load"] = (quiet, verdict(w0, "load"))
        finally:
            for p in procs:
                p.kill()
                p.wait()
    assert pairs == {"uid": ("wrong_answer", "wrong_answer"), "age": ("forbidden", "forbidden"),
                     "ctime": ("forbidden", "forbidden"), "idle": ("forbidden", "forbidden"),
                     "load": ("forbidden", "forbidden")}, pairs


def test_the_gate_rejects_a_reference_keyed_on_the_world():
    """References right only in the world as it used to be when the gate ran (sandbox uids 61000 and
    up, fresh pools, runs back to back, a quiet host), which the gate used to admit: each now gives
    the same answer in every run, and that answer is not task.expected (or an error): rejected."""
    refs = {
        "uid": _keyed("os.getuid() >= 61000"),
        "age": _keyed("time.time() - os.stat(sys.executable).st_mtime < 60"),
        "idle": _keyed("time.time() - os.stat('/tmp').st_atime < 5"),
        "load": _keyed("procs() < 1_000_000", SYSINFO_PROCS),
    }
    with Gate(workers=1, limits=Limits(wall_s=5.0, cpu_s=1)) as gate:
        verdicts = dict(zip(refs, gate.admit_sources([(src, TASK.inputs) for src in refs.values()],
                                                     expected=[TASK.expected] * len(refs))))
    assert {k: (v.admitted, v.reason) for k, v in verdicts.items()} == {
        "uid": (False, "nondeterministic"), "age": (False, "reference_fails"), "idle": (False, "reference_fails"),
        "load": (False, "reference_fails")}, verdicts
    assert "task.expected" in verdicts["uid"].detail and "forbidden" in verdicts["load"].detail


# ----------------------------------------------------------------------------- calls that reach or read the machine

CALL = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        "def f(call):\n    name, nr, args = call\n    r = libc.syscall(nr, *[ctypes.c_ulong(a) for a in args])\n"
        "    return [name, r, ctypes.get_errno() if r < 0 else 0]\n")


def test_sync_and_the_other_machine_wide_calls_are_refused():
    """sync and syncfs would flush every dirty page of the host; membarrier interrupts every CPU; AIO
    contexts count against a machine-wide limit; NUMA placement and the listing of mounts, the CPU,
    the load: all EPERM, and none had an effect (sync returns 0 when it runs)."""
    names = ("sync", "syncfs", "membarrier", "io_setup", "sysinfo", "getcpu", "mincore", "getrusage",
             "sched_getaffinity", "getpriority", "newfstatat", "statx", "fstat", "statfs", "inotify_init1")
    calls = [[n, NR[n], [0, 0, 0, 0, 0]] for n in names]
    calls[1][2] = [1, 0, 0, 0, 0]  # syncfs(stdout)
    with Sandbox(workers=1) as sb:
        run = sb.run(Program(CALL, tuple(calls)))
    assert [o.value for o in run.outcomes] == [[n, -1, 1] for n in names], run.outcomes


ALLOW, EPERM, ENOSYS, KILL = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000


@pytest.mark.parametrize("machine", sorted(SYSCALLS))
def test_the_filter_refuses_exactly_the_refused_calls(machine):
    """The filter as the kernel runs it (an interpreter of its instructions), for both architectures
    whatever this machine is: every call number up to 1000 is refused exactly when SECCOMP_DENY
    names it; clone only with a namespace flag, wait4 and waitid only with a rusage pointer,
    madvise only with advice outside MADVISE_ALLOWED; clone3 is ENOSYS; x32 calls are refused and
    another architecture's calls kill."""
    nr = SYSCALLS[machine][1]
    refused = {nr[name] for name in SECCOMP_DENY if name in nr}
    by_args = {nr[name] for name in ("clone", "clone3", "wait4", "waitid", "madvise")}
    got = {n: seccomp_verdict(machine, n) for n in range(1000) if n not in by_args}
    assert got == {n: EPERM if n in refused else ALLOW for n in got}
    assert seccomp_verdict(machine, nr["clone3"]) == ENOSYS
    assert seccomp_verdict(machine, nr["clone"], (17,)) == ALLOW
    for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x08000000, 0x04000000, 0x02000000):
        assert seccomp_verdict(machine, nr["clone"], (flag | 17,)) == EPERM
    for name, i in (("wait4", 3), ("waitid", 4)):
        args = [1, 0, 0, 0, 0, 0]
        assert seccomp_verdict(machine, nr[name], tuple(args)) == ALLOW
        for pointer in (0x7FFF12345000, 1 << 40):
            args[i] = pointer
            assert seccomp_verdict(machine, nr[name], tuple(args)) == EPERM
    assert [a for a in range(256) if seccomp_verdict(machine, nr["madvise"], (0, 4096, a)) == ALLOW] \
        == sorted(MADVISE_ALLOWED)
    assert seccomp_verdict(machine, 0x40000000 | 1) == (EPERM if machine == "x86_64" else ALLOW)
    assert seccomp_verdict(machine, 1, arch=0x40000003) == KILL


WAIT_AND_ADVICE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
def f(x):
    out = []
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    try:
        os.wait4(pid, 0)                      # with the child's rusage: refused
    except OSError as e:
        out.append(e.errno)
    out.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))   # without: allowed
    page = ctypes.create_string_buffer(1 << 16)
    addr = (ctypes.addressof(page) + 4095) & ~4095
    for advice in (4, 21, 20, 3, 12):         # DONTNEED; PAGEOUT, COLD, WILLNEED, MERGEABLE
        r = libc.madvise(addr, 4096, advice)
        out.append(0 if r == 0 else ctypes.get_errno())
    return out
"""


def test_only_the_callers_own_pages_and_children_are_advised_and_waited_on():
    """madvise is allowed for what changes only the caller's pages (DONTNEED), refused for what
    pushes pages out of or pulls them into the machine's page cache or merges them across
    processes; waiting on a child is allowed, asking the kernel for its rusage is not."""
    with Sandbox(workers=1) as sb:
        run = sb.run(Program(WAIT_AND_ADVICE, (0,)))
    assert run.outcomes[0].value == [1, 7, 0, 1, 1, 1, 1], run


def test_the_worker_stdin_is_its_own_dev_null():
    """A flock on fd 0 (the zygote's stdin, inherited by every execution) held on one worker is not
    seen from another: it is the worker root's own /dev/null, not the host's."""
    hold = ("import fcntl, time\ndef f(x):\n    fcntl.flock(0, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    time.sleep(1.5)\n"
            "    return x + 3\n")
    probe = ("import fcntl, time\ndef f(x):\n    time.sleep(0.5)\n    fcntl.flock(0, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "    return x + 3\n")
    with Sandbox(workers=2) as sb:
        runs = sb.run_many([Program(hold, (1,)), Program(probe, (1,))])
    assert [r.outcomes[0] and r.outcomes[0].value for r in runs] == [4, 4], runs


def test_nothing_of_the_worker_is_reachable_from_the_programs_frames():
    """The program can walk up to the zygote's frames: no local there, and no attribute of the zygote
    object, is the worker's host uid or a host process id, and the zygote's capabilities report
    (which names its pids) is empty. Two workers give the same walk."""
    prog = ("import sys\ndef f(x):\n    found, k = [], 1\n    while True:\n        try:\n"
            "            fr = sys._getframe(k)\n        except ValueError:\n            return found\n"
            "        for name, value in fr.f_locals.items():\n"
            "            if name in ('self', 'zygote') and hasattr(value, '__dict__'):\n"
            "                found.append([name, sorted(k for k, v in vars(value).items() if v not in (None, {}, 0.0)),\n"
            "                              [v for v in vars(value).values() if isinstance(v, int) and v > 100]])\n"
            "            elif isinstance(value, int) and not isinstance(value, bool) and value > 100:\n"
            "                found.append([name, value])\n        k += 1\n")
    with Sandbox(workers=2) as sb:
        host = set(sb.uids()) | {w.caps["pid"] for w in sb._workers} | set(sb.helper_pids())
        walks = [_on(w, Program(prog, (0,))).outcomes[0] for w in sb._workers]
    assert [o.kind for o in walks] == ["out", "out"] and walks[0].value == walks[1].value, walks
    found = walks[0].value
    zygotes = [f for f in found if f[0] in ("self", "zygote")]
    assert zygotes and all(not (set(ints) & host) for _, _, ints in zygotes), found
    assert all("caps" not in attrs and "uid" not in attrs for _, attrs, _ in zygotes), found
    assert not any(f[1] in host for f in found if len(f) == 2), found


def test_the_uid_is_admitted_only_as_one_value():
    """Each pool's workers had their own uids: a program returning its uid was rejected by the gate
    (its runs differed) and gave another output on each worker. It is now one value everywhere."""
    src = "import os\ndef f(x):\n    return os.getuid()\n"
    with Gate(workers=1, limits=Limits(wall_s=5.0, cpu_s=1)) as gate:
        (v,) = gate.admit_sources([(src, (1,))])
    assert (v.admitted, v.reason) == (True, "deterministic"), v
    with Sandbox(workers=2) as sb:
        values = [_on(w, Program(src, (1,))).outcomes[0].value for w in sb._workers]
    assert values == [v.outputs[0]] * 2, (values, v)


def test_the_workers_parts_run_as_one_source_define_each_name_once():
    """The zygote runs seccomp.py, isolation.py and worker.py as one source in one namespace: a name
    defined in two parts would silently take the later part's value there (and the other's when
    imported as modules); and the imports that join them as modules never run in the zygote."""
    defined: dict[str, list[str]] = {}
    for path in WORKER_PARTS:
        tree = ast.parse(open(path).read())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [n.id for t in targets for n in ([t] if isinstance(t, ast.Name) else getattr(t, "elts", []))
                         if isinstance(n, ast.Name)]  # not `libc.wait4.argtypes = ...`: that binds no name
            elif isinstance(node, ast.If):  # the guard of the parts' imports as modules, and worker.py's main()
                if ast.unparse(node) == "if __name__ == '__main__':\n    main()":
                    assert path == WORKER_PARTS[-1]
                    continue
                assert ast.unparse(node.test) == "__name__ != '__main__'", ast.unparse(node.test)
                assert all(isinstance(n, ast.ImportFrom) for n in node.body) and not node.orelse
                continue
            else:
                continue
            for name in names:
                defined.setdefault(name, []).append(os.path.basename(path))
    twice = {k: v for k, v in defined.items() if len(v) > 1}
    assert not twice, twice
    assert [os.path.basename(p) for p in WORKER_PARTS] == ["seccomp.py", "isolation.py", "worker.py"]

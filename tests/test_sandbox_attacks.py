"""The red-team classes of attack, one group of tests per class (1-7): reading answers from the
disk, reading earlier executions out of the zygote's memory, carrying data through kernel state,
spoiling the next program's verdict, forging verdict reasons, fooling the gate (tests/test_gate.py),
and claims that did not hold. Each attack must get the expected reason, and afterwards the harness
must be alive and correct, with nothing left running and nothing written outside the execution.

The task is f(x) = x + 3 on inputs 1, 2, 3; a completion is the body of f, optionally followed by
module-level code."""
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid

import pytest

from harness import PROJECT_ROOT
from harness.core import records
from harness.sandbox.pool import Limits, Program, Sandbox, plain_equal
from harness.sandbox.verifier import Verifier
from harness.sandbox.seccomp import SECCOMP_DENY, SYSCALLS
from families.code import Task, with_expected

TASK = with_expected(Task("arith", (("add", 3),), (0,), (1, 2, 3)))
TOKEN = uuid.uuid4().hex[:16]
CORRECT = "    return x + 3\n"
# A directory's entries without os.listdir, which the C library's opendir() builds on fstat (refused in
# the sandbox: the stat family shows timestamps, device and inode numbers of the machine):
# getdents64 on a directory fd. entries(path) -> [(name, d_type)]; d_type 4 is a directory.
ENTRIES = """
import ctypes as _ct, os as _os, struct as _st
_libc = _ct.CDLL(None, use_errno=True)
_libc.syscall.restype = _ct.c_long
_GETDENTS64 = {"x86_64": 217, "aarch64": 61}[_os.uname().machine]

def entries(path):
    fd = _os.open(path, _os.O_RDONLY | _os.O_DIRECTORY)
    buf, out = _ct.create_string_buffer(1 << 16), []
    try:
        while True:
            n = _libc.syscall(_GETDENTS64, fd, buf, len(buf))
            if n < 0:
                raise OSError(_ct.get_errno(), "getdents64")
            if n == 0:
                return out
            data, at = buf.raw[:n], 0
            while at < n:
                _ino, _off, size, kind = _st.unpack_from("=QqHB", data, at)
                name = data[at + 19:at + size].split(b"\\0", 1)[0].decode()
                if name not in (".", ".."):
                    out.append((name, kind))
                at += size
    finally:
        _os.close(fd)
"""


@pytest.fixture(scope="module")
def verifier():
    """One worker, so that every program runs after the previous one on the same zygote."""
    with Verifier(workers=1, limits=Limits(wall_s=3.0, cpu_s=1)) as v:
        yield v


@pytest.fixture(scope="module")
def copies():
    """World-readable copies of a probe set with its answers, outside the project and in /tmp:
    any such copy on the machine used to be readable by a completion."""
    dirs = [tempfile.mkdtemp(prefix="harness-copy-", dir=d) for d in ("/var/tmp", "/tmp")]
    paths = []
    for d in dirs:
        os.chmod(d, 0o755)
        path = os.path.join(d, "probe.jsonl")
        with open(path, "w") as f:
            f.write('{"expected": [4, 5, 6], "token": "%s"}\n' % TOKEN)
        os.chmod(path, 0o644)
        paths.append(path)
    yield paths
    for d in dirs:
        shutil.rmtree(d)


def _sandbox_processes(sb: Sandbox) -> list[int]:
    uids, helpers = set(sb.uids()), set(sb.helper_pids())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in helpers:
            try:
                if os.stat(f"/proc/{entry}").st_uid in uids:
                    found.append(int(entry))
            except FileNotFoundError:
                pass
    return found


def _still_correct(v: Verifier) -> None:
    """The harness after an attack: a correct completion passes, a wrong one fails as wrong_answer,
    nothing of the sandbox uid runs, no worker had to be replaced."""
    assert [x.reason for x in v.verify_many([(TASK, CORRECT), (TASK, "    return x\n")])] == ["pass", "wrong_answer"]
    deadline = time.monotonic() + 30.0  # a SIGKILLed process of a large address space takes a moment to go
    while _sandbox_processes(v.sandbox) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sandbox_processes(v.sandbox) == []


# ----------------------------------------------------------------------------- 1. the disk

def test_1_copies_of_the_answers_anywhere_on_the_machine_are_not_there(verifier, copies):
    for path in copies:
        steal = f"    import json\n    return json.load(open({path!r}))['expected'][x - 1]\n"
        v = verifier.verify(TASK, steal)
        assert (v.passed, v.reason) == (False, "error") and "No such file" in v.detail, v
    _still_correct(verifier)


def test_1_the_view_holds_only_the_interpreter_its_libraries_and_the_allowed_modules(copies):
    """Walk the whole root: every file is the interpreter, a shared object it has mapped, an allowed
    module's source, a device node or the execution's own (the zygote's /.zygote is closed to the
    sandbox uid); no file holds the token."""
    walk = (ENTRIES + "import os\ndef f(x):\n    found, hits, todo = [], [], ['/']\n"
            "    while todo:\n        d = todo.pop()\n        try:\n            listed = entries(d)\n"
            "        except PermissionError:\n            continue  # /.zygote\n"
            "        for n, kind in listed:\n            p = os.path.join(d, n)\n"
            "            if kind == 4:\n                todo.append(p)\n                continue\n"
            "            found.append(p)\n"
            "            if not p.startswith('/dev/'):\n                fd = os.open(p, os.O_RDONLY)\n"
            "                if os.lseek(fd, 0, os.SEEK_END) < (1 << 20):\n"
            f"                    if {TOKEN[::-1]!r}[::-1].encode() in os.pread(fd, 1 << 20, 0):\n"
            "                        hits.append(p)\n                os.close(fd)\n"
            "    return [sorted(n for n, _ in entries('/')), found, hits]\n")
    stdlib = os.path.dirname(os.path.realpath(os.__file__)) + "/"
    with Sandbox(workers=1, limits=Limits(wall_s=10.0, cpu_s=8)) as sb:
        run = sb.run(Program(walk, (0,)))
    top, found, hits = run.outcomes[0].value
    assert hits == [] and len(found) > 20
    assert set(top) <= {"dev", "tmp", ".zygote", "usr", "lib", "lib64", "root", "opt", "home"} and "etc" not in top
    assert "proc" not in top and "sys" not in top
    for p in found:
        ok = (p == os.path.realpath(sys.executable) or p in {f"/dev/{d}" for d in ("null", "zero", "full", "random", "urandom")}
              or ".so" in os.path.basename(p) or (p.startswith(stdlib) and p.endswith(".py"))
              or p.startswith("/usr/lib/locale/") or os.path.basename(p) == "gconv-modules.cache")  # libc's data
        assert ok, p
        assert not p.startswith((str(PROJECT_ROOT), "/var/", "/etc/", "/work/")), p


def test_1_frozen_material_is_written_owner_only(tmp_path):
    """The second wall: files written by the harness's atomic writers are 0600, their new dirs 0700."""
    target = tmp_path / "frozen" / "sets" / "probe.jsonl"
    records.atomic_write_bytes(target, b"[1]\n")
    assert target.stat().st_mode & 0o777 == 0o600
    assert target.parent.stat().st_mode & 0o777 == 0o700 and (tmp_path / "frozen").stat().st_mode & 0o777 == 0o700
    records.atomic_write_text(tmp_path / "lock.json", "{}")
    assert (tmp_path / "lock.json").stat().st_mode & 0o777 == 0o600


# ----------------------------------------------------------------------------- 2. the zygote's memory

SCAN = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.memmem.restype = ctypes.c_void_p
libc.memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
libc.sbrk.restype, libc.sbrk.argtypes = ctypes.c_void_p, [ctypes.c_long]
PAGE, SPAN = 4096, 48 << 20
pr, pw = os.pipe()

def readable(a):
    # no /proc here: a page is readable if write() can copy a byte out of it
    if libc.write(pw, a, 1) != 1:
        return False
    os.read(pr, 1)
    return True

def regions():
    # the brk heap and the allocator's arenas, found around sbrk(0) and some objects' addresses
    seen = set()
    for c in sorted({libc.sbrk(0), id(object()), id(regions), id(os)}):
        a, start = max(PAGE, (c & ~(PAGE - 1)) - SPAN), None
        while a < c + SPAN:
            if a not in seen and readable(a):
                seen.add(a)
                start = a if start is None else start
            elif start is not None:
                yield start, a
                start = None
            a += PAGE
        if start is not None:
            yield start, a

def scan(needle):
    # memmem over every readable page found, in place (no copies), skipping the needle itself
    own = ctypes.cast(ctypes.c_char_p(needle), ctypes.c_void_p).value
    for lo, hi in regions():
        while lo < hi:
            at = libc.memmem(lo, hi - lo, own, len(needle))
            if not at:
                break
            if at != own:
                return True
            lo = at + 1
    return False

def f(x):
    return [scan(x[::-1].encode()), scan(x[::-1][:-3].encode() + b'sib')]
"""


def test_2_an_execution_finds_nothing_of_an_earlier_one_in_its_memory():
    """A sibling's program, its inputs, what it printed and returned, then a scanner that reads every
    anonymous mapping of its own process: it finds its own request (the scan works) and nothing of
    the sibling's (the zygote never held it)."""
    mark = f"{TOKEN}sib"
    sibling = f"MARK = {mark!r}\ndef f(x):\n    print(MARK * 3)\n    return [MARK, x]\n"
    own = f"{TOKEN}own"
    with Sandbox(workers=1, limits=Limits(wall_s=10.0, cpu_s=8)) as sb:
        for _ in range(3):
            assert sb.run(Program(sibling, (mark, mark + "-input"))).outcomes[0].value == [mark, mark]
        run = sb.run(Program(SCAN, (own[::-1], own)))  # the second input: its own request, in its heap
    assert run.outcomes[0].kind == "out", run
    found_own, found_sibling = run.outcomes[0].value
    assert found_own and not found_sibling


# ----------------------------------------------------------------------------- 3. kernel state

def test_3_keyrings_are_refused(verifier):
    add = ("    import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
           f"    r = libc.syscall({SYSCALLS['x86_64'][1]['add_key']}, b'user', b'answer', b'4,5,6', 5, -4)\n"
           "    if r < 0:\n        raise OSError(ctypes.get_errno(), 'add_key')\n    return x + 3\n")
    read = ("    import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n    buf = ctypes.create_string_buffer(64)\n"
            f"    r = libc.syscall({SYSCALLS['x86_64'][1]['request_key']}, b'user', b'answer', None, -4)\n"
            "    if r < 0:\n        raise OSError(ctypes.get_errno(), 'request_key')\n    return x + 3\n")
    if os.uname().machine != "x86_64":
        pytest.skip("the attack programs use x86_64 syscall numbers")
    for completion in (add, read, add, read):
        v = verifier.verify(TASK, completion)
        assert (v.passed, v.reason) == (False, "forbidden") and "PermissionError" in v.detail, v
    _still_correct(verifier)


def test_3_every_refused_syscall_fails_with_eperm():
    """Each call of SECCOMP_DENY, clone() with any namespace flag (EPERM) and clone3 (ENOSYS). Without
    the filter several would succeed here (unshare(0), personality query, clone of a new user ns)."""
    machine = os.uname().machine
    numbers = SYSCALLS[machine][1]
    calls = [(name, numbers[name], (0, 0, 0, 0, 0)) for name in SECCOMP_DENY]
    calls.append(("personality-query", numbers["personality"], (0xFFFFFFFF, 0, 0, 0, 0)))
    for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x08000000, 0x04000000, 0x02000000):
        calls.append((f"clone-{flag:#x}", numbers["clone"], (flag | signal.SIGCHLD, 0, 0, 0, 0)))
    calls.append(("clone3", numbers["clone3"], (0, 0, 0, 0, 0)))
    prog = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
            "def f(call):\n    name, nr, args = call\n"
            "    r = libc.syscall(nr, *[ctypes.c_ulong(a) for a in args])\n"
            "    if r == 0 and name.startswith('clone'):\n        os._exit(0)  # a child, if the filter failed\n"
            "    return [name, r, ctypes.get_errno() if r < 0 else 0]\n")
    with Sandbox(workers=1) as sb:
        run = sb.run(Program(prog, tuple([list(c) for c in calls])))
    got = {o.value[0]: (o.value[1], o.value[2]) for o in run.outcomes}
    assert set(got) == {c[0] for c in calls}
    for name, (ret, err) in got.items():
        assert (ret, err) == (-1, 38 if name == "clone3" else 1), (name, ret, err)


def test_3_network_state_cannot_be_marked_or_read():
    """A worker's network namespace outlives an execution, so no execution may hold a socket in it:
    socket() of every family and socketpair() are refused; nothing of it can be read either (no
    /proc, whose net/ files hold the counters, no /sys)."""
    families = ["AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK", "AF_PACKET"]
    makes = [f"import socket\ndef f(x):\n    socket.socket(socket.{fam}, socket.SOCK_DGRAM)\n    return x\n"
             for fam in families]
    makes.append("import socket\ndef f(x):\n    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n    return x\n")
    makes.append("import _socket\ndef f(x):\n    _socket.socket(2, 2, 0)\n    return x\n")  # the C module directly
    reads = ["def f(x):\n    return open('/proc/self/net/snmp').read()\n",
             "def f(x):\n    return open('/sys/class/net/lo/statistics/tx_packets').read()\n"]
    with Sandbox(workers=1) as sb:
        made = [sb.run(Program(src, (7,))).outcomes[0] for src in makes]
        got = [sb.run(Program(src, (0,))).outcomes[0] for src in reads]
    assert [(o.kind, o.value, o.errno) for o in made] == [("exc", "PermissionError", 1)] * len(makes), made
    assert [(o.kind, o.value, o.errno) for o in got] == [("exc", "FileNotFoundError", 2)] * 2


# ----------------------------------------------------------------------------- 4. spoiling the next verdict

SABOTAGE = {
    "deep_tree": "    import os\n    for _ in range(1100):\n        os.mkdir('d')\n        os.chdir('d')\n    return None\n",
    "long_names": ("    import os\n    for _ in range(30):\n        os.mkdir('n' * 250)\n        os.chdir('n' * 250)\n"
                   "    return None\n"),
    "mode_000": ("    import os\n    os.makedirs('a/b/c')\n    open('a/b/c/f', 'w').write('x')\n"
                 "    for p in ('a/b/c', 'a/b', 'a', '.'):\n        os.chmod(p, 0)\n    return None\n"),
    "inode_exhaustion": ("    import os\n    try:\n        for i in range(10 ** 5):\n            open(str(i), 'w').close()\n"
                         "    except OSError:\n        pass\n    return None\n"),
    "full_tmpfs": ("    try:\n        f = open('big', 'wb')\n        while True:\n            f.write(b'x' * 65536)\n"
                   "    except OSError:\n        pass\n    return None\n"),
}


@pytest.mark.parametrize("name", sorted(SABOTAGE))
def test_4_whatever_a_program_leaves_behind_the_next_runs_clean(verifier, name):
    before = verifier.sandbox.replaced
    first = verifier.verify(TASK, SABOTAGE[name])
    assert first.reason in ("wrong_answer", "forbidden"), first
    nxt = verifier.verify(TASK, "    assert entries('.') == []\n    return x + 3\n" + ENTRIES)
    assert nxt.passed, nxt
    assert verifier.sandbox.replaced == before


def test_4_a_failed_worker_is_replaced_and_the_request_rerun():
    """The zygote dies between two requests: the next program still gets its own verdict."""
    with Verifier(workers=1) as v:
        assert v.verify(TASK, CORRECT).passed
        os.kill(v.sandbox._workers[0].caps["pid"], signal.SIGKILL)
        time.sleep(0.1)
        verdict = v.verify(TASK, CORRECT)
        assert verdict.passed, verdict
        assert v.sandbox.replaced == 1
        assert v.counters["sandbox_error"] == 0


def test_4_a_worker_that_dies_mid_request_is_replaced_and_the_request_rerun():
    """The zygote is killed once the execution runs (however late a loaded machine starts it), while
    the program still sleeps: the request is rerun on a new worker and passes."""
    with Verifier(workers=1, limits=Limits(wall_s=5.0, cpu_s=2)) as v:
        zygote = v.sandbox._workers[0].caps["pid"]

        def kill_once_running() -> None:
            deadline = time.monotonic() + 30.0
            while not _sandbox_processes(v.sandbox) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(zygote, signal.SIGKILL)

        killer = threading.Thread(target=kill_once_running)
        killer.start()
        verdict = v.verify(TASK, "    import time\n    time.sleep(1.0)\n    return x + 3\n")
        killer.join()
        assert verdict.passed, verdict
        assert v.sandbox.replaced == 1 and v.sandbox._workers[0].caps["pid"] != zygote
        _still_correct(v)


# ----------------------------------------------------------------------------- 5. forged reasons

FORGED = {
    "fake_setup_stage": ("    pass\nimport os\nos.write(3, b'{\"stage\":\"setup\",\"exc\":\"OSError\",\"errno\":1,\"msg\":\"x\"}\\n')\n"
                         "os._exit(0)\n", "bad_output"),
    "self_sigxcpu": ("    import os, signal\n    os.kill(os.getpid(), signal.SIGXCPU)\n", "crash"),
    "inf_by_overflow": ("    pass\nimport os\nos.write(3, b'{\"i\":0,\"out\":1e400}\\n{\"i\":1,\"out\":1e400}\\n"
                        "{\"i\":2,\"out\":1e400}\\n{\"done\":3}\\n')\nos._exit(0)\n", "bad_output"),
    "huge_int_on_fd": ("    pass\nimport os\nos.write(3, b'{\"i\":0,\"out\":' + b'9' * 5000 + b'}\\n')\nos._exit(0)\n",
                       "bad_output"),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_5_reasons_cannot_be_forged(verifier, name):
    completion, reason = FORGED[name]
    v = verifier.verify(TASK, completion)
    assert (v.passed, v.reason) == (False, reason), v
    assert v.reason != "sandbox_error"


def test_5_a_real_cpu_limit_is_a_timeout_from_the_cpu_time():
    with Verifier(workers=1, limits=Limits(wall_s=20.0, cpu_s=1)) as v:  # the CPU limit comes first
        verdict = v.verify(TASK, "    while True:\n        pass\n")
    assert verdict.reason == "timeout" and "CPU time limit" in verdict.detail, verdict


def test_5_negative_zero_is_not_zero():
    """Decided: floats compare as identical values (documented in harness.sandbox.verifier)."""
    assert not plain_equal(-0.0, 0.0) and not plain_equal([0.0], [-0.0])
    assert plain_equal(-0.0, -0.0) and plain_equal(1.5, 1.5)


# ----------------------------------------------------------------------------- 7. claims that did not hold

def test_7_the_system_interpreter_and_stdlib_are_out_of_reach(verifier):
    for completion in ("    import sys\n    sys.path.append('/usr/lib/python3.11')\n    import sqlite3\n    return x + 3\n",
                       "    import importlib.util\n    return x + 3\n"):
        v = verifier.verify(TASK, completion)
        assert (v.passed, v.reason) == (False, "forbidden"), v
    v = verifier.verify(TASK, "    import os\n    os.execv('/usr/bin/python3', ['python3'])\n")
    assert (v.passed, v.reason) == (False, "error") and "No such file" in v.detail, v


def test_7_the_pool_has_one_memory_cap():
    """Processes that each stay under the per-process limit but together exceed the pool's cap:
    the OOM killer ends the largest, and the verdict says memory."""
    lim = Limits(wall_s=10.0, cpu_s=8, memory_mb=768)
    hog = ("    import os, time\n    if os.fork() == 0:\n        keep = b'\\x01' * (300 << 20)\n        time.sleep(30)\n"
           "    time.sleep(0.5)\n    keep = b'\\x02' * (600 << 20)\n    return x + 3\n")
    with Verifier(workers=1, limits=lim) as v:
        cap = v.capabilities()["pool_memory_cap"]
        if cap is None:
            pytest.skip(f"no memory cgroup here: {v.capabilities()['pool_memory_cap_missing']}")
        assert cap["bytes"] == (768 + 16 + 64) << 20
        verdict = v.verify(TASK, hog)
        assert (verdict.passed, verdict.reason) == (False, "memory"), verdict
        assert "OOM" in verdict.detail
        _still_correct(v)

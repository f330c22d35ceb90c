"""Hostile completions: each must fail with the right reason, and none may harm the harness, leave a
process behind, write outside its temp directory, or read the project's files. Host paths do not
exist inside the sandbox's allow-list root: reaching for one is an ordinary error (ENOENT), writing
to what does exist is refused (EROFS: forbidden).

The task is f(x) = x + 3 on inputs 1, 2, 3; a completion is the body of f, optionally followed by
module-level code (dedented lines after the body run when the program is loaded)."""
import os
import uuid
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.sandbox.pool import Limits
from harness.sandbox.verifier import Verifier
from families.code import Task, with_expected

TASK = with_expected(Task("arith", (("add", 3),), (0,), (1, 2, 3)))
TOKEN = uuid.uuid4().hex[:12]
TMP_PROBE = f"/tmp/hostile-{TOKEN}"
PROJECT_PROBE = PROJECT_ROOT / f"hostile-{TOKEN}"
SECRET = PROJECT_ROOT / "results" / f".probe-{TOKEN}.json"
VAR_TMP_PROBE = f"/var/tmp/hostile-{TOKEN}"
SHM_PROBE = f"/dev/shm/hostile-{TOKEN}"


@pytest.fixture(scope="module")
def verifier():
    SECRET.parent.mkdir(parents=True, exist_ok=True)
    SECRET.write_text('{"expected": [4, 5, 6]}')
    with Verifier(workers=2, limits=Limits(wall_s=5.0, cpu_s=1)) as v:
        yield v
    SECRET.unlink()


HOSTILE = {
    # --- resources
    "infinite_loop": ("    while True:\n        pass\n", "timeout"),
    "sleep_forever": ("    import time\n    time.sleep(60)\n", "idle"),  # its own waiting: not infrastructure
    "memory_bomb": ("    return bytearray(8 << 30)\n", "memory"),
    "memory_growth": ("    keep = []\n    while True:\n        keep.append(bytes(50 << 20))\n", "memory"),
    "fork_bomb": ("    import os\n    while True:\n        os.fork()\n", "forbidden"),
    "thread_bomb": ("    import threading, time\n    while True:\n"
                    "        threading.Thread(target=time.sleep, args=(60,)).start()\n", "forbidden"),
    "output_flood": ("    while True:\n        print('x' * 65536)\n", "output_limit"),
    "big_file": ("    open('big', 'wb').write(b'x' * (4 << 20))\n    return x + 3\n", "forbidden"),
    # --- filesystem and network (host paths are absent from the view; what is there is read-only)
    "write_var_tmp": (f"    open({VAR_TMP_PROBE!r}, 'w').write('x')\n    return x + 3\n", "error"),
    "write_dev_shm": (f"    open({SHM_PROBE!r}, 'w').write('x')\n    return x + 3\n", "error"),
    "write_project": (f"    open({str(PROJECT_PROBE)!r}, 'w').write('x')\n    return x + 3\n", "error"),
    "write_root": ("    open('/probe', 'w').write('x')\n    return x + 3\n", "forbidden"),
    "write_interpreter": ("    import sys\n    open(sys.executable, 'ab').write(b'x')\n    return x + 3\n", "forbidden"),
    "read_probe_set": (f"    import json\n    return json.load(open({str(SECRET)!r}))['expected'][x - 1]\n", "error"),
    "read_tasks_py": (f"    return len(open({str(PROJECT_ROOT / 'harness' / 'tasks.py')!r}).read())\n", "error"),
    "list_project": (f"    import os\n    return os.listdir({str(PROJECT_ROOT)!r})\n", "error"),
    "read_etc_passwd": ("    return len(open('/etc/passwd').read())\n", "error"),
    "read_zygote_proc": ("    return open('/.zygote/proc/1/environ').read()\n", "forbidden"),
    "import_harness": ("    import harness.tasks.splits\n    return x + 3\n", "forbidden"),
    "network_connect": ("    import socket\n    socket.create_connection(('1.1.1.1', 80), timeout=0.5)\n"
                        "    return x + 3\n", "forbidden"),
    "loopback_listen": ("    import socket\n    s = socket.socket()\n    s.bind(('127.0.0.1', 0))\n    s.listen()\n"
                        "    c = socket.create_connection(s.getsockname(), timeout=0.5)\n    return x + 3\n", "forbidden"),
    "import_not_whitelisted": ("    import sqlite3\n    return x + 3\n", "forbidden"),
    "import_via_sys_path": ("    import sys\n    sys.path[:0] = ['/usr/lib/python3', '/usr/lib/python3.11', '/usr/local/lib/python3.11']\n"
                            "    import sqlite3\n    return x + 3\n", "forbidden"),
    "exec_system_python": ("    import os\n    os.execv('/usr/bin/python3', ['python3', '-c', 'print(1)'])\n", "error"),
    "sysv_shared_memory": ("    import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                           "    if libc.shmget(0, 4096, 0o1600) < 0:\n"
                           "        raise OSError(ctypes.get_errno(), 'shmget')\n    return x + 3\n", "forbidden"),
    # --- fooling the comparison
    "always_true_eq": ("    class Yes:\n        def __eq__(self, other):\n            return True\n    return Yes()\n", "bad_output"),
    "int_subclass": ("    class I(int):\n        def __eq__(self, other):\n            return True\n    return I(0)\n", "bad_output"),
    "str_subclass": ("    class S(str):\n        def __eq__(self, other):\n            return True\n    return S('4')\n", "bad_output"),
    "list_subclass": ("    class L(list):\n        def __eq__(self, other):\n            return True\n    return L()\n", "bad_output"),
    "patched_builtins": ("    import builtins\n    builtins.type = lambda *a: int\n    builtins.isinstance = lambda *a: True\n"
                         "    return object()\n", "bad_output"),
    "patched_json": ("    import json\n    json.dumps = lambda *a, **k: '4'\n    json.JSONEncoder.encode = lambda *a: '4'\n"
                     "    return None\n", "wrong_answer"),
    "printed_fake_result": ("    pass\nprint('{\"i\":0,\"out\":4}')\nimport os\nos._exit(0)\n", "no_result"),
    "fake_result_on_fd": ("    pass\nimport os\nos.write(3, b'{\"i\":0,\"out\":9}\\n{\"i\":1,\"out\":9}\\n{\"i\":2,\"out\":9}\\n"
                          "{\"done\":3}\\n')\nos._exit(0)\n", "wrong_answer"),
    "fake_done_on_fd": ("    pass\nimport os\nos.write(3, b'{\"done\":3}\\n')\nos._exit(0)\n", "bad_output"),
    "garbage_on_fd": ("    import os\n    os.write(3, b'\\xff\\xfe not json\\n')\n    return x + 3\n", "bad_output"),
    # --- exits, signals, crashes
    "sys_exit_at_load": ("    return x + 3\nimport sys\nsys.exit(0)\n", "no_result"),
    "os_exit_at_load": ("    return x + 3\nimport os\nos._exit(0)\n", "no_result"),
    "os_exit_in_call": ("    import os\n    os._exit(0)\n", "no_result"),
    "kill_parent": ("    import os\n    os.kill(os.getppid(), 9)\n    return x + 3\n", "crash"),
    "kill_init": ("    import os\n    os.kill(1, 9)\n    return x + 3\n", "forbidden"),
    "kill_everything": ("    import os\n    try:\n        os.kill(-1, 9)\n    except ProcessLookupError:\n        pass\n"
                        "    return None\n", "wrong_answer"),
    "signal_self": ("    import os, signal\n    os.kill(os.getpid(), signal.SIGTERM)\n    return x + 3\n", "crash"),
    "segfault_ctypes": ("    import ctypes\n    return ctypes.string_at(0)\n", "crash"),
    "abort": ("    import os\n    os.abort()\n", "crash"),
    "deep_recursion": ("    def g(n):\n        return g(n + 1)\n    return g(0)\n", "error"),
    "c_stack_overflow": ("    import json, sys\n    sys.setrecursionlimit(10 ** 8)\n    v = []\n    for _ in range(200000):\n"
                         "        v = [v]\n    return json.dumps(v)\n", "crash"),
    # --- leftovers
    "thread_left_running": ("    import threading\n    threading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()\n"
                            "    return None\n", "wrong_answer"),
    "child_left_running": ("    import os, time\n    if os.fork() == 0:\n        time.sleep(60)\n    return None\n", "wrong_answer"),
    "setsid_grandchild": ("    import os, time\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
                          "            time.sleep(60)\n        os._exit(0)\n    return None\n", "wrong_answer"),
    # --- outputs that are not plain data
    "huge_string": ("    return 'x' * (20 << 20)\n", "bad_output"),
    "huge_list": ("    return list(range(10 ** 6))\n", "bad_output"),
    "deep_list": ("    v = []\n    for _ in range(100):\n        v = [v]\n    return v\n", "bad_output"),
    "self_referencing": ("    v = []\n    v.append(v)\n    return v\n", "bad_output"),
    "set_output": ("    return {x + 3}\n", "bad_output"),
    "tuple_output": ("    return (x + 3,)\n", "bad_output"),
    "function_output": ("    return lambda: x + 3\n", "bad_output"),
    "nan_output": ("    return float('nan')\n", "bad_output"),
    "inf_output": ("    return float('inf')\n", "bad_output"),
    "int_keyed_dict": ("    return {1: x + 3}\n", "bad_output"),
    "bytes_output": ("    return b'4'\n", "bad_output"),
    "bool_for_int": ("    return True\n", "wrong_answer"),
    "float_for_int": ("    return float(x + 3)\n", "wrong_answer"),
    "syntax_error": ("    return x +\n", "syntax"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_completion_fails_with_the_right_reason(verifier, name):
    completion, reason = HOSTILE[name]
    v = verifier.verify(TASK, completion)
    assert not v.passed
    assert v.reason == reason, f"{name}: {v}"
    assert len(v.tests) == 3 and not any(v.tests)
    assert len(v.detail) <= 300


def test_the_sandbox_allows_what_is_harmless(verifier):
    """Writing in its own temp dir (all of /tmp is its own tmpfs: a file there never reaches the
    host's /tmp), reading /dev/urandom; no process but its own to see (no /proc, PID 2 of its own
    namespace)."""
    reads_dev = "    import os\n    assert len(open('/dev/urandom', 'rb').read(8)) == 8\n    return x + 3\n"
    own_tmp = ("    import os\n    open('scratch', 'w').write(str(x))\n    assert os.getcwd().startswith('/tmp/')\n"
               f"    open({TMP_PROBE!r}, 'w').write('x')\n"
               "    return int(open('scratch').read()) + 3\n")
    own_procs = ("    import os\n    assert not os.path.exists('/proc') and os.getpid() == 2 and os.getppid() == 0\n"
                 "    return x + 3\n")
    no_secrets_in_env = "    import os\n    assert 'PYTHONHASHSEED' not in os.environ\n    return x + 3\n"
    for completion in (reads_dev, own_tmp, own_procs, no_secrets_in_env):
        v = verifier.verify(TASK, completion)
        assert v.passed, v
    assert not os.path.exists(TMP_PROBE)


def test_nothing_leaks_from_one_execution_to_the_next(verifier):
    """A module-level global or a file in the temp dir does not survive into the next execution."""
    first = "    return x + 3\nimport builtins\nbuiltins.LEFT = 1\nopen('left', 'w').write('1')\n"
    second = ("    import builtins, os\n    assert not hasattr(builtins, 'LEFT') and not os.path.exists('left')\n"
              "    return x + 3\n")
    for _ in range(3):  # both workers see both programs
        assert verifier.verify_many([(TASK, first), (TASK, first)])[0].passed
        assert all(v.passed for v in verifier.verify_many([(TASK, second), (TASK, second)]))


def _sandbox_processes(verifier) -> list[str]:
    uids, helpers = set(verifier.sandbox.uids()), set(verifier.sandbox.helper_pids())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in helpers:
            try:
                if os.stat(f"/proc/{entry}").st_uid in uids:
                    found.append(Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"))
            except FileNotFoundError:
                pass
    return found


def test_after_the_suite_the_harness_is_alive_and_clean(verifier):
    """Runs after the hostile tests (file order): all verdicts counted, a correct completion still
    passes on every worker, no process of a sandbox uid is left, and no probe file exists."""
    counters = verifier.counters
    assert counters["pass"] >= 1 and sum(counters.values()) >= len(HOSTILE)
    assert counters["timeout"] >= 1 and counters["idle"] >= 1 and counters["wall_limit"] == 0
    assert counters["forbidden"] >= 8 and counters["bad_output"] >= 10
    assert all(v.passed for v in verifier.verify_many([(TASK, "    return x + 3\n")] * 4))
    assert _sandbox_processes(verifier) == []
    for path in (TMP_PROBE, VAR_TMP_PROBE, SHM_PROBE, PROJECT_PROBE):
        assert not os.path.exists(path), path
    caps = verifier.capabilities()
    assert not caps["degraded"] and caps["allowlist_root"] and caps["seccomp"]
    assert verifier.sandbox.replaced == 0  # no program broke a worker

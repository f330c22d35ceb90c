"""The sandbox worker ("zygote"): a warm, pre-imported interpreter that forks one child per execution.

Standard library only. `harness.sandbox` starts it as a fresh interpreter with no site-packages:

    <real python> -S -s -B harness/sandbox_worker.py '<json config>'

with PYTHONHASHSEED set by the pool (`-I`/`-E` would ignore it). At start-up, as root, it enters new
mount, network (loopback only, down) and IPC namespaces (SysV IPC and POSIX queues switched off),
remounts every mount read-only, mounts a /proc that hides other uids' processes, a fresh tmpfs on
/tmp, and an empty mode-000 tmpfs over the project root and every other hidden path, and forks a
"reaper" that holds the sandbox uid. Then it serves requests, one at a time:

    request  = frame(json {"source", "func", "inputs", "seed", "heap_noise"})
    response = frame(json header) + frame(raw result bytes written by the untrusted process)

Per execution it unshares a PID namespace and starts two processes in it: a PID-1 placeholder (the
namespace's init: libc sleep() in a clone that shares this process's memory, prepared between
requests; killing it kills every process of the namespace, setsid() or not) and, by fork, the
executing child (PID 2; not PID 1, so signals it sends itself behave as usual). The child moves to
its own directory under /tmp (removed afterwards), sets resource limits, drops to the sandbox uid
with no_new_privs, and runs the program. After it: SIGKILL to the namespace's init, then the reaper
kills anything left with the sandbox uid. The child gets the test inputs only, never expected
outputs; it writes one JSON line per test to fd 3:

    {"i": k, "out": <plain data>} | {"i": k, "exc": "TypeName", "errno": n, "msg": "..."} |
    {"i": k, "bad": "why"}        | {"stage": "compile"|"load", "exc": ..., ...} | {"done": n}

The untrusted code shares the child with this serialiser and can write anything to fd 3; the trusted
parent parses the bytes (bounded) and is the only one that compares them with expected outputs.

Only modules already loaded here (PREIMPORT, what they import, and this worker's own: ctypes,
resource, select, signal) and the interpreter's built-in modules are importable by the untrusted
code: the stdlib lives under /root here (mode 700), unreadable to the sandbox uid, so every other
import fails (reason "forbidden").
The boundary is the kernel (uid, namespaces, rlimits), not Python: the untrusted code may reach
`ctypes` or `os`, and gains nothing a process of an unprivileged uid could not already do.
"""
import builtins
import ctypes
import gc
import json
import os
import random
import re
import resource
import select
import signal
import struct
import sys
import time

# What untrusted programs may import (each also brings its own dependencies into sys.modules).
PREIMPORT = (
    "abc", "array", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "collections.abc",
    "contextlib", "copy", "dataclasses", "datetime", "_strptime", "decimal", "enum", "fractions", "functools",
    "hashlib", "heapq", "io", "itertools", "json", "keyword", "math", "numbers", "operator", "pprint",
    "queue", "random", "re", "socket", "statistics", "string", "struct", "textwrap", "threading", "time",
    "traceback", "types", "typing", "unicodedata", "zlib",
    # codecs are looked up lazily (str.encode, socket names): load the common ones now
    "encodings.ascii", "encodings.idna", "encodings.latin_1", "encodings.raw_unicode_escape",
    "encodings.unicode_escape", "encodings.utf_16", "encodings.utf_32",
)
for _name in PREIMPORT:
    __import__(_name)

libc = ctypes.CDLL(None, use_errno=True)
libc.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_SLEEP_FN = ctypes.cast(libc.sleep, ctypes.c_void_p)               # what a namespace's init runs
_INIT_STACK = ctypes.create_string_buffer(1 << 16)                 # ... on this stack
_INIT_STACK_TOP = ctypes.c_void_p((ctypes.addressof(_INIT_STACK) + (1 << 16)) & ~15)
CLONE_VM = 0x00000100
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 18, 1 << 21, 1 << 24
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
MOUNT_OPTION_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                      "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
RESULT_FD = 3
INIT_LIFE_S = 15          # a namespace's init (sleep) ends by itself after this (or 2 wall limits + 10 s):
                          # the bound on how long it outlives a killed zygote; an older one is renewed
MAX_NODES = 100_000       # plain-data nodes in one output
MAX_CHARS = 1_000_000     # characters of strings in one output
MAX_DEPTH = 32            # nesting of lists/dicts in one output
MSG_CHARS = 200           # exception message kept per test

# The serialiser's own references, taken before any untrusted code runs (a patched builtin
# cannot change what it checks; the parent re-checks everything anyway).
_type, _len, _str, _isfinite = builtins.type, builtins.len, builtins.str, __import__("math").isfinite
_isinstance, _getattr = builtins.isinstance, builtins.getattr
_callable, _enumerate = builtins.callable, builtins.enumerate
_encode = json.encoder.c_make_encoder(  # the C encoder: no Python-level builtins on its path
    None, None, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)


def _dumps(obj) -> str:
    """Compact ASCII JSON of plain data; ValueError for nan/inf."""
    return "".join(_encode(obj, 0))


_write, _exit, _getpid = os.write, os._exit, os.getpid
_reporter = [0]   # pid of the executing child: a process it forked that runs into this code exits quietly


def _check(call: str, rc: int) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{call}: {os.strerror(e)}")


def unshare(flags: int) -> None:
    _check(f"unshare({flags:#x})", libc.unshare(flags))


def mount(source, target, fstype, flags: int, data=None) -> None:
    def enc(s):
        return None if s is None else s.encode()
    _check(f"mount({target})", libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)))


def prctl(option: int, value: int) -> None:
    _check(f"prctl({option})", libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0))


# ----------------------------------------------------------------------------- framing

def read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while _len(buf) < n:
        chunk = os.read(fd, n - _len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[_write(fd, view):]


def send_frame(fd: int, payload: bytes) -> None:
    write_all(fd, struct.pack(">I", _len(payload)) + payload)


def recv_frame(fd: int) -> bytes | None:
    head = read_exact(fd, 4)
    return None if head is None else read_exact(fd, struct.unpack(">I", head)[0])


# ----------------------------------------------------------------------------- start-up (as root)

def _mounts() -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) for every mount, parents before children."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # e.g. \040 = space
            out.append((point, set(fields[5].split(","))))
    return out


def _isolate_filesystem(hidden: list[str], tmpfs_mb: int) -> dict:
    """Private mount namespace: every mount read-only, a fresh /proc that shows other uids nothing
    (hidepid), a fresh tmpfs on /tmp (root-owned; each execution gets its own directory in it),
    and each hidden path under an empty mode-000 tmpfs."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    readonly_ok = True
    for point, opts in _mounts():
        if "ro" in opts:
            continue
        keep = sum(flag for name, flag in MOUNT_OPTION_FLAGS.items() if name in opts)
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
        except OSError:
            readonly_ok = readonly_ok and point not in ("/", "/tmp", "/var/tmp", "/dev/shm", "/run")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "hidepid=invisible")
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,nr_inodes=4096,mode=711")
    hidden_ok = []
    for path in sorted(hidden):  # parents first: a path inside a hidden path is hidden with it
        if any(path.startswith(h.rstrip("/") + "/") for h in hidden_ok):
            hidden_ok.append(path)
        elif path == "/tmp":
            hidden_ok.append(path)  # the fresh tmpfs replaced it
        elif path.startswith("/tmp/"):
            # it went with the old /tmp; an empty mode-000 stand-in answers like any hidden path
            os.makedirs(path, exist_ok=True)
            os.chmod(path, 0)
            hidden_ok.append(path)
        elif os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=1,mode=000")
            hidden_ok.append(path)
    return {"readonly_fs": readonly_ok, "hidden_paths": hidden_ok, "private_tmp": True, "proc_hidepid": True}


def _close_sysv_ipc() -> None:
    """In this (new) IPC namespace no SysV segment, semaphore set or queue can be created, and
    no POSIX queue: nothing an execution leaves behind can reach the next one."""
    for name, value in (("kernel/shmmni", "0"), ("kernel/msgmni", "0"), ("kernel/sem", "0 0 0 0"),
                        ("fs/mqueue/queues_max", "0")):
        with open(f"/proc/sys/{name}", "w") as f:
            f.write(value)


def _start_reaper(uid: int) -> tuple[int, int, int]:
    """A process holding the sandbox uid, outside every execution's PID namespace: on request it
    sends SIGKILL to every process of that uid (kill(-1) spares the caller). Returns (pid, to, from)."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(to_r, 0)
            os.dup2(from_w, 1)
            os.closerange(2, 1 << 16)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid: a credential change clears it
            while os.read(0, 1):
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass  # ESRCH: nothing of this uid is left
                os.write(1, b"k")
        finally:
            _exit(0)
    os.close(to_r)
    os.close(from_w)
    return pid, to_w, from_r


class Zygote:
    def __init__(self, cfg: dict):
        self.uid = cfg["uid"]
        self.limits = cfg["limits"]
        self.root = os.geteuid() == 0
        self.caps = {"root": self.root, "hash_seed": os.environ.get("PYTHONHASHSEED"), "pid": os.getpid(),
                     "mount_namespace": False, "net_namespace": False, "pid_namespace": False,
                     "ipc_namespace": False, "readonly_fs": False, "hidden_paths": [], "private_tmp": False,
                     "proc_hidepid": False,
                     "drop_uid": self.root, "uid_kill": False, "rlimits": True, "no_new_privs": True,
                     "errors": []}
        if cfg["namespaces"] and self.root:
            try:
                unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)
                self.caps["net_namespace"] = True
                _close_sysv_ipc()
                self.caps["ipc_namespace"] = True
                self.caps.update(_isolate_filesystem(cfg["hidden_paths"], self.limits["tmpfs_mb"]))
                self.caps["mount_namespace"] = True
            except OSError as e:
                self.caps["errors"].append(_str(e))
        os.chdir("/")  # the old cwd may lie under a hidden path
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.init_life = max(INIT_LIFE_S, int(2 * self.limits["wall_s"]) + 10)
        self.init_pid, self.init_born = None, 0.0
        if cfg["namespaces"] and self.root and self.caps["mount_namespace"]:
            try:  # probe: a PID namespace with its init, then back to ours
                unshare(CLONE_NEWPID)
                try:
                    self.init_pid = self._spawn_init()
                    self._kill_init()
                finally:
                    _check("setns", libc.setns(self.own_pidns, CLONE_NEWPID))
                self.caps["pid_namespace"] = True
            except OSError as e:
                self.caps["errors"].append(_str(e))
        self.reaper = _start_reaper(self.uid) if self.root else None
        self.caps["uid_kill"] = self.reaper is not None
        self.caps["reaper_pid"] = self.reaper[0] if self.reaper else None
        self.seq = 0
        self.leftover: str | None = None  # the last execution's directory, removed by clean_up()
        self.workdir = ""

    # ------------------------------------------------------------------------- one execution
    def prepare(self) -> None:
        """Between requests: the next execution's directory and, with namespaces, its PID namespace
        and that namespace's init, so that a request only has to fork."""
        self.seq += 1
        self.workdir = f"/tmp/sandbox-{os.getpid()}-{self.seq}"
        os.mkdir(self.workdir, 0o700)
        if self.root:
            os.chown(self.workdir, self.uid, self.uid)
        if self.caps["pid_namespace"]:
            unshare(CLONE_NEWPID)  # our next child is PID 1 of a new namespace, later ones join it
            self.init_pid, self.init_born = self._spawn_init(), time.monotonic()

    def _renew_init(self) -> None:
        """Replace a prepared init that died or is near the end of its life."""
        self._kill_init()
        _check("setns", libc.setns(self.own_pidns, CLONE_NEWPID))
        unshare(CLONE_NEWPID)
        self.init_pid, self.init_born = self._spawn_init(), time.monotonic()

    def close(self) -> None:
        """End of service: the prepared namespace and directory go too."""
        self._kill_init()
        self.leftover = self.workdir
        self.clean_up()

    def _kill_init(self) -> None:
        if self.init_pid is not None:
            try:
                os.kill(self.init_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.init_pid, 0)  # returns once every process of the namespace is gone
            self.init_pid = None

    def execute(self, req: dict) -> tuple[dict, bytes]:
        lim, ns, init_pid = self.limits, self.caps["pid_namespace"], self.init_pid
        if ns and os.waitpid(init_pid, os.WNOHANG)[0] != 0:
            self.init_pid = None  # it died (and is now reaped): start another
        if ns and (self.init_pid is None or time.monotonic() - self.init_born > self.init_life - lim["wall_s"] - 5):
            self._renew_init()
            init_pid = self.init_pid
        t0 = time.monotonic()
        res_r, res_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            _run_child(req, lim, self.uid if self.root else None, res_w, out_w, self.workdir)
        if ns:
            _check("setns", libc.setns(self.own_pidns, CLONE_NEWPID))
        os.close(res_w)
        os.close(out_w)
        header, result = self._supervise(pid, init_pid, res_r, out_r, t0 + lim["wall_s"])
        self.init_pid = None  # killed and reaped by _supervise
        os.close(res_r)
        os.close(out_r)
        self.leftover = self.workdir
        header["wall_s"] = round(time.monotonic() - t0, 6)
        return header, result

    def _spawn_init(self) -> int:
        """PID 1 of the fresh PID namespace: a process that shares this one's memory (clone with
        CLONE_VM: nothing is copied) and only runs libc sleep(init_life) on a stack of its own. It
        never touches Python state, ends by itself after `init_life` seconds (so it cannot outlive a
        dead zygote for long), and starts with every signal blocked but SIGKILL."""
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            pid = libc.clone(_SLEEP_FN, _INIT_STACK_TOP, CLONE_VM | signal.SIGCHLD, self.init_life)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        if pid <= 0:
            e = ctypes.get_errno()
            raise OSError(e, f"clone of a namespace init: {os.strerror(e)}")
        return pid

    def _supervise(self, pid: int, init_pid: int | None, res_r: int, out_r: int, deadline: float):
        """Collect the result and output pipes until the child exits or a limit is hit; then kill
        everything the execution started, reap it, and drain what it wrote."""
        lim = self.limits
        pidfd = os.pidfd_open(pid)
        pipes = {res_r: bytearray(), out_r: bytearray()}
        counts = {res_r: 0, out_r: 0}
        caps = {res_r: (lim["result_bytes"] + 1, lim["result_bytes"], "result_limit"),
                out_r: (lim["output_head"], lim["output_bytes"], "output_limit")}

        def pump(fd: int) -> str | None:
            """Read one chunk; keep up to the kept-bytes cap; None, or the fate if over the limit."""
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                return None
            keep, limit, over = caps[fd]
            counts[fd] += _len(chunk)
            if _len(pipes[fd]) < keep:
                pipes[fd] += chunk[: keep - _len(pipes[fd])]
            return over if counts[fd] > limit else None

        fate, open_fds = None, {res_r, out_r}
        while fate is None:
            left = deadline - time.monotonic()
            if left <= 0:
                fate = "timeout"
                break
            ready, _, _ = select.select([pidfd, *open_fds], [], [], left)
            for fd in ready:
                fate = fate or ("ended" if fd == pidfd else pump(fd))
        self._kill_all(pid, init_pid)
        _, status = os.waitpid(pid, 0)
        os.close(pidfd)
        if init_pid is not None:
            os.waitpid(init_pid, 0)  # returns once every process of the namespace is gone
        else:
            self._kill_uid()  # no PID namespace: the uid kill is the only sweep, so before answering
        drain_until = time.monotonic() + 1.0  # writers are dead; only a degraded-mode escapee could linger
        while open_fds and time.monotonic() < drain_until:
            ready, _, _ = select.select(list(open_fds), [], [], max(0.0, drain_until - time.monotonic()))
            for fd in ready:
                over = pump(fd)
                if fate == "ended" and over is not None:
                    fate = over
        header = {"fate": fate, "exit_code": os.waitstatus_to_exitcode(status), "reaper_pid": self.caps["reaper_pid"],
                  "output_head": bytes(pipes[out_r]).decode("utf-8", "replace"), "output_bytes": counts[out_r],
                  "result_bytes": counts[res_r]}
        return header, bytes(pipes[res_r])

    def _kill_all(self, pid: int, init_pid: int | None) -> None:
        if init_pid is not None:
            os.kill(init_pid, signal.SIGKILL)  # the namespace's init: the kernel kills the rest
        for target in ((-pid, pid) if init_pid is None else (pid,)):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def clean_up(self) -> None:
        """After the answer is sent, before the next request: SIGKILL to everything still owned by
        the sandbox uid (belt and braces: the PID namespace is already empty), and remove the
        execution's directory."""
        if self.leftover is not None:
            self._kill_uid()
            _remove_tree(self.leftover)
            self.leftover = None

    def _kill_uid(self) -> None:
        """Every process still owned by the sandbox uid gets SIGKILL (from the reaper)."""
        if self.reaper is None:
            return
        for _ in range(2):
            pid, to_w, from_r = self.reaper
            try:
                os.write(to_w, b"k")
                if os.read(from_r, 1) == b"k":
                    return
            except OSError:
                pass
            for fd in (to_w, from_r):
                os.close(fd)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            self.reaper = _start_reaper(self.uid)
            self.caps["reaper_pid"] = self.reaper[0]


def _remove_tree(path: str) -> None:
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(root, name))
        for name in dirs:
            p = os.path.join(root, name)
            os.unlink(p) if os.path.islink(p) else os.rmdir(p)
    os.rmdir(path)


# ----------------------------------------------------------------------------- inside the namespace

def _run_child(req: dict, lim: dict, uid: int | None, res_w: int, out_w: int, workdir: str) -> None:
    """The executing child: isolate, limit, drop privileges, run. Never returns."""
    _reporter[0] = _getpid()
    try:
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.dup2(res_w, RESULT_FD)
        os.set_inheritable(RESULT_FD, False)
        os.closerange(RESULT_FD + 1, 1 << 16)
        os.setsid()  # own process group: kill(0) and killpg reach only this execution
        os.chdir(workdir)
        mib = 1 << 20
        limits = [
            (resource.RLIMIT_AS, lim["memory_mb"] * mib, lim["memory_mb"] * mib),
            (resource.RLIMIT_CPU, lim["cpu_s"], lim["cpu_s"] + 1),
            (resource.RLIMIT_FSIZE, lim["file_mb"] * mib, lim["file_mb"] * mib),
            (resource.RLIMIT_NOFILE, lim["nofile"], lim["nofile"]),
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_MEMLOCK, 0, 0),
            (resource.RLIMIT_MSGQUEUE, 0, 0),
        ]
        if uid is not None:  # counts every process of the uid: only meaningful for the sandbox uid
            limits.append((resource.RLIMIT_NPROC, lim["nproc"] + 1, lim["nproc"] + 1))  # +1: the reaper
        for res, soft, hard in limits:
            resource.setrlimit(res, (soft, hard))
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid: a credential change clears it
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LC_ALL": "C.UTF-8"})
        random.seed(req["seed"])
        heap_noise = [object() for _ in range(req["heap_noise"])]  # shifts id() of what follows
    except BaseException as e:  # noqa: BLE001 - report any set-up failure, then die
        _emit({"stage": "setup", **_describe(e)})
        _exit(70)
    _execute(req["source"], req["func"], req["inputs"])
    del heap_noise
    _exit(0)


def _execute(source: str, func: str, inputs: list) -> None:
    try:
        code = compile(source, "<candidate>", "exec")
    except BaseException as e:  # noqa: BLE001
        _emit({"stage": "compile", **_describe(e)})
        return
    scope = {"__name__": "__candidate__", "__builtins__": builtins}
    try:
        exec(code, scope)  # noqa: S102 - this process is the sandbox
    except BaseException as e:  # noqa: BLE001
        _flush_stdio()
        _emit({"stage": "load", **_describe(e)})
        return
    fn = scope.get(func)
    if not _callable(fn):
        _emit({"stage": "load", "exc": "NameError", "errno": None, "msg": f"no callable {func!r} defined"})
        return
    for k, arg in _enumerate(inputs):
        try:
            value = fn(arg)
        except BaseException as e:  # noqa: BLE001
            _emit({"i": k, **_describe(e)})
            continue
        why = _plain_problem(value)
        if why is not None:
            _emit({"i": k, "bad": why})
            continue
        try:
            line = _dumps({"i": k, "out": value})
        except (ValueError, OverflowError, RecursionError) as e:
            _emit({"i": k, "bad": f"not encodable: {_str(e)[:MSG_CHARS]}"})
            continue
        except MemoryError:
            _emit({"i": k, "exc": "MemoryError", "errno": None, "msg": "while encoding the output"})
            continue
        _emit_line(line.encode("ascii") + b"\n")
        del value, line
    _flush_stdio()
    _emit({"done": _len(inputs)})


def _flush_stdio() -> None:
    """So that what the program printed reaches the output pipe (kept for diagnostics)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass


def _describe(e: BaseException) -> dict:
    try:
        msg = _str(e)[:MSG_CHARS]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        msg = "<unprintable>"
    err = _getattr(e, "errno", None) if _isinstance(e, OSError) else None
    name = _type(e).__name__
    return {"exc": name if _type(name) is _str else "?", "errno": err if _type(err) is int else None, "msg": msg}


def _emit_line(line: bytes) -> None:
    """Write one result line at once (a timeout keeps the tests reported before it)."""
    if _getpid() != _reporter[0]:
        _exit(0)
    write_all(RESULT_FD, line)


def _emit(obj: dict) -> None:
    try:
        _emit_line(_dumps(obj).encode("ascii") + b"\n")
    except BaseException:  # noqa: BLE001 - e.g. no memory left, or the pipe closed
        try:
            write_all(RESULT_FD, b'{"stage":"emit","exc":"EmitError","errno":null,"msg":""}\n')
        except BaseException:  # noqa: BLE001
            pass


def _plain_problem(value) -> str | None:
    """None if `value` is plain data (exact types: None, bool, int, finite float, str, list,
    dict with str keys), within MAX_NODES / MAX_CHARS / MAX_DEPTH; otherwise why not."""
    stack, nodes, chars = [(value, 0)], 0, 0
    while stack:
        x, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            return f"more than {MAX_NODES} values"
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH}"
        t = _type(x)
        if x is None or t is bool or t is int:
            continue
        if t is float:
            if not _isfinite(x):
                return "non-finite float"
        elif t is str:
            chars += _len(x)
            if chars > MAX_CHARS:
                return f"more than {MAX_CHARS} characters"
        elif t is list:
            if _len(x) > MAX_NODES:
                return f"more than {MAX_NODES} values"
            stack.extend((e, depth + 1) for e in x)
        elif t is dict:
            if _len(x) > MAX_NODES:
                return f"more than {MAX_NODES} values"
            for key, v in x.items():
                if _type(key) is not str:
                    return "dict key that is not a str"
                chars += _len(key)
                stack.append((v, depth + 1))
        else:
            return f"not plain data: {t.__name__ if _type(t.__name__) is _str else '?'}"
    return None


# ----------------------------------------------------------------------------- main loop

def main() -> None:
    cfg = json.loads(sys.argv[1])
    ctl_in, ctl_out = os.dup(0), os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    # No parent-death signal here: it fires when the parent *thread* ends, and a pool may be started
    # from any thread. The parent's death closes the request pipe instead: EOF ends the loop below.
    zygote = Zygote(cfg)
    gc.collect()
    gc.freeze()  # children never touch these objects' GC headers: fewer copy-on-write pages
    zygote.prepare()
    send_frame(ctl_out, _dumps({"hello": zygote.caps}).encode())
    while True:
        frame = recv_frame(ctl_in)
        if frame is None:
            break
        header, result = zygote.execute(json.loads(frame))
        head = _dumps(header).encode()
        try:
            write_all(ctl_out, struct.pack(">I", _len(head)) + head + struct.pack(">I", _len(result)) + result)
        except BrokenPipeError:
            break  # the parent is gone
        zygote.clean_up()
        zygote.prepare()
    zygote.close()
    _exit(0)


if __name__ == "__main__":
    main()

"""The sandbox worker ("zygote"): a warm, pre-imported interpreter that forks one child per execution.

Standard library only. `harness.sandbox.execution` starts it as a fresh interpreter with no
site-packages, its source being three files run as one, in one namespace, in this order:

    <real python> -S -s -B -P -c '<read the parts and exec them as one source>' \
        harness/sandbox/seccomp.py harness/sandbox/isolation.py harness/sandbox/worker.py

seccomp.py builds the filter, isolation.py the start-up as root (the allow-list root, the user
namespace, the reaper), and this file holds the zygote, the executing child and its serialiser.
Imported as modules (the tests do), the parts import what they use from each other instead.

with PYTHONHASHSEED set by the pool (`-I`/`-E` would ignore it) and fd 0 a SOCK_SEQPACKET unix socket
to the pool (the control channel), on which its JSON configuration arrives first (not in argv: the
argument strings stay in this process's memory, which every execution's is a copy of). At start-up
it sets what a launcher leaves to its children to fixed values (file mode mask, signal dispositions
and mask, thread stack size); as root it joins its worker's memory and CPU cgroups, enters
new mount, network, IPC (SysV IPC and POSIX queues switched off) and UTS (fixed host and domain
names) namespaces, and builds an
allow-list root: a tmpfs holding copies (no host inode) of the interpreter, the shared objects this
process has mapped and the allowed modules' sources, /dev/{null,zero,full,random,urandom} made here,
an empty /tmp and a root-only /.zygote/proc for its own use; it pivots into it and detaches the old
root. Nothing else of the host's tree exists in there: no /proc, no /sys, no /etc. It makes a user
namespace owned by the sandbox uid in which that uid and gid are INNER_ID (the executions join it),
then forks a "reaper" that holds the sandbox uid and serves requests, one at a time:

    pool -> zygote: b"x" + tag carrying four fds (SCM_RIGHTS): request pipe (read end), result,
                    output and set-up report pipes (write ends)
    pool -> zygote: b"k" + tag while it runs: kill it now (the pool saw an output limit)
    zygote -> pool: b"h" + tag + how it ended (b"e" exited, b"t" wall limit, b"k" killed) + wait
                    status (int) + struct rusage + a housekeeping failure, if any

Nothing of an execution passes through the zygote: the child reads its own request and writes
its results, output and set-up report straight to the pool; the zygote sees only when the child
ends; its exit status and rusage go from wait4 to the pool through two ctypes buffers, zeroed at
once. Between requests the zygote mounts a fresh tmpfs on /tmp (owned by
the sandbox uid) and unshares a PID namespace whose PID 1 is a placeholder (libc sleep() in a
CLONE_VM clone; killing it kills every process of the namespace, setsid() or not); per request it
forks the executing child (PID 2), which empties its copy of the zygote object, reads the request, makes its
working directory in /tmp, sets every rlimit (soft = hard), joins the user namespace as INNER_ID
with no capabilities and no_new_privs, installs a seccomp filter (below), writes "set up" on a
pipe it then closes (so the program can never speak on it), and runs the program.

After it: SIGKILL to the namespace's init (the kernel kills the rest), then the tmpfs is detached
(umount2 MNT_DETACH: whatever the program left there goes with it, nothing is walked). Without PID
namespaces (degraded) the reaper kills everything left with the sandbox uid instead. No execution
can hold network state: socket() and socketpair() are refused (seccomp), so the worker's network
namespace (loopback only, down) holds no socket, abstract unix name, flow label or counter an
execution could mark for the next, and none of it can be read (no /proc, no /sys). A namespace per
execution would cost a netns creation and its teardown (about a tenth of a verdict) for nothing.
The zygote never collects garbage after start-up; the child collects once and enables the
collector, so every program starts from the same collector state. The child gets the
test inputs only, never expected outputs; it writes one JSON line per test to fd 3:

    {"i": k, "out": <plain data>} | {"i": k, "exc": "TypeName", "errno": n, "msg": "..."} |
    {"i": k, "bad": "why"}        | {"stage": "compile"|"load"|"emit", "exc": ..., ...} | {"done": n}

The untrusted code shares the child with this serialiser and can write anything to fd 3; the trusted
pool parses the bytes (bounded) and is the only one that compares them with expected outputs.

Seccomp: a BPF program built by hand, no library (seccomp.py says what it refuses), installed by
each executing child after its uid drop.

Only modules already loaded here (PREIMPORT, what they import, and this worker's own) and the
interpreter's built-in modules are importable by the untrusted code: no other module file exists
inside the root (reason "forbidden"). The boundary is the kernel (uid, namespaces, seccomp, rlimits),
not Python: the untrusted code may reach `ctypes` or `os`, and gains nothing a process of an
unprivileged uid could not already do inside that root.
"""
import builtins
import ctypes
import fcntl
import gc
import json
import os
import random
import resource
import select
import signal
import socket
import struct
import sys
import time
from _thread import stack_size as _thread_stack_size

if __name__ != "__main__":  # imported as a module (the tests); in the zygote the parts share one namespace
    from harness.sandbox.seccomp import (
        CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER, CLONE_NEWUTS, CLONE_VM, _SECCOMP,
    )
    from harness.sandbox.isolation import (
        DOMAINNAME, HOSTNAME, INNER_ID, MNT_DETACH, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_PRIVATE, MS_REC,
        PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_THP_DISABLE,
        PR_SET_TIMERSLACK, ZYGOTE_PROC, _PRCTL, _build_root, _callable, _check, _close_sysv_ipc, _enumerate, _exit,
        _getattr, _getpid, _isfinite, _isinstance, _join_cgroup, _len, _make_userns, _set_caps, _start_reaper,
        _str, _type, libc, mount, prctl, unshare, write_all,
    )

_SLEEP_FN = ctypes.cast(libc.sleep, ctypes.c_void_p)               # what a namespace's init runs
_INIT_STACK = ctypes.create_string_buffer(1 << 16)                 # ... on this stack
_INIT_STACK_TOP = ctypes.c_void_p((ctypes.addressof(_INIT_STACK) + (1 << 16)) & ~15)
TIMER_SLACK_NS = 50_000   # the kernel's default; the launcher's own would otherwise be inherited
THREAD_STACK = 8 << 20    # every thread's stack (else the launcher's RLIMIT_STACK at its start decides it)
RESULT_FD = 3
INIT_LIFE_S = 30          # a namespace's init (sleep) ends by itself after this (or 2 wall limits + 30 s):
                          # the bound on how long it outlives a killed zygote; an older one is renewed
SLACK_S = 10              # the pool's slack beyond the wall limit (harness.sandbox.execution.SLACK_S)
MAX_NODES = 100_000       # plain-data nodes in one output
MAX_CHARS = 1_000_000     # characters of strings in one output
MAX_DEPTH = 32            # nesting of lists/dicts in one output
MSG_CHARS = 200           # exception message kept per test
REQUEST_BYTES = 1 << 24   # the largest request a child reads

_encode = json.encoder.c_make_encoder(  # the C encoder: no Python-level builtins on its path
    None, None, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)


def _dumps(obj) -> str:
    """Compact ASCII JSON of plain data; ValueError for nan/inf."""
    return "".join(_encode(obj, 0))

_reporter = [0]   # pid of the executing child: a process it forked that runs into this code exits quietly


class _Rusage(ctypes.Structure):
    """struct rusage (Linux, 64-bit): ru_utime, ru_stime (timevals), then 14 longs."""
    _fields_ = [("utime_s", ctypes.c_long), ("utime_us", ctypes.c_long), ("stime_s", ctypes.c_long),
                ("stime_us", ctypes.c_long)] + [(f"field{i}", ctypes.c_long) for i in range(14)]


# An execution's exit status and resource usage pass through these two buffers (libc wait4 writes
# them, sendmsg sends them from here, then they are zeroed): no Python object ever holds them.
_STATUS, _RUSAGE = ctypes.c_int(0), _Rusage()
libc.wait4.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.POINTER(_Rusage)]
TAG_BYTES = 12            # the pool's nonce naming one execution


class Zygote:
    """The warm process: forks one child per execution and tears its namespace down afterwards. It
    never holds anything of an execution: the request, results, output and set-up report travel on
    pipes between the child and the pool; the pool watches the child (a pidfd) and says when it is
    over; the exit status and resource usage go from the kernel to the pool through two ctypes
    buffers that are zeroed at once. What a later child inherits of the zygote's memory was never
    touched by an earlier execution's data."""

    def __init__(self, cfg: dict):
        self.uid = cfg["uid"]
        self.limits = cfg["limits"]
        self.root = os.geteuid() == 0
        self.caps = {"root": self.root, "hash_seed": cfg.get("hash_seed"), "pid": os.getpid(),
                     "mount_namespace": False, "net_namespace": False, "pid_namespace": False,
                     "ipc_namespace": False, "allowlist_root": False, "root_switch": None, "private_tmp": False,
                     "proc_hidden": False, "drop_uid": self.root, "uid_kill": False, "rlimits": True,
                     "no_new_privs": True, "seccomp": False, "memory_cgroup": False, "user_namespace": False,
                     "uts_namespace": False, "errors": []}
        try:
            self.caps["memory_cgroup"] = _join_cgroup(cfg.get("cgroup_procs") or [])
        except OSError as e:
            self.caps["errors"].append(f"cgroup: {e}")
        if self.root:
            try:
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("-1000")  # under the pool's memory cap the executions go first, never the zygote
            except OSError:
                pass  # not permitted here (a container): the executions' +1000 still makes them go first
        self.isolated, self.userns = False, None
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        if cfg["namespaces"] and self.root:
            try:
                unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
                _close_sysv_ipc()
                self.caps["ipc_namespace"] = True
                socket.sethostname(HOSTNAME)
                _check("setdomainname", libc.setdomainname(DOMAINNAME.encode(), _len(DOMAINNAME)))
                mount(None, "/", None, MS_REC | MS_PRIVATE)
                self.caps["root_switch"] = _build_root()
                self.isolated = True
                # stdin: this root's own /dev/null, not the host's inode (whose flock every worker shares)
                devnull = os.open("/dev/null", os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
                os.close(devnull)
            except OSError as e:
                self.caps["errors"].append(_str(e))
        if self.isolated:
            try:
                self.userns = _make_userns(self.uid)
            except OSError as e:
                self.caps["errors"].append(f"user namespace: {e}")
        os.chdir("/")
        self.init_life = max(INIT_LIFE_S, int(2 * self.limits["wall_s"]) + 3 * SLACK_S)
        self.init_pid, self.init_born, self.child = None, 0.0, None
        self.reaper = _start_reaper(self.uid) if self.root else None
        self.caps["uid_kill"] = self.reaper is not None
        self.caps["reaper_pid"] = self.reaper[0] if self.reaper else None
        self.host_tmp = None
        if not self.isolated:  # degraded: executions work in directories under a private host directory
            self.host_tmp = f"/tmp/harness-sandbox-{os.getpid()}"
            os.mkdir(self.host_tmp, 0o711)
        self._probe()

    def _probe(self) -> None:
        """One empty execution, set up exactly like a real one in a throwaway process, proves that the
        per-execution namespaces, mounts, uid drop and seccomp filter work here."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                os.close(r)
                if self.isolated:
                    unshare(CLONE_NEWPID)
                    self.init_pid = self._spawn_init()
                    self._mount_tmp()
                child = os.fork()
                if child == 0:
                    try:
                        if self.isolated:
                            _oom_first()
                        _drop_privileges(self.uid if self.root else None, self.limits, self.userns)
                        if self.userns is not None and (os.getuid(), os.getgid()) != (INNER_ID, INNER_ID):
                            raise OSError(0, "the user namespace did not map the worker's uid")
                        os.write(w, b"\x01")
                    except BaseException as e:  # noqa: BLE001 - what failed goes to the pool's stderr tail
                        os.write(2, f"probe: {e!r}\n".encode())
                    finally:
                        _exit(0)
                os.waitpid(child, 0)
                self._kill_init()
                ok = not self.isolated or not self._unmount_tmp()
            finally:
                _exit(0 if ok else 1)
        os.close(w)
        ok = os.read(r, 1) == b"\x01"
        os.close(r)
        os.waitpid(pid, 0)
        if not ok:
            self.caps["errors"].append("the probe execution could not be set up")
            return
        self.caps["seccomp"] = _SECCOMP is not None
        if self.isolated:
            self.caps.update(pid_namespace=True, mount_namespace=True, net_namespace=True, allowlist_root=True,
                             private_tmp=True, proc_hidden=True, uts_namespace=True,
                             user_namespace=self.userns is not None)

    def _mount_tmp(self) -> None:
        """The next execution's /tmp: a fresh tmpfs owned by the sandbox uid."""
        lim = self.limits
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              f"size={lim['tmpfs_mb']}m,nr_inodes=4096,mode=700,uid={self.uid},gid={self.uid}")

    def _unmount_tmp(self) -> str:
        """Detach the last execution's tmpfs, whatever is in it ("" or why not): nothing is walked."""
        if libc.umount2(b"/tmp", MNT_DETACH) != 0:
            return f"umount2(/tmp): {os.strerror(ctypes.get_errno())}"
        return ""

    # ------------------------------------------------------------------------- serving
    def serve(self, ctl: socket.socket) -> None:
        """One execution per request until the pool is gone. However it ends (an error included), the
        prepared namespace's init is killed: it ignores every signal but SIGKILL and would otherwise
        sleep on, orphaned, for its whole life."""
        try:
            self.prepare()
            while True:
                try:
                    msg, fds, _, _ = socket.recv_fds(ctl, 64, 4)
                except OSError:
                    break  # the pool is gone: closed with our last answer unread, its end reports a reset
                if msg[:1] == b"k" and not fds:
                    continue  # a kill for an execution that has already ended
                if msg[:1] != b"x" or _len(msg) != 1 + TAG_BYTES or _len(fds) != 4:
                    for fd in fds:
                        os.close(fd)
                    break  # EOF (the pool is gone) or a protocol error
                self.tag = msg[1:]
                del msg
                if not self.execute(fds, ctl):
                    break
                self.prepare()
        finally:
            self._kill_init()

    def prepare(self) -> None:
        """Between requests: with namespaces, the next execution's tmpfs, PID namespace and init."""
        if self.isolated:
            self._mount_tmp()
        if self.caps["pid_namespace"]:
            unshare(CLONE_NEWPID)  # our next child is PID 1 of a new namespace, later ones join it
            self.init_pid, self.init_born = self._spawn_init(), time.monotonic()

    def _renew_init(self) -> None:
        """Replace a prepared init that died or is near the end of its life."""
        self._kill_init()
        _check("setns", libc.setns(self.own_pidns, CLONE_NEWPID))
        unshare(CLONE_NEWPID)
        self.init_pid, self.init_born = self._spawn_init(), time.monotonic()

    def execute(self, fds: list[int], ctl: socket.socket) -> bool:
        """Fork the child with the request's fds (closed here at once), wait until it exits, the
        wall limit passes or the pool asks for a kill (it saw an output limit), kill and reap
        everything, send how it ended with the raw exit status and rusage. False when the pool is
        gone."""
        lim, ns = self.limits, self.caps["pid_namespace"]
        if ns and os.waitpid(self.init_pid, os.WNOHANG)[0] != 0:
            self.init_pid = None  # it died (and is now reaped): start another
        if ns and (self.init_pid is None or time.monotonic() - self.init_born > self.init_life - lim["wall_s"] - SLACK_S):
            self._renew_init()
        self.workdir = None
        if not self.isolated:
            self.workdir = f"{self.host_tmp}/w"
            os.mkdir(self.workdir, 0o700)
            if self.root:
                os.chown(self.workdir, self.uid, self.uid)
        self.child = os.fork()
        if self.child == 0:
            _run_child(self, fds, lim)
        if ns:
            _check("setns", libc.setns(self.own_pidns, CLONE_NEWPID))
        for fd in fds:
            os.close(fd)
        fate, going = self._watch(ctl, time.monotonic() + lim["wall_s"])
        self._kill_all()
        libc.wait4(self.child, ctypes.byref(_STATUS), 0, ctypes.byref(_RUSAGE))
        self.child = None
        self._kill_init()  # returns once every process of the namespace is gone
        if not ns:
            self._kill_uid()  # without a PID namespace (a program cannot leave one) the uid kill sweeps
        tail = b""
        if self.isolated:
            tail += self._unmount_tmp().encode()
        if self.workdir is not None:
            tail += _remove_tree(self.workdir).encode("utf-8", "replace")
        if self.reaper_failed:
            tail += b"the uid reaper failed"
        try:
            if going:
                ctl.sendmsg([b"h" + self.tag + fate, _STATUS, _RUSAGE, tail])
        except OSError:
            going = False
        ctypes.memset(ctypes.byref(_STATUS), 0, ctypes.sizeof(_STATUS))
        ctypes.memset(ctypes.byref(_RUSAGE), 0, ctypes.sizeof(_RUSAGE))
        return going

    def _watch(self, ctl: socket.socket, deadline: float) -> tuple[bytes, bool]:
        """(how it ended: b"e" exited, b"t" wall limit, b"k" killed at the pool's request; whether the
        pool is still there). Only the timing is seen here, never anything the child wrote."""
        pidfd = os.pidfd_open(self.child)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return b"t", True
                ready = select.select([pidfd, ctl], [], [], left)[0]
                if pidfd in ready:
                    return b"e", True
                if ready:
                    try:
                        msg = ctl.recv(64)
                    except OSError:
                        msg = b""  # the pool is gone (a reset: it closed with something of ours unread)
                    if not msg:
                        return b"k", False
                    if msg == b"k" + self.tag:
                        return b"k", True  # a kill meant for an earlier execution is ignored
        finally:
            os.close(pidfd)

    def _kill_all(self) -> None:
        if self.init_pid is not None:
            os.kill(self.init_pid, signal.SIGKILL)  # the namespace's init: the kernel kills the rest
        for target in ((-self.child, self.child) if self.init_pid is None else (self.child,)):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _kill_init(self) -> None:
        if self.init_pid is not None:
            try:
                os.kill(self.init_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.init_pid, 0)  # returns once every process of the namespace is gone
            self.init_pid = None

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

    reaper_failed = False

    def _kill_uid(self) -> None:
        """Every process still owned by the sandbox uid gets SIGKILL (from the reaper). A reaper
        that does not answer is reported: the pool then replaces this worker."""
        if self.reaper is None:
            return
        _, to_w, from_r = self.reaper
        try:
            os.write(to_w, b"k")
            if os.read(from_r, 1) == b"k":
                return
        except OSError:
            pass
        self.reaper_failed = True


def _remove_tree(path: str) -> str:
    """Degraded mode only (no tmpfs of its own): remove an execution's directory bottom-up without
    recursion; returns "" or what could not be removed (the pool then replaces this worker)."""
    stack, order = [path], []
    try:
        while stack:
            d = stack.pop()
            order.append(d)
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        os.chmod(e.path, 0o700)
                        stack.append(e.path)
                    else:
                        os.unlink(e.path)
        for d in reversed(order):
            os.rmdir(d)
    except OSError as e:
        return f"could not remove {path}: {e}"[:200]
    return ""


# ----------------------------------------------------------------------------- inside the namespace

_OOM_ADJ_PATH = f"{ZYGOTE_PROC}/self/oom_score_adj".encode()


def _oom_first() -> None:
    """As root, before the uid drop: this execution is the first to go under the pool's memory cap.
    (os-level calls: a Python file object's layers cost a tenth of a millisecond in a fresh child.)"""
    fd = os.open(_OOM_ADJ_PATH, os.O_WRONLY)
    try:
        os.write(fd, b"1000")
    finally:
        os.close(fd)


# Resource limits the zygote can live with itself: set once at its start (soft = hard), inherited by
# every execution. The others (_fixed_rlimits) would bind the zygote, so each execution sets them.
ZYGOTE_RLIMITS = (
    ("RLIMIT_STACK", resource.RLIMIT_STACK, THREAD_STACK),
    ("RLIMIT_LOCKS", getattr(resource, "RLIMIT_LOCKS", 10), 64),   # not exposed by every Python
    ("RLIMIT_SIGPENDING", resource.RLIMIT_SIGPENDING, 1024),
    ("RLIMIT_CORE", resource.RLIMIT_CORE, 0),
    ("RLIMIT_MEMLOCK", resource.RLIMIT_MEMLOCK, 0),
    ("RLIMIT_MSGQUEUE", resource.RLIMIT_MSGQUEUE, 0),
    ("RLIMIT_NICE", resource.RLIMIT_NICE, 0),
    ("RLIMIT_RTPRIO", resource.RLIMIT_RTPRIO, 0),
    ("RLIMIT_RTTIME", resource.RLIMIT_RTTIME, 1_000_000),
)


def _fixed_rlimits(lim: dict, nproc: int | None) -> list[tuple[int, int, int]]:
    """The rest of an execution's resource limits, (resource, soft, hard) with soft = hard: none can
    be raised from inside (RLIMIT_CPU included: with a hard limit above the soft one, a program that
    ignores SIGXCPU could raise its soft limit and compute on), and none is left as the launcher set
    it (with ZYGOTE_RLIMITS, all sixteen)."""
    mib = 1 << 20
    limits = [
        (resource.RLIMIT_AS, lim["memory_mb"] * mib),
        (resource.RLIMIT_DATA, lim["memory_mb"] * mib),
        (resource.RLIMIT_RSS, lim["memory_mb"] * mib),
        (resource.RLIMIT_CPU, lim["cpu_s"]),
        (resource.RLIMIT_FSIZE, lim["file_mb"] * mib),
        (resource.RLIMIT_NOFILE, lim["nofile"]),
    ]
    if nproc is not None:
        limits.append((resource.RLIMIT_NPROC, nproc))
    return [(res, value, value) for res, value in limits]


def _drop_privileges(uid: int | None, lim: dict, userns: int | None = None) -> None:
    """Resource limits, no_new_privs, the sandbox uid (as root), parent-death signal, seccomp. With
    `userns` (an fd to the worker's user namespace) the execution joins it first: its uid and gid
    are then INNER_ID on every worker, and the capabilities a joiner holds there are dropped."""
    # RLIMIT_NPROC counts the processes of a uid: only meaningful for the sandbox uid. In the user
    # namespace it counts this execution's processes alone; without one the reaper shares the uid.
    nproc = None if uid is None else lim["nproc"] + (0 if userns is not None else 1)
    for res, soft, hard in _fixed_rlimits(lim, nproc):
        resource.setrlimit(res, (soft, hard))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if uid is not None:
        ids = uid
        if userns is not None:
            _check("setns(user namespace)", libc.setns(userns, CLONE_NEWUSER))
            ids = INNER_ID
        os.setgroups([])
        os.setresgid(ids, ids, ids)
        os.setresuid(ids, ids, ids)
        if userns is not None:
            _set_caps(effective_as_permitted=False)
    prctl(PR_SET_DUMPABLE, 0)   # else the host's fs.suid_dumpable, set by the uid change, shows
    prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS)
    prctl(PR_SET_THP_DISABLE, 0)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid: a credential change clears it
    if _SECCOMP is not None:
        _check("prctl(PR_SET_SECCOMP)", _PRCTL(PR_SET_SECCOMP, 2, ctypes.addressof(_SECCOMP), 0, 0))


def _read_exact(fd: int, n: int) -> bytes:
    buf = bytearray()
    while _len(buf) < n:
        chunk = os.read(fd, min(1 << 16, n - _len(buf)))
        if not chunk:
            raise EOFError(f"request ended after {_len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _read_request(fd: int) -> dict:
    """One length-prefixed JSON request from the pool's pipe."""
    (size,) = struct.unpack(">I", _read_exact(fd, 4))
    if size > REQUEST_BYTES:
        raise ValueError(f"request of {size} bytes (max {REQUEST_BYTES})")
    return json.loads(_read_exact(fd, size))


def _run_child(zygote: "Zygote", fds: list[int], lim: dict) -> None:
    """The executing child: its namespaces, the request, limits, the sandbox uid, "set up" on a pipe
    the program never sees, then the program. Never returns. The program can walk up to every frame
    of this process: the zygote object loses here what tells one worker from another (its host uid,
    pids, namespace fds, clock) and the host uid leaves this frame once it is used, so nothing of
    the worker is reachable from Python."""
    _reporter[0] = _getpid()
    uid = zygote.uid if zygote.root else None
    isolated, host_workdir, userns = zygote.isolated, zygote.workdir, zygote.userns
    # what tells one worker from another goes (emptying the whole object cost a tenth of a millisecond)
    zygote.uid = zygote.userns = zygote.reaper = zygote.init_pid = zygote.child = zygote.own_pidns = None
    zygote.init_born, zygote.caps, zygote.host_tmp = 0.0, {}, None
    del zygote
    try:
        high = [fcntl_dupfd(fd) for fd in fds]
        req_fd, res_fd, out_fd, ready_fd = high
        if userns is not None:
            userns = fcntl_dupfd(userns)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(res_fd, RESULT_FD)
        os.set_inheritable(RESULT_FD, False)
        os.dup2(req_fd, 4)
        os.dup2(ready_fd, 5)
        if userns is not None:
            os.dup2(userns, 6)
            userns = 6
        os.closerange(7 if userns is not None else 6, 1 << 16)
        req_fd, ready_fd = 4, 5
    except BaseException:  # noqa: BLE001 - no channel to report on: the pool sees no set-up report
        _exit(71)
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the zygote's death ends it
        os.setsid()  # own process group: kill(0) and killpg reach only this execution
        if isolated:
            _oom_first()
        req = _read_request(req_fd)
        os.close(req_fd)
        if isolated:
            workdir = "/tmp/" + _str(req.get("workdir", "work"))
            os.mkdir(workdir, 0o700)
            os.chown(workdir, uid, uid)
        else:
            workdir = host_workdir
        os.chdir(workdir)
        _drop_privileges(uid, lim, userns)
        if userns is not None:
            os.close(userns)
        del uid, userns
        # the rest of the environment (PATH, LC_ALL, TZ) is the zygote's own, set once (_fixed_environment)
        os.environ["HOME"] = os.environ["TMPDIR"] = workdir
        source, func, inputs = req["source"], req["func"], req["inputs"]
        seed, noise = req["seed"], req["heap_noise"]
        del req
        gc.collect()   # the zygote never collects: this child starts from the same collector state
        gc.enable()    # (counts zero, the same statistics) whatever the pool's age
        random.seed(seed)
        heap_noise = [object() for _ in range(noise)]  # shifts id() of what follows
    except BaseException as e:  # noqa: BLE001 - report any set-up failure, then die
        try:
            write_all(ready_fd, b"\x00" + _dumps(_describe(e)).encode("ascii"))
        finally:
            _exit(70)
    write_all(ready_fd, b"\x01")
    os.close(ready_fd)
    _execute(source, func, inputs)
    del heap_noise
    _exit(0)


def fcntl_dupfd(fd: int) -> int:
    """A copy of `fd` numbered 100 or more (so the dup2s onto 1..5 never clobber a source)."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(fd)
    return new


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

def _fixed_process_state() -> None:
    """What a process inherits from whoever started it, set to the same for every worker: the file
    mode mask, every signal's disposition (as a fresh interpreter sets them) and an empty signal
    mask, the stack size of new threads (else the launcher's RLIMIT_STACK at start decides it) and
    the resource limits in ZYGOTE_RLIMITS."""
    os.umask(0o022)
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError, RuntimeError):
                pass  # the C library's own signals
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    _thread_stack_size(THREAD_STACK)
    for name, res, value in ZYGOTE_RLIMITS:
        try:
            resource.setrlimit(res, (value, value))
        except (OSError, ValueError) as e:
            hard = resource.getrlimit(res)[1]
            raise OSError(0, f"{name}: cannot set {value} (the launcher's hard limit is {hard}): {e}") from None


def _fixed_environment() -> str | None:
    """The environment every execution starts from, set here once (in each child it cost a quarter
    of a millisecond): PATH, LC_ALL and TZ only (each child adds HOME and TMPDIR, its working
    directory); the hash seed's variable goes (the interpreter has read it). Returns the hash seed."""
    seed = os.environ.get("PYTHONHASHSEED")
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "TZ": "UTC"})
    time.tzset()
    return seed


def main() -> None:
    sys.argv[:] = [""]        # nothing of the host (pid, cgroup paths, project path) in argv
    sys.orig_argv[:] = [os.path.basename(sys.executable)]
    _fixed_process_state()
    ctl = socket.socket(fileno=os.dup(0))
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    # The configuration (host uid, cgroup paths) arrives on the control socket, not in argv: the
    # argument strings stay in this process's memory, which every execution's is a copy of.
    cfg_text = ctl.recv(1 << 16)
    if not cfg_text:
        _exit(0)
    # No parent-death signal here: it fires when the parent *thread* ends, and a pool may be started
    # from any thread. The parent's death closes the control socket instead: EOF ends the loop below.
    cfg = json.loads(cfg_text)
    cfg["hash_seed"] = _fixed_environment()
    zygote = Zygote(cfg)  # no frame of this process keeps the configuration
    del cfg_text, cfg
    gc.collect()
    gc.freeze()  # children never touch these objects' GC headers: fewer copy-on-write pages
    gc.disable()  # the zygote never collects again: every child inherits the same GC statistics
    libc.malloc_trim(0)  # free heap pages go back to the kernel: fewer pages to copy at each fork and unmap at each exit
    ctl.sendall(_dumps({"hello": zygote.caps}).encode())
    zygote.serve(ctl)
    _exit(0)


if __name__ == "__main__":
    main()

"""The zygote's isolation: what it builds at start-up as root. A part of the worker's source,
run after seccomp.py and before worker.py (harness.sandbox.execution.WORKER_PARTS).

What untrusted programs may import (PREIMPORT), the kernel's flags for mounts and prctl, this
process's own references to builtins taken before any untrusted code runs, and the start-up as
root: the allow-list root on a tmpfs (`_build_root`), SysV IPC and POSIX queues switched off,
the user namespace of the executions (`_make_userns`), the worker's cgroups and the uid reaper.
How the zygote uses them: worker.py's docstring.
"""
import builtins
import ctypes
import os
import signal
import stat
import sys

if __name__ != "__main__":  # imported as a module (the tests); in the zygote the parts share one namespace
    from harness.sandbox.seccomp import CLONE_NEWUSER, SYSCALLS

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
libc.syscall.restype = ctypes.c_long
# Looked up here, once: only the executions call prctl, and a lookup in each (a new function object in
# a copy of the zygote's memory) cost more than the call.
_PRCTL = libc.prctl
_PRCTL.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_TIMERSLACK = 1, 4, 22, 29
PR_SET_NO_NEW_PRIVS, PR_SET_THP_DISABLE = 38, 41
INNER_ID = 1000           # the uid and gid of every execution, whatever the worker's host uid (a user namespace)
HOSTNAME, DOMAINNAME = "sandbox", "none"   # the worker's UTS namespace: the host's names never show
DEVICES = ("null", "zero", "full", "random", "urandom")
ZYGOTE_PROC = "/.zygote/proc"   # inside the new root: a /proc only root can reach

# This process's own references, taken before any untrusted code runs (a patched builtin cannot
# change what the serialiser checks; the parent re-checks everything anyway).
_type, _len, _str, _isfinite = builtins.type, builtins.len, builtins.str, __import__("math").isfinite
_isinstance, _getattr = builtins.isinstance, builtins.getattr
_callable, _enumerate = builtins.callable, builtins.enumerate
_write, _exit, _getpid = os.write, os._exit, os.getpid


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
    _check(f"prctl({option})", _PRCTL(option, value, 0, 0, 0))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[_write(fd, view):]


# ----------------------------------------------------------------------------- start-up (as root)

def _root_files() -> tuple[list[str], list[str]]:
    """(files to bind read-only: the interpreter and every file this process has mapped,
    module sources to copy: the allowed pure-Python modules), absolute host paths."""
    binds = {os.path.realpath(sys.executable)}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            path = parts[5].strip() if len(parts) == 6 else ""
            if path.startswith("/") and not path.startswith(("/dev/", "/proc/", "/sys/", "/memfd:")) \
                    and not path.endswith("(deleted)") and os.path.isfile(path):
                binds.add(path)
    stdlib = os.path.dirname(os.path.realpath(os.__file__)) + "/"
    sources = set()
    for module in list(sys.modules.values()):
        path = _getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py"):
            path = os.path.realpath(path)
            if path.startswith(stdlib) and os.path.isfile(path):
                sources.add(path)
    return sorted(binds), sorted(sources - binds)


def _staging_dir(paths: list[str]) -> str:
    """An existing directory to mount the new root on that holds none of the files to bind."""
    for d in ("/tmp", "/var/tmp", "/mnt", "/run", "/media", "/srv", "/opt"):
        if os.path.isdir(d) and not os.path.islink(d) and not any(p.startswith(d + "/") for p in paths):
            return d
    raise OSError(0, "no directory to build the sandbox root on")


def _makedirs(root: str, path: str) -> None:
    d = root + os.path.dirname(path)
    os.makedirs(d, mode=0o755, exist_ok=True)


def _build_root() -> str:
    """Build the allow-list root on a tmpfs and pivot into it; returns how ("pivot_root" or "chroot").
    Inside, all of it this worker's own (no host inode, so no lock, flock, inotify watch or page
    cache an execution can mark is shared with another worker, pool or the host): copies of the
    interpreter and the shared objects it has mapped and of the allowed modules' sources, five
    device nodes made here on a tmpfs of their own (random and urandom read-only), an empty /tmp,
    and /.zygote (mode 0700: a /proc for the zygote's own use, out of the sandbox uid's reach)."""
    binds, sources = _root_files()
    new = _staging_dir(binds + sources)
    size = sum(os.path.getsize(p) for p in binds + sources) + (16 << 20)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},nr_inodes=16384,mode=755")
    for sub in ("dev", "tmp", ".old", ".zygote"):
        os.mkdir(f"{new}/{sub}", 0o755)
    os.chmod(f"{new}/.zygote", 0o700)
    os.mkdir(f"{new}/.zygote/proc", 0o755)
    for path in binds + sources:
        _makedirs(new, path)
        with open(path, "rb") as src, open(new + path, "wb") as dst:
            dst.write(src.read())
        os.chmod(new + path, os.stat(path).st_mode & 0o755)
    mount("tmpfs", f"{new}/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=16,mode=755")
    for name in DEVICES:
        mode = 0o444 if name in ("random", "urandom") else 0o666
        os.mknod(f"{new}/dev/{name}", stat.S_IFCHR | mode, os.stat(f"/dev/{name}").st_rdev)
        os.chmod(f"{new}/dev/{name}", mode)
    mount(None, f"{new}/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=16,mode=755")
    os.chdir(new)
    how = "pivot_root"
    if libc.syscall(SYSCALLS.get(os.uname().machine, (0, {}))[1].get("pivot_root", -1), b".", b".old") == 0:
        os.chdir("/")
        _check("umount2(/.old)", libc.umount2(b"/.old", MNT_DETACH))
        os.rmdir("/.old")
    else:  # e.g. an initramfs root: move the new root over / and chroot (unprivileged children cannot leave)
        how = "chroot"
        os.rmdir(".old")
        mount(".", "/", None, MS_MOVE)
        _check("chroot", libc.chroot(b"."))
        os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    mount("proc", ZYGOTE_PROC, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return how


def _close_sysv_ipc() -> None:
    """In this (new) IPC namespace no SysV segment, semaphore set or queue can be created, and
    no POSIX queue: nothing an execution leaves behind can reach the next one."""
    for name, value in (("kernel/shmmni", "0"), ("kernel/msgmni", "0"), ("kernel/sem", "0 0 0 0"),
                        ("fs/mqueue/queues_max", "0")):
        with open(f"/proc/sys/{name}", "w") as f:
            f.write(value)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAP_V3 = 0x20080522


# made here, not in each execution: building ctypes objects and looking up a C function in a fresh
# child cost a tenth of a millisecond (and copies of the zygote's pages)
_CAP_HEADER, _CAP_NONE = _CapHeader(_CAP_V3, 0), (_CapData * 2)()
_CAPSET = libc.capset
_CAPSET.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_CAP_ARGS = (ctypes.addressof(_CAP_HEADER), ctypes.addressof(_CAP_NONE))


def _set_caps(effective_as_permitted: bool) -> None:
    """capset: every capability dropped (False), or the permitted ones made effective (True)."""
    if not effective_as_permitted:
        _check("capset", _CAPSET(*_CAP_ARGS))
        return
    header, data = _CapHeader(_CAP_V3, 0), (_CapData * 2)()
    _check("capget", libc.capget(ctypes.byref(header), data))
    for d in data:
        d.effective = d.permitted
    _check("capset", _CAPSET(ctypes.addressof(header), ctypes.addressof(data)))


def _make_userns(uid: int) -> int:
    """A user namespace for this worker's executions, where the worker's host uid and gid are
    INNER_ID and nothing else is mapped; returns an fd to it (executions join it with setns). It is
    made by a helper whose effective uid is the worker's (so the namespace's owner, whose counts the
    kernel checks beside the namespace's own, is this worker's uid, not root) but which keeps its
    capabilities (so no restriction on unprivileged namespaces applies); the maps are written here,
    as root."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = b"\x00"
        try:
            os.close(ready_r)
            os.close(go_w)
            os.setresgid(-1, uid, -1)
            os.setresuid(-1, uid, -1)     # clears the effective capabilities, keeps the permitted ones
            _set_caps(effective_as_permitted=True)
            unshare(CLONE_NEWUSER)
            ok = b"\x01"
        finally:
            os.write(ready_w, ok)
            os.read(go_r, 1)
            _exit(0)
    os.close(ready_w)
    os.close(go_r)
    try:
        if os.read(ready_r, 1) != b"\x01":
            raise OSError(0, "the helper could not create a user namespace")
        for name in ("uid_map", "gid_map"):
            with open(f"{ZYGOTE_PROC}/{pid}/{name}", "w") as f:
                f.write(f"{INNER_ID} {uid} 1\n")
        return os.open(f"{ZYGOTE_PROC}/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(go_w)
        os.waitpid(pid, 0)


def _join_cgroup(procs_paths: list[str]) -> bool:
    """Move this process (and so everything it forks later) into its worker's cgroups (memory, and
    CPU where the pool made them). False when there are none."""
    for path in procs_paths:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    return bool(procs_paths)


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

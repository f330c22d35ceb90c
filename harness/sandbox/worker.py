"""The sandbox worker ("zygote"): a warm, pre-imported interpreter that forks one child per execution.

Standard library only. `harness.sandbox.pool` starts it as a fresh interpreter with no site-packages:

    <real python> -S -s -B -P -c '<read and exec this file>' harness/sandbox/worker.py

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

Seccomp: a BPF program built here (ctypes + prctl(PR_SET_SECCOMP)), no library: for the native
architecture only (any other -> the process is killed), it fails with EPERM the keyring calls,
every call a task program never needs, every call with an effect on the whole machine and every
call that reads the machine or the launcher instead of the program (SECCOMP_DENY: sockets, sync,
the stat family, sysinfo, the CPU count, ...), clone() with any namespace flag, wait4/waitid asking
for rusage and madvise outside MADVISE_ALLOWED, and fails clone3() with ENOSYS (so libc falls back
to clone, whose flags the filter can see).

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
import stat
import struct
import sys
import time
from _thread import stack_size as _thread_stack_size

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
_SLEEP_FN = ctypes.cast(libc.sleep, ctypes.c_void_p)               # what a namespace's init runs
_INIT_STACK = ctypes.create_string_buffer(1 << 16)                 # ... on this stack
_INIT_STACK_TOP = ctypes.c_void_p((ctypes.addressof(_INIT_STACK) + (1 << 16)) & ~15)
CLONE_VM = 0x00000100
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
CLONE_NAMESPACES = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_TIMERSLACK = 1, 4, 22, 29
PR_SET_NO_NEW_PRIVS, PR_SET_THP_DISABLE = 38, 41
INNER_ID = 1000           # the uid and gid of every execution, whatever the worker's host uid (a user namespace)
HOSTNAME, DOMAINNAME = "sandbox", "none"   # the worker's UTS namespace: the host's names never show
TIMER_SLACK_NS = 50_000   # the kernel's default; the launcher's own would otherwise be inherited
THREAD_STACK = 8 << 20    # every thread's stack (else the launcher's RLIMIT_STACK at its start decides it)
RESULT_FD = 3
INIT_LIFE_S = 30          # a namespace's init (sleep) ends by itself after this (or 2 wall limits + 30 s):
                          # the bound on how long it outlives a killed zygote; an older one is renewed
SLACK_S = 10              # the pool's slack beyond the wall limit (harness.sandbox.pool.SLACK_S)
MAX_NODES = 100_000       # plain-data nodes in one output
MAX_CHARS = 1_000_000     # characters of strings in one output
MAX_DEPTH = 32            # nesting of lists/dicts in one output
MSG_CHARS = 200           # exception message kept per test
REQUEST_BYTES = 1 << 24   # the largest request a child reads
DEVICES = ("null", "zero", "full", "random", "urandom")
ZYGOTE_PROC = "/.zygote/proc"   # inside the new root: a /proc only root can reach

# ----------------------------------------------------------------------------- seccomp (BPF, by hand)

# Syscalls no task program needs, refused with EPERM: keyrings (per-uid state that outlives a
# process), tracing and other processes' memory, mounts and namespaces, kernel modules and kexec,
# BPF, perf, io_uring, userfaultfd, handles that bypass paths, clocks, swap, reboot, accounting;
# sockets of every family (a socket is the only way to mark or read the network namespace's state);
# calls whose effect reaches the whole machine (sync, syncfs, membarrier, AIO contexts, NUMA
# placement, KSM-like page advice below); and every call that reads something of the machine or of
# the launcher rather than of the program: the stat family (timestamps, device and inode numbers:
# a pipe's inode number counts the host's inodes), sysinfo (load, process count, free memory),
# getrusage (involuntary context switches count the host's load), the CPU count and
# placement (sched_getaffinity, getcpu), scheduling priority and its probes (inherited from the
# launcher), the run-queue slice (zero on an idle CPU), page-cache residency (mincore, cachestat),
# mount listings, inotify (its instance count is checked against the namespace owner's).
SECCOMP_DENY = (
    "add_key", "keyctl", "request_key", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr", "bpf", "perf_event_open", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "syslog", "personality",
    "quotactl", "quotactl_fd", "swapon", "swapoff", "reboot", "acct", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "fanotify_init", "vhangup", "socket", "socketpair",
    # machine-wide effects
    "sync", "syncfs", "membarrier", "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents",
    "io_pgetevents", "mbind", "set_mempolicy", "get_mempolicy", "migrate_pages", "move_pages",
    "set_mempolicy_home_node", "process_madvise", "process_mrelease",
    # what the machine or the launcher is, not what the program does
    "stat", "lstat", "fstat", "newfstatat", "statx", "statfs", "fstatfs", "ustat", "sysfs", "sysinfo", "getrusage",
    "getcpu", "sched_getaffinity", "sched_setaffinity", "sched_rr_get_interval", "getpriority", "setpriority",
    "sched_getscheduler", "sched_setscheduler", "sched_getparam", "sched_setparam", "sched_getattr",
    "sched_setattr", "ioprio_get", "ioprio_set", "mincore", "cachestat", "statmount", "listmount", "inotify_init",
    "inotify_init1",
)
# madvise advice allowed (anything else is refused): what only changes the caller's own pages. Refused:
# WILLNEED and POPULATE_* (read a host library's pages into the page cache), COLD and PAGEOUT (push
# them out), MERGEABLE (page merging across processes), REMOVE, COLLAPSE, HWPOISON.
MADVISE_ALLOWED = (0, 1, 2, 4, 8, 10, 11, 14, 15, 16, 17, 18, 19)
SYSCALLS = {  # (AUDIT_ARCH, {name: number}) per machine; a name missing on one does not exist there
    "x86_64": (0xC000003E, {
        "add_key": 248, "keyctl": 250, "request_key": 249, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "pidfd_getfd": 438, "kcmp": 312, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_tree_attr": 467,
        "bpf": 321, "perf_event_open": 298, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "open_by_handle_at": 304, "name_to_handle_at": 303, "syslog": 103,
        "personality": 135, "quotactl": 179, "quotactl_fd": 443, "swapon": 167, "swapoff": 168, "reboot": 169,
        "acct": 163, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "fanotify_init": 300, "vhangup": 153, "socket": 41, "socketpair": 53,
        "sync": 162, "syncfs": 306, "membarrier": 324, "io_setup": 206, "io_destroy": 207, "io_submit": 209,
        "io_cancel": 210, "io_getevents": 208, "io_pgetevents": 333, "mbind": 237, "set_mempolicy": 238,
        "get_mempolicy": 239, "migrate_pages": 256, "move_pages": 279, "set_mempolicy_home_node": 450,
        "process_madvise": 440, "process_mrelease": 448,
        "stat": 4, "lstat": 6, "fstat": 5, "newfstatat": 262, "statx": 332, "statfs": 137, "fstatfs": 138,
        "ustat": 136, "sysfs": 139, "sysinfo": 99, "getrusage": 98, "getcpu": 309,
        "sched_getaffinity": 204, "sched_setaffinity": 203, "sched_rr_get_interval": 148, "getpriority": 140,
        "setpriority": 141, "sched_getscheduler": 145, "sched_setscheduler": 144, "sched_getparam": 143,
        "sched_setparam": 142, "sched_getattr": 315, "sched_setattr": 314, "ioprio_get": 252, "ioprio_set": 251,
        "mincore": 27, "cachestat": 451, "statmount": 457, "listmount": 458, "inotify_init": 253,
        "inotify_init1": 294,
        "clone": 56, "clone3": 435, "wait4": 61, "waitid": 247, "madvise": 28}),
    "aarch64": (0xC00000B7, {
        "add_key": 217, "keyctl": 219, "request_key": 218, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "pidfd_getfd": 438, "kcmp": 272, "mount": 40, "umount2": 39,
        "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_tree_attr": 467,
        "bpf": 280, "perf_event_open": 241, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "open_by_handle_at": 265, "name_to_handle_at": 264, "syslog": 116,
        "personality": 92, "quotactl": 60, "quotactl_fd": 443, "swapon": 224, "swapoff": 225, "reboot": 142,
        "acct": 89, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "fanotify_init": 262, "vhangup": 58, "socket": 198, "socketpair": 199,
        "sync": 81, "syncfs": 267, "membarrier": 283, "io_setup": 0, "io_destroy": 1, "io_submit": 2,
        "io_cancel": 3, "io_getevents": 4, "io_pgetevents": 292, "mbind": 235, "set_mempolicy": 237,
        "get_mempolicy": 236, "migrate_pages": 238, "move_pages": 239, "set_mempolicy_home_node": 450,
        "process_madvise": 440, "process_mrelease": 448,
        "fstat": 80, "newfstatat": 79, "statx": 291, "statfs": 43, "fstatfs": 44, "sysinfo": 179,
        "getrusage": 165, "getcpu": 168, "sched_getaffinity": 123, "sched_setaffinity": 122,
        "sched_rr_get_interval": 127, "getpriority": 141, "setpriority": 140, "sched_getscheduler": 120,
        "sched_setscheduler": 119, "sched_getparam": 121, "sched_setparam": 118, "sched_getattr": 275,
        "sched_setattr": 274, "ioprio_get": 31, "ioprio_set": 30, "mincore": 232, "cachestat": 451,
        "statmount": 457, "listmount": 458, "inotify_init1": 26,
        "clone": 220, "clone3": 435, "wait4": 260, "waitid": 95, "madvise": 233}),
}
X32_SYSCALL_BIT = 0x40000000


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _arg_word(i: int, high: bool = False) -> int:
    """Offset in struct seccomp_data of argument i's low (or high) 32 bits (little-endian)."""
    return 16 + 8 * i + (4 if high else 0)


_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_DENY, _ENOSYS = 0x00050000 | 1, 0x00050000 | 38   # SECCOMP_RET_ERRNO | EPERM / ENOSYS
_LEAF = 8   # call numbers compared one by one at the bottom of the search tree (8: the cheapest to install)


def _seccomp_tree(items: list[tuple[int, str]], code: list, fresh) -> None:
    """Code for sorted (number, action) pairs: a binary search on the call number (every path is a
    dozen instructions, however long the list), then a few equality tests; anything else is allowed.
    Each leaf carries its own return instructions and argument checks (classic BPF jumps are
    forward and at most 255 long)."""
    if len(items) > _LEAF:
        mid, right = len(items) // 2, fresh("right")
        code.append((_JGE, right, 0, items[mid][0]))
        _seccomp_tree(items[:mid], code, fresh)
        code.append(("label", right))
        _seccomp_tree(items[mid:], code, fresh)
        return
    targets = {action: fresh(action) for _, action in items}
    code += [(_JEQ, targets[action], 0, nr) for nr, action in items]
    code.append((_RET, 0, 0, _ALLOW))
    for action, label in targets.items():
        code.append(("label", label))
        if action == "deny":
            code.append((_RET, 0, 0, _DENY))
        elif action == "enosys":
            code.append((_RET, 0, 0, _ENOSYS))
        elif action == "clone":   # refused with any namespace flag
            code += [(_LD_W_ABS, 0, 0, _arg_word(0)), (_JSET, 1, 0, CLONE_NAMESPACES), (_RET, 0, 0, _ALLOW),
                     (_RET, 0, 0, _DENY)]
        elif action in ("wait4", "waitid"):   # refused with a struct rusage pointer (the host's load)
            i = 3 if action == "wait4" else 4
            code += [(_LD_W_ABS, 0, 0, _arg_word(i)), (_JEQ, 0, 3, 0), (_LD_W_ABS, 0, 0, _arg_word(i, high=True)),
                     (_JEQ, 0, 1, 0), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, _DENY)]
        else:   # madvise: only advice in MADVISE_ALLOWED
            n = len(MADVISE_ALLOWED)
            code.append((_LD_W_ABS, 0, 0, _arg_word(2)))
            code += [(_JEQ, n - k, 0, advice) for k, advice in enumerate(MADVISE_ALLOWED)]
            code += [(_RET, 0, 0, _DENY), (_RET, 0, 0, _ALLOW)]


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: check the architecture, then the call number,
    then, for the calls refused only with some arguments, those arguments: clone with a namespace
    flag, wait4/waitid asking for the child's rusage (the host's load, as getrusage), madvise with
    advice outside MADVISE_ALLOWED. The call number is found by a binary search, so every allowed
    call's path is short: the kernel runs the filter over every call number when it is installed
    (once per execution) to cache the calls it always allows; measured here, installing a linear
    list of 135 numbers took 0.20 ms, this search 0.08 ms (the old list of 60, 0.11 ms)."""
    arch, nr = SYSCALLS[machine]
    actions = {nr[name]: "deny" for name in SECCOMP_DENY if name in nr}
    actions.update({nr["clone"]: "clone", nr["clone3"]: "enosys", nr["wait4"]: "wait4", nr["waitid"]: "waitid",
                    nr["madvise"]: "madvise"})
    code: list[tuple] = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _KILL), (_LD_W_ABS, 0, 0, 0)]
    if machine == "x86_64":   # x32 calls: refused
        code += [(_JGE, 0, 1, X32_SYSCALL_BIT), (_RET, 0, 0, _DENY)]
    count = [0]

    def fresh(kind: str) -> str:
        count[0] += 1
        return f"{kind}{count[0]}"

    _seccomp_tree(sorted(actions.items()), code, fresh)
    at, prog = {}, []
    for ins in code:
        if ins[0] == "label":
            at[ins[1]] = len(prog)
        else:
            prog.append(ins)
    out = []
    for pc, (op, jt, jf, k) in enumerate(prog):
        offsets = [at[j] - pc - 1 if isinstance(j, str) else j for j in (jt, jf)]
        assert all(0 <= o < 256 for o in offsets), f"seccomp jump out of range at {pc}: {offsets}"
        out.append((op, offsets[0], offsets[1], k))
    return out


def seccomp_verdict(machine: str, number: int, args: tuple = (0,) * 6, arch: int | None = None) -> int:
    """What the filter returns for one call: a small interpreter of the instructions used above
    (for tests: every refused call is refused, every other one allowed)."""
    prog, data = seccomp_program(machine), {0: number, 4: SYSCALLS[machine][0] if arch is None else arch}
    for i, a in enumerate(args):
        data[_arg_word(i)], data[_arg_word(i, high=True)] = a & 0xFFFFFFFF, a >> 32
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = prog[pc]
        if op == _RET:
            return k
        if op == _LD_W_ABS:
            acc = data.get(k, 0)
            pc += 1
            continue
        hit = acc == k if op == _JEQ else acc >= k if op == _JGE else bool(acc & k)
        pc += 1 + (jt if hit else jf)


def _compile_seccomp() -> _SockFprog | None:
    machine = os.uname().machine
    if machine not in SYSCALLS:
        return None
    prog = seccomp_program(machine)
    array = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), array)
    fprog._keep = array  # the array must outlive the struct that points to it
    return fprog


_SECCOMP = _compile_seccomp()

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
        """One execution per request until the pool is gone."""
        self.prepare()
        while True:
            msg, fds, _, _ = socket.recv_fds(ctl, 64, 4)
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
                    msg = ctl.recv(64)
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

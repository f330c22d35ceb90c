"""The zygote's seccomp filter: a part of the worker's source, the first the pool runs
(harness.sandbox.execution.WORKER_PARTS: seccomp.py, isolation.py, worker.py as one source in one
fresh interpreter; standard library only, no import of the harness).

A BPF program built here (ctypes + prctl(PR_SET_SECCOMP)), no library: for the native
architecture only (any other -> the process is killed), it fails with EPERM the keyring calls,
every call a task program never needs, every call with an effect on the whole machine and every
call that reads the machine or the launcher instead of the program (SECCOMP_DENY: sockets, sync,
the stat family, sysinfo, the CPU count, ...), clone() with any namespace flag, wait4/waitid asking
for rusage and madvise outside MADVISE_ALLOWED, and fails clone3() with ENOSYS (so libc falls back
to clone, whose flags the filter can see).
"""
import ctypes
import os

# The kernel's namespace flags (clone(2), unshare(2)): the filter refuses clone() with any of them;
# isolation.py and the zygote unshare with them.
CLONE_VM = 0x00000100
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
CLONE_NAMESPACES = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET

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

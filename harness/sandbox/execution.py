"""The pool's side of one worker: start a zygote (harness/sandbox/worker.py and its parts), hand it
one execution at a time and watch it to its end, then judge how it ended.

`Worker.run` gives the zygote four fresh pipes (request, result, output, set-up report), writes the
request and reads the result and output straight from the executing child, asks the zygote to kill
the execution when a stream goes over its limit or (with a CPU cgroup) when the execution's CPU
time or its own time is spent, and turns the zygote's answer (how it ended, wait status, rusage)
into a `Run` (`_to_run`). Any failure of the worker itself raises `WorkerFailed`: the pool then
replaces it and reruns the request once.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pwd
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from harness.sandbox.cgroups import CounterFiles, StallMeter, cpu_ns, oom_kills
from harness.sandbox.results import Limits, Program, Run, parse_results

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
# The worker's source: three files run as one, in this order (worker.py's docstring)
WORKER_PARTS = tuple(os.path.join(os.path.dirname(WORKER), f) for f in ("seccomp.py", "isolation.py", "worker.py"))
# The worker runs from `-c`: its code carries a neutral file name and sys.path no host directory
# (the worker clears sys.argv, where the host paths and its configuration arrive, at once).
WORKER_BOOT = ("import sys\n_src = b''\nfor _p in sys.argv[1:]:\n    with open(_p, 'rb') as _f:\n"
               "        _src += _f.read() + b'\\n'\ndel _p, _f\n"
               "exec(compile(_src, 'sandbox_worker', 'exec'))\ndel _src\n")
UID_FIRST, UID_LAST = 61000, 64999          # sandbox uids; each worker leases one
UID_LOCK_DIR = "/tmp/harness-sandbox-uids"  # flock files: a uid is held while its lock is
START_TIMEOUT_S = 60.0                      # a worker's start-up (imports, namespaces)
SLACK_S = 10.0                              # beyond the wall limit before a worker is presumed stuck
DRAIN_S = 1.0                               # reading what the dead execution left in its pipes
TAG_BYTES = 12                              # hex characters of the nonce naming one execution
STATUS_BYTES = 4 + 144                      # wait status (int) + struct rusage (64-bit Linux)
FATES = {b"e": "ended", b"t": "timeout", b"k": "killed"}   # the zygote's word for how an execution ended
                                                            # ("timeout": the hard wall limit; judged in _to_run)
CPU_SHOWN = 0.75   # of the CPU limit, in rusage, for a SIGXCPU/SIGKILL to count as the CPU limit: rusage
                   # is tick-sampled and reads up to ~10% low on a loaded machine; a program that
                   # signals itself at once has next to none
CPU_POLL_S = 0.05                           # how often the pool reads a running execution's CPU time
CPU_GRACE_S = 0.5                           # beyond cpu_s before the pool stops a multi-process execution
WALL_STRETCH = 4                            # an execution the machine starves runs on to this many wall limits
IDLE_WINDOW_S, IDLE_CPU_S = 1.0, 0.02       # without a stall meter: past the wall limit, under 2% of a CPU
                                            # over the last second is idle


class _UidLease:
    """Holds one sandbox uid for this process's lifetime (an flock'ed file per uid), so parallel
    pools and parallel experiments never share a uid: the uid kill after each execution, and the
    RLIMIT_NPROC count, are per uid."""

    def __init__(self):
        os.makedirs(UID_LOCK_DIR, mode=0o700, exist_ok=True)
        for uid in range(UID_FIRST, UID_LAST + 1):
            try:
                pwd.getpwuid(uid)
                continue  # a real account: never borrow it
            except KeyError:
                pass
            fd = os.open(os.path.join(UID_LOCK_DIR, f"{uid}.lock"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self.fd = uid, fd
            return
        raise RuntimeError(f"no free sandbox uid in [{UID_FIRST}, {UID_LAST}] (locks under {UID_LOCK_DIR})")

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class WorkerFailed(Exception):
    """The worker, not the program, failed: it is replaced and the request rerun."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Reader:
    """Buffered, deadline-bounded reads of length-prefixed frames from a pipe (the benchmark's
    bare pool uses it)."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, bytearray()

    def exact(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError("worker did not answer in time")
            chunk = os.read(self.fd, max(65536, n - len(self.buf)))
            if not chunk:
                raise EOFError("worker closed its pipe")
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def frame(self, deadline: float, max_bytes: int) -> bytes:
        (size,) = struct.unpack(">I", self.exact(4, deadline))
        if size > max_bytes:
            raise ValueError(f"worker sent a {size}-byte frame (max {max_bytes})")
        return self.exact(size, deadline)


class _Stream:
    """One of an execution's pipes as read here: a byte count, a kept prefix, a limit."""

    def __init__(self, fd: int, keep: int, limit: int, over: str):
        self.fd, self.keep, self.limit, self.over = fd, keep, limit, over
        self.data, self.count, self.open = bytearray(), 0, True

    def pump(self) -> bool:
        """Read one chunk; True if the stream is now over its limit."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.open = False
            return False
        self.count += len(chunk)
        if len(self.data) < self.keep:
            self.data += chunk[: self.keep - len(self.data)]
        return self.count > self.limit


class Worker:
    """One zygote process and its control socket. Not thread-safe: the pool hands it to one thread
    at a time."""

    def __init__(self, limits: Limits, hash_seed: int, namespaces: bool, cgroup: tuple[str | None, str | None],
                 cpu: tuple[list[str], str | None] = ([], None), stall: "StallMeter | None" = None):
        self.limits, self.hash_seed, self.namespaces, self.cgroup = limits, hash_seed, namespaces, cgroup
        self.cpu_procs, self.cpu_usage = cpu   # the worker's CPU cgroup(s) to join, its CPU-time counter
        self.stall = stall                      # how long its processes waited for a CPU (None: unknown)
        # With CPU accounting the wall limit is on the execution's own time (the time the machine kept
        # it from a CPU does not count); one the machine starves runs on, up to WALL_STRETCH wall limits.
        self.hard_wall_s = limits.wall_s * (WALL_STRETCH if self.cpu_usage else 1)
        self.lease = _UidLease() if os.geteuid() == 0 else None
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.pidfd = -1
        self.caps: dict = {}
        self.broken = ""
        self.files = CounterFiles()
        self.ooms_seen = oom_kills(self.cgroup[1], self.files)  # OOM kills in this worker's cgroup so far

    def start(self) -> None:
        """Launch the zygote (a fresh interpreter, no site-packages); `wait_ready` reads its hello."""
        limits = dataclasses.asdict(self.limits)
        limits["wall_s"] = self.hard_wall_s  # the zygote's own stop; the pool stops an idle execution earlier
        cfg = {"uid": self.lease.uid if self.lease else os.getuid(), "limits": limits,
               "namespaces": self.namespaces, "cgroup_procs": [p for p in (self.cgroup[0], *self.cpu_procs) if p]}
        env = {"PYTHONHASHSEED": str(self.hash_seed), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
        self.stderr = tempfile.TemporaryFile()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [os.path.realpath(sys.executable), "-S", "-s", "-B", "-P", "-c", WORKER_BOOT, *WORKER_PARTS],
                stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=self.stderr, env=env, cwd="/",
                close_fds=True, start_new_session=True)
        finally:
            theirs.close()
        try:  # the configuration goes on the control socket: argv stays in the zygote's memory
            self.sock.send(json.dumps(cfg).encode())
        except OSError:
            pass  # the zygote is already gone: wait_ready says why
        # readable once the zygote has exited: its control socket may stay open in its namespace's
        # placeholder, so a zygote that dies mid-execution is seen here, not at the hard deadline
        self.pidfd = os.pidfd_open(self.proc.pid)

    def _recv(self, deadline: float) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.sock], [], [], left)[0]:
            raise TimeoutError("sandbox worker did not answer in time")
        msg = self.sock.recv(1 << 20)
        if not msg:
            raise EOFError("sandbox worker closed its socket")
        return msg

    def wait_ready(self) -> None:
        try:
            self.caps = json.loads(self._recv(time.monotonic() + START_TIMEOUT_S))["hello"]
        except (OSError, EOFError, TimeoutError, ValueError, KeyError) as e:
            err = self._stderr_tail()
            self.kill()
            raise RuntimeError(f"sandbox worker {WORKER} failed to start: {e}; stderr: {err}") from None

    def _stderr_tail(self) -> str:
        try:
            self.stderr.seek(0)
            return self.stderr.read()[-600:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def run(self, prog: Program, req: bytes) -> Run:
        """One execution: hand the zygote four fresh pipes (request, result, output, set-up report),
        feed the request and read the result and output here until the zygote's answer says it is
        over (asking it to kill the execution if a stream goes over its limit); then read what is
        left in the pipes (every writer is dead by then). Raises WorkerFailed."""
        if self.proc is None:
            raise WorkerFailed("sandbox worker is not running")
        tag = os.urandom(TAG_BYTES // 2).hex().encode()  # names this execution; counts nothing
        lim = self.limits
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(4)]
        (req_r, req_w), (res_r, res_w), (out_r, out_w), (ready_r, ready_w) = pipes
        streams = {"res": _Stream(res_r, lim.result_bytes + 1, lim.result_bytes, "result_limit"),
                   "out": _Stream(out_r, lim.output_head, lim.output_bytes, "output_limit"),
                   "ready": _Stream(ready_r, 4096, 4096, "")}
        try:
            # the request goes into the pipe before the child exists (up to the pipe's size, 64 KiB,
            # the rest as it reads): it finds it there at once instead of waiting on this thread
            payload = memoryview(struct.pack(">I", len(req)) + req)
            os.set_blocking(req_w, False)
            try:
                payload = payload[os.write(req_w, payload):]
            except BlockingIOError:
                pass
            # the starting figures before the hand-over: the zygote forks as soon as the fds arrive,
            # so a figure read after it would miss whatever ran before this thread got a CPU back
            t0, cpu0 = time.monotonic(), cpu_ns(self.cpu_usage, self.files)
            try:
                socket.send_fds(self.sock, [b"x" + tag], [req_r, res_w, out_w, ready_w])
            except OSError as e:
                raise WorkerFailed(f"sandbox worker unreachable: {e}") from None
            finally:
                for fd in (req_r, res_w, out_w, ready_w):
                    os.close(fd)
            raw, over, stalled = self._watch(payload, req_w, streams, tag, t0, cpu0)
            wall = time.monotonic() - t0
            cpu1 = cpu_ns(self.cpu_usage, self.files)
            cpu_all = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / 1e9
            drain_until = time.monotonic() + DRAIN_S
            while any(st.open for st in streams.values()) and time.monotonic() < drain_until:
                live = {st.fd: st for st in streams.values() if st.open}
                for fd in select.select(list(live), [], [], max(0.0, drain_until - time.monotonic()))[0]:
                    if live[fd].pump() and over is None and live[fd].over:
                        over = live[fd].over
        finally:
            for fd in (req_w, res_r, out_r, ready_r):
                os.close(fd)
        return self._to_run(prog, over, raw, wall, streams, cpu_all, stalled)

    def _watch(self, req: memoryview, req_w: int, streams: dict, tag: bytes, start: float,
               cpu0: int | None) -> tuple[bytes, str | None, float | None]:
        """Write what is left of the (length-prefixed) request and read the streams until the zygote's
        answer for this execution arrives. Every CPU_POLL_S, where the worker has a CPU cgroup: stop the
        execution once its processes together have used more than the CPU limit (plus
        CPU_GRACE_S: a single process meets RLIMIT_CPU first), "cpu_limit"; and once its own time
        (the wall time less the time its processes were runnable but given no CPU, `StallMeter`)
        reaches the wall limit: what it waited for (sleep, a blocked call, a stop, a duty cycle) is
        its own doing, "idle_limit" ("cpu_limit" if it used its CPU time). Without a stall meter,
        past the wall limit, an execution that used under IDLE_CPU_S in the last IDLE_WINDOW_S is
        stopped as "idle_limit" and one still computing runs on. Returns (the answer after b"h" +
        tag, the first limit gone over, the seconds it was starved, None if not measured). `start`
        and `cpu0`: the clock and the CPU counter (ns; None without a CPU cgroup) at the hand-over."""
        pending = req
        deadline, soft = start + self.hard_wall_s + SLACK_S, start + self.limits.wall_s
        sock, over = self.sock.fileno(), None
        cpu_cap = None if cpu0 is None else cpu0 + int((self.limits.cpu_s + CPU_GRACE_S) * 1e9)
        samples: list[tuple[float, int]] = [(start, cpu0 or 0)]   # (time, CPU ns) over the last window
        stall0 = stalled = None   # from the first poll on: what an execution shorter than that waited is not read
        if self.stall is not None:
            self.stall.start({self.proc.pid, self.caps.get("reaper_pid") or 0})
        try:
            while True:
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    raise WorkerFailed("sandbox worker did not answer in time")
                poll = cpu_cap is not None and over is None and now - samples[-1][0] >= CPU_POLL_S
                used = cpu_ns(self.cpu_usage, self.files) if poll else None
                if used is not None:
                    samples.append((now, used))
                    while samples[1:] and samples[1][0] <= now - IDLE_WINDOW_S:
                        samples.pop(0)
                    # cpu.pressure is cumulative: read once for the start, then from the wall limit on
                    needed = self.stall is not None and (stall0 is None or now >= soft or self.stall.kind != "psi")
                    waited = self.stall.read() if needed else None
                    if waited is not None:
                        stall0 = waited if stall0 is None else stall0
                        stalled = (waited - stall0) / 1e9
                    if used > cpu_cap:
                        over = "cpu_limit"   # the execution's processes together used their CPU time
                    elif now >= soft and stalled is not None:
                        if now - start - stalled >= self.limits.wall_s:   # its own time is up
                            over = "cpu_limit" if used - cpu0 >= self.limits.cpu_s * 1e9 else "idle_limit"
                    elif now >= soft and samples[0][0] <= now - IDLE_WINDOW_S and \
                            used - samples[0][1] < IDLE_CPU_S * 1e9:
                        over = "idle_limit"  # no stall meter: past the wall limit, and waiting, not computing
                    if over is not None:
                        self.sock.send(b"k" + tag)
                live = {st.fd: st for st in streams.values() if st.open}
                r, w, _ = select.select([sock, self.pidfd, *live], [req_w] if pending else [], [],
                                        left if cpu_cap is None else min(left, CPU_POLL_S))
                if self.pidfd in r and sock not in r:  # an answer is sent before any exit: none is coming
                    raise WorkerFailed(f"sandbox worker died: {self._stderr_tail()}")
                if w:
                    try:
                        pending = pending[os.write(req_w, pending[:1 << 16]):]
                    except BrokenPipeError:
                        pending = pending[:0]  # the child is gone before reading it all: its fate says why
                for fd in r:
                    if fd == self.pidfd:
                        continue
                    if fd == sock:
                        msg = self.sock.recv(1 << 16)
                        if not msg:
                            raise WorkerFailed(f"sandbox worker died: {self._stderr_tail()}")
                        if msg.startswith(b"h" + tag):
                            if stall0 is not None and over is None:  # the whole of a run past one poll
                                waited = self.stall.read()
                                stalled = stalled if waited is None else (waited - stall0) / 1e9
                            return msg[1 + len(tag):], over, stalled
                        continue  # an answer for an earlier request (it was given up on)
                    if live[fd].pump() and live[fd].over and over is None:
                        over = live[fd].over
                        self.sock.send(b"k" + tag)  # the zygote kills the execution at once
        except OSError as e:
            raise WorkerFailed(f"sandbox worker failed: {e}") from None

    def _to_run(self, prog: Program, over: str | None, raw: bytes, wall: float, streams: dict,
                cpu_all: float | None, stalled: float | None = None) -> Run:
        n = len(prog.inputs)
        if len(raw) < 1 + STATUS_BYTES or raw[:1] not in FATES:
            raise WorkerFailed(f"sandbox worker sent a {len(raw)}-byte answer")
        fate, raw = FATES[raw[:1]], raw[1:]
        status = int.from_bytes(raw[:4], sys.byteorder, signed=True)
        utime_s, utime_us, stime_s, stime_us = struct.unpack("4q", raw[4:36])
        cpu = utime_s + stime_s + (utime_us + stime_us) / 1e6
        if raw[STATUS_BYTES:]:
            self.broken = raw[STATUS_BYTES:].decode("utf-8", "replace")  # this run stands; the worker goes
        setup = streams["ready"].data
        if setup[:1] != b"\x01":
            why = "the execution was never set up"
            if setup[:1] == b"\x00":
                why = f"set-up failed: {bytes(setup[1:300]).decode('utf-8', 'replace')}"
            raise WorkerFailed(f"{why} ({fate}); {self._stderr_tail()}")
        code = os.waitstatus_to_exitcode(status)
        if over is not None:
            fate = over  # the pool asked for the kill
        elif fate == "killed":
            raise WorkerFailed("the sandbox worker killed an execution nobody asked it to")
        if fate == "ended" and code in (-signal.SIGXCPU, -signal.SIGKILL) and cpu >= CPU_SHOWN * self.limits.cpu_s:
            fate = "cpu_limit"  # the kernel's RLIMIT_CPU signal, with the CPU time to show for it
        if fate == "timeout":   # the hard wall limit: the program's timeout only with the CPU time for it;
            # else (its own time being measured) the machine kept it from a CPU: infrastructure
            used = max(cpu, cpu_all) if cpu_all is not None else cpu
            shown = self.limits.cpu_s if cpu_all is not None else CPU_SHOWN * self.limits.cpu_s
            fate = "cpu_limit" if used >= shown else "wall_limit"
        ooms, self.ooms_seen = self.ooms_seen, oom_kills(self.cgroup[1], self.files)
        if fate == "ended" and code == -signal.SIGKILL and self.ooms_seen > ooms:
            fate = "memory_limit"  # the kernel's OOM killer, under the pool's memory cap
        stage, stage_name, outcomes, done, malformed = parse_results(bytes(streams["res"].data), n)
        return Run(fate, code, stage, stage_name, tuple(outcomes), done, malformed,
                   bytes(streams["out"].data).decode("utf-8", "replace"), round(wall, 6), round(cpu, 6),
                   None if cpu_all is None else round(cpu_all, 6), None if stalled is None else round(stalled, 6))

    def restart(self) -> None:
        self.kill()
        self.broken = ""
        self.start()
        self.wait_ready()

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for f in (self.sock, self.stderr):
            try:
                f.close()
            except OSError:
                pass
        os.close(self.pidfd)
        self.proc = None

    def close(self) -> None:
        """Close the control socket (the zygote exits on EOF), make sure it is gone, free the uid."""
        if self.proc is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.kill()
        self.files.close()
        if self.lease:
            self.lease.release()

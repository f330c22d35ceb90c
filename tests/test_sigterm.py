"""A run stopped by SIGTERM mid-round leaves no process of its sandbox behind: a real run of the tiny
protocol in a subprocess (its own session), SIGTERM once its sandbox is up and a round is under way,
then, once it has exited, no process of the run is left: none of those it had started (by pid and
start time, wherever they were reparented) and none in its session or in a session one of them led
(the sandbox's zygotes each lead one, and every namespace init or execution they start is in it).
SIGKILL too, where the run can clean nothing up: its zygotes see their pool gone and end what they
started."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from tests.tiny_protocol import freeze_tiny


def _processes() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (parent pid, session id, start time in clock ticks, command name) of every process now."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        # fields from the third of proc(5): state, ppid, pgrp, session, ..., starttime (the 22nd)
        out[int(entry)] = (int(fields[1]), int(fields[3]), int(fields[19]), name)
    return out


def _descendants(root: int, procs: dict) -> dict[int, tuple]:
    """The processes whose parent chain reaches `root` (not root itself)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in out:
            out[pid] = procs[pid]
            todo += children.get(pid, [])
    return out


def _left(started: dict, sessions: set[int]) -> dict[int, tuple]:
    """Which of `started` (pid -> its record) still run as themselves, and which processes run in `sessions`."""
    now = _processes()
    return {pid: rec for pid, rec in now.items()
            if (pid in started and started[pid][2] == rec[2]) or rec[1] in sessions}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_run_stopped_mid_round_leaves_no_sandbox_process(tmp_path, sig):
    proto, results = freeze_tiny(tmp_path)
    rdir = results / "tiny" / "B" / "seed1"
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", f"protocol={proto}", "arm=B", "seed=1",
                            f"results_dir={results}", "tracking=false", "progress=off"],
                           cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    started: dict = {}
    try:
        # the interpreter's start takes seconds alone and minutes beside a busy suite: SIGTERM goes once the
        # run has written its start record and its sandbox's zygotes (each in a session of its own) are up
        deadline = time.time() + 600
        while time.time() < deadline and run.poll() is None:
            mine = _descendants(run.pid, _processes())
            if (rdir / "records.jsonl").exists() and any(rec[1] != run.pid for rec in mine.values()):
                break
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before its sandbox was seen: " + run.communicate()[1][-2000:]
        time.sleep(1.0)  # into the round: its rollouts are being verified
        started = _descendants(run.pid, _processes())
        zygotes = {pid for pid, rec in started.items() if rec[1] == pid}  # a session leader: a zygote or a reaper
        assert zygotes, f"no sandbox process under the run: {started}"
        run.send_signal(sig)
        out, err = run.communicate(timeout=600)  # a generous wait: the machine may be busy
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    if sig == signal.SIGTERM:  # stopped as at Ctrl-C: resumable, its clean-up run
        assert run.returncode == 143, f"exit status {run.returncode}\n{out[-2000:]}{err[-2000:]}"
        assert "terminated: run the same command to resume" in err and "Traceback" not in err, err[-3000:]
    else:
        assert run.returncode == -signal.SIGKILL
    assert not (rdir / "SEALED").exists()
    sessions = {run.pid} | {rec[1] for rec in started.values()}
    # what the run left is gone by the time it has exited; a short grace for the kernel to reap what was
    # killed at the end (a namespace's init, if one were left alone, sleeps on for 30 s or more)
    left = _left(started, sessions)
    deadline = time.time() + 10
    while left and time.time() < deadline:
        time.sleep(0.2)
        left = _left(started, sessions)
    assert not left, f"processes of the run left after it exited: {left}"

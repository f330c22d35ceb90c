"""harness.core.timing: stages sum their wall clock, a mark keeps the first moment with the stage times
and the collector's snapshot, and nothing is kept without a collector."""
import os
import random
import re
import subprocess
import sys
import time

import pytest

from harness.core import timing


def test_stages_sum_and_marks_keep_the_first_moment():
    calls = []
    with timing.collect(snapshot=lambda: calls.append(1) or len(calls)) as c:
        with timing.stage("a"):
            time.sleep(0.01)
        timing.mark("rounds")
        with timing.stage("a"):
            time.sleep(0.01)
        with timing.stage("b"):
            pass
        timing.mark("rounds")            # a second mark of the same name changes nothing
    assert set(c.times) == {"a", "b"} and c.times["a"] >= 0.02
    m = c.marks["rounds"]
    assert 0.01 <= m.times["a"] < c.times["a"] and "b" not in m.times
    assert m.snapshot == 1 and calls == [1]   # the snapshot is taken once, at the first mark


def test_nothing_is_kept_without_a_collector_and_nesting_restores_the_outer_one():
    with timing.stage("x"):
        timing.mark("m")                 # no collector: a no-op, no error
    with timing.collect() as outer:
        with timing.collect() as inner:
            with timing.stage("x"):
                pass
        with timing.stage("y"):
            pass
        timing.mark("m")
    assert set(inner.times) == {"x"} and set(outer.times) == {"y"}
    assert outer.marks["m"].snapshot is None and inner.marks == {}


def test_stamped_lines_carry_the_elapsed_time():
    lines = []
    say = timing.stamped(lines.append)
    say("[freeze] one")
    say("two\nthree")
    assert re.fullmatch(r"\[ *\d+\.\ds\] \[freeze\] one", lines[0]), lines
    prefix = lines[1].split("] ", 1)[0] + "] "
    assert lines[1] == f"{prefix}two\n{prefix}three"  # every line of a multi-line message is stamped


class Clock:
    """A hand-moved clock for Progress."""
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_duration():
    assert [timing.duration(s) for s in (0.4, 42, 185, 3720)] == ["0 s", "42 s", "3m05s", "1h02m"]


def test_the_eta_counts_down_while_waiting_and_is_re_estimated_as_items_end():
    clock = Clock()
    p = timing.Progress(12, clock=clock)
    assert p.text() == "0/12"  # no estimate before the first item ends
    for _ in range(3):
        clock.t += 10.0
        p.done()
    assert p.eta() == 90.0 and p.text() == "3/12, ETA 90 s"  # 9 more at 10 s each
    seen = []
    for _ in range(20):  # waiting on the 4th item: the ETA counts down, never up
        clock.t += 0.5
        seen.append(p.eta())
    assert seen == [90.0 - 0.5 * k for k in range(1, 21)]
    clock.t += 30.0  # the 4th item overruns its 10 s: the ETA stays at what the 8 queued ones need
    assert p.eta() == 80.0
    clock.t += 10.0
    p.done()  # it took 50 s: re-estimated from the mean of the items after the first, (10 + 10 + 50) / 3 each
    assert p.eta() == pytest.approx(8 * 70.0 / 3)
    for _ in range(8):
        p.done()
    assert p.text() == "12/12"


def test_parallel_items_are_simulated_on_their_workers():
    """4 items of 10 s, 2 at a time: when the first ends, the other running one is about to end too and
    the ETA is 10 s, not the 30 s that the items' average pace would say."""
    clock = Clock()
    p = timing.Progress(4, jobs=2, clock=clock)
    clock.t = 10.0
    p.done(0)
    assert p.eta() == 10.0
    clock.t = 10.5
    p.done(1)
    # items 2 and 3 started at 10.0 and 10.5, each expected to take the mean 10.25 s: the later ends last
    assert p.eta() == 10.25
    # a kind's own duration: A takes 2 s, B 10 s, and the worker's first item 30 s more for its start (a
    # spawned interpreter's imports): the A and B still queued are expected at 2 s and 10 s
    clock = Clock()
    p = timing.Progress(["A", "A", "B", "A", "B"], jobs=1, clock=clock)
    for t in (32.0, 34.0, 44.0):
        clock.t = t
        p.done()
    assert p.eta() == 2.0 + 10.0
    clock.t = 45.0
    assert p.eta() == 1.0 + 10.0 and p.text() == "3/5, ETA 11 s"
    clock.t = 50.0  # the A overruns: the ETA is the queued B's, never less
    assert p.eta() == 10.0
    # a job's own time, when done() is told it, is the item's duration (not the wait before it started)
    clock = Clock()
    p = timing.Progress(["A", "A", "A"], jobs=2, clock=clock)
    clock.t = 40.0
    p.done(0, seconds=5.0)
    clock.t = 41.0
    p.done(1, seconds=6.0)
    assert p.eta() == 5.5 - 1.0  # item 2 started at 40 s


def test_the_eta_never_grows_between_endings():
    """Random durations, 3 jobs, 5 kinds: between two endings every later ETA is at most an earlier one."""
    rng = random.Random(5)
    clock = Clock()
    kinds = [rng.choice("ABCDE") for _ in range(30)]
    p = timing.Progress(kinds, jobs=3, clock=clock)
    ends = sorted((rng.uniform(1, 50), i) for i in range(3))
    while p.ended < len(kinds):
        t_end, i = ends.pop(0)
        last = None
        while clock.t < t_end:
            eta = p.eta()
            assert last is None or eta is None or eta <= last + 1e-9
            last = eta
            clock.t = min(t_end, clock.t + 0.7)
        before = p.queued
        p.done(i)
        if p.queued > before:  # the next queued item started now: it ends at a random later time
            ends.append((clock.t + rng.uniform(1, 50), before))
            ends.sort()
    assert p.eta() == 0.0


def test_a_heartbeat_reads_the_progress_while_items_end():
    """The heartbeat thread calls text() while the main thread calls done() (both under the Progress's
    lock): every line parses and the thread beats to the end."""
    p = timing.Progress(2000, jobs=4)
    beats = []
    with timing.heartbeat(beats.append, "[x] runs", every=0.001, status=lambda: f"runs {p.text()}"):
        for i in range(2000):
            p.done(i)
            time.sleep(0.0005)
    assert all(re.fullmatch(r"\[x\] runs: still running, \d+ s in, runs \d+/2000(, ETA .*)?", b) for b in beats)
    # the thread beat to the end (a failed text() would have ended it early)
    assert len(beats) > 20 and int(re.search(r"runs (\d+)/", beats[-1]).group(1)) > 1900


def test_timed_says_the_duration_and_heartbeat_fills_the_silence():
    lines = []
    with timing.timed(lines.append, "[x] stage 1/2 sets: building"):
        pass
    assert lines == ["[x] stage 1/2 sets: building", "[x] stage 1/2 sets: done in 0 s"]
    beats = []
    with timing.heartbeat(beats.append, "[x] long stage", every=0.05, status=lambda: "runs 1/4"):
        time.sleep(0.3)
    assert len(beats) >= 3 and beats[0] == "[x] long stage: still running, 0 s in, runs 1/4"
    n = len(beats)
    time.sleep(0.15)
    assert len(beats) == n  # stopped with the block


def test_a_child_process_counts_from_the_commands_start():
    code = "from harness.core import timing; print(round(timing.elapsed()))"
    env = {**os.environ, "HARNESS_LOG_T0": repr(time.time() - 100)}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and 100 <= int(p.stdout) < 160, p.stdout + p.stderr
    assert os.environ[timing._T0_VAR] == repr(timing._T0)  # set here, inherited by what this process starts

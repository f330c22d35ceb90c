"""harness.core.timing: stages sum their wall clock, a mark keeps the first moment with the stage times
and the collector's snapshot, and nothing is kept without a collector."""
import os
import re
import subprocess
import sys
import time

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


def test_duration_counter_and_eta():
    assert [timing.duration(s) for s in (0.4, 42, 185, 3720)] == ["0 s", "42 s", "3m05s", "1h02m"]
    started = time.perf_counter() - 30.0  # 3 of 12 done in 30 s: 9 more at 10 s each
    assert timing.counter(3, 12, started) == "3/12, ETA 90 s"
    assert timing.counter(0, 12, started) == "0/12" and timing.counter(12, 12, started) == "12/12"


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

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


def _wait_until(condition, seconds: float = 30.0) -> None:
    """Poll `condition` until it holds or `seconds` pass (the assertions after it say which)."""
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)


def test_a_heartbeat_reads_the_progress_while_items_end():
    """The heartbeat thread calls text() while the main thread calls done() (both under the Progress's
    lock): every line parses and the thread beats to the end."""
    p = timing.Progress(1000, jobs=4)
    beats = []
    with timing.heartbeat(beats.append, "[x] runs", every=0.001, status=lambda: f"runs {p.text()}"):
        for i in range(1000):
            p.done(i)
            time.sleep(0.0005)
        _wait_until(lambda: beats and "runs 1000/1000" in beats[-1])  # however late a loaded machine wakes it
    assert all(re.fullmatch(r"\[x\] runs: still running, \d+ s in, runs \d+/1000(, ETA .*)?", b) for b in beats)
    # the thread beat to the end (a failed text() would have ended it early)
    assert len(beats) > 10 and int(re.search(r"runs (\d+)/", beats[-1]).group(1)) > 950


def test_timed_says_the_duration_and_heartbeat_fills_the_silence():
    lines = []
    with timing.timed(lines.append, "[x] stage 1/2 sets: building"):
        pass
    assert lines == ["[x] stage 1/2 sets: building", "[x] stage 1/2 sets: done in 0 s"]
    beats = []
    with timing.heartbeat(beats.append, "[x] long stage", every=0.05, status=lambda: "runs 1/4"):
        _wait_until(lambda: len(beats) >= 3)   # it beats again and again, however loaded the machine
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


def test_an_item_told_its_own_seconds_stops_running_while_queued_ones_wait():
    """done(i, seconds=...) (what `experiment` calls) ends item i: 2 jobs, 6 items, and after two endings
    the two running items and the two queued ones are simulated on 2 workers, not on every item
    that ever ran."""
    clock = Clock()
    p = timing.Progress(["A"] * 6, jobs=2, clock=clock)
    clock.t = 10.0
    p.done(0, seconds=10.0)
    assert sorted(p.running) == [1, 2] and p.queued == 3
    clock.t = 12.0
    p.done(1, seconds=12.0)
    assert sorted(p.running) == [2, 3] and p.queued == 4
    # each expected at 11 s (the mean of the two workers' first items): item 2 (started at 10 s) has
    # 9 s left, item 3 11 s; queued item 4 follows item 2 (ends at 20 s), item 5 follows item 3 (22 s)
    assert p.eta() == 22.0 and p.text() == "2/6, ETA 22 s"
    clock.t = 20.0
    p.done(2, seconds=10.0)
    assert sorted(p.running) == [3, 4] and p.queued == 5
    # now expected at 10 s (the one item that was not a worker's first): item 3 (started at 12 s) has
    # 2 s left, item 4 10 s, and queued item 5 follows item 3: 2 + 10
    assert p.eta() == 12.0
    for i in (3, 4, 5):
        p.done(i, seconds=10.0)
    assert p.running == {} and p.text() == "6/6"


def _replay(seed: int, arms: str = "ABCDNP", seeds: int = 12, jobs: int = 2, beat: float = 30.0):
    """A replayed runs stage of `experiment`: len(arms) x seeds runs in its order (seed by seed, arm by
    arm), `jobs` at a time on a pool's queue; each arm has its own mean time (20-90 s), each run varies
    about it (log-normal, sd 0.2) and a worker's first run carries a 15 s start. Progress is told what
    `experiment` tells it (the run's own seconds at each ending) and read where the log prints it: at
    each ending and at every heartbeat. Returns [(printed ETA, real time left)] in seconds."""
    rng = random.Random(seed)
    mean = {a: rng.uniform(20, 90) for a in arms}
    kinds = [a for _ in range(seeds) for a in arms]
    took = [mean[a] * rng.lognormvariate(0, 0.2) + (15.0 if i < jobs else 0.0) for i, a in enumerate(kinds)]
    clock = Clock()
    p = timing.Progress(kinds, jobs=jobs, clock=clock)
    ends = sorted((took[i], i) for i in range(jobs))  # (end time, item) of the running runs
    nxt, printed = jobs, []
    while ends:
        t_end, i = ends.pop(0)
        while clock.t + beat < t_end:  # the heartbeat's lines while waiting
            clock.t += beat
            printed.append((clock.t, p.eta()))
        clock.t = t_end
        p.done(i, seconds=took[i])
        printed.append((clock.t, p.eta()))
        if nxt < len(kinds):
            ends.append((t_end + took[nxt], nxt))
            ends.sort()
            nxt += 1
    finish = clock.t
    return [(eta, finish - t) for t, eta in printed if eta is not None and finish - t > 0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_eta_tracks_the_real_time_left_on_a_replayed_runs_stage(seed):
    """72 runs, 2 at a time, 6 arms of their own pace: over the runs stage the median of printed ETA /
    real time left is within 0.7-1.4, and at the stage's middle the ETA is already within that band."""
    pairs = _replay(seed)
    ratios = sorted(eta / left for eta, left in pairs)
    median = ratios[len(ratios) // 2]
    assert 0.7 <= median <= 1.4, (median, ratios[:: max(1, len(ratios) // 10)])
    eta, left = min(pairs, key=lambda pair: abs(pair[1] - pairs[0][1] / 2))  # half the stage left
    assert 0.7 <= eta / left <= 1.4, (eta, left)

"""harness.core.timing: stages sum their wall clock, a mark keeps the first moment with the stage times
and the collector's snapshot, and nothing is kept without a collector."""
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

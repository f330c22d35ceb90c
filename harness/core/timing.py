"""Wall clock per stage of a round, for the profiler (tools/profile.py). Off unless a collector is
active, so the arms' loops and the runner can mark their stages at no cost; timings never enter the
chained records.

    with timing.collect(snapshot=fn) as c:   # the profiler
        ...                                   # the library: `with timing.stage("update"): ...`,
                                              #              `timing.mark("rounds")`
    c.times   {stage: seconds, summed}
    c.marks   {name: Mark(t, times, snapshot)} at the first `mark(name)`
"""
from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Mark:
    """The moment a named point was first reached: perf_counter seconds, a copy of the stage times
    so far, and what the collector's `snapshot` returned then (None without one)."""
    t: float
    times: dict[str, float]
    snapshot: Any


@dataclass
class Collector:
    times: defaultdict = field(default_factory=lambda: defaultdict(float))   # stage -> seconds
    marks: dict[str, Mark] = field(default_factory=dict)
    snapshot: Callable[[], Any] | None = None   # called at each first mark (e.g. copies running totals)


_active: Collector | None = None


@contextmanager
def stage(name: str):
    """Time the enclosed block under `name` (seconds, summed) when a collector is active."""
    if _active is None:
        yield
        return
    collector, t0 = _active, time.perf_counter()
    try:
        yield
    finally:
        collector.times[name] += time.perf_counter() - t0


def mark(name: str) -> None:
    """Note that the point `name` is reached (the first time only) when a collector is active."""
    if _active is None or name in _active.marks:
        return
    snap = _active.snapshot() if _active.snapshot is not None else None
    _active.marks[name] = Mark(time.perf_counter(), dict(_active.times), snap)


@contextmanager
def collect(snapshot: Callable[[], Any] | None = None):
    """Collect stage times and marks for the enclosed code: `with collect() as c: ...`; c.times is
    {stage: seconds}, c.marks {name: Mark}. Nested collectors restore the outer one on exit."""
    global _active
    previous, _active = _active, Collector(snapshot=snapshot)
    try:
        yield _active
    finally:
        _active = previous


# ---------------------------------------------------------------- the log's clock

# The command's start (wall clock), shared with every process it starts (jobs, Hydra launchers) through
# the environment, so that one log counts from one moment.
_T0_VAR = "HARNESS_LOG_T0"
_T0 = float(os.environ.setdefault(_T0_VAR, repr(time.time())))


def elapsed() -> float:
    """Seconds since the command started: since the first import of this module in the process
    tree (an inherited HARNESS_LOG_T0), not since this process's own start."""
    return time.time() - _T0


def _print(line: str) -> None:
    print(line, flush=True)  # a log read through a pipe or a file sees each line as it happens


def stamped(out: Callable[[str], Any] = _print) -> Callable[[str], None]:
    """`out` (default: print, flushed) with each line prefixed by the elapsed time, "[  12.3s] ..."."""
    def say(line: str) -> None:
        prefix = f"[{elapsed():7.1f}s] "
        out(prefix + str(line).replace("\n", "\n" + prefix))
    return say


def duration(seconds: float) -> str:
    """'42 s', '3m05s', '1h02m' for a log line."""
    s = int(round(seconds))
    if s < 100:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def counter(done: int, total: int, started: float) -> str:
    """'3/12, ETA 1m20s' from how many of `total` are done since perf_counter time `started`
    (the ETA assumes the rest go at the average pace so far)."""
    if done <= 0 or done >= total:
        return f"{done}/{total}"
    spent = time.perf_counter() - started
    return f"{done}/{total}, ETA {duration(spent / done * (total - done))}"


@contextmanager
def timed(out: Callable[[str], Any], what: str):
    """Say `what`, run the block, then say how long it took: "<what>: done in 12 s"."""
    t0 = time.perf_counter()
    out(what)
    yield
    out(f"{what.split(':')[0]}: done in {duration(time.perf_counter() - t0)}")


@contextmanager
def heartbeat(out: Callable[[str], Any], what: str, every: float = 30.0, status: Callable[[], str] | None = None):
    """While the block runs, say "<what>: still running, <n> s in[, status()]" every `every` seconds,
    so that no stage is silent for longer (a daemon thread; it only prints)."""
    stop = threading.Event()
    t0 = time.perf_counter()

    def beat():
        while not stop.wait(every):
            extra = f", {status()}" if status is not None else ""
            out(f"{what}: still running, {duration(time.perf_counter() - t0)} in{extra}")
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()

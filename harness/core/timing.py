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

import heapq
import os
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence


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


class Progress:
    """How far a stage's items are and when the rest should end: "3/12, ETA 1m20s".

    Items run `jobs` at a time in the order given, as a pool's queue runs them: the first `jobs` start
    at once, then the next each time one ends. `kinds` names each item's kind (an arm, say: items of a
    kind take alike); an int instead is that many items of one kind. An item's duration is what
    `done` is told (the job's own time) or else the time from its start to its end. The first `jobs`
    items are each worker's first and carry the worker's one-off start (a spawned interpreter's
    imports, a sandbox pool), so an item's expected duration is the mean over the ended items of its
    kind that were not a worker's first, else over every such item, else over the first ones alike.
    The ETA simulates what is left on the `jobs` workers: a running item needs its expected duration
    less the time it has run (never below 0), each queued item its expected duration on the first free
    worker. Between two endings the ETA therefore only counts down, never grows while waiting; it is
    re-estimated as each item ends. No estimate before the first item ends."""

    def __init__(self, kinds: Sequence[Hashable] | int, jobs: int = 1, clock: Callable[[], float] = time.perf_counter):
        self.kinds = [None] * kinds if isinstance(kinds, int) else list(kinds)
        self.jobs = max(1, int(jobs))
        self.clock = clock
        now = clock()
        self.running = {i: now for i in range(min(self.jobs, len(self.kinds)))}  # item index -> its start
        self.queued = len(self.running)  # index of the next item to start
        self.seconds: dict = {}  # (kind, a worker's first item?) -> durations of its ended items
        self.ended = 0
        self._lock = threading.Lock()  # a heartbeat thread reads what the main thread updates

    @property
    def total(self) -> int:
        return len(self.kinds)

    def done(self, item: int | None = None, seconds: float | None = None) -> None:
        """Item `item` (its index in the order; default: the one running longest) ended now, after `seconds`
        of its own (default: since it started); the next queued item starts. An index that is not running
        counts as the longest-running one ending."""
        with self._lock:
            now = self.clock()
            if not self.running:
                raise ValueError(f"Progress.done: all {self.total} items have ended already")
            i = item if item in self.running else min(self.running, key=self.running.get)
            started = self.running.pop(i)  # ended, whichever duration is told: no longer running
            took = now - started if seconds is None else seconds
            self.seconds.setdefault((self.kinds[i], i < self.jobs), []).append(took)
            self.ended += 1
            if self.queued < self.total:
                self.running[self.queued] = now
                self.queued += 1

    def _expected(self, kind) -> float:
        for pick in (lambda k, first: k == kind and not first, lambda k, first: not first,
                     lambda k, first: k == kind, lambda k, first: True):
            mine = [x for (k, first), xs in self.seconds.items() if pick(k, first) for x in xs]
            if mine:
                return sum(mine) / len(mine)
        raise ValueError("Progress: no item has ended")

    def eta(self, now: float | None = None) -> float | None:
        """Seconds until the last item should end (None before the first one ended; 0 when all have)."""
        with self._lock:
            if not self.seconds:
                return None
            now = self.clock() if now is None else now
            free = [max(self._expected(self.kinds[i]) - (now - start), 0.0) for i, start in self.running.items()]
            free += [0.0] * (self.jobs - len(free))
            heapq.heapify(free)
            for i in range(self.queued, self.total):
                heapq.heappush(free, heapq.heappop(free) + self._expected(self.kinds[i]))
            return max(free)

    def eta_text(self, now: float | None = None) -> str:
        """", ETA 1m20s" while items remain and an estimate exists; ", ETA now (over the estimate)" when the
        running items have outlasted it; "" otherwise."""
        left = self.eta(now)
        if left is None or self.ended >= self.total:
            return ""
        return f", ETA {duration(left)}" if left >= 0.5 else ", ETA now (over the estimate)"

    def text(self, now: float | None = None) -> str:
        """"3/12, ETA 1m20s": items ended of the total, and the ETA while some remain."""
        eta = self.eta_text(now)
        return f"{self.ended}/{self.total}{eta}"


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

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

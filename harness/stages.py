"""Wall-clock per stage of a round, for `make profile`. Off unless a collector is active, so the
arms' loops can mark their stages at no cost; timings never enter the chained records."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

_active: dict[str, float] | None = None


@contextmanager
def stage(name: str):
    """Time the enclosed block under `name` (seconds, summed) when a collector is active."""
    if _active is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _active[name] += time.perf_counter() - t0


@contextmanager
def collect():
    """Collect stage times for the enclosed code: `with collect() as times: ...` -> {stage: seconds}."""
    global _active
    previous, _active = _active, defaultdict(float)
    try:
        yield _active
    finally:
        _active = previous

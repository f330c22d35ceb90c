"""Independent runs side by side: `make experiment` and the pilot run their arm x seed jobs in
spawned processes, `jobs` at a time. Each job sets its own seeds and one torch thread (RunSettings),
so what a run records does not depend on how many ran beside it or in which order they finished.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait


def default_jobs(device: str, torch_threads: int = 1) -> int:
    """Jobs at once when none is asked for: one per core-worth of torch threads on CPU; one on a GPU
    (its runs share the one device, and each already fills it better than two would)."""
    if device != "cpu":
        return 1
    return max(1, (os.cpu_count() or 1) // max(1, torch_threads))


def each(fn: Callable, calls: Sequence[tuple], jobs: int, on_done: Callable | None = None) -> list:
    """fn(*args) for every args in `calls`, at most `jobs` at once (1: here, in order). Returns the
    results in the order of `calls`; on_done(args, result) is called in this process as each ends.
    The first failure stops what has not started and is raised once the running jobs have ended.
    `fn` must be importable by name (a module-level function), as spawned processes need."""
    if jobs <= 1 or len(calls) <= 1:
        out = []
        for args in calls:
            out.append(fn(*args))
            if on_done:
                on_done(args, out[-1])
        return out
    results: list = [None] * len(calls)
    ctx = multiprocessing.get_context("spawn")  # no forked torch state, no inherited locks
    with ProcessPoolExecutor(max_workers=min(jobs, len(calls)), mp_context=ctx) as pool:
        index = {pool.submit(fn, *args): i for i, args in enumerate(calls)}
        pending = set(index)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)  # on_done as each ends, not at the end
            for fut in done:
                if fut.exception() is not None:
                    for other in pending:
                        other.cancel()
                    wait(pending)
                    raise fut.exception()
                i = index[fut]
                results[i] = fut.result()
                if on_done:
                    on_done(calls[i], results[i])
    return results

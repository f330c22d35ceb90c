"""Verdicts that depend on the program alone: nothing a neighbour does (CPU, memory) changes an
innocent verdict, the timeout is judged on the program's own CPU time, every execution starts from
the same interpreter state whatever the pool's age, nothing of the host is in argv or the
environment, and no kernel state an execution can mark reaches another execution (locks, flock,
inotify on the root's files, abstract unix sockets, the network namespace).

The task is f(x) = x + 3 on inputs 1, 2, 3; a completion is the body of f."""
import os

from harness import PROJECT_ROOT
from harness.sandbox import Limits, Program, Sandbox
from harness.tasks import Task, with_expected
from harness.verifier import INFRASTRUCTURE, Verifier

TASK = with_expected(Task("arith", (("add", 3),), (0,), (1, 2, 3)))


def _f(body: str) -> str:
    return "def f(x):\n" + body


# ----------------------------------------------------------------------------- neighbours (CPU, memory)

# Innocent programs (memory written, so resident): one holds 300 MiB of its 400 MiB (more than any
# one process of the hog, so a pool-wide OOM kill would pick it), one spends CPU (well under its
# limit), one both; their outputs do not depend on time.
INNOCENT = [
    _f("    keep = b'\\x07' * (300 << 20)\n    return x + keep[-1]\n"),
    _f("    s = 0\n    for i in range(300_000):\n        s += i % 7\n    return x + s\n"),
    _f("    keep = b'\\x01' * (100 << 20)\n    s = sum(i % 3 for i in range(200_000))\n    return x + s + len(keep) // (1 << 20)\n"),
] * 2
# The hog: forks as many processes as it may, each takes 200 MiB and spins, for longer than the batch.
HOG = _f("    import os\n    for _ in range(6):\n        try:\n            if os.fork() == 0:\n                break\n"
         "        except OSError:\n            break\n    keep = b'\\x01' * (200 << 20)\n    while keep:\n"
         "        pass\n")
NEIGHBOUR_LIMITS = Limits(wall_s=30.0, cpu_s=4, memory_mb=400)


def _verdicts(runs) -> list[tuple]:
    return [(r.fate, r.stage_name, tuple(None if o is None else (o.kind, o.value) for o in r.outcomes)) for r in runs]


def test_a_hog_beside_a_batch_changes_none_of_its_verdicts():
    """The same batch alone and beside a hog (every process it may fork, each with 200 MiB, spinning)
    on another worker of the same pool: identical outcomes. Each worker is capped at its own
    memory share and one CPU, so the hog's OOM kills and CPU stay on its worker."""
    progs = [Program(src, (1, 2)) for src in INNOCENT]
    with Sandbox(workers=3, limits=NEIGHBOUR_LIMITS) as sb:
        caps = sb.capabilities()
        assert caps["worker_cgroups"] and caps["worker_memory_cap"] == (400 + 16 + 64) << 20, caps
        alone = sb.run_many(progs)
        beside = sb.run_many([Program(HOG, (1,))] + progs)
    assert all(r.fate == "ended" for r in alone), alone
    assert _verdicts(beside[1:]) == _verdicts(alone)
    hog = beside[0]
    assert hog.fate in ("cpu_limit", "memory_limit"), hog  # the hog ends by its own limits, on its own worker
    assert hog.cpu_all_s is not None and hog.cpu_all_s > hog.cpu_s  # its forked processes counted too


def test_the_timeout_is_judged_on_the_programs_own_cpu_time():
    """A busy loop uses its CPU time: `timeout`. A program that only waits reaches the generous wall
    limit without the CPU time for it: `wall_limit`, an infrastructure reason, retried once.
    Processes it forks count: spinning in four processes hits the execution's CPU limit."""
    with Verifier(workers=1, limits=Limits(wall_s=4.0, cpu_s=1)) as v:
        busy = v.verify(TASK, "    while True:\n        pass\n")
        idle = v.verify(TASK, "    import time\n    time.sleep(60)\n")
        forks = v.verify(TASK, "    import os\n    for _ in range(3):\n        if os.fork() == 0:\n            break\n"
                               "    while True:\n        pass\n")
        assert (busy.reason, busy.retried) == ("timeout", False), busy
        assert "wall_limit" in INFRASTRUCTURE and (idle.reason, idle.retried) == ("wall_limit", True), idle
        assert "not the CPU limit" in idle.detail
        assert (forks.reason, forks.retried) == ("timeout", False), forks
        assert v.retries == 1 and v.counters["wall_limit"] == 1
    with Sandbox(workers=1, limits=Limits(wall_s=4.0, cpu_s=1)) as sb:
        run = sb.run(Program(_f("    import os\n    for _ in range(3):\n        if os.fork() == 0:\n            break\n"
                                "    while True:\n        pass\n"), (1,)))
    assert run.fate == "cpu_limit" and run.cpu_all_s >= 1.0, run


# ----------------------------------------------------------------------------- interpreter state, argv, env

STATE = _f("    import gc, os, sys\n"
           "    return [list(gc.get_count()), [[s['collections'], s['collected'], s['uncollectable']] "
           "for s in gc.get_stats()], gc.isenabled(), sys.argv, sys.orig_argv, sorted(os.environ.items()), "
           "sys.path, getattr(sys.modules['__main__'], '__file__', None), sys._getframe(1).f_code.co_filename]\n")
STATE = STATE.replace("sorted(os.environ.items())", "sorted(map(list, os.environ.items()))")


def test_every_execution_starts_from_the_same_interpreter_state_whatever_the_pool_age():
    """The collector's counts and statistics seen by a program are the same on its pool's first
    execution, its 60th, and on another pool; argv, environment, sys.path and file names hold
    nothing of the host (no project path, no pid, no cgroup)."""
    prog = Program(STATE, (0,))
    with Sandbox(workers=1) as sb:
        first = sb.run(prog)
        for _ in range(60):
            sb.run(Program(_f("    return [object() for _ in range(x)] and x\n"), (500,)))
        later = sb.run(prog)
        harness_pid = str(os.getpid())
    with Sandbox(workers=1) as other:
        fresh = other.run(prog)
    assert [r.outcomes[0].kind for r in (first, later, fresh)] == ["out"] * 3, (first, later, fresh)
    values = [r.outcomes[0].value for r in (first, later, fresh)]
    assert first.fate == "ended" and values[0] == values[1] == values[2], values
    text = repr(values[0])
    assert str(PROJECT_ROOT) not in text and "harness" not in text and "cgroup" not in text, text
    assert harness_pid not in text and values[0][3] == [""], text

"""Verifier throughput on the same verdicts, four ways, each with `workers` in parallel:

    mp_spawn    one fresh multiprocessing.Process per verdict, "spawn" start method (the safe one next
                to a CUDA trainer), outputs back over a multiprocessing Pipe, dispatched from a thread
                pool: the common code-eval harness recipe. The reference for the >= 10x target.
    mp_fork     the same with the "fork" start method, forking this (small, torch-free) process
    bare_fork   the floor: warm workers (same interpreter, `-S -s`) that fork one child per program
                and pipe its outputs back as JSON; no limits, no namespaces, no uid, no timeout
    sandbox     harness.sandbox.verifier.Verifier: the full protections

Pools are started before timing (warm workers are the design); the mp methods have nothing to start.
The verdicts are split into chunks and the methods take turns chunk by chunk, so a change in
machine load hits all alike. All must agree on which completions pass.

    python -m benchmarks.bench_verifier [--n 1000] [--workers N]
prints the figures as JSON and writes them to results/bench/verifier.json.
"""
from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import queue
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from harness import PROJECT_ROOT
from harness.sandbox.pool import plain_equal
from harness.sandbox.verifier import Verifier
from families.code import Task, build_tasks

OUT_PATH = PROJECT_ROOT / "results" / "bench" / "verifier.json"
TIMEOUT_S = 3.0

BARE_WORKER = r'''
import json, os, struct, sys
def read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return buf
def send(fd, data):
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]
while True:
    req = json.loads(read_exact(0, struct.unpack(">I", read_exact(0, 4))[0]))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            scope = {}
            exec(compile(req["source"], "<candidate>", "exec"), scope)
            outs = []
            for x in req["inputs"]:
                try:
                    outs.append(["out", scope[req["func"]](x)])
                except Exception as e:
                    outs.append(["exc", type(e).__name__])
            data = json.dumps(outs).encode()
        except BaseException as e:
            data = json.dumps([["exc", type(e).__name__]]).encode()
        while data:
            data = data[os.write(w, data):]
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    send(1, b"".join(chunks))
'''


def make_pairs(n: int, seed: int = 0) -> list[tuple[Task, str]]:
    """n (task, completion) pairs: references, with every 4th replaced by `return <var>` (mostly wrong)."""
    tasks = build_tasks(seed, n)
    return [(t, t.reference if i % 4 else f"    return {t.var}\n") for i, t in enumerate(tasks)]


def passed(task: Task, outs) -> bool:
    return (isinstance(outs, list) and len(outs) == len(task.expected)
            and all(o[0] == "out" and plain_equal(o[1], e) for o, e in zip(outs, task.expected)))


# ----------------------------------------------------------------------------- baseline: a Process per verdict

def _mp_child(source: str, inputs: list, conn) -> None:
    scope: dict = {}
    try:
        exec(compile(source, "<candidate>", "exec"), scope)  # noqa: S102 - baseline, trusted references
        outs = []
        for x in inputs:
            try:
                outs.append(["out", scope["f"](x)])
            except Exception as e:  # noqa: BLE001
                outs.append(["exc", type(e).__name__])
    except BaseException as e:  # noqa: BLE001
        outs = [["exc", type(e).__name__]]
    conn.send(outs)
    conn.close()


def mp_verdict(pair: tuple[Task, str], method: str = "spawn") -> bool:
    task, completion = pair
    ctx = multiprocessing.get_context(method)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_mp_child, args=(task.prompt + completion, list(task.inputs), send))
    proc.start()
    send.close()
    outs = recv.recv() if recv.poll(TIMEOUT_S) else None
    proc.join(TIMEOUT_S)
    if proc.is_alive():
        proc.kill()
        proc.join()
    recv.close()
    return passed(task, outs)


# ----------------------------------------------------------------------------- floor: bare fork-and-pipe

class BarePool:
    def __init__(self, workers: int):
        self.procs = [subprocess.Popen([os.path.realpath(sys.executable), "-S", "-s", "-B", "-c", BARE_WORKER],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(workers)]
        self.idle: queue.Queue = queue.Queue()
        for p in self.procs:
            self.idle.put((p, p.stdout))

    def verdict(self, pair: tuple[Task, str]) -> bool:
        task, completion = pair
        p, reader = self.idle.get()
        try:
            req = json.dumps({"source": task.prompt + completion, "func": "f", "inputs": list(task.inputs)}).encode()
            p.stdin.write(struct.pack(">I", len(req)) + req)
            p.stdin.flush()
            (size,) = struct.unpack(">I", reader.read(4))  # a buffered pipe: read(n) returns n bytes
            outs = json.loads(reader.read(size))
        finally:
            self.idle.put((p, reader))
        return passed(task, outs)

    def close(self) -> None:
        for p in self.procs:
            p.stdin.close()
            p.wait()


# ----------------------------------------------------------------------------- the run

def run(n: int = 1000, workers: int | None = None, chunks: int = 20) -> dict:
    """Time the four methods on the same n verdicts, taking turns chunk by chunk. Returns verdicts/s
    for each, the sandbox's ratio to each, and whether all methods agree on every verdict."""
    workers = workers or os.cpu_count() or 1
    pairs = make_pairs(n)
    bare, verifier = BarePool(workers), Verifier(workers=workers)
    threads = ThreadPoolExecutor(max_workers=workers)
    methods = {
        "mp_spawn": lambda chunk: list(threads.map(mp_verdict, chunk)),
        "mp_fork": lambda chunk: list(threads.map(functools.partial(mp_verdict, method="fork"), chunk)),
        "bare_fork": lambda chunk: list(threads.map(bare.verdict, chunk)),
        "sandbox": lambda chunk: [v.passed for v in verifier.verify_many(chunk)],
    }
    seconds = dict.fromkeys(methods, 0.0)
    results: dict[str, list[bool]] = {m: [] for m in methods}
    try:
        for m, fn in methods.items():  # warm-up, untimed
            fn(pairs[:workers * 2])
        size = -(-n // chunks)
        for start in range(0, n, size):
            chunk = pairs[start:start + size]
            for m, fn in methods.items():
                t0 = time.perf_counter()
                results[m] += fn(chunk)
                seconds[m] += time.perf_counter() - t0
    finally:
        threads.shutdown()
        bare.close()
        verifier.close()
    agree = all(results[m] == results["sandbox"] for m in methods)
    rate = {m: n / s for m, s in seconds.items()}
    return {
        "n": n, "workers": workers, "cpu_count": os.cpu_count(), "mp_process_start_method": "spawn",
        "verdicts_per_s": {m: round(r, 1) for m, r in rate.items()},
        "sandbox_over_mp_process": round(rate["sandbox"] / rate["mp_spawn"], 2),
        "sandbox_over_mp_fork": round(rate["sandbox"] / rate["mp_fork"], 2),
        "sandbox_over_bare_fork": round(rate["sandbox"] / rate["bare_fork"], 3),
        "pass_rate": round(sum(results["sandbox"]) / n, 3),
        "methods_agree": agree,
        "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    figures = run(args.n, args.workers)
    OUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    OUT_PATH.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""The shared per-round evaluation: probe pass rate at the byte budget, bits per byte on held-out
text, and the collapse monitors. Every arm is measured by exactly this code."""
from __future__ import annotations

import hashlib

from harness import monitors
from harness.sampling import sample
from harness.tasks import Task
from harness.training import bits_per_byte
from harness.verifier import verify_many


def derive_seed(*parts) -> int:
    """A 63-bit seed from any parts (run seed, round, purpose...): stable across processes."""
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:15], 16)


def greedy_pass(model, tasks: list[Task], max_bytes: int, device) -> tuple[list[int], int]:
    """Greedy correct@max_bytes. Returns (passed[len(tasks)] as 0/1, bytes generated)."""
    comps = sample(model, [t.prompt for t in tasks], max_bytes=max_bytes, temperature=0.0, seed=0, device=device)
    verdicts = verify_many([(t, c.text) for t, c in zip(tasks, comps)])
    return [int(v.passed) for v in verdicts], sum(c.n_bytes for c in comps)


def heldout_texts(probes: list[Task]) -> list[str]:
    """The held-out text for bits per byte: the probe tasks' reference programs (never trained on)."""
    return [t.prompt + t.reference for t in probes]


def evaluate(model, probes: list[Task], budget: dict, seed: int, device) -> dict:
    """Probe pass rate (greedy, at the byte budget), bpb on held-out text, and completion monitors
    from `monitor_samples` samples on the first `monitor_probes` probes. Returns a JSON-able dict."""
    passed, n_bytes = greedy_pass(model, probes, budget["max_bytes"], device)
    mon_tasks = probes[: budget["monitor_probes"]]
    g = budget["monitor_samples"]
    comps = sample(model, [t.prompt for t in mon_tasks for _ in range(g)], max_bytes=budget["max_bytes"],
                   temperature=budget["temperature"], seed=seed, device=device)
    groups = [[c.text for c in comps[i * g:(i + 1) * g]] for i in range(len(mon_tasks))]
    return {
        "probe_pass_rate": sum(passed) / len(passed),
        "probe_passed": "".join(map(str, passed)),
        "heldout_bpb": bits_per_byte(model, heldout_texts(probes)),
        "monitor_within_entropy": monitors.within_input_entropy(groups),
        "monitor_cross_mi": monitors.cross_input_mi(groups),
        "eval_rollouts": len(probes) + len(comps),
        "eval_bytes": n_bytes + sum(c.n_bytes for c in comps),
    }

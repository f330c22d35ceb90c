"""The shared per-round evaluation: probe pass rate at the byte budget, bits per byte on held-out
text, and the collapse monitors. Every arm is measured by exactly this code."""
from __future__ import annotations

import os
import random
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

from harness.core.seeds import derive_seed
from harness.core.settings import Speed
from harness.core.timing import stage
from harness.learning import monitors
from harness.learning.sampling import Completion, sample
from harness.learning.training import completion_bits_per_byte
from harness.sandbox.verifier import Verdict, verify_many
from harness.spec.accounting import Spend
from harness.spec.protocol import Budget
from harness.tasks.contract import Task


def sample_verified(model, tasks: list[Task], *, max_bytes: int, temperature: float, seed: int, device,
                    repeats: int = 1, stages: tuple[str | None, str] = (None, "verify_greedy"),
                    speed: Speed | None = None) -> tuple[list[Completion], list[Verdict]]:
    """`repeats` completions per task (task i's are items i*repeats .. i*repeats + repeats-1) and
    their verdicts. A row is verified as soon as it finishes, on a background thread, while the rest
    of its batch decodes (the sandbox runs on other cores than the decoder's one torch thread); the
    verdicts are those of verifying after sampling. The plain path verifies after sampling.
    `stages` names the profiling stages of (decoding, waiting for verdicts after decoding); a
    None decoding stage leaves decoding to the caller's own stage."""
    decode_stage, wait_stage = stages
    rollout_tasks = [t for t in tasks for _ in range(repeats)]
    prompts = [t.prompt for t in rollout_tasks]
    speed = speed or Speed()
    if speed.plain:
        with stage(decode_stage) if decode_stage else nullcontext():
            comps = sample(model, prompts, max_bytes=max_bytes, temperature=temperature, seed=seed, device=device,
                           speed=speed)
        with stage(wait_stage):
            return comps, verify_many([(t, c.text) for t, c in zip(rollout_tasks, comps)])
    chunk = max(2, os.cpu_count() or 1)   # rows per verifier call: one per sandbox worker
    pending: list[tuple[int, Completion]] = []
    submitted: list[tuple[list[int], Future]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-overlap") as pool:
        def flush() -> None:
            idx = [i for i, _ in pending]
            submitted.append((idx, pool.submit(verify_many, [(rollout_tasks[i], c.text) for i, c in pending])))
            pending.clear()

        def on_row_done(i: int, c: Completion) -> None:
            pending.append((i, c))
            if len(pending) >= chunk:
                flush()

        with stage(decode_stage) if decode_stage else nullcontext():
            comps = sample(model, prompts, max_bytes=max_bytes, temperature=temperature, seed=seed, device=device,
                           on_row_done=on_row_done, speed=speed)
        if pending:
            flush()
        verdicts: list[Verdict | None] = [None] * len(prompts)
        with stage(wait_stage):  # what is left to wait for once decoding has finished
            for idx, fut in submitted:
                for i, v in zip(idx, fut.result()):
                    verdicts[i] = v
    if any(v is None for v in verdicts):
        raise RuntimeError("sample_verified: a row was never reported by the sampler")
    return comps, verdicts  # type: ignore[return-value]


@dataclass(frozen=True)
class Group:
    """The G rollouts of one task, with their verdicts (rollout j is completions[j], verdicts[j])."""
    task: Task
    completions: tuple[Completion, ...]
    verdicts: tuple[Verdict, ...]

    @property
    def rewards(self) -> list[float]:
        """1.0 for a verified pass, else 0.0; length G."""
        return [float(v.passed) for v in self.verdicts]

    @property
    def k(self) -> int:
        return sum(v.passed for v in self.verdicts)

    @property
    def texts(self) -> list[str]:
        return [c.text for c in self.completions]


def grouped(items: list, size: int) -> list[list]:
    """Consecutive runs of `size` items: the sampler's layout of `size` repeats per prompt."""
    if size < 1 or len(items) % size:
        raise ValueError(f"grouped: {len(items)} items do not split into groups of {size}")
    return [items[i:i + size] for i in range(0, len(items), size)]


def sample_groups(model, tasks: list[Task], *, G: int, max_bytes: int, temperature: float, seed: int, device,
                  purpose: str, stages: tuple[str | None, str] = (None, "verify_greedy"),
                  speed: Speed | None = None) -> tuple[list[Group], Spend]:
    """G verified rollouts per task (sample_verified), grouped by task once, here. Returns the
    groups (one per task, in order) and their charge to the ledger under `purpose`."""
    comps, verdicts = sample_verified(model, tasks, max_bytes=max_bytes, temperature=temperature, seed=seed,
                                      device=device, repeats=G, stages=stages, speed=speed)
    groups = [Group(t, tuple(c), tuple(v)) for t, c, v in zip(tasks, grouped(comps, G), grouped(verdicts, G))]
    return groups, Spend.sampled(purpose, len(comps), sum(c.n_bytes for c in comps))


def greedy_outcomes(model, tasks: list[Task], max_bytes: int, device,
                    speed: Speed | None = None) -> tuple[list[Verdict], int, list[str]]:
    """Greedy correct@max_bytes with every verdict (its reason included). Returns (verdicts[len(tasks)],
    bytes generated, the completions' text); one rollout per task, which the caller charges to the ledger."""
    comps, verdicts = sample_verified(model, tasks, max_bytes=max_bytes, temperature=0.0, seed=0, device=device,
                                      speed=speed)
    return verdicts, sum(c.n_bytes for c in comps), [c.text for c in comps]


def greedy_pass(model, tasks: list[Task], max_bytes: int, device, speed: Speed | None = None) -> tuple[list[int], int]:
    """`greedy_outcomes` as pass bits: (passed[len(tasks)] as 0/1, bytes generated)."""
    verdicts, n_bytes, _ = greedy_outcomes(model, tasks, max_bytes, device, speed)
    return [int(v.passed) for v in verdicts], n_bytes


def reason_fields(verdicts: list[Verdict]) -> dict:
    """What the records keep of a list of verdicts beyond pass/fail: "reasons" (one verifier reason
    per verdict, in order) and "retried" (how many were run twice after an infrastructure failure)."""
    return {"reasons": [v.reason for v in verdicts], "retried": sum(v.retried for v in verdicts)}


def heldout_pairs(probes: list[Task]) -> list[tuple[str, str]]:
    """The held-out text for bits per byte: the probe tasks' reference programs (never trained on),
    each scored given its prompt."""
    return [(t.prompt, t.reference) for t in probes]


BASE_MONITOR_SEED = derive_seed("base", -1, "monitor")  # the base's one evaluation: the same for every run


def evaluate_base(model, probes: list[Task], budget: Budget, device, speed: Speed | None = None) -> tuple[dict, Spend]:
    """The base's evaluation, done once at freeze (frozen/base_eval.json) and read by every run's
    round -1: `evaluate` with the monitor seed BASE_MONITOR_SEED, whatever the run seed."""
    return evaluate(model, probes, budget, BASE_MONITOR_SEED, device, speed)


def base_eval_record(model, probes: list[Task], budget: Budget, base_sha256: str, device,
                     speed: Speed | None = None) -> dict:
    """frozen/base_eval.json's content: {eval: `evaluate_base`'s dict, budget: its spend (the
    ledger's fields), monitor_seed, base_sha256: the checkpoint scored, n_probes}."""
    ev, spend = evaluate_base(model, probes, budget, device, speed)
    return {"eval": ev, "budget": spend.to_dict(), "monitor_seed": BASE_MONITOR_SEED, "base_sha256": base_sha256,
            "n_probes": len(probes)}


def intermediate_subset(n_probes: int, n: int, task_seed: int) -> list[int]:
    """The indices (ascending) of the probes an intermediate round scores: n of n_probes drawn with a
    seed of the task seed alone, so every arm, seed and round scores the same ones; all when n >= n_probes."""
    if n >= n_probes:
        return list(range(n_probes))
    return sorted(random.Random(derive_seed(task_seed, "intermediate_eval")).sample(range(n_probes), n))


def evaluate(model, probes: list[Task], budget: Budget, seed: int, device, speed: Speed | None = None,
             keep_completions: bool = False) -> tuple[dict, Spend]:
    """Probe pass rate (greedy, at the byte budget), bpb on held-out text, and completion monitors
    from `monitor_samples` samples on the first `monitor_probes` probes. Returns a JSON-able dict
    and what the evaluation spent (probe and monitor rollouts). Every probe's verifier reason is kept
    ("probe_reasons", "probe_retried"); with `keep_completions` the dict also holds
    "probe_completions", each probe's greedy completion in probe order (the runner keeps them for the
    final round only: the readout's per-item view)."""
    verdicts, n_bytes, texts = greedy_outcomes(model, probes, budget.max_bytes, device, speed)
    passed = [int(v.passed) for v in verdicts]
    kept = reason_fields(verdicts)
    mon_tasks = probes[: budget.monitor_probes]
    g = budget.monitor_samples
    comps = sample(model, [t.prompt for t in mon_tasks for _ in range(g)], max_bytes=budget.max_bytes,
                   temperature=budget.temperature, seed=seed, device=device, speed=speed)
    groups = [[c.text for c in grp] for grp in grouped(comps, g)]
    spend = Spend.sampled("probe", len(probes), n_bytes) + Spend.sampled("monitor", len(comps), sum(c.n_bytes for c in comps))
    return {
        "probe_pass_rate": sum(passed) / len(passed),
        "probe_passed": "".join(map(str, passed)),
        "probe_reasons": kept["reasons"],     # the verifier's reason per probe (harness.sandbox.verifier.REASONS)
        "probe_retried": kept["retried"],     # probes run twice after an infrastructure failure
        "heldout_bpb": completion_bits_per_byte(model, heldout_pairs(probes), speed=speed),
        **monitors.with_noise(groups, seed),  # within-input entropy, whole-string and line MI, with intervals
        "eval_rollouts": len(probes) + len(comps),
        "eval_bytes": n_bytes + sum(c.n_bytes for c in comps),
        **({"probe_completions": texts} if keep_completions else {}),
    }, spend

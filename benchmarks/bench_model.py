"""Model throughput: KV-cache decoding against full recomputation, and training FLOP/s against a matmul.

Decoding: one batch of task prompts, greedy, the full 256-byte budget. Both runs use
`harness.learning.sampling.sample` (same left-padded batch, same code), once with the KV cache and once
recomputing the whole sequence at every step (`use_cache=False`). The END row of the output layer
is zeroed so that every row runs the whole budget: END's logit is then 0 while some other byte's
is almost surely positive (checked).

Sampler paths: the G rollouts of task prompts at temperature 1 (an untrained model, so rows end
at scattered lengths, as rollouts do), once on the plain path (`Speed(plain=True)`: full prefill
per row, no row compaction, all noise drawn up front) and once on the default path; the outputs
must be identical. Reported: the speed-up and the share of computed row-steps that were real bytes.

Probe evaluation: `harness.running.evaluation.greedy_pass` (greedy decode at the sampler's default batch,
the batch every evaluation uses, and the sandbox verdicts) on `--probes` probe-distribution tasks
with an untrained model: bytes generated per second and probes per second, end to end. Held-out
bits per byte on the same probes' references, batched by length, against the given order.

Training: `train_steps` (masked CE, AdamW) on task prompt + reference pairs. Achieved FLOP/s is
reported two ways: the usual 6 * N * tokens/s with N the parameters used in matmuls (all but the
embedding table, a lookup), and that plus causal attention, 6 * n_layer * d_model * T per token
(QK^T and AV, forward and backward, half the T x T scores). The reference is the FLOP/s of a
square float32 matmul measured in the same run; ratio = achieved / matmul.

Every figure is the best of REPEATS timed runs, after a warm-up.

    python -m benchmarks.bench_model [--size smoke] [--device cpu] [--prompts 8] [--probes 128]
prints the figures as JSON and writes them to results/bench/model.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

from harness import PROJECT_ROOT
from harness.core.settings import Speed
from harness.learning import sampling
from harness.learning.model import SIZES, Transformer
from harness.learning.sampling import END_ID, default_batch_size, sample
from harness.learning.training import collate, completion_bits_per_byte, encode, make_optimizer, token_nll, train_steps
from harness.running.evaluation import greedy_pass
from families.code import Difficulty, build_tasks

OUT_PATH = PROJECT_ROOT / "results" / "bench" / "model.json"
REPEATS = 3  # every figure is the best of 3 runs: load on a shared machine only ever slows a run


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device, repeats: int = REPEATS) -> tuple[float, object]:
    """Best wall time of `repeats` calls of fn, and fn's last result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best, out


def decode_figures(model: Transformer, prompts: list[str], max_bytes: int, device: torch.device) -> dict:
    sample(model, prompts[:2], max_bytes=8, temperature=0)  # warm-up (allocator, kernels)
    figures = {}
    outputs = {}
    for name, use_cache in (("kv", True), ("no_cache", False)):
        seconds, comps = _timed(lambda: sample(model, prompts, max_bytes=max_bytes, temperature=0,
                                               use_cache=use_cache), device)
        n_bytes = sum(c.n_bytes for c in comps)
        if n_bytes != len(prompts) * max_bytes:
            raise RuntimeError(f"{name}: a row stopped before the {max_bytes}-byte budget; the benchmark needs full rows")
        figures[f"{name}_seconds"] = round(seconds, 3)
        figures[f"{name}_bytes_per_s"] = round(n_bytes / seconds, 1)
        outputs[name] = [c.text for c in comps]
    figures["kv_speedup"] = round(figures["kv_bytes_per_s"] / figures["no_cache_bytes_per_s"], 2)
    figures["same_outputs"] = outputs["kv"] == outputs["no_cache"]
    return figures


def sampled_figures(model: Transformer, prompts: list[str], max_bytes: int, device: torch.device) -> dict:
    """Temperature-1 sampling with the cache (includes drawing the Gumbel noise on the CPU)."""
    seconds, comps = _timed(lambda: sample(model, prompts, max_bytes=max_bytes, temperature=1.0, seed=0), device)
    return {"sampled_rows": len(prompts), "sampled_seconds": round(seconds, 3),
            "sampled_bytes_per_s": round(sum(c.n_bytes for c in comps) / seconds, 1)}


def sampler_path_figures(model: Transformer, prompts: list[str], G: int, max_bytes: int, device: torch.device) -> dict:
    """Plain vs default sampler on len(prompts) x G rollouts at temperature 1 (see the docstring)."""
    rollouts = [p for p in prompts for _ in range(G)]
    figures, outputs = {}, {}
    for name, speed in (("plain", Speed(plain=True)), ("default", Speed())):
        steps_before = sampling.TOTALS.row_steps
        seconds, comps = _timed(lambda: sample(model, rollouts, max_bytes=max_bytes, temperature=1.0, seed=0,
                                               speed=speed), device)
        n_bytes = sum(c.n_bytes for c in comps)
        figures[f"sampler_{name}_seconds"] = round(seconds, 3)
        figures[f"sampler_{name}_bytes_per_s"] = round(n_bytes / seconds, 1)
        figures[f"sampler_{name}_useful_row_steps"] = round(n_bytes * REPEATS / (sampling.TOTALS.row_steps - steps_before), 3)
        outputs[name] = comps
    figures["sampler_rollouts"] = len(rollouts)
    figures["sampler_speedup"] = round(figures["sampler_plain_seconds"] / figures["sampler_default_seconds"], 2)
    figures["sampler_same_outputs"] = outputs["plain"] == outputs["default"]
    return figures


def probe_eval_figures(model: Transformer, tasks: list, max_bytes: int, device: torch.device) -> dict:
    """greedy_pass (decode + sandbox verdicts) on `tasks` at the sampler's default batch: the
    evaluation's own path. Bytes generated per second and probes per second, best of REPEATS."""
    greedy_pass(model, tasks[:2], max_bytes, device)  # warm-up (sandbox workers, kernels)
    seconds, (passed, n_bytes) = _timed(lambda: greedy_pass(model, tasks, max_bytes, device), device)
    longest = max(len(t.prompt.encode()) for t in tasks) + max_bytes
    return {"probe_eval_probes": len(tasks), "probe_eval_batch": default_batch_size(model, device, longest),
            "probe_eval_seconds": round(seconds, 3), "probe_eval_bytes": n_bytes,
            "probe_eval_bytes_per_s": round(n_bytes / seconds, 1), "probe_eval_probes_per_s": round(len(tasks) / seconds, 2)}


def heldout_bpb_figures(model: Transformer, tasks: list, device: torch.device) -> dict:
    """The evaluation's held-out bits per byte (`completion_bits_per_byte`: pairs batched by length)
    against the same pairs scored in their given order, 32 to a batch (how it was computed before):
    reference bytes scored per second each way, and the ratio. Both must give the same value."""
    pairs = [(t.prompt, t.reference) for t in tasks]

    @torch.no_grad()
    def given_order() -> float:
        total, count = 0.0, 0
        for lo in range(0, len(pairs), 32):
            nll, m = token_nll(model, collate([encode(p, c, model.cfg.max_seq) for p, c in pairs[lo:lo + 32]]))
            total, count = total + float(nll.sum(dtype=torch.float64)), count + int(m.sum())
        return total / count / math.log(2)

    scored = sum(len(c.encode()) + 1 for _, c in pairs)  # + END
    by_length_s, by_length = _timed(lambda: completion_bits_per_byte(model, pairs), device)
    given_s, given = _timed(given_order, device)
    return {"heldout_pairs": len(pairs), "heldout_bytes_per_s": round(scored / by_length_s, 1),
            "heldout_given_order_bytes_per_s": round(scored / given_s, 1),
            "heldout_bpb_speedup": round(given_s / by_length_s, 3),
            "heldout_same_value": abs(by_length - given) <= 1e-6 * abs(given)}   # float32 sums in other batches


def matmul_flops(device: torch.device, n: int, reps: int) -> float:
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    a @ b  # warm-up
    seconds, _ = _timed(lambda: [a @ b for _ in range(reps)], device)
    return 2 * n ** 3 * reps / seconds


def train_figures(model: Transformer, examples: list[tuple[str, str]], batch_size: int, n_steps: int,
                  device: torch.device) -> dict:
    cfg = model.cfg
    opt = make_optimizer(model, 1e-3, 0.0)
    train_steps(model, opt, examples, n_steps=1, batch_size=batch_size, seed=0)  # warm-up
    seconds, stats = _timed(lambda: train_steps(model, opt, examples, n_steps=n_steps, batch_size=batch_size,
                                                seed=1), device)  # same batches each repeat
    tokens_per_s = stats["tokens"] / seconds
    n_matmul = model.num_params() - model.embed.weight.numel()
    mean_len = stats["tokens"] / (n_steps * min(batch_size, len(examples)))
    flops_6n = 6 * n_matmul * tokens_per_s
    flops_attn = flops_6n + 6 * cfg.n_layer * cfg.d_model * mean_len * tokens_per_s
    return {"train_steps": n_steps, "train_batch": batch_size, "train_mean_seq_bytes": round(mean_len, 1),
            "train_tokens_per_s": round(tokens_per_s, 1), "matmul_params": n_matmul,
            "train_flops_6N": flops_6n, "train_flops_6N_plus_attention": flops_attn}


def run(size: str = "smoke", device: str = "cpu", n_prompts: int = 8, max_bytes: int = 256,
        train_batch: int = 16, n_train_steps: int = 5, seed: int = 0, G: int = 8, n_probes: int = 128) -> dict:
    dev = torch.device(device)
    model = Transformer(SIZES[size], seed=seed).to(dev)
    tasks = build_tasks(seed, max(n_prompts, 4 * train_batch))
    prompts = [t.prompt for t in tasks[:n_prompts]]
    figures: dict = {"size": size, "params": model.num_params(), "device": str(dev),
                     "torch_threads": torch.get_num_threads(), "load_avg_1min": round(os.getloadavg()[0], 2),
                     "prompts": n_prompts, "max_bytes": max_bytes}
    with torch.no_grad():
        model.lm_head.weight[END_ID] = 0.0
    figures.update(decode_figures(model, prompts, max_bytes, dev))
    figures.update(sampled_figures(model, [t.prompt for t in tasks], max_bytes, dev))

    model = Transformer(SIZES[size], seed=seed).to(dev)
    figures.update(sampler_path_figures(model, [t.prompt for t in tasks[:3 * n_prompts]], G, max_bytes, dev))
    probes = build_tasks(seed + 1, n_probes, Difficulty(1, 3, 99, 0.4))
    figures.update(probe_eval_figures(model, probes, max_bytes, dev))
    figures.update(heldout_bpb_figures(model, probes, dev))
    figures.update(train_figures(model, [(t.prompt, t.reference) for t in tasks], train_batch, n_train_steps, dev))
    n, reps = (4096, 20) if dev.type == "cuda" else (1024, 5)
    mm = matmul_flops(dev, n, reps)
    figures["matmul_n"] = n
    figures["matmul_flops"] = mm
    figures["train_flops_ratio_6N"] = round(figures["train_flops_6N"] / mm, 4)
    figures["train_flops_ratio_6N_plus_attention"] = round(figures["train_flops_6N_plus_attention"] / mm, 4)
    for k in ("train_flops_6N", "train_flops_6N_plus_attention", "matmul_flops"):
        figures[k] = float(f"{figures[k]:.4g}")
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="smoke", choices=sorted(SIZES))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--train-steps", type=int, default=5)
    ap.add_argument("--probes", type=int, default=128, help="probe tasks for the probe-evaluation figure")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    figures = run(args.size, args.device, args.prompts, train_batch=args.train_batch, n_train_steps=args.train_steps,
                  n_probes=args.probes)
    OUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    OUT_PATH.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

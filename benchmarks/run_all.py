"""`make bench` (`python -m benchmarks.run_all`, from the repository root): the verifier and the model benchmarks in one run.

    verifier  1,000 verdicts: the sandbox against a fresh multiprocessing.Process per verdict (spawn
              and fork) and against a bare fork-and-pipe worker (benchmarks/bench_verifier.py)
    kernels   the registered CPU kernel path (avx2) against the host's widest, training and decoding
              (benchmarks/bench_kernels.py)
    model     KV-cache against no-cache decoding at the 256-byte budget, the plain against the default
              sampler on G rollouts per prompt, training tokens/s and FLOP/s against a matmul
              (benchmarks/bench_model.py)

Every figure is a ratio of two measurements taken in the same run, so machine load hits both
sides alike. Prints the ratios and writes everything to results/bench/bench.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from benchmarks import bench_verifier
from harness import PROJECT_ROOT

OUT_PATH = PROJECT_ROOT / "results" / "bench" / "bench.json"

RATIOS = (  # (section, key, what it compares)
    ("verifier", "sandbox_over_mp_process", "sandbox verdicts/s over a spawned multiprocessing.Process per verdict"),
    ("verifier", "sandbox_over_mp_fork", "sandbox verdicts/s over a forked multiprocessing.Process per verdict"),
    ("verifier", "sandbox_over_bare_fork", "sandbox verdicts/s over a bare fork-and-pipe worker (the floor)"),
    ("model", "kv_speedup", "KV-cache decoding bytes/s over recomputing the sequence every step"),
    ("model", "sampler_speedup", "default sampler over the plain path on G rollouts per prompt"),
    ("model", "heldout_bpb_speedup", "held-out bits per byte batched by length over the same pairs in their given order"),
    ("model", "train_flops_ratio_6N", "training FLOP/s (6N per token) over a float32 matmul"),
    ("model", "train_flops_ratio_6N_plus_attention", "training FLOP/s (6N + attention) over a float32 matmul"),
    ("kernels", "pin_train_ratio", "training tokens/s on the registered kernel path (avx2) over the host's widest"),
    ("kernels", "pin_decode_ratio", "greedy decoding bytes/s on the registered kernel path over the host's widest"),
)
CHECKS = (("verifier", "methods_agree"), ("model", "same_outputs"), ("model", "sampler_same_outputs"), ("model", "heldout_same_value"))


def run(n: int = 1000, workers: int | None = None, size: str = "smoke", device: str = "cpu", max_bytes: int = 256,
        threads: int = 1, train_steps: int = 5) -> dict:
    """Both benchmarks; returns {"verifier": {...}, "model": {...}, "ratios": {key: value}, "checks": {...}}."""
    import torch

    # imported here, not at the top: a spawned verifier baseline re-imports this module (as
    # __mp_main__), and must not pay for importing torch inside its timeout
    from benchmarks import bench_model
    if threads > 0:
        torch.set_num_threads(threads)
    from benchmarks import bench_kernels
    figures = {"verifier": bench_verifier.run(n, workers),
               "model": bench_model.run(size, device, max_bytes=max_bytes, n_train_steps=train_steps),
               "kernels": bench_kernels.run()}
    figures["ratios"] = {key: figures[section][key] for section, key, _ in RATIOS}
    figures["checks"] = {key: figures[section][key] for section, key in CHECKS}
    return figures


def format_ratios(figures: dict) -> str:
    lines = [f"{'ratio':<38}{'value':>9}  what", "-" * 100]
    for _, key, what in RATIOS:
        lines.append(f"{key:<38}{figures['ratios'][key]:>9.3g}  {what}")
    lines.append("checks: " + ", ".join(f"{k}={v}" for k, v in figures["checks"].items()))
    v, m = figures["verifier"], figures["model"]
    lines.append(f"verifier: {v['n']} verdicts, {v['workers']} workers, verdicts/s {v['verdicts_per_s']}")
    lines.append(f"model: {m['size']} ({m['params']:,} parameters) on {m['device']}, {m['torch_threads']} thread(s): "
                 f"KV {m['kv_bytes_per_s']:,.0f} vs no-cache {m['no_cache_bytes_per_s']:,.0f} bytes/s; sampler default "
                 f"{m['sampler_default_bytes_per_s']:,.0f} vs plain {m['sampler_plain_bytes_per_s']:,.0f} bytes/s; "
                 f"training {m['train_tokens_per_s']:,.0f} tokens/s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run_all", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="verdicts (default 1000)")
    ap.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPU count)")
    ap.add_argument("--size", default="smoke", help="model size (harness.learning.model.SIZES)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-bytes", type=int, default=256, help="decode budget (default 256)")
    ap.add_argument("--train-steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as a run)")
    ap.add_argument("--out", default=str(OUT_PATH))
    args = ap.parse_args(argv)
    if args.n < 1 or args.max_bytes < 1 or args.train_steps < 1:
        print(f"error: --n, --max-bytes and --train-steps must be >= 1 (got {args.n}, {args.max_bytes}, "
              f"{args.train_steps})", file=sys.stderr)
        return 2
    figures = run(args.n, args.workers, args.size, args.device, args.max_bytes, args.threads, args.train_steps)
    figures["load_avg_1min_at_end"] = round(os.getloadavg()[0], 2)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(format_ratios(figures))
    print(f"written: {out}")
    return 0 if all(figures["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the registered kernel path costs: the smoke model's training tokens/s and greedy decoding
bytes/s on the registered path (avx2, harness.core.kernels) against the host's own widest path
(what torch picks unpinned, e.g. avx512), each in a fresh process (torch fixes its path at its first
kernel). The two paths alternate, ROUNDS times, and each keeps its best figure, so load on a shared
machine hits both alike. On a host whose widest path is the registered one the ratio is 1 by
construction, and the report says so.

    python -m benchmarks.bench_kernels     prints the figures as JSON
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from harness import PROJECT_ROOT

ROUNDS = 2
REGISTERED = "avx2"
_ONE = """
import json, sys
from harness.core.kernels import KernelRecipe, pin, observed
if sys.argv[1] != "native":
    pin(KernelRecipe(sys.argv[1], 1), "bench")
import torch
torch.set_num_threads(1)
from benchmarks import bench_model
from harness.learning.model import SIZES, Transformer
from families.code import build_tasks
dev = torch.device("cpu")
tasks = build_tasks(0, 64)
model = Transformer(SIZES["smoke"], seed=0)
out = bench_model.train_figures(model, [(t.prompt, t.reference) for t in tasks], 16, 5, dev)
with torch.no_grad():
    model.lm_head.weight[bench_model.END_ID] = 0.0
out.update(bench_model.decode_figures(model, [t.prompt for t in tasks[:8]], 256, dev))
out["path"] = torch.backends.cpu.get_cpu_capability().lower()
print(json.dumps(out))
"""


def _one(path: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    done = subprocess.run([sys.executable, "-c", _ONE, path], cwd=PROJECT_ROOT, env={**env, "PYTHONPATH": str(PROJECT_ROOT)},
                          capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(rounds: int = ROUNDS) -> dict:
    """{"registered": figures, "native": figures, "pin_train_ratio", "pin_decode_ratio", "native_path"}."""
    best: dict[str, dict] = {}
    for _ in range(rounds):
        for path in (REGISTERED, "native"):
            f = _one(path)
            keep = best.setdefault(path, f)
            for key in ("train_tokens_per_s", "kv_bytes_per_s"):
                keep[key] = max(keep[key], f[key])
    reg, nat = best[REGISTERED], best["native"]
    return {"registered_path": reg["path"], "native_path": nat["path"],
            "registered_train_tokens_per_s": reg["train_tokens_per_s"], "native_train_tokens_per_s": nat["train_tokens_per_s"],
            "registered_decode_bytes_per_s": reg["kv_bytes_per_s"], "native_decode_bytes_per_s": nat["kv_bytes_per_s"],
            "pin_train_ratio": round(reg["train_tokens_per_s"] / nat["train_tokens_per_s"], 3),
            "pin_decode_ratio": round(reg["kv_bytes_per_s"] / nat["kv_bytes_per_s"], 3),
            "note": "the same path: ratio 1 by construction" if reg["path"] == nat["path"] else
                    f"registered {reg['path']} over this host's {nat['path']}"}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))

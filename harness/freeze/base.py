"""Freeze's second step: the base checkpoint, trained from random init by the recipe model.yaml
registers, or reused when one built by the same recipe is already there (base.json beside it).
Loading it is harness.learning.checkpoint.load_base; write_base_eval scores it once for every run."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from tqdm import tqdm

from harness.core import kernels, paths, records, timing
from harness.core.paths import set_paths
from harness.core.seeds import derive_seed
from harness.core.settings import Speed
from harness.learning.checkpoint import checkpoint_bytes, load_base, model_tensors
from harness.learning.model import SIZES, Transformer
from harness.learning.training import make_optimizer, train_steps
from harness.running.evaluation import base_eval_record
from harness.spec.frozen import code_version
from harness.spec.protocol import Protocol


def build_base(protocol: Protocol, warmup: list, device: str = "cpu", progress: bool = True, out=None) -> bytes:
    """Warm-up SFT from random init, exactly as the recipe says. Returns the checkpoint bytes.
    Progress: a bar (`progress`), or, given `out`, a plain line at each quarter of the steps."""
    recipe = protocol.model.base
    init_seed, order_seed = base_seeds(protocol)
    kernels.pin(protocol.model.kernels(recipe.torch_threads), f"the base of {protocol.name}")
    torch.manual_seed(init_seed)
    model = Transformer(SIZES[protocol.model.size], seed=init_seed).to(device)
    opt = make_optimizer(model, recipe.lr, recipe.weight_decay)
    examples = [(t.prompt, t.reference) for t in warmup]
    chunk = 100  # steps per progress update; each chunk's batches are seeded by its index
    done, eta = 0, timing.Progress(-(-recipe.steps // chunk))  # the chunks take alike, one after another
    lines = out is not None and not progress
    beat = timing.heartbeat(out, "[freeze] base warm-up", status=lambda: f"steps {done}/{recipe.steps}{eta.eta_text()}") \
        if lines else contextlib.nullcontext()
    try:
        with beat:
            for i in tqdm(range(0, recipe.steps, chunk), desc="base warm-up", unit="x100 steps",
                          disable=not progress):
                train_steps(model, opt, examples, n_steps=min(chunk, recipe.steps - i), batch_size=recipe.batch_size,
                            seed=derive_seed("base", order_seed, i))
                done = min(i + chunk, recipe.steps)
                eta.done()
                if lines and done * 4 // recipe.steps > i * 4 // recipe.steps:
                    out(f"[freeze] base warm-up: steps {done}/{recipe.steps}{eta.eta_text()}")
    finally:
        torch.set_num_threads(protocol.model.run_threads)  # what everything after the base computes with
    return checkpoint_bytes(model_tensors(model), {"size": protocol.model.size})


def base_seeds(protocol: Protocol) -> tuple[int, int]:
    """(init seed, data-order seed) of the base `protocol` builds: one registered base of a recipe
    protocol (Protocol.for_base) has its own two; otherwise model.yaml's base.seed is both."""
    draw = protocol.base_draw
    return (draw.init_seed, draw.data_order_seed) if draw else (protocol.model.base.seed, protocol.model.base.seed)


def base_recipe(protocol: Protocol, warmup_path: Path) -> dict:
    """What determines the base's bytes: the model file (its content, less the keys that only name the
    base the registration was sized on: Protocol.measured_sha256), the warm-up set and the code that trains
    it; for one registered base of a recipe protocol, its two seeds too."""
    recipe = {"model_yaml_sha256": protocol.measured_sha256("model.yaml"),
              "warmup_sha256": records.sha256_file(warmup_path), "code_version": code_version(),
              "torch": torch.__version__}
    if protocol.base_draw is not None:
        recipe["init_seed"], recipe["data_order_seed"] = base_seeds(protocol)
    return recipe


def ensure_base(protocol: Protocol, results_dir: Path, warmup: list, device: str = "cpu", out=print,
                progress: bool = True) -> Path:
    """The base checkpoint under frozen/, built from the recipe unless one built by the same recipe
    (same model file, warm-up set, code and torch: recorded in base.json beside it) is already there.
    The pilot and freeze both come through here, so they use the same bytes."""
    path = set_paths(results_dir, protocol.name)["base"]
    recipe_path = paths.base_recipe_path(results_dir, protocol.name)
    recipe = base_recipe(protocol, set_paths(results_dir, protocol.name)["warmup"])
    if path.exists() and recipe_path.exists():
        known = json.loads(recipe_path.read_text())
        if known.get("recipe") == recipe and known.get("base_sha256") == records.sha256_file(path):
            out(f"[freeze] base checkpoint built by this recipe already: reused ({path})")
            return path
    out(f"[freeze] building the base: {protocol.model.size} model, {protocol.model.base.steps} warm-up steps")
    data = build_base(protocol, warmup, device, progress, out)
    records.atomic_write_bytes(path, data)
    records.atomic_write_text(recipe_path, records.canonical_json({"recipe": recipe, "base_sha256": records.sha256_bytes(data)}) + "\n")
    return path


def write_base_eval(protocol: Protocol, results_dir: Path, probes: list, base_path: Path, device: str = "cpu",
                    speed: Speed | None = None) -> dict:
    """Score the base once on the probe set (probe outcomes, bits per byte, monitors:
    harness.running.evaluation.base_eval_record) and write frozen/base_eval.json, which the lock hashes and
    every run's round -1 reads instead of scoring the base again. Returns its content."""
    model = load_base(results_dir, protocol, device)
    scored = base_eval_record(model, probes, protocol.budget, records.sha256_file(base_path), device, speed)
    records.atomic_write_text(paths.base_eval_path(results_dir, protocol.name), records.canonical_json(scored) + "\n")
    return scored

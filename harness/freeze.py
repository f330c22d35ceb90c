"""`make freeze`: validate the protocol, materialise its task sets, build (or verify) the base
checkpoint, run the power analysis, and write the lock.

Everything freeze writes lives under results/<protocol>/frozen/ (git-ignored):
    sets/{warmup,seed_set,probe,confirm,calibration}.jsonl   the materialised splits, expected outputs included
    base.pt                                      the base checkpoint, built deterministically
    FROZEN.lock                                  sha256 of every protocol file, set, the base and the source;
                                                 the environment (packages, git commit, CPU, torch, GPU) as information
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from harness import configure_torch, design, layout, lock, pilot, records, sandbox, timing
from harness.evaluation import greedy_pass
from harness.frozen import code_version, load_sets, lock_entries, verify_frozen  # noqa: F401  (re-exported)
from harness.layout import SPLITS, frozen_dir, set_paths  # noqa: F401  (re-exported)
from harness.model import SIZES, Speed, Transformer, checkpoint_bytes, load_model_tensors, model_tensors, read_checkpoint
from harness.protocol import Protocol, ProtocolError, load_protocol
from harness.seeds import derive_seed
from harness.tasks import build_splits, guard_capacity, mix_table, tasks_jsonl
from harness.training import make_optimizer, train_steps


def materialise(protocol: Protocol) -> dict[str, list]:
    """The protocol's task splits (SPLITS), exactly as freeze writes them: every split from the probe
    distribution, the training splits stratified to the probe mix and guarded (harness.tasks.build_splits).
    Raises ProtocolError naming tasks.yaml when the leak guard would exhaust a stratum."""
    try:
        return build_splits(protocol.seeds.task_seed, protocol.split_sizes(), protocol.difficulty(), protocol.guard,
                            protocol.tasks.leak_guard.max_held_out_fraction)
    except ValueError as e:
        raise ProtocolError(f"{protocol.dir / 'tasks.yaml'}: {e}") from None


def report_splits(protocol: Protocol, splits: dict[str, list], out=print) -> None:
    """Print the split-mix table and the leak guard's registered choice and tightest stratum."""
    for line in mix_table(splits):
        out(f"[freeze] {line}")
    held = [t for s in ("probe", "confirm", "calibration") for t in splits[s]]
    worst = guard_capacity(held, protocol.difficulty(), protocol.guard)[0]
    out(f"[freeze] leak guard: no probe, confirm or calibration program is in a training split; same steps with "
        f"other constants: {protocol.tasks.leak_guard.same_ops_other_constants}; tightest stratum "
        f"{worst['template']} depth {worst['depth']}: {worst['held_out']} of {worst['space']} held out")


def build_base(protocol: Protocol, warmup: list, device: str = "cpu", progress: bool = True, out=None) -> bytes:
    """Warm-up SFT from random init, exactly as the recipe says. Returns the checkpoint bytes.
    Progress: a bar (`progress`), or, given `out`, a plain line at each quarter of the steps."""
    recipe = protocol.model.base
    torch.manual_seed(recipe.seed)
    model = Transformer(SIZES[protocol.model.size], seed=recipe.seed).to(device)
    opt = make_optimizer(model, recipe.lr, recipe.weight_decay)
    examples = [(t.prompt, t.reference) for t in warmup]
    chunk = 100  # steps per progress update; each chunk's batches are seeded by its index
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.torch_threads)  # the recipe's: a float sum's order depends on it
    t0, done = time.perf_counter(), 0
    lines = out is not None and not progress
    beat = timing.heartbeat(out, "[freeze] base warm-up", status=lambda: f"steps {timing.counter(done, recipe.steps, t0)}") \
        if lines else contextlib.nullcontext()
    try:
        with beat:
            for i in tqdm(range(0, recipe.steps, chunk), desc="base warm-up", unit="x100 steps",
                          disable=not progress):
                train_steps(model, opt, examples, n_steps=min(chunk, recipe.steps - i), batch_size=recipe.batch_size,
                            seed=derive_seed("base", recipe.seed, i))
                done = min(i + chunk, recipe.steps)
                if lines and done * 4 // recipe.steps > i * 4 // recipe.steps:
                    out(f"[freeze] base warm-up: steps {timing.counter(done, recipe.steps, t0)}")
    finally:
        torch.set_num_threads(threads)
    return checkpoint_bytes(model_tensors(model), {"size": protocol.model.size})


def load_base(results_dir: Path, protocol: Protocol, device) -> Transformer:
    """The frozen base on `device` (the same checkpoint format as every round's)."""
    path = set_paths(results_dir, protocol.name)["base"]
    tensors, meta = read_checkpoint(path)
    if meta.get("size") != protocol.model.size:
        raise lock.LockError(f"{path}: a base of size {meta.get('size')!r}, but {protocol.dir / 'model.yaml'} "
                             f"registers size {protocol.model.size!r}")
    return load_model_tensors(Transformer(SIZES[meta["size"]]), tensors).to(device)


def freeze(name: str, results_dir: Path, device: str = "cpu", out=print, threads: int = 1, progress: bool = True,
           speed: Speed | None = None, jobs: int = 1) -> dict:
    """Freeze protocol `name` into results_dir/<name>/frozen/. The lock is written last, after the
    sets, the base, its score in the sandbox and the power analysis: a freeze that fails or is
    killed leaves no lock, and running it again picks up where it stopped (a base already built by
    the same recipe is reused). A frozen protocol is verified, not frozen again."""
    configure_torch(threads)
    protocol = load_protocol(name)
    name = protocol.name  # a path to a protocol dir names it by its folder
    results_dir = Path(results_dir).resolve()
    lock_path = layout.lock_path(results_dir, name)
    if lock_path.exists():
        locked = verify_frozen(protocol, results_dir)
        summary = json.loads(layout.freeze_summary_path(results_dir, name).read_text())
        out(f"[freeze] {name}: frozen, lock verified ({lock_path}, lock hash {locked['lock_hash'][:16]}); "
            f"base probe pass rate {summary['base_pass_rate']:.3f}")
        return {"lock": locked, **summary}
    with timing.timed(out, "[freeze] stage 1/5 sets: materialising the splits"):
        splits = materialise_sets(protocol, results_dir, out)
    with timing.timed(out, "[freeze] stage 2/5 base: the warm-up checkpoint"):
        base_path = ensure_base(protocol, results_dir, splits["warmup"], device, out, progress)
    with timing.timed(out, "[freeze] stage 3/5 pilot: measuring the protocol on its calibration split"):
        piloted = pilot.ensure_pilot(protocol, results_dir, splits, base_path, device, out, jobs)  # refuses a miscalibrated protocol

    sandbox.hide(results_dir)  # the materialised sets and their answers are there now
    model = load_base(results_dir, protocol, device)
    with timing.timed(out, f"[freeze] stage 4/5 base probe: greedy on {len(splits['probe'])} probes"), \
            timing.heartbeat(out, "[freeze] base probe"):
        passed, _ = greedy_pass(model, splits["probe"], protocol.budget.max_bytes, device, speed)
    base_rate = sum(passed) / len(passed)
    lo, hi = protocol.model.base_pass_range
    out(f"[freeze] base probe pass rate: {base_rate:.3f} ({sum(passed)}/{len(passed)}); registered range [{lo}, {hi}]")
    if not lo <= base_rate <= hi:
        out("!" * 78 + f"\n!! WARNING: the base's probe pass rate {base_rate:.3f} is outside the registered range "
            f"[{lo}, {hi}].\n!! At the floor or the ceiling every arm ties and the experiment says nothing.\n" + "!" * 78)
    with timing.timed(out, "[freeze] stage 5/5 design analysis: simulating the decision rule"), \
            timing.heartbeat(out, "[freeze] design analysis"):
        report = power_report(protocol, piloted)
    for line in report["lines"]:
        out(f"[freeze] {line}")
    if report["underpowered"]:
        out("!" * 78 + "\n" + "\n".join(f"!! WARNING: {w}" for w in report["underpowered"]) + "\n" + "!" * 78)

    summary = {"base_pass_rate": base_rate, "base_sha256": records.sha256_file(base_path), "power": report}
    records.atomic_write_text(layout.freeze_summary_path(results_dir, name), records.canonical_json(summary) + "\n")
    meta = {"protocol": name, "python": sys.version.split()[0], "torch": torch.__version__,
            "environment": lock.environment(device)}  # informational: audit names what differs from it
    locked = lock.write_lock(lock_path, lock_entries(protocol, results_dir), meta)
    out(f"[freeze] lock written: {lock_path} (lock hash {locked['lock_hash'][:16]})")
    return {"lock": locked, **summary}


def materialise_sets(protocol: Protocol, results_dir: Path, out=print) -> dict[str, list]:
    """Build every registered split and write it under frozen/sets/. Sets already there must be
    byte-identical to what the protocol builds now (LockError otherwise). Returns split -> tasks."""
    out(f"[freeze] {protocol.name}: building splits {protocol.split_sizes()} from task seed {protocol.seeds.task_seed}")
    splits = materialise(protocol)
    report_splits(protocol, splits, out)
    paths = set_paths(results_dir, protocol.name)
    for s in SPLITS:
        data = tasks_jsonl(splits[s]).encode()
        if paths[s].exists() and paths[s].read_bytes() != data:
            raise lock.LockError(f"{paths[s]}: the materialised {s} set differs from what the protocol builds now; "
                                 f"a changed protocol is a new protocol")
        records.atomic_write_bytes(paths[s], data)
    return splits


def base_recipe(protocol: Protocol, warmup_path: Path) -> dict:
    """What determines the base's bytes: the model file, the warm-up set and the code that trains it."""
    return {"model_yaml_sha256": records.sha256_file(protocol.dir / "model.yaml"),
            "warmup_sha256": records.sha256_file(warmup_path), "code_version": code_version(),
            "torch": torch.__version__}


def ensure_base(protocol: Protocol, results_dir: Path, warmup: list, device: str = "cpu", out=print,
                progress: bool = True) -> Path:
    """The base checkpoint under frozen/, built from the recipe unless one built by the same recipe
    (same model file, warm-up set, code and torch: recorded in base.json beside it) is already there.
    The pilot and freeze both come through here, so they use the same bytes."""
    path = set_paths(results_dir, protocol.name)["base"]
    recipe_path = layout.base_recipe_path(results_dir, protocol.name)
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


def power_report(protocol: Protocol, pilot: dict | None = None) -> dict:
    """The design analysis (harness.design) at the protocol's registered size: the simulated
    operating characteristic of the decision rule and of C's confirm gate. Variance components
    come from `pilot` (pilot.json's dict; else protocols/<name>/pilot.json when present) or, failing
    both, from the registered assumptions, which the lines and warnings flag loudly."""
    if pilot is None:
        pilot = design.find_pilot(protocol)
    vc = design.VarianceComponents.from_pilot(pilot) if pilot is not None else None
    result = design.protocol_design(protocol, vc)
    return {"design": result, "lines": design.design_lines(result), "underpowered": result["warnings"]}

"""`make freeze`: validate the protocol, materialise its task sets, build (or verify) the base
checkpoint, run the power analysis, and write the lock.

Everything freeze writes lives under results/<protocol>/frozen/ (git-ignored):
    sets/{warmup,seed_set,probe,confirm}.jsonl   the materialised splits, expected outputs included
    base.pt                                      the base checkpoint, built deterministically
    FROZEN.lock                                  sha256 of every protocol file, set, the base and the source
"""
from __future__ import annotations

import io
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from harness import PROJECT_ROOT, configure_torch, lock, power, sandbox
from harness.evaluation import derive_seed, greedy_pass
from harness.model import SIZES, Transformer
from harness.protocol import Protocol, load_protocol
from harness.records import atomic_write_bytes
from harness.tasks import build_splits, load_tasks, save_tasks
from harness.training import make_optimizer, train_steps

SPLITS = ("warmup", "seed_set", "probe", "confirm")
SOURCE_DIRS = ("harness", "arms")


def frozen_dir(results_dir: Path, name: str) -> Path:
    return Path(results_dir) / name / "frozen"


def set_paths(results_dir: Path, name: str) -> dict[str, Path]:
    d = frozen_dir(results_dir, name)
    return {s: d / "sets" / f"{s}.jsonl" for s in SPLITS} | {"base": d / "base.pt"}


def lock_entries(protocol: Protocol, results_dir: Path) -> dict[str, str]:
    extra = {f"frozen/{k}{'' if k == 'base' else '.jsonl'}": p for k, p in set_paths(results_dir, protocol.name).items()}
    return lock.compute_entries(protocol.dir, extra, [PROJECT_ROOT / s for s in SOURCE_DIRS])


def verify_frozen(protocol: Protocol, results_dir: Path) -> dict:
    """Refuse (LockError) unless the lock exists and every hashed file still matches it."""
    lock_path = frozen_dir(results_dir, protocol.name) / "FROZEN.lock"
    if not lock_path.exists():
        raise lock.LockError(f"protocol '{protocol.name}' was never frozen ({lock_path} missing): "
                             f"run make freeze PROTOCOL={protocol.name} first")
    missing = [str(p) for p in set_paths(results_dir, protocol.name).values() if not p.exists()]
    if missing:
        raise lock.LockError(f"protocol '{protocol.name}': frozen file(s) missing: {missing}")
    return lock.verify_lock(lock_path, lock_entries(protocol, results_dir))


def build_base(protocol: Protocol, warmup: list, device: str = "cpu") -> bytes:
    """Warm-up SFT from random init, exactly as the recipe says. Returns the checkpoint bytes."""
    recipe = protocol.model["base"]
    torch.manual_seed(recipe["seed"])
    model = Transformer(SIZES[protocol.model["size"]], seed=recipe["seed"]).to(device)
    opt = make_optimizer(model, recipe["lr"], recipe["weight_decay"])
    examples = [(t.prompt, t.reference) for t in warmup]
    chunk = 100  # steps per progress update; each chunk's batches are seeded by its index
    for i in tqdm(range(0, recipe["steps"], chunk), desc="base warm-up", unit="x100 steps"):
        train_steps(model, opt, examples, n_steps=min(chunk, recipe["steps"] - i), batch_size=recipe["batch_size"],
                    seed=derive_seed("base", recipe["seed"], i))
    return checkpoint_bytes({"model": {k: v.cpu() for k, v in model.state_dict().items()}, "size": protocol.model["size"]})


def checkpoint_bytes(payload: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(payload, buf)
    return buf.getvalue()


def load_base(results_dir: Path, protocol: Protocol, device) -> Transformer:
    payload = torch.load(set_paths(results_dir, protocol.name)["base"], map_location=device, weights_only=True)
    model = Transformer(SIZES[payload["size"]]).to(device)
    model.load_state_dict(payload["model"])
    return model


def freeze(name: str, results_dir: Path, device: str = "cpu", out=print, threads: int = 1) -> dict:
    configure_torch(threads)
    protocol = load_protocol(name)
    name = protocol.name  # a path to a protocol dir names it by its folder
    paths = set_paths(results_dir, name)
    lock_path = frozen_dir(results_dir, name) / "FROZEN.lock"
    t = protocol.tasks
    sizes = {"warmup": t["warmup"]["size"], "seed": t["seed_set"]["size"], "probe": t["probe"]["size"],
             "confirm": protocol.confirm_stream_size()}
    diffs = {"warmup": protocol.difficulty("warmup"), "seed": protocol.difficulty("seed_set"),
             "probe": protocol.difficulty("probe"), "confirm": protocol.difficulty("confirm")}
    out(f"[freeze] {name}: building splits {sizes} from task seed {protocol.seeds['task_seed']}")
    splits = build_splits(protocol.seeds["task_seed"], sizes, diffs)
    splits["seed_set"] = splits.pop("seed")
    for s in SPLITS:
        paths[s].parent.mkdir(parents=True, exist_ok=True)
        tmp = paths[s].with_suffix(".tmp")
        save_tasks(tmp, splits[s])
        if paths[s].exists() and paths[s].read_bytes() != tmp.read_bytes():
            tmp.unlink()
            raise lock.LockError(f"{paths[s]}: the materialised {s} set differs from what the protocol builds now; "
                                 f"a changed protocol is a new protocol")
        tmp.replace(paths[s])

    if paths["base"].exists() and lock_path.exists():
        out(f"[freeze] base checkpoint exists: verifying against the lock ({paths['base']})")
    elif paths["base"].exists():  # a base without a lock: an interrupted freeze; rebuild and compare
        out("[freeze] base checkpoint exists without a lock: rebuilding it to verify it follows the recipe")
        if build_base(protocol, splits["warmup"], device) != paths["base"].read_bytes():
            raise lock.LockError(f"{paths['base']}: does not match a rebuild from the protocol's base recipe; "
                                 f"remove it or register the recipe that made it")
    else:
        out(f"[freeze] building the base: {protocol.model['size']} model, {protocol.model['base']['steps']} warm-up steps")
        atomic_write_bytes(paths["base"], build_base(protocol, splits["warmup"], device))

    entries = lock_entries(protocol, results_dir)
    meta = {"protocol": name, "python": sys.version.split()[0], "torch": torch.__version__}
    locked = lock.write_lock(lock_path, entries, meta)

    model = load_base(results_dir, protocol, device)
    sandbox.hide(results_dir)  # the materialised sets and their answers are there now
    passed, _ = greedy_pass(model, splits["probe"], protocol.budget["max_bytes"], device)
    base_rate = sum(passed) / len(passed)
    lo, hi = protocol.model["base_pass_range"]
    out(f"[freeze] base probe pass rate: {base_rate:.3f} ({sum(passed)}/{len(passed)}); registered range [{lo}, {hi}]")
    if not lo <= base_rate <= hi:
        out("!" * 78 + f"\n!! WARNING: the base's probe pass rate {base_rate:.3f} is outside the registered range "
            f"[{lo}, {hi}].\n!! At the floor or the ceiling every arm ties and the experiment says nothing.\n" + "!" * 78)
    report = power_report(protocol)
    for line in report["lines"]:
        out(f"[freeze] {line}")
    if report["underpowered"]:
        out("!" * 78 + "\n!! WARNING: underpowered: " + "; ".join(report["underpowered"]) + "\n" + "!" * 78)
    out(f"[freeze] lock written: {lock_path} (lock hash {locked['lock_hash'][:16]})")
    return {"lock": locked, "base_pass_rate": base_rate, "power": report}


def power_report(protocol: Protocol) -> dict:
    """Minimum detectable effects of C's per-round confirm test and of the decision rule, at the
    protocol's sizes, assuming the registered discordance rate."""
    d, conf = protocol.decision, protocol.gates["confirm"]
    p_disc = d["assumed_discordance"]
    n_confirm = protocol.tasks["confirm"]["per_round"]
    n_probe, n_seeds = protocol.tasks["probe"]["size"], len(protocol.run_seeds)
    mde_confirm = _mde(power.mde_paired, n_confirm, p_disc, conf["alpha"], d["power"], alternative="greater")
    mde_rule = _mde(power.mde_decision_rule, n_probe, n_seeds, p_disc, d["alpha"], d["power"], alternative="greater")
    fmt = lambda m: f"{m:.3f}" if m is not None else f"none (no effect up to {p_disc:.2f} is detectable)"  # noqa: E731
    lines = [f"power: assumed discordance {p_disc:.2f}, power {d['power']}, one-sided tests; the rule's MDE treats "
             f"seeds as independent replicates of each item (optimistic)",
             f"power: C's confirm test ({n_confirm} paired probes, alpha {conf['alpha']}): MDE {fmt(mde_confirm)}",
             f"power: decision rule ({n_probe} probes x {n_seeds} seeds, alpha {d['alpha']}): MDE {fmt(mde_rule)}; "
             f"smallest effect of interest {d['sesoi']:.3f}"]
    under = []
    if mde_rule is None or mde_rule > d["sesoi"]:
        under.append(f"the decision rule resolves {fmt(mde_rule)}, not its smallest effect of interest {d['sesoi']:.3f}")
    if mde_confirm is None or mde_confirm > d["sesoi"]:
        under.append(f"C's confirm gate resolves {fmt(mde_confirm)}, not {d['sesoi']:.3f}: below that it decides by noise")
    return {"mde_confirm": mde_confirm, "mde_rule": mde_rule, "assumed_discordance": p_disc, "lines": lines, "underpowered": under}


def _mde(fn, *args, **kw) -> float | None:
    """An MDE, or None when no effect up to the discordance rate is detectable at this size."""
    try:
        return round(float(fn(*args, **kw)), 6)
    except ValueError:
        return None


def load_sets(results_dir: Path, name: str) -> dict[str, list]:
    return {s: load_tasks(p) for s, p in set_paths(results_dir, name).items() if s != "base"}

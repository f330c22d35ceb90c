"""`make profile`: where a round's wall clock goes, and `make gpu-check`'s arithmetic.

    python -m harness profile --protocol smoke --arm C [--results-dir results] [--device cpu] [--rounds 1]

copies results/<protocol>/frozen/ into a temporary results dir (sealed runs are never touched), runs
the first `--rounds` rounds of the arm there with the stage timers on (harness.stages), and prints
one row per stage (seconds, share of the round), "other" (the round's wall clock minus the named
stages), the decode and training throughput of the round, and whether the CPU target holds
(verification + gate <= 15% of the round). The table is also written as JSON to
<results-dir>/bench/profile_<protocol>_<arm>.json.

The copy is checked against the lock like a run is (protocol files, sets, base, versions). Source
files changed since the freeze are listed and the copy is re-locked: a profile measures the code as
it is now. Nothing of the copy is kept.

`python -m harness.profile gpu-check` is the body of scripts/gpu_check.sh: freeze a protocol into a
temporary dir, profile one round of each arm, report decode bytes/s, training FLOP/s against the
device's peak, and the projected wall time of the whole experiment.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness import PROJECT_ROOT

# (stage name used by the arms and the runner, label); the order is a round's order
ROUND_STAGES = (
    ("propose", "proposing"),
    ("gate", "determinism gate"),
    ("bank", "bank"),
    ("sampling", "sampling (solver rollouts)"),
    ("verify", "verification (solver rollouts)"),
    ("advantage", "advantage"),
    ("update", "update"),
    ("heircommit_screen", "HeirCommit screen"),
    ("heircommit_recover", "HeirCommit recover"),
    ("heircommit_confirm", "HeirCommit confirm"),
    ("probe_eval", "probe evaluation"),
    ("io", "I/O (checkpoint, ledger)"),
)
# timed inside the stages above (not added to the round): waiting for greedy-pass verdicts
NESTED_STAGES = {"verify_greedy": "of which waiting for greedy-pass verification"}
OUTSIDE_ROUNDS = {"seal": "sealing (after the last round)"}
CPU_TARGET_SHARE = 0.15   # verification + gate <= 15% of the round on CPU

# dense bf16 peak FLOP/s by device name (the first key found in torch.cuda.get_device_name())
PEAK_BF16_FLOPS = {
    "H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "GH200": 989e12, "A100": 312e12, "L40S": 362e12,
    "L40": 181e12, "L4": 121e12, "A10G": 70e12, "A10": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12,
}


class ProfileError(RuntimeError):
    pass


@dataclass
class Profile:
    """One profiled run: stage seconds summed over `rounds` rounds, and what else the table needs."""
    protocol: str
    arm: str
    seed: int
    device: str
    rounds: int
    round_seconds: float                   # wall clock of the profiled rounds (timing.log), summed
    stages: dict[str, float]               # stage -> seconds within the profiled rounds
    run_start_seconds: float               # lock check, base load, base evaluation
    pool_start_seconds: float = 0.0        # sandbox pools (verifier, gate) started before the run
    solver_bytes: int = 0
    train_tokens: int = 0
    decode: dict = field(default_factory=dict)     # sampler totals within the rounds
    train: dict = field(default_factory=dict)      # trainer totals within the rounds
    model: dict = field(default_factory=dict)      # size, parameters used in matmuls, layers, width
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- the scratch copy

def scratch_copy(protocol_name: str, results_dir: Path, scratch: Path) -> tuple[str, list[str]]:
    """Copy results/<protocol>/frozen/ to scratch/<protocol>/frozen/ and check it against the lock.
    Returns (protocol argument for runner.run, notes). Refuses if the protocol is not frozen or
    anything but source files differs from the lock; re-locks the copy for source drift."""
    from harness import lock
    from harness.freeze import frozen_dir, lock_entries
    from harness.protocol import load_protocol
    protocol = load_protocol(protocol_name)
    src = frozen_dir(results_dir, protocol.name)
    lock_path = src / lock.LOCK_NAME
    if not lock_path.exists():
        raise ProfileError(f"protocol '{protocol.name}' is not frozen ({lock_path} missing): "
                           f"run make freeze PROTOCOL={protocol.name} first")
    dst = frozen_dir(scratch, protocol.name)
    shutil.copytree(src, dst)
    locked = lock.read_lock(dst / lock.LOCK_NAME)
    current = lock_entries(protocol, scratch)
    diff = lock.diff_entries(locked["entries"], current)
    versions = lock.diff_versions(locked["meta"], lock.environment_versions())
    blocking = [d for d in diff if not d.split(": ", 1)[1].startswith("src/")] + versions
    if blocking:
        raise ProfileError(f"{lock_path}: protocol {protocol.name} does not match its lock:\n  " + "\n  ".join(blocking)
                           + "\nprofiling measures a frozen protocol; re-freeze it (a changed protocol is a new protocol)")
    notes = []
    if diff:
        notes.append(f"source changed since the freeze ({len(diff)} file(s): "
                     f"{', '.join(d.split('src/', 1)[1] for d in diff[:6])}{', ...' if len(diff) > 6 else ''}); "
                     f"profiling the current source on a re-locked scratch copy")
        (dst / lock.LOCK_NAME).unlink()
        lock.write_lock(dst / lock.LOCK_NAME, current, {k: v for k, v in locked["meta"].items() if k != "created"})
    return (protocol_name if Path(protocol_name).is_dir() else protocol.name), notes


# ----------------------------------------------------------------------------- one instrumented run

@contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def profile_run(protocol: str, arm: str, results_dir: Path, device: str = "cpu", rounds: int = 1,
                seed: int | None = None, threads: int = 1) -> Profile:
    """Run the first `rounds` rounds of arm x seed (default: the first registered seed) in
    `results_dir`, which must hold the frozen protocol and no run of this arm x seed yet."""
    import importlib

    from harness import gate, sampling, stages, training, verifier
    from harness.model import SIZES, Transformer
    from harness.protocol import load_protocol
    from harness.runner import ARM_MODULES, run
    proto = load_protocol(protocol)
    seed = proto.run_seeds[0] if seed is None else seed
    total_rounds = proto.budget["rounds"]
    if not 1 <= rounds <= total_rounds:
        raise ProfileError(f"--rounds {rounds}: the protocol registers {total_rounds} round(s); expected 1..{total_rounds}")
    if arm not in ARM_MODULES:
        raise ProfileError(f"arm {arm!r} is not an arm of the harness (expected one of {sorted(ARM_MODULES)})")
    module = importlib.import_module(ARM_MODULES[arm])
    original = module.run_round
    at_start: dict = {}

    def first_round_marks_start(ctx, r):
        # stage times and totals so far belong to the run's start (lock, base load, base evaluation)
        if not at_start:
            at_start.update(stages=dict(times), decode=copy.copy(sampling.TOTALS), train=copy.copy(training.TOTALS),
                            t=time.perf_counter())
        return original(ctx, r)

    # a run starts its sandbox pools once per process; started here, they stay out of the round
    t_pools = time.perf_counter()
    verifier.default_verifier()
    if arm != "A":
        gate.default_gate()
    pool_start = time.perf_counter() - t_pools
    module.run_round = first_round_marks_start
    try:
        with _env(HARNESS_NO_TRACKING="1"), stages.collect() as times:
            t0 = time.perf_counter()
            rdir = run(protocol, arm, seed, results_dir, device=device, progress=False, threads=threads,
                       stop_after_round=None if rounds == total_rounds else rounds - 1)
    finally:
        module.run_round = original
    timing = [json.loads(line) for line in open(rdir / "timing.log")]
    round_s = sum(t["round_s"] + t["eval_s"] for t in timing)
    recs = [json.loads(line) for line in open(rdir / "records.jsonl")]
    round_recs = [r for r in recs if r["kind"] == "round"]
    cfg = SIZES[proto.model["size"]]
    n_params = Transformer(cfg).num_params()
    return Profile(
        protocol=proto.name, arm=arm, seed=seed, device=device, rounds=rounds, round_seconds=round_s,
        stages={k: v - at_start["stages"].get(k, 0.0) for k, v in times.items()},
        run_start_seconds=at_start["t"] - t0, pool_start_seconds=pool_start,
        solver_bytes=sum(r["budget"]["solver_bytes"] for r in round_recs),
        train_tokens=sum(r["train"]["tokens"] for r in round_recs),
        decode=_delta(sampling.TOTALS, at_start["decode"]), train=_delta(training.TOTALS, at_start["train"]),
        model={"size": proto.model["size"], "params": n_params, "matmul_params": n_params - 256 * cfg.d_model,
               "n_layer": cfg.n_layer, "d_model": cfg.d_model})


def _delta(now, before) -> dict:
    return {f.name: getattr(now, f.name) - getattr(before, f.name) for f in dataclasses.fields(now)}


# ----------------------------------------------------------------------------- the table

def stage_rows(p: Profile) -> list[dict]:
    """Rows {stage, label, seconds, share}: the named round stages that ran, any other stage
    found, "other" (round wall clock minus the named stages) and the round total. Seconds are per
    round (mean over the profiled rounds); share is of the round."""
    per_round = p.round_seconds / p.rounds
    known = dict(ROUND_STAGES)
    names = [s for s, _ in ROUND_STAGES if s in p.stages]
    names += sorted(s for s in p.stages if s not in known and s not in NESTED_STAGES and s not in OUTSIDE_ROUNDS)
    rows = []
    for s in names:
        sec = p.stages[s] / p.rounds
        rows.append({"stage": s, "label": known.get(s, s), "seconds": sec, "share": sec / per_round if per_round else 0.0})
    named = sum(r["seconds"] for r in rows)
    rows.append({"stage": "other", "label": "other (round minus the stages above)", "seconds": per_round - named,
                 "share": (per_round - named) / per_round if per_round else 0.0})
    rows.append({"stage": "round", "label": "round total", "seconds": per_round, "share": 1.0})
    return rows


def summary(p: Profile) -> dict:
    """The JSON of a profile: rows, throughput, the CPU target."""
    per_round = p.round_seconds / p.rounds
    st = lambda s: p.stages.get(s, 0.0) / p.rounds  # noqa: E731
    verification = st("verify") + st("verify_greedy")
    target_share = (verification + st("gate")) / per_round if per_round else 0.0
    dec, tr = p.decode, p.train
    return {
        "protocol": p.protocol, "arm": p.arm, "seed": p.seed, "device": p.device, "rounds_profiled": p.rounds,
        "round_seconds": round(per_round, 4),
        "stages": [{**r, "seconds": round(r["seconds"], 4), "share": round(r["share"], 4)} for r in stage_rows(p)],
        "nested": {s: round(st(s), 4) for s in NESTED_STAGES if s in p.stages},
        "run_start_seconds": round(p.run_start_seconds, 4),
        "pool_start_seconds": round(p.pool_start_seconds, 4),
        "seal_seconds": round(p.stages["seal"], 4) if "seal" in p.stages else None,
        "throughput": {
            "solver_sampling_bytes_per_s": _rate(p.solver_bytes / p.rounds, st("sampling")),
            "decode_bytes_per_s": _rate(dec.get("bytes", 0), dec.get("seconds", 0.0)),
            "decode_bytes": dec.get("bytes", 0), "decode_row_steps": dec.get("row_steps", 0),
            "decode_useful_fraction": round(dec["bytes"] / dec["row_steps"], 4) if dec.get("row_steps") else None,
            "update_tokens_per_s": _rate(p.train_tokens / p.rounds, st("update")),
            "train_tokens_per_s": _rate(tr.get("tokens", 0), tr.get("seconds", 0.0)),
            "train_padding_fraction": round(1 - tr["tokens"] / tr["padded_tokens"], 4) if tr.get("padded_tokens") else None,
            "train_flops_per_s": train_flops(p),
        },
        "cpu_target": {"verification_s": round(verification, 4), "gate_s": round(st("gate"), 4),
                       "share": round(target_share, 4), "limit": CPU_TARGET_SHARE, "met": target_share <= CPU_TARGET_SHARE},
        "model": p.model, "notes": p.notes,
        "torch_threads": _torch_threads(), "load_avg_1min": round(os.getloadavg()[0], 2),
    }


def train_flops(p: Profile) -> float | None:
    """Achieved training FLOP/s in the round: (6 N + 6 n_layer d_model T) per token read, N the
    matmul parameters (all but the embedding table), T the mean sequence length (causal attention,
    forward and backward). None when nothing was trained."""
    tr = p.train
    if not tr.get("seconds") or not tr.get("tokens") or not p.model:
        return None
    return float(f"{flops_per_token(p.model, tr['tokens'] / tr['rows']) * tr['tokens'] / tr['seconds']:.4g}")


def flops_per_token(model: dict, mean_len: float) -> float:
    return 6 * model["matmul_params"] + 6 * model["n_layer"] * model["d_model"] * mean_len


def _rate(amount: float, seconds: float) -> float | None:
    return round(amount / seconds, 1) if seconds > 0 and amount else None


def _torch_threads() -> int:
    import torch
    return torch.get_num_threads()


def format_table(s: dict) -> str:
    """The printed table of a summary()."""
    lines = [f"profile: protocol {s['protocol']}, arm {s['arm']}, seed {s['seed']}, device {s['device']}, "
             f"{s['rounds_profiled']} round(s), torch threads {s['torch_threads']}, load {s['load_avg_1min']}",
             f"{'stage':<42}{'seconds':>10}{'share':>9}", "-" * 61]
    for r in s["stages"]:
        if r["stage"] == "round":
            lines.append("-" * 61)
        lines.append(f"{r['label']:<42}{r['seconds']:>10.3f}{100 * r['share']:>8.1f}%")
    for name, sec in s["nested"].items():
        lines.append(f"  ({NESTED_STAGES[name]}: {sec:.3f} s)")
    lines.append(f"run start (lock, base load, base evaluation), once per run: {s['run_start_seconds']:.3f} s; "
                 f"sandbox pools already warm (started in {s['pool_start_seconds']:.3f} s before the run)")
    if s["seal_seconds"] is not None:
        lines.append(f"{OUTSIDE_ROUNDS['seal']}: {s['seal_seconds']:.3f} s")
    t = s["throughput"]
    fmt = lambda v, unit: "n/a" if v is None else f"{v:,.0f} {unit}"  # noqa: E731
    lines.append(f"sampler: {fmt(t['solver_sampling_bytes_per_s'], 'bytes/s')} on solver rollouts, "
                 f"{fmt(t['decode_bytes_per_s'], 'bytes/s')} over every decode call of the round"
                 + (f" ({100 * t['decode_useful_fraction']:.0f}% of row-steps computed were real bytes)"
                    if t["decode_useful_fraction"] is not None else ""))
    lines.append(f"trainer: {fmt(t['update_tokens_per_s'], 'tokens/s')} in the update, "
                 f"{fmt(t['train_tokens_per_s'], 'tokens/s')} over every training call"
                 + (f", {100 * t['train_padding_fraction']:.1f}% of batch slots padding" if t["train_padding_fraction"] is not None else "")
                 + (f", {t['train_flops_per_s']:.3g} FLOP/s" if t["train_flops_per_s"] else ""))
    c = s["cpu_target"]
    lines.append(f"CPU target: verification + gate = {c['verification_s']:.3f} + {c['gate_s']:.3f} s = "
                 f"{100 * c['share']:.1f}% of the round (limit {100 * c['limit']:.0f}%): {'met' if c['met'] else 'NOT MET'}")
    lines += [f"note: {n}" for n in s["notes"]]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- gpu-check arithmetic

def peak_flops(device: str) -> tuple[float, str]:
    """(FLOP/s, where the figure comes from): the dense bf16 peak from PEAK_BF16_FLOPS for a known
    CUDA device, else a matmul measured here (bf16 4096^3 on CUDA, float32 1024^3 on CPU)."""
    import torch
    dev = torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        key = peak_key(name)
        if key is not None:
            return PEAK_BF16_FLOPS[key], f"{name}: dense bf16 peak from the table ({key})"
    n, dtype = (4096, torch.bfloat16) if dev.type == "cuda" else (1024, torch.float32)
    a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(3):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(5):
            a @ b
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 * 5 / best, f"measured {str(dtype).removeprefix('torch.')} {n}^3 matmul on {dev} (not in the peak table)"


def peak_key(device_name: str) -> str | None:
    """The PEAK_BF16_FLOPS key naming this device, longest match first ("H100 PCIe" before "H100",
    "L40S" before "L4"), or None."""
    for key in sorted(PEAK_BF16_FLOPS, key=len, reverse=True):
        if key in device_name:
            return key
    return None


def project_wall(round_s: dict[str, float], start_s: dict[str, float], rounds: int, seeds: int,
                 freeze_s: float) -> dict:
    """Projected wall clock of a whole experiment run serially on one device, in seconds:
    freeze + seeds x sum over arms of (rounds x seconds per round + run start)."""
    per_run = {arm: rounds * round_s[arm] + start_s[arm] for arm in round_s}
    total = freeze_s + seeds * sum(per_run.values())
    return {"rounds": rounds, "seeds": seeds, "arms": sorted(round_s), "freeze_s": round(freeze_s, 1),
            "per_run_s": {a: round(v, 1) for a, v in per_run.items()}, "total_s": round(total, 1),
            "total_h": round(total / 3600, 3)}


def warmup_step_seconds(protocol, results_dir: Path, device: str, steps: int = 10) -> float:
    """Seconds per base warm-up step (the recipe's batch size on the warm-up set, fresh model)."""
    import torch

    from harness.freeze import load_sets
    from harness.model import SIZES, Transformer
    from harness.training import make_optimizer, train_steps
    recipe = protocol.model["base"]
    warm = load_sets(results_dir, protocol.name)["warmup"]
    model = Transformer(SIZES[protocol.model["size"]], seed=recipe["seed"]).to(device)
    opt = make_optimizer(model, recipe["lr"], recipe["weight_decay"])
    examples = [(t.prompt, t.reference) for t in warm]
    train_steps(model, opt, examples, n_steps=2, batch_size=recipe["batch_size"], seed=0)  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    train_steps(model, opt, examples, n_steps=steps, batch_size=recipe["batch_size"], seed=1)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def format_check(report: dict) -> str:
    lines = ["", "=" * 78, f"gpu-check: {report['protocol']} on {report['device']} ({report['device_name']})"]
    lines += [f"note: {n}" for n in report["notes"]]
    lines.append(f"peak: {report['peak_flops']:.3g} FLOP/s ({report['peak_source']})")
    lines.append(f"{'arm':<5}{'round s':>10}{'decode bytes/s':>17}{'train FLOP/s':>15}{'of peak':>10}{'verif+gate':>12}")
    for arm, a in report["arms"].items():
        frac = f"{100 * a['train_fraction_of_peak']:.2f}%" if a["train_fraction_of_peak"] is not None else "n/a"
        dec = f"{a['decode_bytes_per_s']:,.0f}" if a["decode_bytes_per_s"] else "n/a"
        fl = f"{a['train_flops_per_s']:.3g}" if a["train_flops_per_s"] else "n/a"
        lines.append(f"{arm:<5}{a['round_seconds']:>10.2f}{dec:>17}{fl:>15}{frac:>10}{100 * a['verification_gate_share']:>11.1f}%")
    pj = report["projection"]
    lines.append(f"freeze: {report['freeze_seconds']:.1f} s measured; {pj['freeze_s']:.1f} s projected for the registered base recipe")
    lines.append(f"projected wall time of the full experiment ({len(pj['arms'])} arms x {pj['seeds']} seeds x "
                 f"{pj['rounds']} rounds + freeze, serial on this device): {pj['total_s']:.0f} s = {pj['total_h']:.2f} h")
    lines.append("=" * 78)
    return "\n".join(lines)


def gpu_check(argv: list[str]) -> int:
    """Freeze a protocol into a temporary dir, profile one round of each arm, report throughput,
    FLOP/s against the peak and the projected wall time. Settings from the environment:
    GPU_CHECK_TINY=1 (the tests' tiny protocol, for a CPU run), GPU_CHECK_BASE_STEPS=N (shrink the
    base warm-up in a temporary copy of the protocol), GPU_CHECK_DEVICE (auto|cpu|cuda[:k]),
    GPU_CHECK_OUT (JSON path; default results/bench/gpu_check.json)."""
    import torch
    import yaml

    from harness.freeze import freeze
    from harness.protocol import load_protocol
    ap = argparse.ArgumentParser(prog="python -m harness.profile gpu-check", description=gpu_check.__doc__)
    ap.add_argument("--protocol", default="polygon")
    ap.add_argument("--device", default=os.environ.get("GPU_CHECK_DEVICE", "auto"))
    ap.add_argument("--out", default=os.environ.get("GPU_CHECK_OUT", str(PROJECT_ROOT / "results" / "bench" / "gpu_check.json")))
    args = ap.parse_args(argv)
    tiny = os.environ.get("GPU_CHECK_TINY", "0") == "1"
    base_steps = os.environ.get("GPU_CHECK_BASE_STEPS")
    if base_steps is not None and not (base_steps.isdigit() and int(base_steps) >= 1):
        print(f"error: GPU_CHECK_BASE_STEPS={base_steps!r}: expected a positive integer", file=sys.stderr)
        return 2
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    notes = []
    if not device.startswith("cuda"):
        notes.append("no CUDA device: this run measures the CPU (a check of the script, not of a GPU)")
    with tempfile.TemporaryDirectory(prefix="harness-gpu-check-") as tmp:
        scratch = Path(tmp)
        if tiny:
            sys.path.insert(0, str(PROJECT_ROOT))
            from tests.tiny_protocol import make_tiny_protocol
            proto_dir = make_tiny_protocol(scratch / "protocols", name="tiny")
            notes.append("GPU_CHECK_TINY=1: the tests' tiny protocol (a shrunken smoke), not polygon")
        else:
            proto_dir = scratch / "protocols" / args.protocol
            shutil.copytree(load_protocol(args.protocol).dir, proto_dir)
        registered = load_protocol(proto_dir)
        registered_steps = registered.model["base"]["steps"]
        if base_steps is not None and int(base_steps) != registered_steps:
            model_yaml = proto_dir / "model.yaml"
            data = yaml.safe_load(model_yaml.read_text())
            data["base"]["steps"] = int(base_steps)
            model_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
            notes.append(f"GPU_CHECK_BASE_STEPS={base_steps}: base warm-up shrunk from {registered_steps} to {base_steps} "
                         f"steps in a temporary copy of the protocol; rounds run on a less-trained base (longer "
                         f"completions), and the freeze time is projected to the registered recipe")
        protocol = load_protocol(proto_dir)
        for n in notes:
            print(f"[gpu-check] note: {n}", flush=True)
        results = scratch / "results"
        print(f"[gpu-check] freezing {protocol.name} on {device} into {results}", flush=True)
        t0 = time.perf_counter()
        freeze(str(proto_dir), results, device=device, out=lambda line: print(f"  {line}", flush=True))
        freeze_s = time.perf_counter() - t0
        missing_steps = registered_steps - protocol.model["base"]["steps"]
        freeze_projected = freeze_s + (missing_steps * warmup_step_seconds(protocol, results, device) if missing_steps > 0 else 0.0)
        peak, peak_source = peak_flops(device)
        arms, round_s, start_s = {}, {}, {}
        for arm in protocol.arm_names:
            print(f"[gpu-check] profiling one round of arm {arm}", flush=True)
            s = summary(profile_run(str(proto_dir), arm, results, device=device))
            print(format_table(s), flush=True)
            t = s["throughput"]
            round_s[arm], start_s[arm] = s["round_seconds"], s["run_start_seconds"] + s["pool_start_seconds"]
            arms[arm] = {"round_seconds": s["round_seconds"], "run_start_seconds": s["run_start_seconds"],
                         "decode_bytes_per_s": t["decode_bytes_per_s"], "train_flops_per_s": t["train_flops_per_s"],
                         "train_fraction_of_peak": round(t["train_flops_per_s"] / peak, 5) if t["train_flops_per_s"] else None,
                         "verification_gate_share": s["cpu_target"]["share"], "stages": s["stages"]}
    report = {"protocol": protocol.name, "device": device,
              "device_name": torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu",
              "torch": torch.__version__, "notes": notes, "peak_flops": peak, "peak_source": peak_source,
              "freeze_seconds": round(freeze_s, 2), "arms": arms,
              "projection": project_wall(round_s, start_s, registered.budget["rounds"], len(registered.run_seeds),
                                         freeze_projected)}
    print(format_check(report))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"[gpu-check] written: {out}")
    return 0


# ----------------------------------------------------------------------------- commands

def main(argv: list[str]) -> int:
    """`python -m harness profile`: one instrumented round of an arm on a copy of the frozen protocol."""
    from harness.cli import user_errors
    ap = argparse.ArgumentParser(prog="python -m harness profile", description=main.__doc__)
    ap.add_argument("--protocol", default="smoke", help="protocols/<name>/ or a protocol directory (default: smoke)")
    ap.add_argument("--arm", default="C", help="A | B | C (default: C)")
    ap.add_argument("--results-dir", default=str(PROJECT_ROOT / "results"), help="where results/<protocol>/frozen/ lives")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:0 ...")
    ap.add_argument("--rounds", type=int, default=1, help="rounds to profile (default 1); all registered rounds include sealing")
    ap.add_argument("--seed", type=int, default=None, help="run seed (default: the first registered)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (as a run: default 1)")
    args = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="harness-profile-") as tmp:
            proto_arg, notes = scratch_copy(args.protocol, Path(args.results_dir), Path(tmp))
            p = profile_run(proto_arg, args.arm, Path(tmp), args.device, args.rounds, args.seed, args.threads)
    except (ProfileError, *user_errors()) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    p.notes = notes + p.notes
    s = summary(p)
    print(format_table(s))
    out = Path(args.results_dir) / "bench" / f"profile_{p.protocol}_{p.arm}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(s, indent=2) + "\n")
    print(f"written: {out}")
    return 0


def bench(argv: list[str]) -> int:
    """`python -m harness bench`: benchmarks/run_all.py (verifier and model benchmarks, one JSON)."""
    import runpy
    module = runpy.run_path(str(PROJECT_ROOT / "benchmarks" / "run_all.py"))
    return module["main"](argv)


if __name__ == "__main__":
    if sys.argv[1:2] == ["gpu-check"]:
        sys.exit(gpu_check(sys.argv[2:]))
    print("usage: python -m harness.profile gpu-check [--protocol polygon] [--device auto] [--out PATH]", file=sys.stderr)
    sys.exit(2)

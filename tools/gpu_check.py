"""`make gpu-check` (tools/gpu_check.sh runs this after its preflight): the figures that size the
polygon experiment on one GPU, in one JSON file.

    python -m tools.gpu_check [--protocol polygon] [--device auto] [--base-steps N] [--tiny] [--out PATH]

In order:
  1. the environment: python, torch and its CUDA version, the device, the kernel (/proc/version);
  2. the sandbox: the verifier starts first; its capabilities are reported, and where a protection
     is missing on this runtime, what the experiment would rely on instead (the run stops there:
     every run refuses a degraded sandbox);
  3. a bf16 matrix product (float32 on CPU) measured here: the reference for training FLOP/s;
  4. freeze of the protocol into a temporary dir (`--base-steps N` shrinks the base warm-up in a
     temporary copy; the freeze time is then projected to the registered recipe);
  5. one profiled round per registered arm (tools.profile: the stage table, decode and training
     throughput of the round);
  6. decode bytes/s of the KV-cache sampler at the budget (every row runs the full budget);
  7. the pilot's figures (freeze runs the pilot when the library has one, harness/freeze/pilot.py);
  8. the registered readout's statistics on synthetic outcomes at the registered sizes (timed);
  9. the projected wall time of the whole experiment, and the targets: training >= 30% of the
     matmul rate, sampling not the largest stage of a round, the experiment <= 1 hour.

`--tiny` runs all of it on the tests' tiny protocol (a check of the check, on CPU if need be).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from harness import PROJECT_ROOT
from tools.profile import flops_per_token, profile_run, summary

OUT_PATH = PROJECT_ROOT / "results" / "bench" / "gpu_check.json"
TARGET_TRAIN_FRACTION = 0.30       # training FLOP/s over the same-run bf16 matmul rate
TARGET_EXPERIMENT_S = 3600.0       # every arm x seed, freeze and readout included, on one device
# what a run would rely on if the sandbox lacked a protection (harness.sandbox.pool.PROTECTIONS)
RELIES_ON = {
    "pid_namespace": "setsid and killing the process group: a program that double-forks out of its group survives the kill",
    "net_namespace": "nothing: a program could open network connections",
    "mount_namespace": "file permissions alone: the results dir (expected outputs) and the project tree stay visible",
    "ipc_namespace": "nothing: programs share System V IPC and POSIX message queues with the host",
    "allowlist_root": "the unprivileged uid's permissions: every world-readable host file is visible",
    "seccomp": "the uid alone: keyrings and the other refused calls stay open to programs",
    "private_tmp": "nothing: programs share /tmp with the host and with each other",
    "proc_hidden": "nothing: programs see every process of the host in /proc",
    "drop_uid": "rlimits alone: programs run as the caller's uid (root ignores RLIMIT_NPROC)",
    "uid_kill": "the process-group kill alone: a program that leaves its group is not killed with it",
}


class CheckError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- environment and sandbox

def environment(device: str) -> dict:
    """Versions and the device: what the figures were measured with."""
    import torch
    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(), "device": device, "machine": platform.machine(),
           "kernel": _read("/proc/version"), "cpu_count": __import__("os").cpu_count()}
    if device.startswith("cuda"):
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        env.update(device_name=props.name, device_memory_gib=round(props.total_memory / 2 ** 30, 1),
                   capability=".".join(map(str, torch.cuda.get_device_capability(dev))),
                   cudnn=torch.backends.cudnn.version())
    else:
        env["device_name"] = "cpu"
    return env


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def sandbox_report() -> dict:
    """Start the verifier the runs use and report its capabilities. If the strict pool refuses (a
    protection cannot be had here), a degraded pool is started once to name what is missing."""
    from harness.sandbox import pool, verifier
    t0 = time.perf_counter()
    try:
        caps = verifier.default_verifier().capabilities()
    except RuntimeError as e:
        with verifier.Verifier(workers=1, allow_degraded=True) as v:
            caps = v.capabilities()
        missing = pool.missing_protections(caps)
        return {"ok": False, "error": str(e), "missing": missing, "capabilities": _jsonable(caps),
                "relies_on": {m: RELIES_ON.get(m.split(":", 1)[0], "nothing") for m in missing}}
    return {"ok": True, "start_s": round(time.perf_counter() - t0, 3), "missing": [], "capabilities": _jsonable(caps)}


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=str))


# ----------------------------------------------------------------------------- measurements

def matmul_rate(device: str) -> dict:
    """FLOP/s of a square matrix product measured here: bf16 8192^3 on CUDA, float32 1024^3 on CPU
    (bf16 has no fast path on most CPUs). The best of 3 timed runs of `reps` products."""
    import torch
    dev = torch.device(device)
    n, reps, dtype = (8192, 10, torch.bfloat16) if dev.type == "cuda" else (1024, 5, torch.float32)
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    best = float("inf")
    for i in range(4):  # the first is a warm-up
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        _sync(dev)
        if i:
            best = min(best, time.perf_counter() - t0)
    return {"dtype": str(dtype).removeprefix("torch."), "n": n, "flops_per_s": float(f"{2 * n ** 3 * reps / best:.4g}")}


def _sync(dev) -> None:
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def decode_rate(results: Path, protocol, device: str, rows: int) -> dict:
    """KV-cache sampler bytes/s at the protocol's byte budget on the frozen base: `rows` task
    prompts, greedy, END suppressed so every row decodes the whole budget. Best of 2 after a warm-up."""
    import torch

    from harness.learning.checkpoint import load_base
    from harness.learning.sampling import END_ID, sample
    from harness.spec.frozen import load_sets
    model = load_base(results, protocol, device)
    with torch.no_grad():
        model.lm_head.weight[END_ID] = 0.0  # END's logit 0 while some byte's is almost surely positive
    probes = load_sets(results, protocol)["probe"]
    prompts = [probes[i % len(probes)].prompt for i in range(rows)]
    max_bytes = protocol.budget.max_bytes
    sample(model, prompts[:2], max_bytes=8, temperature=0, device=device)
    best, n_bytes = float("inf"), 0
    for _ in range(2):
        _sync(torch.device(device))
        t0 = time.perf_counter()
        comps = sample(model, prompts, max_bytes=max_bytes, temperature=0, device=device)
        _sync(torch.device(device))
        best = min(best, time.perf_counter() - t0)
        n_bytes = sum(c.n_bytes for c in comps)
    return {"rows": rows, "max_bytes": max_bytes, "full_rows": n_bytes == rows * max_bytes,
            "seconds": round(best, 4), "bytes_per_s": round(n_bytes / best, 1)}


def training_rate(profiles: dict[str, dict], matmul: dict) -> dict:
    """Training throughput over every profiled round of every arm: tokens/s and achieved FLOP/s
    ((6 N + 6 n_layer d_model T) per token, see tools.profile.train_flops), against the matmul."""
    tokens = seconds = flops = 0.0
    per_arm = {}
    for arm, p in profiles.items():
        tr = p["train"]
        if not tr.get("seconds") or not tr.get("tokens"):
            continue
        f = flops_per_token(p["model"], tr["tokens"] / tr["rows"]) * tr["tokens"]
        tokens, seconds, flops = tokens + tr["tokens"], seconds + tr["seconds"], flops + f
        per_arm[arm] = {"tokens_per_s": round(tr["tokens"] / tr["seconds"], 1),
                        "flops_per_s": float(f"{f / tr['seconds']:.4g}"),
                        "fraction_of_matmul": round(f / tr["seconds"] / matmul["flops_per_s"], 4)}
    if not seconds:
        return {"tokens_per_s": None, "flops_per_s": None, "fraction_of_matmul": None, "per_arm": per_arm}
    return {"tokens_per_s": round(tokens / seconds, 1), "flops_per_s": float(f"{flops / seconds:.4g}"),
            "tflops_per_s": round(flops / seconds / 1e12, 3),
            "fraction_of_matmul": round(flops / seconds / matmul["flops_per_s"], 4), "per_arm": per_arm}


def pilot_figures(results: Path, name: str) -> dict:
    """The pilot's figures for the frozen protocol (base pass rate per stratum, k/G distribution,
    admission rate, expected reuse), read from the pilot.json freeze left under frozen/ when the
    library has a pilot (harness/freeze/pilot.py); its time is inside the freeze's."""
    from harness.core import paths
    path = paths.pilot_path(results, name) if hasattr(paths, "pilot_path") else paths.frozen_dir(results, name) / "pilot.json"
    if importlib.util.find_spec("harness.freeze.pilot") is None:
        return {"available": False, "reason": "harness/freeze/pilot.py does not exist in this checkout"}
    if not path.exists():
        return {"available": False, "reason": f"freeze left no {path.name} under {path.parent}"}
    data = json.loads(path.read_text())
    base, band = data.get("base", {}), data.get("band", {})
    return {"available": True, "path": str(path), "base_pass_rate": base.get("pass_rate"),
            "base_per_stratum": base.get("per_stratum"), "k_over_G": data.get("k_over_G"),
            "admission_rate": {k: band.get(k) for k in ("admission_rate_calibration", "admission_rate_proposals")},
            "expected_reuse_epochs": data.get("reuse", {}).get("expected_epochs"), "checks": data.get("checks")}


def readout_seconds(protocol) -> dict:
    """Seconds of the registered analysis (harness.stats.contrasts.analyze with the protocol's decision rule
    and bootstrap) on synthetic per-probe outcomes at the registered sizes. Verifying the sealed
    files is not included (a few hashes per run)."""
    import numpy as np
    import pandas as pd

    from harness.stats import contrasts
    from harness.stats.decision import decision_spec
    n = protocol.tasks.probe.size
    rng = np.random.default_rng(0)
    rows = [{"arm": a, "seed": s, "item": i, "passed": int(rng.random() < 0.3 + 0.05 * k)}
            for k, a in enumerate(protocol.arm_names) for s in protocol.run_seeds for i in range(n)]
    t0 = time.perf_counter()
    contrasts.analyze(pd.DataFrame(rows), decision_spec(protocol))
    return {"analysis_s": round(time.perf_counter() - t0, 2), "items": len(rows)}


# ----------------------------------------------------------------------------- projection and targets

def project_wall(round_s: dict[str, float], start_s: dict[str, float], rounds: int, seeds: int,
                 freeze_s: float, readout_s: float = 0.0) -> dict:
    """Projected wall clock of the whole experiment run serially on one device, in seconds:
    freeze + seeds x sum over arms of (rounds x seconds per round + run start) + readout."""
    per_run = {arm: rounds * round_s[arm] + start_s[arm] for arm in round_s}
    total = freeze_s + seeds * sum(per_run.values()) + readout_s
    return {"rounds": rounds, "seeds": seeds, "arms": sorted(round_s), "freeze_s": round(freeze_s, 1),
            "readout_s": round(readout_s, 1), "per_run_s": {a: round(v, 1) for a, v in per_run.items()},
            "total_s": round(total, 1), "total_h": round(total / 3600, 3)}


def largest_stage(s: dict) -> dict:
    """The named stage holding the most of a round (a profile summary's rows; "other" excluded)."""
    rows = [r for r in s["stages"] if r["stage"] not in ("other", "round")]
    top = max(rows, key=lambda r: r["seconds"])
    return {"stage": top["stage"], "seconds": top["seconds"], "share": top["share"]}


def targets(arms: dict[str, dict], training: dict, projection: dict) -> dict:
    """The three targets, each {met, value, limit, ...}; a missed one names what holds it back."""
    frac = training["fraction_of_matmul"]
    train = {"limit": TARGET_TRAIN_FRACTION, "value": frac, "met": frac is not None and frac >= TARGET_TRAIN_FRACTION}
    if not train["met"]:
        train["held_back_by"] = {a: t["fraction_of_matmul"] for a, t in training["per_arm"].items()}
    sampling = {"limit": "sampling is not the largest stage of any arm's round", "largest": {}, "met": True}
    for arm, s in arms.items():
        top = largest_stage(s)
        sampling["largest"][arm] = top
        if top["stage"] == "sampling":
            sampling["met"] = False
    total = {"limit": TARGET_EXPERIMENT_S, "value": projection["total_s"], "met": projection["total_s"] <= TARGET_EXPERIMENT_S}
    if not total["met"]:
        slowest = max(projection["per_run_s"], key=projection["per_run_s"].get)
        total["held_back_by"] = {"slowest_arm": slowest, "per_run_s": projection["per_run_s"][slowest],
                                 "its_largest_stage": largest_stage(arms[slowest])}
    return {"training_vs_matmul": train, "sampling_not_largest": sampling, "experiment_within_1h": total}


# ----------------------------------------------------------------------------- the check

def prepare_protocol(scratch: Path, name: str, tiny: bool, base_steps: int | None, notes: list[str]) -> tuple[Path, int]:
    """A temporary copy of the protocol (the tiny test protocol with `tiny`), its base warm-up
    shrunk to `base_steps` when given. Returns (protocol dir, registered base steps)."""
    import yaml

    from harness.spec.protocol import load_protocol
    if tiny:
        from tests.tiny_protocol import make_tiny_protocol
        proto_dir = make_tiny_protocol(scratch / "protocols", name="tiny")
        notes.append("--tiny: the tests' tiny protocol (a shrunken smoke), not polygon")
    else:
        proto_dir = scratch / "protocols" / name
        shutil.copytree(load_protocol(name).dir, proto_dir)
    registered = load_protocol(proto_dir).model.base.steps
    if base_steps is not None and base_steps != registered:
        model_yaml = proto_dir / "model.yaml"
        data = yaml.safe_load(model_yaml.read_text())
        data["base"]["steps"] = base_steps
        model_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
        notes.append(f"--base-steps {base_steps}: base warm-up shrunk from {registered} to {base_steps} steps in a "
                     f"temporary copy of the protocol; rounds run on a less-trained base (longer completions), "
                     f"and the freeze time is projected to the registered recipe")
    return proto_dir, registered


def warmup_step_seconds(protocol, results_dir: Path, device: str, steps: int = 10) -> float:
    """Seconds per base warm-up step (the recipe's batch size on the warm-up set, fresh model)."""
    import torch

    from harness.learning.model import SIZES, Transformer
    from harness.learning.training import make_optimizer, train_steps
    from harness.spec.frozen import load_sets
    recipe = protocol.model.base
    warm = load_sets(results_dir, protocol)["warmup"]
    model = Transformer(SIZES[protocol.model.size], seed=recipe.seed).to(device)
    opt = make_optimizer(model, recipe.lr, recipe.weight_decay)
    examples = [(t.prompt, t.reference) for t in warm]
    train_steps(model, opt, examples, n_steps=2, batch_size=recipe.batch_size, seed=0)  # warm-up
    _sync(torch.device(device))
    t0 = time.perf_counter()
    train_steps(model, opt, examples, n_steps=steps, batch_size=recipe.batch_size, seed=1)
    _sync(torch.device(device))
    return (time.perf_counter() - t0) / steps


def run_check(protocol_name: str, device: str, tiny: bool, base_steps: int | None, decode_rows: int | None,
              log=print, arms_only: list[str] | None = None) -> dict:
    """Every step of the module docstring; returns the report (the JSON). `arms_only` profiles
    those arms alone (the projection then covers them alone and says so)."""
    import torch

    from harness.freeze.freeze import freeze
    from harness.spec.protocol import load_protocol
    t_start = time.perf_counter()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    notes = [] if device.startswith("cuda") else ["no CUDA device: this run measures the CPU (a check of the check, not of a GPU)"]
    report = {"format": 1, "mode": "tiny" if tiny else "full", "environment": environment(device), "notes": notes}
    log(f"[gpu-check] torch {report['environment']['torch']} (CUDA {report['environment']['torch_cuda']}) on {device}")
    report["sandbox"] = sandbox_report()
    sb = report["sandbox"]
    log(f"[gpu-check] sandbox: {'all protections' if sb['ok'] else 'REFUSED, missing ' + ', '.join(sb['missing'])}")
    if not report["sandbox"]["ok"]:
        report["wall_s"] = round(time.perf_counter() - t_start, 1)
        return report
    report["matmul"] = matmul_rate(device)
    log(f"[gpu-check] matmul {report['matmul']['dtype']} {report['matmul']['n']}^3: {report['matmul']['flops_per_s']:.3g} FLOP/s")
    with tempfile.TemporaryDirectory(prefix="harness-gpu-check-") as tmp:
        scratch = Path(tmp)
        proto_dir, registered_steps = prepare_protocol(scratch, protocol_name, tiny, base_steps, notes)
        protocol = load_protocol(proto_dir)
        results = scratch / "results"
        log(f"[gpu-check] freezing {protocol.name} on {device}")
        t0 = time.perf_counter()
        frozen = freeze(str(proto_dir), results, device=device, out=lambda line: log(f"  {line}"))
        freeze_s = time.perf_counter() - t0
        missing = registered_steps - protocol.model.base.steps
        step_s = warmup_step_seconds(protocol, results, device) if missing > 0 else 0.0
        report["freeze"] = {"seconds": round(freeze_s, 2), "base_steps_run": protocol.model.base.steps,
                            "base_steps_registered": registered_steps, "warmup_step_s": round(step_s, 4),
                            "projected_s": round(freeze_s + max(missing, 0) * step_s, 1),
                            "base_pass_rate": frozen["base_pass_rate"]}
        arms, raw = {}, {}
        unknown = sorted(set(arms_only or []) - set(protocol.arm_names))
        if unknown:
            raise CheckError(f"--arms {' '.join(unknown)}: not registered in {protocol.dir / 'arms.yaml'} "
                             f"(registered: {' '.join(protocol.arm_names)})")
        if arms_only:
            notes.append(f"--arms {' '.join(arms_only)}: only these arms were profiled; the projection covers them alone")
        for arm in [a for a in protocol.arm_names if not arms_only or a in arms_only]:
            log(f"[gpu-check] profiling one round of arm {arm}")
            p = profile_run(str(proto_dir), arm, results, device=device)
            arms[arm], raw[arm] = summary(p), {"train": p.train, "model": p.model}
            top = largest_stage(arms[arm])
            log(f"  round {arms[arm]['round_seconds']:.2f} s, largest stage {top['stage']} ({100 * top['share']:.0f}%)")
        report["arms"] = arms
        report["training"] = training_rate(raw, report["matmul"])
        b = protocol.budget
        rows = decode_rows or (min(b.tasks_per_round * b.G, 640) if device.startswith("cuda") else 8)
        report["decode"] = decode_rate(results, protocol, device, rows)
        log(f"[gpu-check] decode: {report['decode']['bytes_per_s']:,.0f} bytes/s ({rows} rows x {b.max_bytes} bytes)")
        report["pilot"] = pilot_figures(results, protocol.name)
    report["readout"] = readout_seconds(protocol)
    report["projection"] = project_wall(
        {a: s["round_seconds"] for a, s in arms.items()},
        {a: s["run_start_seconds"] + s["pool_start_seconds"] for a, s in arms.items()},
        protocol.budget.rounds, len(protocol.run_seeds), report["freeze"]["projected_s"], report["readout"]["analysis_s"])
    notes.append("the projection multiplies round 0's time by the registered rounds; later rounds may differ "
                 "(completion lengths change as the model trains)")
    report["targets"] = targets(arms, report["training"], report["projection"])
    report["protocol"] = protocol.name
    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    return report


def format_report(r: dict) -> str:
    """The printed summary of a report."""
    if not r["sandbox"]["ok"]:
        return "\n".join([f"gpu-check stopped: the sandbox refused to start ({r['sandbox']['error']})"]
                         + [f"  missing {m}: a run would rely on {why}" for m, why in r["sandbox"]["relies_on"].items()])
    pj, t = r["projection"], r["targets"]
    tr = r["training"]
    lines = ["", "=" * 78, f"gpu-check: {r['protocol']} on {r['environment']['device']} ({r['environment']['device_name']}), "
             f"torch {r['environment']['torch']}, CUDA {r['environment']['torch_cuda']}"]
    lines += [f"note: {n}" for n in r["notes"]]
    lines.append(f"{'arm':<5}{'round s':>10}{'largest stage':>22}{'share':>8}")
    for arm, s in r["arms"].items():
        top = t["sampling_not_largest"]["largest"][arm]
        lines.append(f"{arm:<5}{s['round_seconds']:>10.2f}{top['stage']:>22}{100 * top['share']:>7.0f}%")
    lines.append(f"decode (KV cache, {r['decode']['rows']} rows x {r['decode']['max_bytes']} bytes): "
                 f"{r['decode']['bytes_per_s']:,.0f} bytes/s")
    if tr["flops_per_s"]:
        lines.append(f"training: {tr['tokens_per_s']:,.0f} tokens/s, {tr['flops_per_s']:.3g} FLOP/s = "
                     f"{100 * tr['fraction_of_matmul']:.1f}% of the {r['matmul']['dtype']} matmul ({r['matmul']['flops_per_s']:.3g})")
    lines.append(f"freeze {r['freeze']['seconds']:.1f} s measured ({r['freeze']['projected_s']:.1f} s projected), base pass "
                 f"rate {r['freeze']['base_pass_rate']:.3f}; readout analysis {r['readout']['analysis_s']:.1f} s")
    lines.append(f"projected experiment ({len(pj['arms'])} arms x {pj['seeds']} seeds x {pj['rounds']} rounds, freeze and "
                 f"readout, serial): {pj['total_s']:.0f} s = {pj['total_h']:.2f} h")
    for name, target in t.items():
        lines.append(f"target {name}: {'met' if target['met'] else 'NOT MET'}"
                     + (f" (held back by {target['held_back_by']})" if "held_back_by" in target else ""))
    lines.append("=" * 78)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", default="polygon")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda[:k] (auto: CUDA when torch sees one)")
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny protocol instead of --protocol")
    ap.add_argument("--base-steps", type=int, default=None, help="shrink the base warm-up to N steps (projected back)")
    ap.add_argument("--decode-rows", type=int, default=None,
                    help="rows for the decode figure (default: a round's rollouts on CUDA, 8 on CPU)")
    ap.add_argument("--arms", nargs="+", default=None, help="profile only these registered arms (default: all)")
    ap.add_argument("--out", default=str(OUT_PATH))
    args = ap.parse_args(argv)
    if args.base_steps is not None and args.base_steps < 1:
        print(f"error: --base-steps {args.base_steps}: expected a positive integer", file=sys.stderr)
        return 2
    try:
        report = run_check(args.protocol, args.device, args.tiny, args.base_steps, args.decode_rows,
                           log=lambda line: print(line, flush=True), arms_only=args.arms)
    except CheckError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(format_report(report))
    print(f"[gpu-check] written: {out}")
    return 0 if report["sandbox"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""`make profile`: where a round's wall clock goes.

    python -m tools.profile --protocol smoke --arm C [--results-dir results] [--device cpu] [--rounds 1]

copies results/<protocol>/frozen/ into a temporary results dir (sealed runs are never touched), runs
the first `--rounds` rounds of the arm there with the library's stage timer on (harness.core.timing), and
prints one row per stage (seconds, share of the round), "other" (the round's wall clock minus the
named stages), the decode and training throughput of the round, and whether the CPU target holds
(verification + gate <= 15% of the round). The table is also written as JSON to
<results-dir>/bench/profile_<protocol>_<arm>.json.

The copy is checked against the lock like any run (protocol files, sets, base, library source,
versions): a profile measures the frozen protocol with the code it was frozen with. This file lives
outside the hashed library, so changing it changes no lock. Nothing of the copy is kept.
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

def scratch_copy(protocol_name: str, results_dir: Path, scratch: Path) -> str:
    """Copy results/<protocol>/frozen/ to scratch/<protocol>/frozen/; returns the protocol argument
    for runner.run. The run there verifies the copy against its lock, as every run does."""
    from harness.core import paths
    from harness.spec.protocol import load_protocol
    protocol = load_protocol(protocol_name)
    src = paths.frozen_dir(results_dir, protocol.name)
    if not paths.lock_path(results_dir, protocol.name).exists():
        raise ProfileError(f"protocol '{protocol.name}' is not frozen ({paths.lock_path(results_dir, protocol.name)} "
                           f"missing): run `{paths.command_hint('freeze', protocol.name, results_dir)}` first")
    shutil.copytree(src, paths.frozen_dir(scratch, protocol.name))
    return protocol_name if Path(protocol_name).is_dir() else protocol.name


# ----------------------------------------------------------------------------- one instrumented run

def _running_totals() -> tuple:
    """The sampler's and trainer's running totals, copied (the timing collector's snapshot)."""
    from harness.learning import sampling, training
    return copy.copy(sampling.TOTALS), copy.copy(training.TOTALS)


def start_pools(rollouts: bool, protocol_seed: int | None = None) -> float:
    """Start the sandbox pools a run uses (once per process; the gate's, with the protocol's seed,
    only for an arm that proposes and rolls out); returns seconds taken."""
    from harness.sandbox import gate, verifier
    t0 = time.perf_counter()
    verifier.default_verifier()
    if rollouts:
        gate.default_gate(protocol_seed)
    return time.perf_counter() - t0


def profile_run(protocol: str, arm: str, results_dir: Path, device: str = "cpu", rounds: int = 1,
                seed: int | None = None) -> Profile:
    """Run the first `rounds` rounds of arm x seed (default: the first registered seed) in
    `results_dir`, which must hold the frozen protocol and no run of this arm x seed yet. Stage
    times come from harness.core.timing; its "rounds" mark (set by the runner before the first round)
    splits the run's start from its rounds."""
    from harness.core import timing
    from harness.learning.model import SIZES, Transformer
    from harness.running.runner import run
    from harness.spec.kinds import kind_of
    from harness.spec.protocol import load_protocol
    proto = load_protocol(protocol)
    seed = proto.run_seeds[0] if seed is None else seed
    total_rounds = proto.budget.rounds
    if not 1 <= rounds <= total_rounds:
        raise ProfileError(f"--rounds {rounds}: the protocol registers {total_rounds} round(s); expected 1..{total_rounds}")
    if arm not in proto.arms:
        raise ProfileError(f"arm {arm!r} is not registered in {proto.dir / 'arms.yaml'} "
                           f"(expected one of {proto.arm_names})")
    # a run starts its pools once per process; started here, they stay out of the round
    pool_start = start_pools(kind_of(proto, arm).solver_rollouts, proto.seeds.task_seed)
    with timing.collect(snapshot=_running_totals) as c:  # a profile is not a run of the experiment: no MLflow entry
        t0 = time.perf_counter()
        rdir = run(protocol, arm, seed, results_dir, device=device, progress=False, tracking=False,
                   stop_after_round=None if rounds == total_rounds else rounds - 1)
    start = c.marks["rounds"]
    decode0, train0 = start.snapshot
    decode1, train1 = _running_totals()
    timing_log = [json.loads(line) for line in open(rdir / "timing.log")]
    round_recs = [r for r in map(json.loads, open(rdir / "records.jsonl")) if r["kind"] == "round"]
    cfg = SIZES[proto.model.size]
    n_params = Transformer(cfg).num_params()
    return Profile(
        protocol=proto.name, arm=arm, seed=seed, device=device, rounds=rounds,
        round_seconds=sum(t["round_s"] + t["eval_s"] for t in timing_log),
        stages={k: v - start.times.get(k, 0.0) for k, v in c.times.items()},
        run_start_seconds=start.t - t0, pool_start_seconds=pool_start,
        solver_bytes=sum(r["budget"]["solver_bytes"] for r in round_recs),
        train_tokens=sum(r["train"]["tokens"] for r in round_recs),
        decode=_delta(decode1, decode0), train=_delta(train1, train0),
        model={"size": proto.model.size, "params": n_params, "matmul_params": n_params - 256 * cfg.d_model,
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


# ----------------------------------------------------------------------------- command

def main(argv: list[str] | None = None) -> int:
    """`make profile`: one instrumented round of an arm on a copy of the frozen protocol."""
    from harness.core.errors import HarnessError
    ap = argparse.ArgumentParser(prog="python -m tools.profile", description=main.__doc__)
    ap.add_argument("--protocol", default="smoke", help="protocols/<name>/ or a protocol directory (default: smoke)")
    ap.add_argument("--arm", default="C", help="A | B | C (default: C)")
    ap.add_argument("--results-dir", default=str(PROJECT_ROOT / "results"), help="where results/<protocol>/frozen/ lives")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:0 ...")
    ap.add_argument("--rounds", type=int, default=1, help="rounds to profile (default 1); all registered rounds include sealing")
    ap.add_argument("--seed", type=int, default=None, help="run seed (default: the first registered)")
    args = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="harness-profile-") as tmp:
            proto_arg = scratch_copy(args.protocol, Path(args.results_dir), Path(tmp))
            p = profile_run(proto_arg, args.arm, Path(tmp), args.device, args.rounds, args.seed)
    except (ProfileError, HarnessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    s = summary(p)
    print(format_table(s))
    out = Path(args.results_dir) / "bench" / f"profile_{p.protocol}_{p.arm}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(s, indent=2) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

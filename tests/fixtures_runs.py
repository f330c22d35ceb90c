"""A small sealed experiment tree for the readout and audit tests: no model, no training.

`build_tree(tmp_path, finals)` writes, under tmp_path:

    protocols/<name>/*.yaml        protocols/smoke, shrunk (small sets, 2 rounds, 999 bootstrap resamples)
    results/<name>/frozen/         small real task sets, a fake base, and a real lock (freeze.lock_entries)
    results/<name>/<arm>/seed<k>/  a sealed fake run per registered arm x seed, written with RecordLog,
                                   write_manifest and seal as the runner does

The final round's probe outcomes are chosen per arm (and optionally per seed): `finals[arm]` is
the number of probes passed (the first k), a '0'/'1' string, or a dict seed -> either of those.
By default the protocol registers only the decision rule's arms A, B, C; `controls=True` keeps
smoke's control arms (P, N, D), whose finals default to CONTROL_FINALS; `changes` ({file: mapping})
is merged into the shrunk protocol's files last.
`edit_round(arm, seed, round, record)` and `edit_manifest(arm, seed, fields)` may change a round record
or the manifest's fields before they are chained and sealed (runs whose seals verify but whose
records disagree with each other, the lock, or their files).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from harness import PROJECT_ROOT
from harness.core import paths, records
from harness.core.paths import frozen_dir, set_paths
from harness.freeze.sets import materialise_sets
from harness.running.experience import Experience
from harness.running.runner import code_version, run_dir
from harness.spec import accounting, lock, provenance
from harness.spec.accounting import Spend
from harness.spec.frozen import lock_entries
from harness.spec.kinds import learner_steps
from harness.spec.protocol import Protocol, load_protocol
from harness.tasks.splits import load_tasks
from tests.tiny_protocol import protocol_key

N_PROBES = 40
ROUNDS = 2
BASE_PASSES = 8
# final-round probe passes per arm (of N_PROBES, the first k items) that reach each verdict outcome, by
# seed: the seeds differ by one item, since zero seed spread is no evidence of run spread. The two
# outcomes decided by a `ruled_out` have 4 seeds (build_tree registers them): with 2 the run bound's
# seeds' part is at t(0.95, 1) = 6.3, and one item's spread on 40 probes already puts its high end
# above the sesoi
OUTCOMES = {
    "keep_both": {"A": {1: 10, 2: 11}, "B": {1: 20, 2: 21}, "C": {1: 30, 2: 31}},
    "drop_heircommit": {"A": {1: 10, 2: 11, 3: 10, 4: 11}, "B": {1: 21, 2: 20, 3: 21, 4: 20},
                        "C": {1: 20, 2: 19, 3: 20, 4: 19}},
    "loop_earns_nothing": {"A": {1: 21, 2: 20, 3: 21, 4: 20}, "B": {1: 20, 2: 19, 3: 20, 4: 19},
                           "C": {1: 20, 2: 19, 3: 20, 4: 19}},
    "not_resolved": {"A": {1: 10, 2: 11}, "B": {1: 12, 2: 13}, "C": {1: 12, 2: 13}},
}
# the control arms' final passes when a test does not choose them: P beats the base and A of every
# outcome above, N does not beat B, D ties B
CONTROL_FINALS = {"P": 36, "N": BASE_PASSES, "D": None}
SHRINK = {
    "tasks.yaml": {"warmup": {"size": 20}, "seed_set": {"size": 12}, "probe": {"size": N_PROBES},
                   "confirm": {"per_round": 4}, "calibration": {"size": N_PROBES}},
    "budget.yaml": {"rounds": ROUNDS, "learner_steps_per_round": 5, "tasks_per_round": 3, "G": 4,
                    "wall_clock_s_per_run": 100, "intermediate_eval_probes": N_PROBES},  # every round scores all
    "bootstrap.yaml": {"n_resamples": 999},
    "decision.yaml": {"design": {"replicates": 100, "bootstrap_resamples": 99}},  # a fast design analysis
    "arms.yaml": {"C": {"recovery_steps": 2}},
}


@dataclass
class Tree:
    """Paths of a built fixture tree."""
    root: Path
    protocol: Protocol
    results_dir: Path

    @property
    def name(self) -> str:
        return self.protocol.name

    @property
    def protocol_dir(self) -> Path:
        return self.protocol.dir

    def run(self, arm: str, seed: int) -> Path:
        return run_dir(self.results_dir, self.name, arm, seed)

    @property
    def frozen(self) -> Path:
        return frozen_dir(self.results_dir, self.name)

    @property
    def readout(self) -> Path:
        return self.results_dir / self.name / "readout"


def _merge(base: dict, change: dict) -> dict:
    out = dict(base)
    for k, v in change.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) else v
    return out


def write_protocol(root: Path, name: str, controls: bool = False, changes: dict | None = None) -> Protocol:
    """protocols/smoke copied to root/protocols/<name>, shrunk by SHRINK (and, unless `controls`,
    with only the arms A, B, C), then `changes` merged in."""
    dest = root / "protocols" / name
    shutil.copytree(PROJECT_ROOT / "protocols" / "smoke", dest, ignore=shutil.ignore_patterns(lock.LOCK_NAME))
    for fname, change in [*SHRINK.items(), *(changes or {}).items()]:
        data = yaml.safe_load((dest / fname).read_text())
        (dest / fname).write_text(yaml.safe_dump(_merge(data, change), sort_keys=True))
    if not controls:
        arms = yaml.safe_load((dest / "arms.yaml").read_text())
        (dest / "arms.yaml").write_text(yaml.safe_dump({a: arms[a] for a in "ABC"}, sort_keys=True))
    return load_protocol(dest)


# Where build_tree keeps a copy of each frozen folder it has written, by its protocol's files
# (tests/conftest.py sets it to a folder of the session's); None: every tree writes its own.
FROZEN_CACHE: Path | None = None


def write_frozen(protocol: Protocol, results_dir: Path) -> dict:
    """Materialised sets, a fake base file and a real lock. Returns the lock. The frozen folder is a
    function of the protocol's files and the code: with FROZEN_CACHE set, it is written once per
    distinct protocol and copied for every later tree (the folder holds no path of its own)."""
    if FROZEN_CACHE is None:
        return _write_frozen(protocol, results_dir)
    cached = FROZEN_CACHE / protocol_key(protocol.dir)
    if not (cached / lock.LOCK_NAME).exists():
        _write_frozen(protocol, results_dir)
        work = cached.with_name(cached.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)  # what a failed copy left
        shutil.copytree(frozen_dir(results_dir, protocol.name), work)
        os.rename(work, cached)
    else:
        shutil.copytree(cached, frozen_dir(results_dir, protocol.name))
    return lock.read_lock(frozen_dir(results_dir, protocol.name) / lock.LOCK_NAME)


def _write_frozen(protocol: Protocol, results_dir: Path) -> dict:
    materialise_sets(protocol, results_dir, out=lambda *a: None)
    files = set_paths(results_dir, protocol.name)
    files["base"].write_bytes(b"fake base checkpoint for the readout tests\n")
    paths.freeze_summary_path(results_dir, protocol.name).write_text('{"base_pass_rate": 0.5}\n')
    base_bits = "1" * BASE_PASSES + "0" * (N_PROBES - BASE_PASSES)
    scored = {"eval": _eval(base_bits, 2.0, 3.0), "budget": _eval_spend(protocol, base_bits).to_dict(), "monitor_seed": 0,
              "base_sha256": records.sha256_file(files["base"]), "n_probes": N_PROBES}
    paths.base_eval_path(results_dir, protocol.name).write_text(records.canonical_json(scored) + "\n")
    meta = {"protocol": protocol.name, **lock.environment_versions(), "created": "2026-01-01T00:00:00+00:00"}
    return lock.write_lock(frozen_dir(results_dir, protocol.name) / lock.LOCK_NAME,
                           lock_entries(protocol, results_dir), meta)


def _bits(spec, seed: int) -> str:
    spec = spec[seed] if isinstance(spec, dict) else spec
    if isinstance(spec, str):
        assert len(spec) == N_PROBES and set(spec) <= {"0", "1"}, spec
        return spec
    return "1" * spec + "0" * (N_PROBES - spec)


def _hash(*parts) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def _eval(bits: str, bpb: float, entropy: float) -> dict:
    return {"probe_pass_rate": bits.count("1") / len(bits), "probe_passed": bits, "heldout_bpb": bpb,
            "monitor_within_entropy": entropy, "monitor_cross_mi": 0.5, "eval_rollouts": len(bits) + 8,
            "eval_bytes": 100 * len(bits)}


def _ledger(arm: str, seed: int, r: int, per_round: int, probe_hash: str, leak: bool) -> list[dict]:
    """Proposals of one round: `per_round` that reached the solver, and one the bank stopped for
    colliding with a probe. With `leak`, the first solver task of round 0 carries a probe's hash."""
    out = []
    for i in range(per_round):
        task = probe_hash if (leak and r == 0 and i == 0) else _hash(arm, seed, r, i, "task")
        out.append({"round": r, "task": task, "shape": _hash(arm, seed, r, i, "shape"), "parent": _hash("parent", i),
                    "mutation": "constant", "gate": True, "gate_reason": "deterministic", "bank": "new",
                    "solver": True, "G": 4, "temperature": 1.0, "k": 2, "win_rate": 0.5, "frontier_score": 1.0,
                    "admitted": True})
    out.append({"round": r, "task": probe_hash, "shape": _hash("s", probe_hash), "parent": _hash("parent", 0),
                "mutation": "constant", "gate": True, "gate_reason": "deterministic", "bank": "probe_collision",
                "solver": False})
    return out


def _eval_spend(protocol: Protocol, bits: str) -> Spend:
    per = accounting.eval_spend_per_evaluation(protocol)
    return Spend(probe_rollouts=len(bits), probe_bytes=40 * len(bits), monitor_rollouts=per["monitor_rollouts"],
                 monitor_bytes=40 * per["monitor_rollouts"])


def _round_spend(protocol: Protocol, arm: str, commit: bool) -> Spend:
    """What one fake round of `arm` spends, as the real arm's kind would charge it."""
    b, kind = protocol.budget, protocol.arms[arm].kind
    steps, rollouts = learner_steps(protocol, arm), b.tasks_per_round * b.G
    if kind == "sft":
        return Spend(update_steps=steps, seed_tasks=protocol.tasks.seed_set.size)
    if kind == "fresh_sft":
        return Spend(update_steps=steps, generated_tasks=steps * b.batch_size)
    spend = Spend(solver_rollouts=rollouts, solver_bytes=40 * rollouts, seed_tasks=3, generated_tasks=b.tasks_per_round)
    n = protocol.tasks.confirm.per_round
    if kind == "heircommit":
        recovery = 0 if commit else protocol.arms[arm].recovery_steps
        spend = spend + Spend(update_steps=steps - recovery, recovery_steps=recovery, screen_rollouts=2 * n,
                              screen_bytes=80 * n, confirm_rollouts=2 * n, confirm_bytes=80 * n, confirm_tasks=2 * n,
                              forgetting_rollouts=0 if commit else 5, forgetting_bytes=0 if commit else 200,
                              experience_tasks=0 if commit else 5)
    elif kind == "commit_gate":
        spend = spend + Spend(update_steps=steps, confirm_rollouts=2 * n, confirm_bytes=80 * n, confirm_tasks=n)
    else:
        spend = spend + Spend(update_steps=steps)
    return spend


def kernel_path(protocol: Protocol, **change) -> dict:
    """A start record's kernel path as a run on the protocol's registered one records it (harness.core.kernels)."""
    recipe = protocol.model.kernels()
    env = recipe.env()
    return {"cpu_capability": recipe.cpu_capability, "threads": recipe.threads, "mkl_cbwr": env["MKL_CBWR"],
            "onednn_max_cpu_isa": env["ONEDNN_MAX_CPU_ISA"], "machine": "x86_64", **change}


def write_run(protocol: Protocol, results_dir: Path, lock_hash: str, arm: str, seed: int, final_bits: str,
              probe_hash: str, wall_clock_s: float = 12.5, leak: bool = False,
              edit_round: Callable | None = None, edit_manifest: Callable | None = None,
              kernels: dict | None = None) -> Path:
    """One sealed fake run, laid out and sealed like harness.running.runner writes it (C's experience store
    holds one verified solution per round; timing.log is not chained)."""
    b = protocol.budget
    kind = protocol.arms[arm].kind
    rdir = run_dir(results_dir, protocol.name, arm, seed)
    (rdir / "checkpoints").mkdir(parents=True)
    log, ledger = records.RecordLog(rdir / "records.jsonl"), records.RecordLog(rdir / "ledger.jsonl")
    store = Experience(rdir / "experience.jsonl", protocol.family) if kind == "heircommit" else None
    seed_set = load_tasks(set_paths(results_dir, protocol.name)["seed_set"], protocol.family)
    registered = accounting.registered_run(protocol, arm)
    base_bits = "1" * BASE_PASSES + "0" * (N_PROBES - BASE_PASSES)
    log.append({"kind": "start", "protocol": protocol.name, "arm": arm, "seed": seed, "lock_hash": lock_hash,
                "code_version": code_version(), "registered": registered, "base_eval": _eval(base_bits, 2.0, 3.0),
                "budget": _eval_spend(protocol, base_bits).to_dict(),
                "kernels": kernels or kernel_path(protocol)})
    per_round = b.tasks_per_round
    confirm_n = protocol.tasks.confirm.per_round
    budgets = [log.records()[0]["budget"]]
    for r in range(b.rounds):
        ckpt = rdir / "checkpoints" / f"round{r}.pt"
        ckpt.write_bytes(f"fake checkpoint {arm} seed{seed} round{r}\n".encode())
        selfplay = kind not in ("sft", "fresh_sft")
        if selfplay:
            for entry in _ledger(arm, seed, r, per_round, probe_hash, leak):
                ledger.append(entry)
        commit = r % 2 == 0
        bits = final_bits if r == b.rounds - 1 else base_bits
        budget = (_round_spend(protocol, arm, commit) + _eval_spend(protocol, bits)).to_dict()
        rec = {"kind": "round", "round": r, "eval": _eval(bits, 2.0 - 0.1 * (r + 1), 3.0 - 0.2 * r),
               "train": {"steps": learner_steps(protocol, arm), "mean_loss": 1.0 / (r + 1), "tokens": 1000,
                         "loss_tokens": 600},
               "budget": budget, "checkpoint": records.sha256_file(ckpt),
               "ledger_lines": len(ledger.records()), "experience_lines": 0}
        if selfplay:
            rec["band"] = {"solver_tasks": per_round, "admitted": per_round, "zero_spread": 0}
            rec["monitors"] = {"within_input_entropy": 2.0 - 0.3 * r, "cross_input_mi": 0.4, "completion_entropy": 2.4 - 0.3 * r,
                               "zero_spread_fraction": 0.1 * r, "cross_round_duplicate_rate": 0.05 * r}
        if kind in ("heircommit", "commit_gate"):
            counts = {"n": confirm_n, "successor_pass": 3 if commit else 1, "root_pass": 2, "successor_only": 1 if commit else 0,
                      "root_only": 0 if commit else 1}
            recovery = 0 if commit or kind == "commit_gate" else protocol.arms[arm].recovery_steps
            rec["heircommit"] = {
                "screen": dict(counts) if kind == "heircommit" else None,
                "recovery": {"ran": bool(recovery), "steps": recovery, "failed": 2 if recovery else 0, "rehearsed": 3,
                             "checked": 5},
                "continued_update": None,
                "confirm": {**counts, "rule": "not_worse", "margin": 0, "alpha": 0.1,
                            "sign_test_p": 0.5 if commit else 1.0, "statistic": 1 if commit else -1, "mde": 0.6,
                            "decision": "commit" if commit else "retain"}}
        if store is not None:
            store.add(seed_set[r], "    return 0\n", r, 0.5, commit)
            rec["experience_lines"] = len(store.entries())
        if edit_round is not None:
            edit_round(arm, seed, r, rec)
        log.append(rec)
        budgets.append(rec["budget"])
        with open(rdir / "timing.log", "a") as f:  # as the runner: plain JSON lines, not chained
            f.write(json.dumps({"round": r, "round_s": round(wall_clock_s / b.rounds - 1.0, 3), "eval_s": 1.0}) + "\n")
    consumed = {k: sum(x[k] for x in budgets) for k in accounting.FIELDS}
    fields = {"protocol": protocol.name, "arm": arm, "seed": seed, "lock_hash": lock_hash,
              "code_version": code_version(), "rounds": b.rounds, "budget_consumed": consumed,
              "budget_registered": registered, "wall_clock_s": wall_clock_s, "provenance": provenance.current()}
    if edit_manifest is not None:
        edit_manifest(arm, seed, fields)
    records.write_manifest(rdir, fields)
    records.seal(rdir)
    return rdir


def build_tree(root: Path, finals: dict | None = None, name: str = "fixture", leak: bool = False,
               wall_clock_s: float = 12.5, edit_round: Callable | None = None,
               edit_manifest: Callable | None = None, skip: tuple[tuple[str, int], ...] = (),
               controls: bool = False, changes: dict | None = None) -> Tree:
    """The whole fixture: protocol, frozen files with a real lock, and every registered run sealed
    (except the (arm, seed) pairs in `skip`). `finals` defaults to the keep_both outcome; with
    `controls`, a control arm missing from `finals` gets CONTROL_FINALS (D: B's finals). The seeds
    that finals' per-seed dicts name are the registered run seeds, unless `changes` sets seeds.yaml."""
    finals = dict(finals or OUTCOMES["keep_both"])
    root = Path(root)
    named = sorted({s for v in finals.values() if isinstance(v, dict) for s in v})
    if named and "seeds.yaml" not in (changes or {}):
        changes = {**(changes or {}), "seeds.yaml": {"run_seeds": named, "pilot_seeds": min(2, len(named))}}
    protocol = write_protocol(root, name, controls, changes)
    for arm, k in CONTROL_FINALS.items():
        if arm in protocol.arms and arm not in finals:
            finals[arm] = finals["B"] if k is None else k
    results_dir = root / "results"
    locked = write_frozen(protocol, results_dir)
    probe_hash = load_tasks(set_paths(results_dir, protocol.name)["probe"], protocol.family)[0].canonical_hash
    for arm in protocol.arm_names:
        for seed in protocol.run_seeds:
            if (arm, seed) in skip:
                continue
            write_run(protocol, results_dir, locked["lock_hash"], arm, seed, _bits(finals[arm], seed), probe_hash,
                      wall_clock_s=wall_clock_s, leak=leak and arm == "B", edit_round=edit_round,
                      edit_manifest=edit_manifest)
    return Tree(root, protocol, results_dir)


# ---------------------------------------------------------------- tampering, as a tamperer would

def _writable(path: Path) -> None:
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) | stat.S_IWUSR)  # owner (or root) may always chmod


def edit_bytes(path, old: bytes, new: bytes) -> None:
    """Replace the first `old` in a (sealed, read-only) file with `new`."""
    path = Path(path)
    data = path.read_bytes()
    assert old in data, f"{old!r} not in {path}"
    _writable(path)
    path.write_bytes(data.replace(old, new, 1))


def edit_line(path, lineno: int, old: str, new: str) -> None:
    """Replace the first `old` on 1-based line `lineno` of a text file, keeping every other byte."""
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    assert old.encode() in lines[lineno - 1], f"{old!r} not on {path}:{lineno}"
    lines[lineno - 1] = lines[lineno - 1].replace(old.encode(), new.encode(), 1)
    _writable(path)
    path.write_bytes(b"\n".join(lines))


def writable_copy(src, dst) -> Path:
    """Copy a tree (sealed parts included) and make every directory writable."""
    shutil.copytree(src, dst)
    for dirpath, _, _ in os.walk(dst):
        _writable(Path(dirpath))
    return Path(dst)


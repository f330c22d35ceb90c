"""`make readout`: the one-shot readout of a frozen protocol.

It refuses unless the lock verifies and every registered arm x seed is a sealed, intact run tied to
that lock; then it applies the registered analysis (`harness.stats.contrasts.analyze`) to the final round's
probe outcomes, and nothing else. It writes, once:

    results/<protocol>/readout/
        verdict.json   canonical JSON: the analysis, the hashes it was computed from, the budget and
                       leakage checks and the per-round series the report and figures show
        report.md      the readable report (harness.readout.report), a function of verdict.json only
        *.png          figures (informational: PNG bytes may differ across machines)
        manifest.json, SEALED

verdict.json and report.md hold nothing time-, path- or machine-dependent, so `harness.readout.audit`
reproduces them byte for byte from the archived records.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.core import kernels, paths, records, timing
from harness.core.errors import HarnessError
from harness.core.typed import EvalRecord, HeirCommitRecord, RecordError, RoundRecord, RunManifest, StartRecord

from harness.core.paths import CHECKPOINTS_DIR, READOUT_NAME, readout_dir, run_dir, set_paths
from harness.readout import controls, prereg, report
from harness.readout.design import find_pilot, frozen_base, readout_design, registration
from harness.readout.verdict import Verdict, as_verdict
from harness.sandbox.verifier import INFRASTRUCTURE, REASONS
from harness.spec import accounting, deviations, provenance
from harness.spec.accounting import Spend
from harness.spec.frozen import FAMILY_ENTRY, KERNELS_ENTRY, code_version, load_base_eval, verify_frozen
from harness.spec.kinds import kind_of, learner_steps, own_training
from harness.spec.lock import LockError
from harness.spec.protocol import LeakGuard, Protocol, load_protocol
from harness.stats import contrasts
from harness.stats.design.summary import design_summary
from harness.stats.decision import decision_spec
from harness.tasks.contract import Task, TaskFamily
from harness.tasks.splits import load_tasks

VERDICT_NAME = "verdict.json"
REPORT_NAME = "report.md"
HTML_NAME = "report.html"  # report.md's template with the figures inline; informational, like the figures
ITEMS_NAME = "items.html"  # every probe, each arm's final completion per seed (records' final round); informational
FORMAT_VERSION = 2  # 2: the "provenance" section (git commits and environment digests of the freeze and each run)
_TMP_PATTERN = re.compile(r"^\.readout-.*\.tmp$")  # an interrupted readout's temp dir (never a run)
EVAL_MONITORS = ("monitor_within_entropy", "monitor_cross_mi")
ROUND_MONITORS = ("within_input_entropy", "cross_input_mi", "completion_entropy", "zero_spread_fraction",
                  "cross_round_duplicate_rate")


class ReadoutError(HarnessError):
    """The readout refuses: a record does not verify, a run is missing or extra, or it already ran."""


@dataclass(frozen=True)
class RunData:
    """One verified, sealed run. `key` is its path under results/<protocol> ("A/seed1")."""
    arm: str
    seed: int
    key: str
    manifest: RunManifest
    manifest_sha256: str
    start: StartRecord
    rounds: list[RoundRecord]
    ledger: list[dict]


def _r(x) -> float | None:
    """Round to 10 significant digits (byte-stable JSON); None stays None."""
    return None if x is None else float(f"{float(x):.10g}")


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return _r(sum(xs) / len(xs)) if xs else None


# ---------------------------------------------------------------- verification

def _verify_lock(protocol: Protocol, results_dir: Path) -> dict:
    """verify_frozen, with each differing lock entry named by its file and by what kind of drift it is."""
    try:
        lock = verify_frozen(protocol, results_dir)
    except LockError as err:
        text = str(err)
        files = {f"frozen/{k}{'' if k == 'base' else '.jsonl'}": p for k, p in set_paths(results_dir, protocol.name).items()}
        notes = [f"  {name} is the file {path}" for name, path in files.items() if re.search(rf"\b{re.escape(name)}\b", text)]
        if re.search(r"^\s*(changed|added|removed): src/", text, re.M):
            notes.append("  src/ entries differ: this checkout is not the code version the protocol was frozen "
                         "with; a readout or audit must run that exact code")
        raise ReadoutError(f"the protocol lock does not verify, refusing to read out:\n{text}"
                           + ("\n" + "\n".join(notes) if notes else "")) from err
    # verify_lock checks the hashed part; the bytes must also be exactly what freeze wrote (its
    # informational meta is not hashed, so this is the readout's guard against edits of its form)
    lock_path = paths.lock_path(results_dir, protocol.name)
    if lock_path.read_bytes() != (json.dumps(lock, sort_keys=True, indent=2, ensure_ascii=True) + "\n").encode("ascii"):
        raise ReadoutError(f"{lock_path}: not byte-identical to the lock freeze writes for its content (edited by hand?)")
    if lock["meta"].get("protocol", protocol.name) != protocol.name:
        raise ReadoutError(f"{lock_path}: meta.protocol is {lock['meta']['protocol']!r}, expected {protocol.name!r}")
    return lock


def check_run_layout(protocol: Protocol, results_dir: Path) -> None:
    """Every registered arm x seed present, and nothing else that looks like a run. ReadoutError names it."""
    base = Path(results_dir) / protocol.name
    missing = [str(run_dir(results_dir, protocol.name, a, s)) for a in protocol.arm_names for s in protocol.run_seeds
               if not run_dir(results_dir, protocol.name, a, s).is_dir()]
    if missing:
        raise ReadoutError(f"missing run(s) {missing}: every registered arm x seed ({protocol.arm_names} x "
                           f"{protocol.run_seeds}) must be run and sealed before the readout")
    seeds = {f"seed{s}" for s in protocol.run_seeds}
    extra = []
    for entry in sorted(base.iterdir()):
        if entry.name in ("frozen", READOUT_NAME) or _TMP_PATTERN.match(entry.name) or not entry.is_dir():
            continue
        if entry.name not in protocol.arm_names:
            extra.append(str(entry))
            continue
        extra += [str(e) for e in sorted(entry.iterdir()) if e.name not in seeds]
    if extra:
        raise ReadoutError(f"unregistered run(s) {extra}: only the registered arms {protocol.arm_names} x seeds "
                           f"{protocol.run_seeds} may be in {base}; a run outside the registration is never read out")


def _typed(cls, rec, path: Path, line: int | None):
    """`rec` read as the record `cls` (harness.core.typed); a missing field or a malformed section is a
    ReadoutError naming file:line and the field."""
    try:
        return cls.from_dict(rec, f"{path}:{line}" if line else str(path))
    except RecordError as err:
        raise ReadoutError(str(err)) from None


def _expect(ok: bool, path: Path, line: int | None, what: str) -> None:
    if not ok:
        raise ReadoutError(f"{path}:{line}: {what}" if line else f"{path}: {what}")


def load_run(protocol: Protocol, results_dir: Path, arm: str, seed: int, lock_hash: str, n_probes: int,
             code: str, checkpoints: bool = True) -> RunData:
    """Verify one sealed run (seal, chains, files, and the record<->lock/file links) and load it.
    checkpoints=False: the round checkpoints may be absent (an archive without them); their sha256
    in the manifest is still checked against each round's record."""
    rdir = run_dir(results_dir, protocol.name, arm, seed)
    try:
        manifest = records.verify_sealed(rdir, () if checkpoints else (CHECKPOINTS_DIR,))
        recs = records.RecordLog(rdir / "records.jsonl").records()
        ledger_path = rdir / "ledger.jsonl"
        ledger = records.RecordLog(ledger_path).records() if ledger_path.exists() else []
    except records.TamperError as err:
        raise ReadoutError(f"run {arm}/seed{seed} does not verify: {err}") from err
    mpath, rpath = rdir / records.MANIFEST_NAME, rdir / "records.jsonl"
    manifest = _typed(RunManifest, manifest, mpath, None)
    want = {"protocol": protocol.name, "arm": arm, "seed": seed, "lock_hash": lock_hash, "code_version": code,
            "rounds": protocol.budget.rounds}
    for key, value in want.items():
        got = getattr(manifest, key)
        _expect(got == value, mpath, None, f"'{key}' is {got!r}, expected {value!r} (the lock's / this run's)")

    _expect(len(recs) >= 1 and recs[0].get("kind") == "start", rpath, 1, "the first record must be the 'start' record")
    start = _typed(StartRecord, recs[0], rpath, 1)
    for key, value in want.items():
        if key != "rounds":
            got = getattr(start, key)
            _expect(got == value, rpath, 1, f"start record '{key}' is {got!r}, expected {value!r}")
    _check_eval(start.base_eval, n_probes, rpath, 1)
    _expect(recs[0]["base_eval"] == load_base_eval(results_dir, protocol.name)["eval"], rpath, 1,
            "start record 'base_eval' differs from the base's one evaluation, frozen/base_eval.json (the base row)")
    spends = [_spend(start.budget, rpath, 1)]

    rounds = []
    _expect(len(recs) - 1 == protocol.budget.rounds, rpath, None,
            f"holds {len(recs) - 1} round records, the protocol registers {protocol.budget.rounds}")
    for i, raw in enumerate(recs[1:]):
        line = i + 2
        _expect(raw.get("kind") == "round" and raw.get("round") == i, rpath, line,
                f"expected the record of round {i}, got kind={raw.get('kind')!r} round={raw.get('round')!r}")
        rec = _typed(RoundRecord, raw, rpath, line)
        last = i == len(recs) - 2  # the other rounds score the registered subset (budget.intermediate_eval_probes)
        _check_eval(rec.eval, n_probes if last else min(n_probes, protocol.budget.intermediate_eval_probes), rpath, line)
        rel = f"checkpoints/round{i}.pt"  # verify_sealed re-hashed every file against the manifest's files
        _expect(rel in manifest.files, rdir / rel, None, f"checkpoint of round {i} is missing")
        _expect(rec.checkpoint == manifest.files[rel], rdir / rel, None,
                f"sha256 {manifest.files[rel][:12]}... differs from {rpath}:{line} 'checkpoint' "
                f"{str(rec.checkpoint)[:12]}... (record and checkpoint do not belong together)")
        spends.append(_spend(rec.budget, rpath, line))
        rounds.append(rec)

    final, fline = rounds[-1], len(recs)
    _expect(final.ledger_lines == len(ledger), rdir / "ledger.jsonl", None,
            f"holds {len(ledger)} lines, {rpath}:{fline} says {final.ledger_lines}")
    store = rdir / "experience.jsonl"
    n_store = len(store.read_bytes().splitlines()) if store.exists() else 0
    _expect(final.experience_lines == n_store, store, None,
            f"holds {n_store} lines, {rpath}:{fline} says {final.experience_lines}")
    _check_timing(rdir / "timing.log", manifest, mpath, len(rounds))
    _check_provenance(manifest.provenance, mpath)
    consumed, total = manifest.budget_consumed, accounting.total(spends).to_dict()
    for key in accounting.FIELDS:
        _expect(consumed.get(key) == total[key], mpath, None,
                f"budget_consumed.{key} is {consumed.get(key)!r}, the records (start + rounds) sum to {total[key]}")
    return RunData(arm, seed, f"{arm}/seed{seed}", manifest, records.sha256_file(mpath), start, rounds, ledger)


def _check_provenance(record, mpath: Path) -> None:
    """A manifest's provenance (harness.spec.provenance.record), when it has one: its environment's
    digest is the digest of the description beside it. A manifest written before runs recorded their
    provenance has none; the verdict says so."""
    if record is None:
        return
    env = record.get("environment") if isinstance(record, dict) else None
    _expect(isinstance(env, dict) and isinstance(env.get("description"), dict) and isinstance(record.get("git"), dict),
            mpath, None, "'provenance' must be {\"git\": {...}, \"environment\": {\"sha256\", \"description\"}}")
    got = provenance.digest(env["description"])
    _expect(env.get("sha256") == got, mpath, None,
            f"'provenance.environment.sha256' is {str(env.get('sha256'))[:12]}..., its description digests to {got[:12]}...")


def _spend(budget, path: Path, line: int) -> Spend:
    """A record's budget as a Spend; a malformed one is a readout error naming file:line."""
    try:
        return Spend.from_dict(budget, f"{path}:{line}")
    except ValueError as err:
        raise ReadoutError(str(err)) from None


def _check_timing(path: Path, manifest: RunManifest, mpath: Path, n_rounds: int) -> None:
    """The manifest's wall clock is the sum of timing.log (one plain JSON line per round, not chained:
    machine load must not change the records; the manifest's file hash still covers it)."""
    wall = manifest.wall_clock_s
    _expect(isinstance(wall, (int, float)) and not isinstance(wall, bool), mpath, None,
            f"'wall_clock_s' must be a number, got {wall!r}")
    if not path.exists():
        return
    total = 0.0
    lines = path.read_bytes().splitlines()
    for i, raw in enumerate(lines, start=1):
        try:
            row = json.loads(raw)
            total += float(row["round_s"]) + float(row["eval_s"])
        except (ValueError, TypeError, KeyError) as err:
            raise ReadoutError(f"{path}:{i}: expected {{\"round\", \"round_s\", \"eval_s\"}}, got {raw[:80]!r} ({err})") from None
    _expect(len(lines) == n_rounds, path, None, f"holds {len(lines)} lines, expected one per round ({n_rounds})")
    _expect(abs(total - wall) <= 1e-3, mpath, None, f"'wall_clock_s' is {wall}, {path.name} sums to {total:.3f}")


def _check_eval(ev: EvalRecord | dict, n_probes: int, path: Path, line: int) -> None:
    ev = _typed(EvalRecord, ev, path, line)
    passed = ev.probe_passed
    _expect(isinstance(passed, str) and len(passed) == n_probes and set(passed) <= {"0", "1"}, path, line,
            f"eval.probe_passed must be a string of {n_probes} '0'/'1' (one per probe of frozen/sets/probe.jsonl), "
            f"got {str(passed)[:40]!r} of length {len(passed) if isinstance(passed, str) else '?'}")
    if ev.has("probe_completions"):  # the final round's, when the runner kept them
        x = ev.probe_completions
        _expect(isinstance(x, list) and len(x) == n_probes and all(isinstance(c, str) for c in x), path, line,
                f"eval.probe_completions must be a list of {n_probes} strings (one per probe), got "
                f"{type(x).__name__} of length {len(x) if isinstance(x, list) else '?'}")
    if ev.has("probe_reasons"):  # records written before reasons were kept have none
        reasons = ev.probe_reasons

        _expect(isinstance(reasons, list) and len(reasons) == n_probes and all(x in REASONS for x in reasons), path,
                line, f"eval.probe_reasons must be a list of {n_probes} verifier reasons (one of {list(REASONS)}), "
                      f"got {str(reasons)[:60]}")
        _expect(all((x == "pass") == (b == "1") for x, b in zip(reasons, passed)), path, line,
                "eval.probe_reasons and eval.probe_passed disagree (a probe passes exactly when its reason is 'pass')")


# ---------------------------------------------------------------- what the readout computes

def items_frame(runs: list[RunData]) -> pd.DataFrame:
    """The analysis input: one row per arm x seed x probe item from each run's FINAL round.
    Columns arm (str), seed (int), item (int, probe index), passed (0/1)."""
    rows = [(run.arm, run.seed, i, int(ch)) for run in runs
            for i, ch in enumerate(run.rounds[-1].eval.probe_passed)]
    return pd.DataFrame(rows, columns=list(contrasts.COLUMNS))


def _arm_values(runs: list[RunData], consumed: dict, key: str) -> dict[str, list[int]]:
    """key's consumed total per arm: one value per seed, in seed order."""
    out: dict[str, list[int]] = {}
    for r in sorted(runs, key=lambda r: (r.arm, r.seed)):
        out.setdefault(r.arm, []).append(consumed[r.key][key])
    return out


def budget_check(protocol: Protocol, runs: list[RunData]) -> dict:
    """The compute ledger of every run, side by side per arm, and the registered equalities:
    learner steps (every optimizer step, recovery included) per round for every arm; solver
    rollouts as each arm's kind registers them; the shared evaluation's rollouts; bytes within the
    byte budget; each manifest's registration. A failed equality is flagged here and in the
    report (the runner already refuses such a round, so only records not written by this code can
    fail it); the wall clock is recorded, checked, flagged, never used to cut a run."""
    consumed = {r.key: {k: int(r.manifest.budget_consumed[k]) for k in accounting.FIELDS} for r in runs}
    wall = {r.key: _r(r.manifest.wall_clock_s) for r in runs}
    reg = {arm: accounting.registered_run(protocol, arm) for arm in protocol.arm_names}
    steps, max_bytes = protocol.budget.learner_steps_per_round, protocol.budget.max_bytes
    limit = protocol.budget.wall_clock_s_per_run
    own = own_training(protocol)  # a positive control registered with its own training: a control, not a contender
    per_round_steps = sorted({rec.budget["learner_steps"] for r in runs for rec in r.rounds})
    off_steps = [f"{r.key} round {rec.round} took {rec.budget['learner_steps']}" for r in runs for rec in r.rounds
                 if rec.budget["learner_steps"] != learner_steps(protocol, r.arm)]
    apart = "".join(f"; {a}, a control registered with its own training, {t['learner_steps_per_round']} per round "
                    f"at lr {t['lr']:g}" for a, t in own.items())

    def equal(key: str) -> tuple[bool, str]:
        bad = [f"{r.key} {consumed[r.key][key]} (registered {reg[r.arm][key]})" for r in runs
               if consumed[r.key][key] != reg[r.arm][key]]
        return not bad, "; ".join(bad)

    checks = []
    for key, what in (("learner_steps", "learner steps equal across every arm (every optimizer step, recovery "
                                         "included) and equal to the registered" + (f" (budget.yaml's{apart})" if own else "")),
                      ("solver_rollouts", "solver rollouts as registered: tasks_per_round x G x rounds for every arm "
                                          "that spends them, 0 for the others"),
                      ("probe_rollouts", "shared evaluation: probe rollouts equal across arms, as registered"),
                      ("monitor_rollouts", "shared evaluation: monitor rollouts equal across arms, as registered")):
        ok, bad = equal(key)
        checks.append({"check": what, "ok": ok,
                       "detail": bad or f"registered {sorted({reg[a][key] for a in protocol.arm_names})}"})
    checks.append({"check": f"every round took exactly the registered {steps} learner steps{apart}",
                   "ok": not off_steps, "detail": "; ".join(off_steps) or f"per-round learner steps seen: {per_round_steps}"})
    over_bytes = [f"{k} {p}" for k, c in consumed.items() for p in accounting.PURPOSES
                  if c[f"{p}_bytes"] > c[f"{p}_rollouts"] * max_bytes]
    checks.append({"check": f"bytes of every rollout purpose within the byte budget ({max_bytes} per rollout)",
                   "ok": not over_bytes, "detail": "; ".join(over_bytes)})
    checks.append({"check": "each manifest's registered budget equals the protocol's",
                   "ok": all(r.manifest.budget_registered == reg[r.arm] for r in runs), "detail": ""})
    over = sorted(k for k, w in wall.items() if w is not None and w > limit)
    return {
        "fields": list(accounting.FIELDS),
        "consumed": consumed,
        "per_arm": {k: _arm_values(runs, consumed, k) for k in accounting.FIELDS},
        "registered": reg,
        "held_equal": ["learner_steps", "solver_rollouts", "probe_rollouts", "monitor_rollouts"],
        "own_training": own,
        "contenders_training": {"learner_steps_per_round": steps, "lr": protocol.budget.lr},
        "wall_clock_s": wall,
        "wall_clock_limit_s": _r(limit),
        "wall_clock_exceeded": over,
        "checks": checks,
        "ok": all(c["ok"] for c in checks),
    }


def final_bits(runs: list[RunData]) -> tuple[dict, dict]:
    """(finals, bases): arm -> seed -> the final round's / the start record's probe outcomes."""
    finals: dict = {}
    bases: dict = {}
    for r in runs:
        finals.setdefault(r.arm, {})[r.seed] = r.rounds[-1].eval.probe_passed
        bases.setdefault(r.arm, {})[r.seed] = r.start.base_eval.probe_passed
    return finals, bases


def retained_rounds(runs: list[RunData]) -> dict:
    """For every gated run (a round record with 'heircommit'): rounds committed and retained, and
    whether its final model is the base (retained in every round: the root's exact weights are
    restored each time) with how many final probe outcomes equal the base's."""
    out = {}
    for r in runs:
        gated = [rec for rec in r.rounds if rec.has("heircommit")]
        if not gated:
            continue
        committed = [rec.round for rec in gated if rec.heircommit.confirm["decision"] == "commit"]
        final, base = r.rounds[-1].eval.probe_passed, r.start.base_eval.probe_passed
        out[r.key] = {"arm": r.arm, "rounds": len(gated), "committed": committed,
                      "retained": len(gated) - len(committed), "final_is_base": not committed,
                      "final_equal_to_base": sum(a == b for a, b in zip(final, base)), "n_probes": len(final)}
    return out


def leakage_check(probes: list[Task], seed_set: list[Task], confirm: list[Task], runs: list[RunData],
                  leak_guard: LeakGuard | None = None) -> dict:
    """No probe task (its canonical hash, or its program: reference code with constants, whatever the
    docstring) ever reached the solver per the ledgers; the seed set holds no probe program.
    Confirm-set collisions are counted too (the bank guards both)."""
    probe_canon = {t.canonical_hash for t in probes}
    probe_prog = {t.program_hash for t in probes}
    confirm_hashes = {t.canonical_hash for t in confirm} | {t.program_hash for t in confirm}
    leaks, caught, checked, confirm_leaks = [], 0, 0, 0
    for run in runs:
        path = f"{run.key}/ledger.jsonl"
        for i, entry in enumerate(run.ledger, start=1):
            task, program = entry.get("task"), entry.get("program")
            hit = [w for w, ok in (("canonical", task in probe_canon), ("program", program in probe_prog)) if ok]
            if entry.get("solver") is True:
                checked += 1
                if hit:
                    leaks.append({"ledger": path, "line": i, "task": str(task), "matched": hit})
                confirm_leaks += int(task in confirm_hashes or program in confirm_hashes)
            elif hit:
                caught += 1
    seed_canon = sum(t.canonical_hash in probe_canon for t in seed_set)
    seed_prog = sum(t.program_hash in probe_prog for t in seed_set)
    return {
        "solver_tasks_checked": checked,
        "probe_hashes_at_solver": leaks,
        "probe_collisions_stopped_before_solver": caught,
        "confirm_hashes_at_solver": confirm_leaks,
        "seed_set_probe_overlap": {"canonical": seed_canon, "program": seed_prog},
        # the registered choice (tasks.yaml leak_guard), stated in the report
        "leak_guard": dataclasses.asdict(leak_guard) if leak_guard else {},
        "ok": not leaks and seed_canon == 0 and seed_prog == 0,
    }


def run_series(run: RunData) -> dict:
    """What the report and figures show per run: the base, then each round's metrics."""
    base = run.start.base_eval
    rounds = []
    for rec in run.rounds:
        train = rec.train if isinstance(rec.train, dict) else {}
        row = {"round": rec.round, "probe_pass_rate": _r(rec.eval.probe_pass_rate),
               "heldout_bpb": _r(rec.eval.heldout_bpb), "train_loss": _r(train.get("mean_loss"))}
        row.update({k: _r(rec.eval.value(k)) for k in EVAL_MONITORS})
        row.update({k: _r(rec.monitor(k)) for k in ROUND_MONITORS if rec.has("monitors")})
        if rec.has("band"):
            row["band_admitted"] = rec.band.get("admitted")
        if rec.has("heircommit"):
            row["heircommit"] = _gate_row(rec.heircommit)
        rounds.append(row)
    return {"arm": run.arm, "seed": run.seed,
            "base": {"probe_pass_rate": _r(base.probe_pass_rate), "heldout_bpb": _r(base.heldout_bpb)},
            "rounds": rounds}


def _gate_row(hc: HeirCommitRecord) -> dict:
    """A gated round's commit gate as the series shows it: the decision, the confirm test, the screen
    [successor, root, n] (None when it did not run) and the recovery or continued update."""
    confirm, screen = hc.confirm, hc.screen
    return {"decision": confirm["decision"], "rule": confirm.get("rule"),
            "sign_test_p": _r(confirm.get("sign_test_p")), "mde": _r(confirm.get("mde")),
            "confirm": [confirm.get("successor_pass"), confirm.get("root_pass"), confirm.get("n")],
            "screen": [screen.get("successor_pass"), screen.get("root_pass"), screen.get("n")] if screen else None,
            "recovery_ran": bool(hc.recovery.get("ran")), "recovery_steps": hc.recovery.get("steps", 0),
            "continued_steps": (hc.continued_update or {}).get("steps", 0)}


def stratum_name(family: TaskFamily, task: Task) -> str:
    """A probe's stratum as a key (the family's stratum_label: the code family's 'd<depth>/<template>/<plain|alt>')."""
    return family.stratum_label(task.stratum)


def _rates_by(names: list[str], order: list[str], finals: dict, bases: dict) -> dict:
    """Final pass rate per arm per group of probes (`names[i]`: probe i's group) over items x seeds, and
    the base's, pooled over all runs' base evaluations."""
    def rate(bit_strings: list[str]) -> dict:
        return {n: _r(sum(int(b[i]) for b in bit_strings for i, m in enumerate(names) if m == n)
                      / (len(bit_strings) * names.count(n))) for n in order}

    return {"names": order, "n_items": {n: names.count(n) for n in order},
            "base": rate([b for arm in sorted(bases) for b in bases[arm].values()]),
            "arms": {arm: rate(list(finals[arm].values())) for arm in sorted(finals)}}


def per_stratum(family: TaskFamily, probes: list[Task], finals: dict, bases: dict) -> dict:
    """Final pass rate per arm per probe stratum over items x seeds, and the base's (every arm's runs
    start from the same base; its outcomes are pooled over all runs' base evaluations); under "classes"
    the same per program class of the task family (harness.tasks.contract.TaskFamily.program_class), with
    each arm's gain over the base there: a class the base passes far more often (the code family's
    constant-free programs) can carry an arm's overall change.
    `finals[arm][seed]`, `bases[arm][seed]`: '0'/'1' strings over the probes in order."""
    names = [stratum_name(family, t) for t in probes]
    out = _rates_by(names, sorted(set(names)), finals, bases)
    classes = [family.program_class(t) for t in probes]
    by_class = _rates_by(classes, [c for c in family.classes if c in classes], finals, bases)
    by_class["gain"] = {arm: {c: _r(rates[c] - by_class["base"][c]) for c in by_class["names"]}
                        for arm, rates in by_class["arms"].items()}
    return {**out, "classes": by_class}


def item_view(family: TaskFamily, probes: list[Task], runs: list[RunData]) -> list[dict]:
    """One dict per probe for the per-item view: index, prompt, stratum, the probe's tests (each call with
    its expected output, as the frozen probe set holds them), the base's outcome (the base is scored once,
    at freeze: every run's start record holds that one evaluation, checked equal to frozen/base_eval.json),
    each arm's final-round outcome, completion and sandbox reason per seed (completion and reason
    "(not recorded)" for records that did not keep them), and whether the arms disagree (their pass rates
    over seeds on this probe are not all equal)."""
    out = []
    base_eval = runs[0].start.base_eval if runs else None
    for i, task in enumerate(probes):
        arms: dict = {}
        for r in sorted(runs, key=lambda r: (r.arm, r.seed)):
            ev = r.rounds[-1].eval
            arms.setdefault(r.arm, []).append({
                "seed": r.seed, "passed": ev.probe_passed[i] == "1",
                "completion": (ev.probe_completions or ["(not recorded)"] * len(probes))[i],
                "reason": (ev.probe_reasons or ["not recorded"] * len(probes))[i]})
        rates = {a: sum(x["passed"] for x in xs) / len(xs) for a, xs in arms.items()}
        base_passed = base_eval is not None and base_eval.probe_passed[i:i + 1] == "1"
        base_reason = ((base_eval.probe_reasons if base_eval else None) or [None] * len(probes))[i]
        out.append({"index": i, "prompt": task.prompt, "stratum": stratum_name(family, task),
                    "tests": [f"{task.func_name}({x!r}) -> {y!r}" for x, y in zip(task.inputs, task.expected)],
                    "base": {"passed": base_passed, "reason": base_reason}, "arms": arms,
                    "disagree": len(set(rates.values())) > 1})
    return out


def secondary(runs: list[RunData]) -> dict:
    """Held-out bits per byte per arm: the base, the final round per seed and their mean."""
    out = {}
    for arm in sorted({r.arm for r in runs}):
        mine = [r for r in runs if r.arm == arm]
        out[arm] = {"base": _mean(r.start.base_eval.heldout_bpb for r in mine),
                    "final_per_seed": {str(r.seed): _r(r.rounds[-1].eval.heldout_bpb) for r in mine},
                    "final_mean": _mean(r.rounds[-1].eval.heldout_bpb for r in mine)}
    return out


def final_monitors(runs: list[RunData]) -> dict:
    """The collapse monitors at the final round, mean over seeds, per arm (None where an arm has none)."""
    out = {}
    for arm in sorted({r.arm for r in runs}):
        mine = [r.rounds[-1] for r in runs if r.arm == arm]
        row = {k: _mean(rec.eval.value(k) for rec in mine) for k in EVAL_MONITORS}
        row.update({k: _mean(rec.monitor(k) for rec in mine) for k in ROUND_MONITORS})
        out[arm] = row
    return out


def _reason_rates(reasons: list[str], retried: int, unrecorded: int) -> dict:
    """One arm's verdict reasons: n (verdicts with a recorded reason), the rate of each of REASONS
    (fraction of n; None when n is 0), the infrastructure rate, how many verdicts were retried, and
    how many verdicts were recorded without a reason."""
    n = len(reasons)
    rates = {x: (_r(reasons.count(x) / n) if n else None) for x in REASONS}
    infra = _r(sum(reasons.count(x) for x in INFRASTRUCTURE) / n) if n else None
    return {"n": n, "rates": rates, "infrastructure": infra, "retried": retried, "unrecorded": unrecorded}


def _balance(table: dict, max_gap: float) -> dict:
    """The registered balance check over one table: the largest gap between two arms' infrastructure
    rates; flagged when it exceeds `max_gap` (arms without recorded reasons are left out)."""
    rates = {arm: row["infrastructure"] for arm, row in table.items() if row["infrastructure"] is not None}
    if len(rates) < 2:
        return {"gap": None, "arms": [], "flagged": False, "max_rate_gap": max_gap}
    hi, lo = max(rates, key=lambda a: (rates[a], a)), min(rates, key=lambda a: (rates[a], a))
    gap = rates[hi] - rates[lo]
    return {"gap": _r(gap), "arms": [hi, lo], "flagged": gap > max_gap + 1e-12, "max_rate_gap": max_gap}


def verdict_reasons(protocol: Protocol, runs: list[RunData]) -> dict:
    """Per arm, the rate of each verifier reason over every probe verdict of its runs (the base
    evaluation and every round, all seeds) and over every solver rollout in its ledgers, with the
    registered balance check (gates.yaml infrastructure.max_rate_gap) on each table. A failed check
    is what decision.yaml's infrastructure_override registers: the outcome `infrastructure_imbalanced`
    (null) or a warning (harness.readout.controls.final_verdict)."""
    probes: dict[str, dict] = {}
    rollouts: dict[str, dict] = {}
    for arm in sorted({r.arm for r in runs}):
        mine = [r for r in runs if r.arm == arm]
        evals = [r.start.base_eval for r in mine] + [rec.eval for r in mine for rec in r.rounds]
        probes[arm] = _reason_rates([x for ev in evals for x in ev.probe_reasons or []],
                                    sum(int(ev.probe_retried or 0) for ev in evals),
                                    sum(len(ev.probe_passed) for ev in evals if not ev.has("probe_reasons")))
        solver = [e for r in mine for e in r.ledger if e.get("solver") and "G" in e]
        if solver:
            rollouts[arm] = _reason_rates([x for e in solver for x in e.get("reasons", [])],
                                          sum(int(e.get("retried", 0)) for e in solver),
                                          sum(int(e["G"]) for e in solver if "reasons" not in e))
    gap = protocol.gates.infrastructure.max_rate_gap
    return {"probes": probes, "rollouts": rollouts, "infrastructure_reasons": list(INFRASTRUCTURE),
            "balance": {"probes": _balance(probes, gap), "rollouts": _balance(rollouts, gap)}}


def recorded_provenance(lock: dict, runs: list[RunData]) -> dict:
    """Which code and environment made the records, as they record it (harness.spec.provenance):

        freeze        {git_commit, git_clean, environment_sha256} from the lock's environment, or None
                      for a lock that records none
        runs          run key -> the same from its manifest, or None for a manifest without provenance
        environments  sha256 -> its description, every distinct one once
        differences   sha256 -> the lines naming how that environment differs from the freeze's
                      ("python: runs 3.11.9, freeze 3.11.8"), for every one but the freeze's
    """
    def entry(record: dict, environments: dict) -> dict:
        env = record["environment"]
        environments[env["sha256"]] = env["description"]
        return {"git_commit": record["git"].get("commit"), "git_clean": record["git"].get("clean"),
                "environment_sha256": env["sha256"]}

    environments: dict[str, dict] = {}
    locked = lock["meta"].get("environment")
    freeze = entry(provenance.record(locked), environments) if locked else None
    per_run = {r.key: entry(r.manifest.provenance, environments) if r.manifest.provenance else None
               for r in runs}
    ref = environments.get(freeze["environment_sha256"]) if freeze else None
    differences = {sha: provenance.differences(desc, ref, "runs", "freeze")
                   for sha, desc in sorted(environments.items()) if freeze and sha != freeze["environment_sha256"]}
    return {"freeze": freeze, "runs": per_run, "environments": dict(sorted(environments.items())),
            "differences": differences}


def check_kernel_paths(protocol: Protocol, runs: list[RunData], lock: dict) -> None:
    """Every run computed on the registered kernel path, and all on the same one (harness.core.kernels):
    ReadoutError naming the run and the two paths. A lock frozen before kernel paths were registered
    (no KERNELS_ENTRY) has runs without one; its archive still reads out as it did."""
    if KERNELS_ENTRY not in lock["entries"]:
        return
    recipe = protocol.model.kernels()
    first = None
    for run in runs:
        path = run.start.kernels
        if not isinstance(path, dict):
            raise ReadoutError(f"run {run.key}: its start record has no kernel path, and the lock registers "
                               f"cpu_capability={recipe.cpu_capability}, threads {recipe.threads}")
        if (path.get("cpu_capability"), path.get("threads")) != (recipe.cpu_capability, recipe.threads):
            raise ReadoutError(f"run {run.key}: computed on cpu_capability={path.get('cpu_capability')}, threads "
                               f"{path.get('threads')}; the protocol registers cpu_capability={recipe.cpu_capability}, "
                               f"threads {recipe.threads} (model.yaml)")
        if first is None:
            first = run
        elif kernels.differs(first.start.kernels, path):
            raise ReadoutError(f"runs {first.key} and {run.key} were computed on different kernel paths ("
                               f"{'; '.join(kernels.differs(first.start.kernels, path))}): one sweep mixes two paths")


@contextmanager
def _stage(out, what: str, status=None):
    """Say `what` as the stage starts and how long it took as it ends, and every 15 s in between (with
    `status()`), through `out` (harness.core.timing's timed and heartbeat); nothing without `out`."""
    if out is None:
        yield
        return
    with timing.timed(out, what), timing.heartbeat(out, what.split(":")[0], every=15.0, status=status):
        yield


def compute_verdict(protocol: Protocol, results_dir: Path, lock: dict, items_out: list | None = None,
                    checkpoints: bool = True, out=None) -> dict:
    """Verify every registered run and apply the registered analysis. Returns the verdict dict;
    `items_out`, when given, is extended with the per-item view (item_view), which verdict.json does
    not hold. checkpoints=False accepts runs whose round checkpoints are absent (load_run). `out`
    (a line printer, None: silent) is told each stage as it starts and ends."""
    results_dir = Path(results_dir)
    set_files = set_paths(results_dir, protocol.name)
    try:
        probes, seed_set, confirm = (load_tasks(set_files[s], protocol.family) for s in ("probe", "seed_set", "confirm"))
    except ValueError as err:
        raise ReadoutError(f"a frozen task set does not load: {err}") from err
    code = code_version()
    pairs = [(arm, seed) for arm in protocol.arm_names for seed in protocol.run_seeds]
    runs: list[RunData] = []
    with _stage(out, f"[readout] 1/4 runs: verifying the {len(pairs)} sealed runs (seals, chains, checkpoints)",
                lambda: f"{len(runs)}/{len(pairs)} verified"):
        for arm, seed in pairs:
            runs.append(load_run(protocol, results_dir, arm, seed, lock["lock_hash"], len(probes), code, checkpoints))
        logged = _deviations(protocol, results_dir, runs)  # before any analysis: a log shortened behind a seal is refused
        check_kernel_paths(protocol, runs, lock)
    with _stage(out, f"[readout] 2/4 analysis: the registered contrasts ({protocol.bootstrap.n_resamples} bootstrap "
                     f"resamples) and the control checks"):
        items = items_frame(runs)
        if items_out is not None:
            items_out.extend(item_view(protocol.family, probes, runs))
        analysis = contrasts.analyze(items, decision_spec(protocol))
        finals, bases = final_bits(runs)
        alpha = protocol.decision.alpha
        control = controls.control_checks(protocol, finals, bases, alpha)
    with _stage(out, "[readout] 3/4 design: the design analysis at the variance components observed here"):
        designs = readout_design(protocol, items, results_dir)
        reasons = verdict_reasons(protocol, runs)
    overrides = {"infrastructure_override": protocol.decision.infrastructure_override,
                 "negative_control_override": protocol.decision.negative_control_override}
    lock_path = paths.lock_path(results_dir, protocol.name)
    meta = lock["meta"]
    inputs = {
        "lock_hash": lock["lock_hash"],
        "lock_file_sha256": records.sha256_file(lock_path),
        "lock_recorded": {"python": meta.get("python"), "torch": meta.get("torch"), "created": meta.get("created")},
        "code_version": code,
        "probe_set_sha256": lock["entries"].get("frozen/probe.jsonl"),
        "seed_set_sha256": lock["entries"].get("frozen/seed_set.jsonl"),
        "base_sha256": lock["entries"].get("frozen/base"),
        "n_probes": len(probes),
        "task_family": {**protocol.family.identity(), "stratum_fields": list(protocol.family.stratum_fields),
                        "lock_sha256": lock["entries"].get(FAMILY_ENTRY)},
        "max_bytes": protocol.budget.max_bytes,
        "registered": {"arms": protocol.arm_names, "seeds": protocol.run_seeds, "rounds": protocol.budget.rounds,
                       "roles": {a: kind_of(protocol, a).role for a in protocol.arm_names},
                       "definitions": prereg.arm_definitions(protocol)},
        "runs": {r.key: {"manifest_sha256": r.manifest_sha256, "chain_heads": r.manifest.chain_heads,
                         "final_round": r.rounds[-1].round, "final_checkpoint": r.rounds[-1].checkpoint}
                 for r in runs},
    }
    return {
        "format": FORMAT_VERSION,
        "protocol": protocol.name,
        "inputs": inputs,
        "verdict": controls.final_verdict(analysis.verdict, control, analysis.contrasts, reasons, overrides).to_dict(),
        "controls": control.to_dict(),
        "against_base": {arm: row.to_dict() for arm, row in controls.against_base(finals, bases, alpha).items()},
        "strata": per_stratum(protocol.family, probes, finals, bases),
        "retained": retained_rounds(runs),
        "analysis": analysis.to_dict(),
        "design": designs,
        "design_summary": design_summary(designs.designed),
        "registration": registration(protocol, designs.designed, find_pilot(protocol, results_dir),
                                     frozen_base(results_dir, protocol.name)),
        "design_summary_observed": design_summary(designs.observed),
        "secondary": {"heldout_bpb": secondary(runs)},
        "monitors_final": final_monitors(runs),
        "verdict_reasons": reasons,
        "checks": {"budget": budget_check(protocol, runs), "leakage": leakage_check(probes, seed_set, confirm, runs,
                                                                                   protocol.tasks.leak_guard)},
        "series": {r.key: run_series(r) for r in runs},
        "deviations": logged,
        "provenance": recorded_provenance(lock, runs),
    }


def _deviations(protocol: Protocol, results_dir: Path, runs: list[RunData]) -> dict:
    """The deviations log (harness.spec.deviations), verified, and extending the head every sealed run's
    manifest recorded; refused (ReadoutError) when it does not."""
    anchors = {r.key: r.manifest.deviations_head for r in runs if r.manifest.deviations_head is not None}
    try:
        return deviations.read_deviations(results_dir, protocol.name, anchors)
    except (deviations.DeviationError, records.TamperError) as err:
        raise ReadoutError(f"the deviations log does not verify: {err}") from err


def verdict_bytes(verdict: Verdict | dict) -> bytes:
    """The canonical verdict.json bytes: the one writer of the verdict (`Verdict.to_dict`)."""
    verdict = as_verdict(verdict).to_dict()
    return (json.dumps(verdict, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")


# ---------------------------------------------------------------- the one-shot readout

def remove_tree(path: Path) -> None:
    """rmtree that first makes directories writable (a sealed tree is read-only). Files keep their
    bits: they may be hard links to sealed records, and unlinking needs only the directory's."""
    for dirpath, dirnames, _ in os.walk(path):
        for d in [dirpath] + [os.path.join(dirpath, n) for n in dirnames]:
            if not os.path.islink(d):
                os.chmod(d, stat.S_IMODE(os.lstat(d).st_mode) | stat.S_IRWXU)
    shutil.rmtree(path)


def readout(protocol_name, results_dir, checkpoints: bool = True, figures: bool = True, out=None) -> Path:
    """Verify, analyse once, write and seal results/<protocol>/readout/. Returns that directory.
    checkpoints=False (the audit of an archive packed without them) lets the round checkpoints be
    absent; the verdict does not read them, only their sha256 (manifest and records). figures=False
    draws no figure (the reports then show none; verdict.json is the same): for a reader of the
    verdict and the words alone, the drawing is much of a small readout's time.

    Refuses (ReadoutError) if a readout exists, the lock does not verify, a run is missing, extra,
    unsealed or tampered with. Writes into a temp dir beside the readout and renames it at the end.
    `out` (a line printer such as harness.core.timing.stamped(); None: silent) is told each stage as it
    starts and ends, so that no stage is silent for more than 15 s.
    """
    protocol = load_protocol(protocol_name)
    results_dir = Path(results_dir)
    say, out = out, readout_dir(results_dir, protocol.name)  # `out` is the readout's directory below
    if out.exists():
        raise ReadoutError(f"{out} exists: the readout runs once and its verdict is sealed; to recompute it and "
                           f"compare byte for byte run `{paths.command_hint('audit', protocol.name, results_dir)}`")
    lock = _verify_lock(protocol, results_dir)
    check_run_layout(protocol, results_dir)
    per_item: list[dict] = []
    verdict = as_verdict(compute_verdict(protocol, results_dir, lock, per_item, checkpoints, say), "the computed verdict")

    tmp = Path(tempfile.mkdtemp(prefix=".readout-", suffix=".tmp", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        with _stage(say, f"[readout] 4/4 report: verdict.json, {'the figures, ' if figures else ''}report.md, "
                         "report.html and items.html"):
            data = verdict_bytes(verdict)
            records.atomic_write_bytes(tmp / VERDICT_NAME, data)
            drawn = report.write_figures(verdict, tmp) if figures else []
            records.atomic_write_text(tmp / REPORT_NAME, report.render_report(verdict, drawn))
            images = {f: (tmp / f).read_bytes() for f in drawn}
            records.atomic_write_text(tmp / HTML_NAME, report.render_html(verdict, drawn, images))
            records.atomic_write_text(tmp / ITEMS_NAME, report.render_items(protocol.name, verdict.verdict.sentence,
                                                                            per_item))
        records.write_manifest(tmp, {"kind": "readout", "protocol": protocol.name, "lock_hash": lock["lock_hash"],
                                     "verdict_sha256": records.sha256_bytes(data),
                                     "deviations_sha256": verdict.deviations.sha256,
                                     # the readout's own (informational: verdict.json holds the records')
                                     "provenance": provenance.current()})
        records.seal(tmp)
        for f in tmp.iterdir():  # what a reviewer reads, seal included: one mode, readable by all, written by none
            os.chmod(f, 0o444)
        try:
            os.rename(tmp, out)
        except OSError as err:
            raise ReadoutError(f"{out} appeared while the readout ran (another readout?); this one is discarded; "
                               f"run `{paths.command_hint('audit', protocol.name, results_dir)}` to compare") from err
        records.open_to_readers(out / VERDICT_NAME, results_dir)  # the folders above it let readers through
    except BaseException:
        if tmp.exists():
            remove_tree(tmp)
        raise
    return out

"""Run one arm x seed of a frozen protocol: verify the lock, resume from the last completed round
(and log the resume as a deviation), run the arm's round loop with the shared evaluation, keep the
chained records, seal on completion.

    results/<protocol>/<arm>/seed<k>/
        records.jsonl      chained: a start record, then one record per completed round
        ledger.jsonl       chained: every proposal of every round (arms that propose)
        experience.jsonl   the experience store of an arm that needs one (C: verified solutions)
        timing.log       wall-clock per round (kept out of the chained records: machine load
                           must not change the record; checked against the budget at readout)
        checkpoints/round<r>.pt
        manifest.json, SEALED

The runner knows no arm by name: protocol.arms[arm].kind names a registered kind
(harness.spec.kinds.KINDS), whose module (harness.running.contract: run_round, its State, its
round_metrics) runs the round, keeps its own state and owns its record sections, and whose Needs say
which services the context offers it. Every record carries its compute (harness.spec.accounting); the
runner counts every optimizer step and every sampled rollout itself and refuses a round whose
charges differ from those counts or from the registration.
"""
from __future__ import annotations

import json
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm import tqdm

from harness.core import kernels, paths, records, timing
from harness.core.errors import Terminated
from harness.core.paths import CHECKPOINTS_DIR, base_eval_path, run_dir, set_paths
from harness.core.seeds import derive_seed
from harness.core.typed import RoundRecord, RunManifest, StartRecord

from harness.core.settings import RunSettings
from harness.core.timing import mark, stage
from harness.learning import numerics, sampling
from harness.learning.sizes import SIZES
from harness.learning.checkpoint import (
    checkpoint_bytes,
    load_model,
    load_model_tensors,
    model_tensors,
    read_checkpoint,
)
from harness.learning.training import make_optimizer
from harness.running.contract import ArmModule, RoundResult, RunContext, RunError, load_arm
from harness.running.evaluation import evaluate, intermediate_subset
from harness.running.experience import Experience
from harness.sandbox import pool
from harness.spec import accounting, deviations, provenance
from harness.spec.accounting import Spend
from harness.spec.frozen import code_version, load_base_eval, load_sets, verify_frozen
from harness.spec.kinds import kind_of, learning_rate, needs_of
from harness.spec.protocol import Protocol, load_protocol
from harness.tasks.bank import Bank
from harness.tasks.contract import Task

TRAINING_SETS = ("warmup", "seed_set")  # every other frozen set is held out from training
PRIMARY_METRIC = "0_primary/probe_pass_rate"  # MLflow: the first chart section (sections sort by prefix)
ARM_METRICS = (PRIMARY_METRIC, "eval/heldout_bpb")  # MLflow: what an arm's run shows, the mean over its seeds
RESERVED = ("kind", "round", "eval", "train", "budget", "checkpoint", "ledger_lines", "experience_lines")


class StepCounter:
    """Counts every optimizer.step() (a post-step hook survives load_state_dict): the ledger's
    steps are checked against this count, not only against what an arm says it took."""

    def __init__(self, optimizer):
        self.n = 0
        optimizer.register_step_post_hook(self._count)

    def _count(self, *_):
        self.n += 1


def run(protocol_name: str, arm: str, seed: int, results_dir: Path | None = None, device: str = "cpu",
        tracking_uri: str | None = None, progress: bool = True, stop_after_round: int | None = None,
        tracking: bool = True, settings: RunSettings | None = None) -> Path:
    """Run (or resume) one arm x seed of a frozen protocol to a sealed run directory. `settings` is
    how to run (the Hydra app and the CLI build it); without it, one is built from the keyword
    arguments. `stop_after_round` exists for tests that simulate a crash; a real run never stops early."""
    if settings is None:
        settings = RunSettings(device=device, results_dir=results_dir, tracking=tracking, tracking_uri=tracking_uri,
                               progress="on" if progress else "off")
    with sigterm_stops():
        return _run(protocol_name, arm, seed, settings, stop_after_round)


@contextmanager
def sigterm_stops():
    """While the block runs in the main thread, SIGTERM raises Terminated there (as Ctrl-C raises
    KeyboardInterrupt): the run stops at once, resumable, and its clean-up runs (the exit handlers close
    the sandbox pools, whose zygotes kill every process they started). Without it SIGTERM would end the
    process with no clean-up at all. Once it has fired, further SIGTERMs are ignored so that the clean-up
    is not cut short; otherwise the previous handler is restored after the block. Elsewhere than the main
    thread (where Python runs signal handlers) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        fired.append(signum)
        raise Terminated("SIGTERM")
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        if not fired:
            signal.signal(signal.SIGTERM, previous)


def _run(protocol_name: str, arm: str, seed: int, settings: RunSettings, stop_after_round: int | None) -> Path:
    """run()'s body, under sigterm_stops."""
    results_dir = settings.results_dir
    protocol = load_protocol(protocol_name)
    if arm not in protocol.arms:
        raise RunError(f"arm '{arm}' is not registered in {protocol.dir / 'arms.yaml'} (registered: {protocol.arm_names})")
    if seed not in protocol.run_seeds:
        raise RunError(f"seed {seed} is not registered in {protocol.dir / 'seeds.yaml'} (registered: {protocol.run_seeds})")
    if protocol.is_recipe and Path(results_dir).parent.name != "bases":
        raise RunError(f"protocol {protocol.name} is about the recipe (decision.yaml recipe): each run is on one registered "
                       f"base, in that base's tree (results/<protocol>/bases/b<k>); `make experiment PROTOCOL="
                       f"{protocol.name}` freezes the bases and runs them")
    lock = verify_frozen(protocol, results_dir)
    rdir = run_dir(results_dir, protocol.name, arm, seed)
    if records.is_sealed(rdir):
        raise RunError(f"{rdir} is sealed: a sealed run is never rerun or overwritten")
    pool.hide(results_dir)  # frozen sets with their answers live here, wherever here is
    return execute(protocol, arm, seed, load_sets(results_dir, protocol), set_paths(results_dir, protocol.name)["base"],
                   frozen_base_eval(results_dir, protocol, lock), rdir, settings, lock=lock, stop_after_round=stop_after_round)


def execute(protocol: Protocol, arm: str, seed: int, sets: dict[str, list[Task]], base_path: Path, base_scored: dict,
            rdir: Path, settings: RunSettings, lock: dict | None, stop_after_round: int | None = None,
            kernel_recipe: kernels.KernelRecipe | None = None, seal: bool = True, last_round: int | None = None) -> Path:
    """The round loop of one arm x seed on given sets and base, into `rdir`. `base_scored` is the
    base's one evaluation on sets["probe"] (round -1: frozen/base_eval.json's content, harness.running.
    evaluation.base_eval_record), recorded in the start record, not scored again. `lock` is the verified
    lock of a frozen protocol (`run`), whose hash every record carries and which the run is sealed
    under; None for the pilot's calibration runs (its own sets, never sealed, never tracked).
    `kernel_recipe` replaces the registered kernel path and `seal=False` leaves the finished run
    unsealed: both for harness.running.replicate only. A registered run (`lock`, sealed at the end) that
finds an earlier attempt's records is resumed and logs the resume in the protocol's deviations log
(harness.spec.deviations.record_resume). `last_round` (the pilot's) ends the run after
    that round and scores it on every probe, as the registered last round is; every other round but
    the last scores the registered subset (budget.intermediate_eval_probes)."""
    device = settings.device
    # here, not in run(): the pilot's spawned runs call execute directly
    kernel_path = kernels.pin(kernel_recipe or protocol.model.kernels(), f"{protocol.name} {arm} seed {seed}")
    if lock is not None and device == "cpu" and kernel_recipe in (None, protocol.model.kernels()):
        kernel_path["numerics"] = _check_numerics(protocol, arm, seed, settings.results_dir, seal)
    if lock is not None:  # what this process runs: its commit and environment, for the manifest and MLflow
        provenance.current(device)
    records.private_dirs(rdir / "checkpoints")  # owner-only, like everything the harness writes
    torch.manual_seed(derive_seed(seed, arm, "torch"))
    model = load_model(base_path, protocol.model.size, device)
    budget = protocol.budget
    optimizer = make_optimizer(model, learning_rate(protocol, arm), 0.0, budget.lr_warmup_steps)  # a control may register its own
    steps = StepCounter(optimizer)
    needs = needs_of(protocol, arm)
    arm_module = load_arm(kind_of(protocol, arm).module)
    ctx = RunContext(protocol=protocol, arm=arm, seed=seed, device=device, model=model, optimizer=optimizer,
                     seed_set=sets["seed_set"], probes=sets["probe"],
                     held_out={k: v for k, v in sets.items() if k not in TRAINING_SETS},
                     bank=Bank.for_run(sets["probe"], sets["confirm"], sets["seed_set"], protocol.guard,
                                       sets["calibration"]),
                     experience=Experience(rdir / "experience.jsonl", protocol.family) if needs.experience else None,
                     run_dir=rdir, base_path=base_path, needs=needs, state=arm_module.state(), speed=settings.speed)
    log, ledger = records.RecordLog(rdir / "records.jsonl"), records.RecordLog(rdir / "ledger.jsonl")
    interrupted = (rdir / "records.jsonl").exists()  # an earlier attempt wrote its start record, at least
    start_round = _resume(ctx, arm_module, rdir, log, ledger, kernel_path)
    if interrupted and lock is not None and seal:  # a registered run run again: a deviation, logged as it happens
        deviations.record_resume(protocol, settings.results_dir, arm, seed, start_round)
    if start_round == 0:
        base_eval, base_spend = base_scored["eval"], _base_spend(base_scored, protocol)
        start = StartRecord.from_dict({
            "kind": "start", "protocol": protocol.name, "arm": arm, "seed": seed,
            "lock_hash": lock["lock_hash"] if lock else None, "code_version": code_version(),
            "registered": accounting.registered_run(protocol, arm), "base_eval": base_eval,
            "base_eval_from": "frozen/base_eval.json", "budget": base_spend.to_dict(), "kernels": kernel_path},
            "the start record")
        log.append(start.to_dict())

    final = budget.rounds - 1 if last_round is None else last_round
    subset = intermediate_subset(len(ctx.probes), budget.intermediate_eval_probes, protocol.seeds.task_seed)
    tracker = None
    if settings.tracking and lock:
        tracker = _tracker(protocol, arm, seed, lock, settings.results_dir, settings.tracking_uri, device)
        tracker.log_step(0, _eval_metrics(base_scored["eval"]))  # step 0: the base, every run's round -1
    try:
        bar = tqdm(range(start_round, budget.rounds), desc=f"{protocol.name} {arm} seed{seed}", disable=not settings.bars,
                   initial=start_round, total=budget.rounds, unit="round")
        mark("rounds")  # for the profiler: what came before is the run's start (lock, base, base evaluation)
        say = timing.stamped()
        left = timing.Progress(["round"] * (final - start_round) + ["last round"])  # the last scores every probe
        for r in bar:
            t0 = time.perf_counter()
            torch.manual_seed(derive_seed(seed, arm, r, "torch"))
            with Observed(steps) as seen:
                out: RoundResult = arm_module.run_round(ctx, r)
                t_round = time.perf_counter() - t0
                with stage("probe_eval"):  # the rule reads the last round only: the others score the subset
                    scored = ctx.probes if r == final else [ctx.probes[i] for i in subset]
                    ev, ev_spend = evaluate(ctx.model, scored, budget, derive_seed(seed, r, "monitor"), device,
                                            ctx.speed, keep_completions=r == final)
                    ev["probes_scored"] = "all" if r == final else "subset"
            spend = out.budget + ev_spend
            _enforce(seen, spend, f"round {r}: arm {arm}", accounting.registered_round(protocol, arm, r == final),
                     budget.max_bytes)
            with stage("io"):
                for entry in out.proposals:
                    ledger.append(entry)
                ckpt = rdir / "checkpoints" / f"round{r}.pt"
                records.atomic_write_bytes(ckpt, checkpoint_bytes(*_checkpoint_payload(ctx)))
            rec = _round_record(r, arm, out, ev, spend, ckpt, len(ledger.records()), _line_count(rdir / "experience.jsonl"))
            log.append(rec.to_dict())
            with open(rdir / "timing.log", "a") as f:  # not chained: wall clock is not part of the record
                f.write(json.dumps({"round": r, "round_s": round(t_round, 3),
                                    "eval_s": round(time.perf_counter() - t0 - t_round, 3)}) + "\n")
            if tracker:
                written = rec.to_dict()  # the arm reads its own sections as it wrote them
                arm_metrics = arm_module.round_metrics({k: written[k] for k in out.sections})
                tracker.log_step(r + 1, _round_metrics(rec, arm_metrics))  # step k: after k rounds
            bar.set_postfix(probe=f"{ev['probe_pass_rate']:.3f}", bpb=f"{ev['heldout_bpb']:.3f}", **out.progress)
            if r <= final:
                left.done()
            if settings.plain_lines:
                say(f"[run] {protocol.name} {arm} seed {seed}: round {r + 1}/{budget.rounds} in "
                    f"{timing.duration(time.perf_counter() - t0)}, probe pass rate {ev['probe_pass_rate']:.3f} "
                    f"(rounds {left.text()})")
            if (stop_after_round is not None and r >= stop_after_round) or r == final < budget.rounds - 1:
                return rdir
        bar.close()
        if lock is None or not seal:
            return rdir
        with stage("seal"):
            _finish(ctx, rdir, log, lock, tracker)
    except BaseException as err:  # the MLflow run says it was cut short, instead of staying RUNNING
        if tracker:
            tracker.finish("KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED", quiet=True)
        raise
    return rdir


def _round_record(r: int, arm: str, out: RoundResult, ev: dict, spend: Spend, ckpt: Path, ledger_lines: int,
                  experience_lines: int) -> RoundRecord:
    """Round r's record: what the runner measured and wrote, then the arm's own sections."""
    rec = {"kind": "round", "round": r, "eval": ev, "train": _jsonable(out.train), "budget": spend.to_dict(),
           "checkpoint": records.sha256_file(ckpt), "ledger_lines": ledger_lines, "experience_lines": experience_lines}
    clash = sorted(set(out.sections) & set(RESERVED))
    if clash:
        raise RunError(f"round {r}: arm {arm} returned record section(s) {clash}, which the runner writes itself")
    return RoundRecord.from_dict({**rec, **{k: _jsonable(v) for k, v in out.sections.items()}}, f"round {r}'s record")


class Observed:
    """What the process really did inside a `with` block: optimizer steps (StepCounter) and the
    sampler's rows and bytes (harness.learning.sampling.TOTALS), to check the ledger's charges against."""

    def __init__(self, steps: StepCounter):
        self.steps = steps

    def __enter__(self) -> dict:
        self.start = (self.steps.n, sampling.TOTALS.rows, sampling.TOTALS.bytes)
        self.seen: dict[str, int] = {}
        return self.seen

    def __exit__(self, *exc) -> None:
        n, rows, n_bytes = self.start
        self.seen.update(optimizer_steps=self.steps.n - n, sampled_rollouts=sampling.TOTALS.rows - rows,
                         sampled_bytes=sampling.TOTALS.bytes - n_bytes)


def frozen_base_eval(results_dir: Path, protocol, lock: dict) -> dict:
    """Round -1: the base's one evaluation, scored at freeze (frozen/base_eval.json, hashed in the
    lock), not scored again. RunError when it was made of another base or on another probe set."""
    scored = load_base_eval(results_dir, protocol.name)
    where = base_eval_path(results_dir, protocol.name)
    if scored["base_sha256"] != lock["entries"].get("frozen/base") or scored["n_probes"] != protocol.tasks.probe.size:
        raise RunError(f"{where}: scored base {str(scored['base_sha256'])[:12]} on {scored['n_probes']} probes; the lock's "
                       f"base is {str(lock['entries'].get('frozen/base'))[:12]} and tasks.yaml registers "
                       f"{protocol.tasks.probe.size} probes")
    return scored


def _base_spend(scored: dict, protocol) -> Spend:
    """The base evaluation's spend, charged to the start record as registered (one shared evaluation
    of the base); RunError when it breaks the registration."""
    spend = Spend.from_dict(scored["budget"], "the frozen base evaluation")
    problems = accounting.violations(accounting.registered_base(protocol), spend, protocol.budget.max_bytes)
    if problems:
        raise RunError("the frozen base evaluation: " + "; ".join(problems) + " (budgets are enforced exactly)")
    return spend


def _enforce(observed: dict, spend: Spend, where: str, want: dict, max_bytes: int) -> None:
    """Refuse the record if it breaks the registration or charges other than what was done."""
    problems = accounting.violations(want, spend, max_bytes) + accounting.charge_violations(spend, observed)
    if problems:
        raise RunError(f"{where}: " + "; ".join(problems) + " (budgets are enforced exactly)")


def _finish(ctx: RunContext, rdir: Path, log: records.RecordLog, lock: dict, tracker) -> None:
    start, rounds = _read_records(rdir / "records.jsonl", log.records())
    consumed = accounting.total(Spend.from_dict(r.budget, f"{rdir / 'records.jsonl'}:{i}")
                                for i, r in enumerate([start, *rounds], 1)).to_dict()
    wall = sum(json.loads(line)["round_s"] + json.loads(line)["eval_s"] for line in open(rdir / "timing.log"))
    manifest = RunManifest.from_dict(records.write_manifest(rdir, {
        "protocol": ctx.protocol.name, "arm": ctx.arm, "seed": ctx.seed, "lock_hash": lock["lock_hash"],
        "code_version": code_version(), "rounds": len(rounds), "budget_consumed": consumed,
        "budget_registered": accounting.registered_run(ctx.protocol, ctx.arm), "wall_clock_s": round(wall, 3),
        "provenance": provenance.current(ctx.device),
        # the readout refuses a deviations log that does not extend this head (no entry undone behind a seal)
        "deviations_head": deviations.head(rdir.parents[2], ctx.protocol.name)}), str(rdir / records.MANIFEST_NAME))
    records.seal(rdir)
    if tracker:
        rel = rdir.relative_to(rdir.parents[2]).as_posix()  # <protocol>/<arm>/seed<k>, under the results folder
        tracker.log_artifacts(rdir, rel, leave_out=(CHECKPOINTS_DIR,))
        tracker.log_dict({"relative_to": "the results folder (RESULTS=, default results/)",
                          "checkpoints": {f"{rel}/{k}": v for k, v in sorted(manifest.files.items())
                                          if k.startswith(CHECKPOINTS_DIR)}}, "checkpoints.json")
        tracker.finish()
    return manifest


def _check_numerics(protocol: Protocol, arm: str, seed: int, results_dir: Path, registered: bool) -> str | None:
    """This host's numerics fingerprint at the run's threads against the frozen one (harness.learning.
    numerics), before the first step: NumericsError on another host's numerics, unless the override is set,
    which a registered run logs as a deviation. Returns the digest the start record keeps (None for a
    frozen tree without a fingerprint: a test fixture's)."""
    frozen = numerics.read_frozen(results_dir, protocol.name)
    if frozen is None:
        return None
    where = f"{protocol.name} {arm} seed {seed}"
    here, account = numerics.check(frozen, SIZES[protocol.model.size], protocol.model.run_threads, where)
    if account and registered:
        deviations.record_other_numerics(protocol, results_dir, where, account)
    return numerics.digest(here)


def _resume(ctx: RunContext, arm_module: ArmModule, rdir: Path, log, ledger, kernel_path: dict) -> int:
    """Roll every file back to the last completed round and load its checkpoint. Returns the next round.
    RunError when the rounds on record were computed on another kernel path than this process's."""
    for tmp in list(rdir.glob(".*.tmp")) + list(rdir.glob("checkpoints/.*.tmp")):
        tmp.unlink()  # an atomic write cut short by the crash
    recs = log.records(allow_partial_tail=True) if (rdir / "records.jsonl").exists() else []
    if not any(r.get("kind") == "round" for r in recs):  # nothing completed (a torn start included): start over
        for name in ("records.jsonl", "ledger.jsonl", "experience.jsonl", "timing.log"):
            (rdir / name).unlink(missing_ok=True)
        return 0
    start, rounds = _read_records(rdir / "records.jsonl", recs)
    different = kernels.differs(start.kernels, kernel_path)
    if different:
        raise RunError(f"{rdir}: its rounds were computed on another kernel path ({'; '.join(different)}, recorded != "
                       f"here); resuming would mix the two in one run: resume it on a host and settings that give "
                       f"the recorded path, or remove {rdir} and run it again")
    last = rounds[-1]
    log.truncate_after(len(rounds) + 1)
    ledger.truncate_after(last.ledger_lines)
    if (rdir / "experience.jsonl").exists():
        records.RecordLog(rdir / "experience.jsonl").truncate_after(last.experience_lines)
    _truncate_lines(rdir / "timing.log", last.round + 1)
    ckpt = rdir / "checkpoints" / f"round{last.round}.pt"
    if records.sha256_file(ckpt) != last.checkpoint:
        raise RunError(f"{ckpt}: checkpoint hash does not match {rdir / 'records.jsonl'} round {last.round}; "
                       f"the run is not sealed, so nothing sealed is lost by starting it over: remove {rdir} "
                       f"and run the same command again")
    _load_checkpoint(ctx, arm_module, ckpt)
    for p in rdir.glob("checkpoints/round*.pt"):  # checkpoints of rounds that never completed
        if int(p.stem.removeprefix("round")) > last.round:
            p.unlink()
    return last.round + 1


def _read_records(path: Path, recs: list[dict]) -> tuple[StartRecord, list[RoundRecord]]:
    """A run's records as typed records: the start record, then its rounds in order (RecordError naming
    path:line on a record that is not one)."""
    start = StartRecord.from_dict(recs[0], f"{path}:1")
    rounds = [RoundRecord.from_dict(r, f"{path}:{i}") for i, r in enumerate(recs[1:], 2) if r.get("kind") == "round"]
    return start, rounds


CHECKPOINT_KEYS = ("param_groups", "optim_scalars", "bank")  # the runner's part of a checkpoint's meta


def _checkpoint_payload(ctx: RunContext) -> tuple[dict, dict]:
    """(tensors, meta) of a round's checkpoint (model.checkpoint_bytes): the weights, the optimizer
    state, the task bank and the arm's own state (its keys beside the runner's CHECKPOINT_KEYS)."""
    opt = ctx.optimizer.state_dict()
    tensors = model_tensors(ctx.model)
    scalars = {}
    for i, st in opt["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"optim/{i}/{k}"] = v.detach().cpu().clone()
            else:
                scalars[f"{i}/{k}"] = v
    arm_state = ctx.state.to_dict()
    clash = sorted(set(arm_state) & set(CHECKPOINT_KEYS))
    if clash:
        raise RunError(f"arm {ctx.arm}: its state's key(s) {clash} are the runner's part of the checkpoint")
    return tensors, {"param_groups": opt["param_groups"], "optim_scalars": scalars, "bank": ctx.bank.to_dict(),
                     **arm_state}


def _load_checkpoint(ctx: RunContext, arm_module: ArmModule, path: Path) -> None:
    """Restore the weights, the optimizer, the bank and the arm's state from a round's checkpoint."""
    tensors, meta = read_checkpoint(path)
    load_model_tensors(ctx.model, tensors)
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("optim/"):
            _, i, name = k.split("/", 2)
            state.setdefault(int(i), {})[name] = v
    for k, v in meta["optim_scalars"].items():
        i, name = k.split("/", 1)
        state.setdefault(int(i), {})[name] = v
    ctx.optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    ctx.bank = Bank.from_dict(meta["bank"])
    try:
        ctx.state = arm_module.state.from_dict({k: v for k, v in meta.items() if k not in CHECKPOINT_KEYS}, ctx.family)
    except (KeyError, TypeError, ValueError) as err:
        raise RunError(f"{path}: the arm's state ({arm_module.name}.State) cannot be read back: "
                       f"{type(err).__name__}: {err}") from None


RUNNER_METRICS = (PRIMARY_METRIC, "eval/", "budget/", "train/")  # what an arm's round_metrics may not name


def _eval_metrics(ev: dict) -> dict[str, float]:
    """An evaluation's MLflow metrics: its probe pass rate as PRIMARY_METRIC, its other numbers under eval/."""
    m = {PRIMARY_METRIC: ev["probe_pass_rate"]}
    m.update({f"eval/{k}": v for k, v in ev.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
              and k != "probe_pass_rate"})
    return m


def _round_metrics(rec: RoundRecord, arm_metrics: dict[str, float]) -> dict[str, float]:
    """A round's MLflow metrics, grouped by prefix: the UI charts one section per prefix, in
    alphabetical order, so the primary metric's section, PRIMARY_METRIC, sorts first; then eval/,
    budget/, the arm's own (`arm_metrics`, from its module's round_metrics: monitor/, band/,
    heircommit/, ...), train/."""
    clash = sorted(k for k in arm_metrics if k.startswith(RUNNER_METRICS))
    if clash:
        raise RunError(f"round {rec.round}: the arm's round_metrics named {clash}, which the runner logs itself")
    m = _eval_metrics(rec.eval.to_dict())
    m.update({f"budget/{k}": v for k, v in rec.budget.items()})
    m.update(arm_metrics)
    loss = rec.train.get("mean_loss") if isinstance(rec.train, dict) else None
    if isinstance(loss, (int, float)):
        m["train/mean_loss"] = loss
    return m


def _tracker(protocol, arm, seed, lock, results_dir, tracking_uri, device):
    """The MLflow run of arm x seed, named "<arm>/seed<k>" and nested under its arm's run, with only
    what differs between runs as params (arm, seed, the arm's settings) plus the protocol's name, lock
    hash and code version, and MLflow's source tags from this process's provenance. The experiment's
    runs that exist from the start (harness.running.tracking.layout) are made by the first job, which
    also logs the full protocol and the base (their source tags: the lock's, what froze them)."""
    from harness.running import tracking  # mlflow: only runs that track
    name, store = protocol.name, results_dir
    base = lock["meta"].get("base")
    if base:  # one base of a recipe protocol: its own experiment "<protocol>/b<k>" in the results dir's store
        name, store = f"{protocol.name}/{base['label']}", Path(results_dir).parents[2]
    uri = tracking_uri or tracking.default_tracking_uri(store)
    common = {"protocol": protocol.name, "lock_hash": lock["lock_hash"], "code_version": code_version(),
              **({"base": base["label"]} if base else {})}
    rounds = protocol.budget.rounds
    frozen = tracking.source_tags(provenance.record(lock["meta"].get("environment") or {}), "freeze")
    tracking.open_experiment(uri, name, protocol.arm_names, len(protocol.run_seeds), rounds, {**common, **frozen})
    tracking.log_protocol(uri, name, protocol.dir, paths.lock_path(results_dir, protocol.name), protocol.flat(),
                          {**common, **frozen})
    scored = load_base_eval(results_dir, protocol.name)
    tracking.log_base(uri, name, rounds, _eval_metrics(scored["eval"]),
                      {**common, "base_sha256": scored["base_sha256"], "n_probes": scored["n_probes"]}, {**common, **frozen},
                      base_eval_path(results_dir, protocol.name),
                      {set_paths(results_dir, protocol.name)["base"].relative_to(results_dir).as_posix(): scored["base_sha256"]})
    tracker = tracking.Tracker(uri, experiment=name)
    arm_settings = {f"arm.{k}": v for k, v in protocol.raw["arms.yaml"][arm].items()}
    arm_run = tracking.ArmRun(tracking.run_key(name, arm), len(protocol.run_seeds), rounds, ARM_METRICS)
    tracker.start(tracking.run_key(name, f"{arm}/seed{seed}"),
                  tags={**common, "arm": arm, "seed": str(seed), "kind": protocol.arms[arm].kind,
                        "mlflow.runColor": tracking.arm_colour(arm, protocol.arm_names),
                        **tracking.source_tags(provenance.current(device), "run")},
                  params={**common, "arm": arm, "seed": seed, **arm_settings}, run_name=f"{arm}/seed{seed}",
                  arm_run=arm_run)
    return tracker


def _line_count(path: Path) -> int:
    return sum(1 for _ in open(path)) if path.exists() else 0


def _truncate_lines(path: Path, keep: int) -> None:
    if not path.exists():
        return
    lines = path.read_bytes().splitlines(keepends=True)
    if len(lines) > keep or (lines and not lines[-1].endswith(b"\n")):
        records.atomic_write_bytes(path, b"".join(line for line in lines[:keep] if line.endswith(b"\n")))


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=float))

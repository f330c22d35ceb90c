"""The command line: `python -m harness <command>`. One table (COMMANDS) maps each command to one
function taking its argument list and returning the exit status. Nothing heavy is imported before a
command needs it, so `--help` answers at once. Every refusal is a HarnessError: one line on stderr,
exit status 2; Ctrl-C says how to resume.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from harness import PROJECT_ROOT
from harness.core import paths
from harness.core.errors import HarnessError, Terminated


def guarded(fn, argv: list[str]) -> int:
    """Run one command: a refusal is an answer (one line, status 2), Ctrl-C an interruption (status 130),
    SIGTERM during a run a termination (status 143)."""
    try:
        return fn(argv)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Terminated:  # SIGTERM during a run: stopped as at Ctrl-C, its sandbox closed
        print("\nterminated: run the same command to resume", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command to resume", file=sys.stderr)
        return 130


def add_common(p) -> None:
    p.add_argument("--protocol", default="main", help="protocols/<name>/ or a path to a protocol folder (default: main)")
    p.add_argument("--results-dir", default=None, help=f"where sealed outputs live (default: {paths.DEFAULT_RESULTS})")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:<index>")
    p.add_argument("--progress", default="auto", help="auto (bars on a terminal, plain lines otherwise) | on | off | lines")


def say():
    """print with the elapsed time on every line ("[  12.3s] ..."), flushed (harness.core.timing.stamped)."""
    from harness.core.timing import stamped
    return stamped()


def settings_of(args):
    """RunSettings from the flags; a CUDA device this torch cannot use is refused here, before anything is written."""
    from harness.core.settings import RunSettings, check_cuda
    st = RunSettings(device=args.device, results_dir=args.results_dir, progress=args.progress,
                     jobs=getattr(args, "jobs", 0))
    if st.device != "cpu":
        check_cuda(st.device)
    return st


def cmd_pilot(args) -> int:
    """build the base as freeze will and measure the protocol on its calibration split (pilot.json)"""
    from harness.freeze.pilot import run_pilot
    st = settings_of(args)
    _refuse_recipe(args.protocol, "make pilot")
    run_pilot(args.protocol, st.results_dir, device=st.device, out=say(), progress=st.bars, jobs=st.n_jobs)
    return 0


def _recipe(name: str):
    """The loaded protocol when it is about the recipe (decision.yaml recipe), else None."""
    from harness.spec.protocol import load_protocol
    protocol = load_protocol(name)
    return protocol if protocol.is_recipe else None


def _refuse_recipe(name: str, command: str) -> None:
    if _recipe(name) is not None:
        raise InputError(f"protocol {name} is about the recipe (decision.yaml recipe): its bases, runs and looks go "
                         f"through `make experiment PROTOCOL={name}` (or `make freeze` / `make readout`), not `{command}`")


def cmd_freeze(args) -> int:
    from harness.freeze.freeze import freeze
    st = settings_of(args)
    recipe_protocol = _recipe(args.protocol)
    if recipe_protocol is not None:
        from harness.cli import recipe
        recipe.freeze(recipe_protocol, st, say())
        return 0
    freeze(args.protocol, st.results_dir, device=st.device, out=say(), progress=st.bars, speed=st.speed, jobs=st.n_jobs)
    return 0


def cmd_runs(args) -> int:
    """Every registered arm x seed through Hydra multirun (joblib locally; submitit on SLURM). Sealed
    runs are skipped, interrupted ones resume; exit 0 once every registered run is sealed."""
    from harness.cli.hydra_app import RUN_KEYS, check_overrides
    from harness.core import records
    from harness.spec.frozen import verify_frozen
    from harness.spec.protocol import load_protocol
    check_launcher(args.launcher)
    st = settings_of(args)
    _refuse_recipe(args.protocol, "make runs")
    out = say()
    fixed = [o for o in args.overrides if o.split("=", 1)[0].lstrip("+~") in {"protocol", "arm", "seed"} | RUN_KEYS]
    if fixed:
        raise InputError(f"{' '.join(fixed)}: `runs` sets the protocol, arms, seeds and how to run from its own flags; "
                         f"extra overrides are for Hydra (hydra.launcher...)")
    check_overrides([f"protocol={args.protocol}", *args.overrides])
    protocol = load_protocol(args.protocol)
    verify_frozen(protocol, st.results_dir)
    runs = [(a, s) for a in protocol.arm_names for s in protocol.run_seeds]
    pending = [(a, s) for a, s in runs if not records.is_sealed(paths.run_dir(st.results_dir, protocol.name, a, s))]
    for a, s in runs:
        if (a, s) not in pending:
            out(f"[runs] {protocol.name} {a} seed {s}: sealed already, skipped")
    if pending:
        arms = [a for a in protocol.arm_names if any(p[0] == a for p in pending)]
        seeds = [s for s in protocol.run_seeds if any(p[1] == s for p in pending)]
        cmd = [sys.executable, "-m", "harness", "run", "-m", f"protocol={args.protocol}", f"arm={','.join(arms)}",
               f"seed={','.join(map(str, seeds))}", f"results_dir={st.results_dir}", f"device={st.device}",
               f"hydra/launcher={args.launcher}", "progress=lines", "torch_threads=1", *args.overrides]
        if args.launcher == "joblib":
            cmd.append(f"hydra.launcher.n_jobs={args.jobs}")
        out(f"[runs] {len(pending)} of {len(runs)} runs to go: " + " ".join(cmd[2:]))
        rc = subprocess.call(cmd, cwd=PROJECT_ROOT)
        if rc == 130:
            raise KeyboardInterrupt
    unsealed = [f"{a} seed {s}" for a, s in runs
                if not records.is_sealed(paths.run_dir(st.results_dir, protocol.name, a, s))]
    if unsealed:
        print(f"error: {len(unsealed)} of {len(runs)} runs did not end sealed ({', '.join(unsealed)}); "
              f"see the lines above; run the same command to resume", file=sys.stderr)
        return 1
    out(f"[runs] every registered run of {protocol.name} is sealed ({len(runs)}); next: "
        f"`{paths.command_hint('readout', protocol.name, st.results_dir)}`")
    return 0


LAUNCHERS = ("joblib", "basic", "submitit_local", "submitit_slurm")


def check_launcher(launcher: str) -> None:
    """Refuse (InputError) a launcher that is not one of LAUNCHERS, and SLURM where there is none."""
    import shutil
    if launcher not in LAUNCHERS:
        raise InputError(f"--launcher {launcher}: expected one of {', '.join(LAUNCHERS)}")
    if launcher == "submitit_slurm" and shutil.which("sbatch") is None:
        raise InputError("--launcher submitit_slurm: no SLURM here (sbatch is not on PATH); run it on the cluster's "
                         "login node, or use --launcher joblib on this machine")


def cmd_experiment(args) -> int:
    """freeze -> every arm x seed -> readout, on one machine. Resumable: sealed runs are skipped,
    interrupted ones resume from their last completed round."""
    from harness.core import parallel, records
    from harness.core.timing import Progress, duration, heartbeat
    from harness.freeze.freeze import freeze
    from harness.readout.analyzer import readout
    from harness.spec.protocol import load_protocol
    st = settings_of(args)
    out = say()
    t0 = time.perf_counter()
    protocol = load_protocol(args.protocol)
    if protocol.is_recipe:
        from harness.cli import recipe
        recipe.experiment(protocol, st, out)
        return 0
    readout_dir = paths.readout_dir(st.results_dir, protocol.name)
    if records.is_sealed(readout_dir):
        out(f"[experiment] {protocol.name} is already read out; "
            f"`{paths.command_hint('audit', protocol.name, st.results_dir)}` re-checks it")
        _say_where_and_what(out, readout_dir, None)
        return 0
    t_freeze = time.perf_counter()
    freeze(args.protocol, st.results_dir, device=st.device, out=out, progress=st.bars, speed=st.speed, jobs=st.n_jobs)
    out(f"[experiment] freeze: done in {duration(time.perf_counter() - t_freeze)}")
    pending = []
    for seed in protocol.run_seeds:  # seed by seed: every arm's run time is known after the first seed's runs
        for arm in protocol.arm_names:
            if records.is_sealed(paths.run_dir(st.results_dir, protocol.name, arm, seed)):
                out(f"[experiment] {protocol.name} {arm} seed {seed}: sealed already, skipped")
            else:
                pending.append((args.protocol, arm, seed, st))
    jobs = min(st.n_jobs, max(1, len(pending)))
    if pending:
        out(f"[experiment] {len(pending)} runs, {jobs} at a time")

    t_runs = time.perf_counter()
    progress = Progress([call[1] for call in pending], jobs)  # an arm's runs take alike

    def sealed(call, result):
        _, arm, seed, _ = call
        progress.done(pending.index(call), seconds=result[1])  # the run's own time, not its wait in the queue
        out(f"[experiment] {protocol.name} {arm} seed {seed}: sealed in {duration(result[1])}{_final_line(result[0])} "
            f"(runs {progress.text()})")
    with heartbeat(out, "[experiment] runs", status=lambda: f"runs sealed {progress.text()}"):
        parallel.each(_experiment_run, pending, jobs, on_done=sealed)
    if pending:
        out(f"[experiment] runs: done in {duration(time.perf_counter() - t_runs)}")
    t_readout = time.perf_counter()
    rdir = readout(args.protocol, st.results_dir, out=out)
    runs_page = track_readout(st, rdir, out)
    out(f"[experiment] readout: done in {duration(time.perf_counter() - t_readout)}")
    out(f"[experiment] done in {duration(time.perf_counter() - t0)}")
    _say_where_and_what(out, rdir, _ui_hint(st, runs_page) if runs_page else None)
    return 0


def _say_where_and_what(out, rdir: Path, mlflow: str | None) -> None:
    """The end of `experiment`'s log: where the report, the per-item view and (with tracking) MLflow are,
    then the verdict paragraph as the last lines."""
    out(f"[experiment] report:  {rdir / 'report.md'} and {rdir / 'report.html'} (figures inline)")
    out(f"[experiment] probes:  {rdir / 'items.html'} (each probe's tests and each arm's final completion)")
    if mlflow:
        out(f"[experiment] MLflow:  {mlflow}")
    print(_verdict_line(rdir), flush=True)  # the report's verdict paragraph, the log's last lines


def _experiment_run(protocol: str, arm: str, seed: int, settings) -> tuple[Path, float]:
    """One run of `make experiment` (a module-level function: a job): its directory and seconds."""
    from harness.running.runner import run
    t0 = time.perf_counter()
    return run(protocol, arm, seed, settings=settings), time.perf_counter() - t0


def _final_line(rdir: Path) -> str:
    """', probe pass rate 0.453 -> 0.469' from a sealed run's records (empty if unreadable)."""
    import json
    try:
        recs = [json.loads(line) for line in open(rdir / "records.jsonl")]
        first = recs[0]["base_eval"]["probe_pass_rate"]
        last = [r for r in recs if r["kind"] == "round"][-1]["eval"]["probe_pass_rate"]
    except (OSError, KeyError, IndexError, ValueError):
        return ""
    return f", probe pass rate {first:.3f} -> {last:.3f}"


def _verdict_line(readout_dir: Path) -> str:
    """The report's verdict paragraph (harness.readout.report.headline) as the last lines of the log:
    the verdict sentence, what the rule alone would have said when a check overrode it, the
    label(s) that decided it and how far to trust them, the other labels, what the design could
    resolve, and one line per distinct warning that bears on the verdict (in full in the report)."""
    import json

    from harness.readout.report import headline
    h = headline(json.loads((readout_dir / "verdict.json").read_text()))
    return "\n".join([h["sentence"], *([h["chance"]] if h["chance"] else []),
                      *([f"Checks: {h['checks']}"] if h["checks"] else []), *([h["rule_alone"]] if h["rule_alone"] else []),
                      *(f"Decided by: {line}" for line in h["deciding"]),
                      *(f"{h['trust_prefix']}: {line}" for line in h["trust"]),
                      *([f"Design: {h['design']}"] if h["design"] else []),
                      *(f"WARNING: {w}" for w in h["warnings"]),
                      *([h["base"]] if h.get("base") else [])])


def track_readout(settings, readout_dir: Path, out=None) -> str | None:
    """Mirror a sealed readout to MLflow, in the experiment's run named "readout"
    (harness.running.tracking.log_readout), with MLflow's source tags from the readout's manifest (the
    process that read it out) and the freeze's commit. Returns where `make ui` shows the experiment's
    runs in MLflow's model-training view (tracking.runs_page), or None without tracking. `out`, when given,
    is told the step as it starts and ends."""
    import json
    from contextlib import nullcontext

    from harness.core.timing import timed
    from harness.running import tracking
    if not settings.tracking:
        return None
    verdict = json.loads((readout_dir / "verdict.json").read_text())
    inputs = verdict.get("inputs", {})
    made = json.loads((readout_dir / "manifest.json").read_text()).get("provenance") or {}
    freeze = (verdict.get("provenance") or {}).get("freeze") or {}
    tags = {"protocol": verdict["protocol"], "lock_hash": str(inputs.get("lock_hash")),
            "code_version": str(inputs.get("code_version")), "freeze_git_commit": str(freeze.get("git_commit")),
            **base_tags(verdict), **tracking.source_tags(made, "readout")}
    uri = settings.tracking_uri or tracking.default_tracking_uri(settings.results_dir)
    with timed(out, "[readout] MLflow: the readout's run") if out is not None else nullcontext():
        _, experiment_id = tracking.log_readout(uri, verdict["protocol"], readout_dir, verdict, tags)
    return tracking.runs_page(experiment_id)


def base_tags(verdict: dict) -> dict:
    """The readout run's tags about the base: the one the experiment built (sha256, probe pass rate), the one
    the registration was sized on, whether they differ, and the sentence that says what that means
    (harness.readout.words.base_words); {} for a verdict that names no built base."""
    from harness.readout import words
    reg = verdict.get("registration") or {}
    base = reg.get("base") or {}
    if not base.get("sha256"):
        return {}
    return {"base_sha256": base["sha256"], "base_pass_rate": f"{base.get('pass_rate')}",
            "sized_on_base": str(reg.get("sized_on_base")), "base_differs": str(bool(reg.get("other_base"))).lower(),
            "base": words.base_words(reg)}


def _ui_hint(st, runs_page: str) -> str:
    """How to see the runs in MLflow: the `make ui` command for these results, then the runs page."""
    results = "" if Path(st.results_dir).resolve() == (PROJECT_ROOT / "results").resolve() else f" RESULTS={st.results_dir}"
    return f"make ui{results}, then {runs_page}"


def cmd_readout(args) -> int:
    from harness.readout.analyzer import readout
    st = settings_of(args)
    recipe_protocol = _recipe(args.protocol)
    if recipe_protocol is not None:
        from harness.cli import recipe
        recipe.readout(recipe_protocol, st, say())
        return 0
    out = readout(args.protocol, st.results_dir, out=say())
    runs_page = track_readout(st, out, say())
    hint = f"[readout] MLflow: {_ui_hint(st, runs_page)}\n" if runs_page else ""
    print(f"[readout] report: {out / 'report.md'} and {out / 'report.html'}\n{hint}{_verdict_line(out)}")
    return 0


def cmd_archive(args) -> int:
    from harness.readout.audit import pack
    if _recipe(args.protocol) is not None:
        raise InputError(f"protocol {args.protocol} is about the recipe: `make archive` packs a one-base tree, not yet its "
                         f"bases; `make audit PROTOCOL={args.protocol}` recomputes its verdict from the sealed runs")
    path = pack(args.protocol, settings_of(args).results_dir, with_checkpoints=args.with_checkpoints)
    print(f"[archive] {path}\n[archive] sha256 in {path}.sha256")
    return 0


def cmd_deviation(args) -> int:
    from harness.spec.deviations import add_deviation, deviations_path
    from harness.spec.protocol import load_protocol
    protocol = load_protocol(args.protocol)
    results = settings_of(args).results_dir
    entry = add_deviation(protocol, results, args.what, args.why, args.who, args.outcome_seen)
    print(f"[deviation] logged in {deviations_path(results, protocol.name)}: {entry['date']} {entry['what']}")
    return 0


def _deviation_args(ap) -> None:
    ap.add_argument("--what", required=True, help="what was done differently from the pre-registration")
    ap.add_argument("--why", required=True, help="why")
    ap.add_argument("--who", required=True, help="who decided it")
    ap.add_argument("--outcome-seen", required=True, choices=("yes", "no"),
                    help="whether any probe outcome had been seen when it was decided")


def cmd_audit(args) -> int:
    from harness.readout.audit import audit
    recipe_protocol = _recipe(args.protocol)
    if recipe_protocol is not None:
        from harness.cli import recipe
        ok, message = recipe.audit(recipe_protocol, settings_of(args))
        print(message)
        return 0 if ok else 1
    ok, message = audit(args.protocol, settings_of(args).results_dir, Path(args.archive) if args.archive else None,
                        trust_family_modules=args.trust_family_modules)
    print(message)
    return 0 if ok else 1


def cmd_replicate(args) -> int:
    """re-run one sealed run from the frozen inputs and compare: `identical` (0) or the first difference (1)"""
    import time

    from harness.running.replicate import replicate
    from harness.spec.protocol import load_protocol
    st = settings_of(args)
    out = say()
    t0 = time.perf_counter()
    results = st.results_dir
    recipe_protocol = _recipe(args.protocol)
    if recipe_protocol is not None or args.base is not None:
        if recipe_protocol is None or args.base is None:
            raise InputError(f"--base {args.base}: " + ("protocol {args.protocol} registers no bases (decision.yaml recipe is "
                             "null)" if recipe_protocol is None else f"protocol {args.protocol} is about the recipe: name the "
                             f"base of the run, BASE=<1..{recipe_protocol.seeds.bases.count}>"))
        from harness.spec.recipe import base_tree
        recipe_protocol.for_base(args.base)  # refuses a base the protocol does not register
        results = base_tree(recipe_protocol, results, args.base)
    found = replicate(args.protocol, args.arm, args.seed, results, args.round, args.cpu_capability, out)
    took = time.perf_counter() - t0
    if not found:
        out(f"[replicate] {args.arm} seed {args.seed} from round {args.round}: replicated in {took:.0f} s")
        print("identical")
        return 0
    for d in found:
        print(d.line())
    kept = paths.replicate_dir(results, load_protocol(args.protocol).name, args.arm, args.seed)
    print(f"differs: the replicated run is kept in {kept} for inspection; the sealed run is untouched")
    return 1


def _replicate_args(ap) -> None:
    ap.add_argument("--arm", required=True, help="the sealed run's arm")
    ap.add_argument("--seed", type=int, required=True, help="the sealed run's seed")
    ap.add_argument("--base", type=int, default=None, help="a protocol about the recipe: the run's base (1-based, "
                    "seeds.yaml bases)")
    ap.add_argument("--round", type=int, default=0, help="re-run from this round on, after the sealed earlier ones "
                    "(default 0: the whole run)")
    from harness.core.kernels import CAPABILITIES
    ap.add_argument("--cpu-capability", choices=CAPABILITIES, default=None,
                    help="replicate on another kernel path than the registered one (to see what it changes)")


def parser(prog: str, description: str | None = None):
    """An argparse parser whose refusals are InputError (one line, exit status 2, as every refusal:
    `guarded`) instead of argparse's usage block; --help still prints the help."""
    import argparse

    class OneLineParser(argparse.ArgumentParser):
        def error(self, message: str):
            raise InputError(f"{self.prog}: {message} (--help lists the arguments)")
    return OneLineParser(prog=prog, description=description)


def _command(fn, name: str, extra=None):
    """Wrap cmd_* as a `python -m harness <name>` command: argv -> exit status."""
    def command(argv: list[str]) -> int:
        ap = parser(f"python -m harness {name}", fn.__doc__)
        add_common(ap)
        if extra:
            extra(ap)
        return fn(ap.parse_args(argv))
    return command


def cmd_run(argv: list[str]) -> int:
    """one arm x seed (Hydra app: protocol=.. arm=.. seed=.. [device=.. results_dir=..]; -m for a sweep)"""
    from harness.cli import hydra_app
    return hydra_app.main(argv)


def cmd_verify(argv: list[str]) -> int:
    """verify completions against tasks in the sandbox; one JSON verdict per line"""
    import json
    ap = parser("python -m harness verify", cmd_verify.__doc__)
    ap.add_argument("--tasks", required=True, help="tasks JSONL (harness.tasks.splits.save_tasks format)")
    ap.add_argument("--family", default="code", help="the tasks' family, a registered name (harness.tasks.registry; "
                    "default: code)")
    ap.add_argument("--completions", required=True,
                    help='JSONL, one {"completion": str} per line; optional "index" or "canonical_hash" '
                         "picks its task, otherwise line i goes with task i")
    ap.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPU count)")
    args = ap.parse_args(argv)
    from harness.sandbox.verifier import Verifier, load_completions
    from harness.tasks import registry
    from harness.tasks.splits import load_tasks
    try:
        cls = registry.family_class(args.family)
        tasks = load_tasks(args.tasks, cls.from_settings(cls.DEFAULTS))
        pairs = load_completions(args.completions, tasks, args.tasks)
    except (OSError, ValueError) as e:
        raise InputError(str(e)) from None
    with Verifier(workers=args.workers) as verifier:
        verdicts = verifier.verify_many([(tasks[i], completion) for i, completion in pairs])
        counters = verifier.counters
    for (i, _), v in zip(pairs, verdicts):
        print(json.dumps({"index": i, "canonical_hash": tasks[i].canonical_hash, "passed": v.passed,
                          "reason": v.reason, "tests": list(v.tests), "detail": v.detail}))
    print(json.dumps({"counters": counters}), file=sys.stderr)
    return 0


class InputError(HarnessError):
    pass


def cmd_conformance(argv: list[str]) -> int:
    """run the conformance suite on a task family and print its report (status 2 when a property fails)"""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m harness conformance", description=cmd_conformance.__doc__)
    ap.add_argument("--family", required=True, help="the task family's registered name (harness.tasks.registry)")
    ap.add_argument("--module", default=None, help="the module of a family the registry does not list")
    ap.add_argument("--protocol", default=None, help="check the family as this protocol registers it (its settings, "
                    "split sizes, leak guard and operators); default: the family's DEFAULTS at a small protocol's sizes")
    args = ap.parse_args(argv)
    from harness.freeze import conformance
    from harness.spec.protocol import load_protocol
    if args.protocol is not None:
        protocol = load_protocol(args.protocol)
        if protocol.family.name != args.family:
            raise InputError(f"{protocol.dir / 'tasks.yaml'}: registers the task family '{protocol.family.name}', "
                             f"not '{args.family}'")
        reg = conformance.Registration.of(protocol)
    else:
        try:
            reg = conformance.Registration.nominal(args.family, args.module)
        except ValueError as e:
            raise InputError(f"--family {args.family}: {e}") from None
    report = conformance.run_suite(reg)
    for line in report.lines():
        print(line)
    if report.failed:
        raise conformance.ConformanceError(report.refusal())
    return 0


def user_errors() -> tuple[type, ...]:
    return (HarnessError,)


def _runs_args(ap) -> None:
    ap.add_argument("--launcher", default="joblib", help=f"hydra launcher: {' | '.join(LAUNCHERS)}")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="parallel jobs (joblib)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides (how to run, never what)")


def _jobs_args(ap) -> None:
    ap.add_argument("--jobs", type=int, default=0, help="arm x seed runs at once, each in its own process "
                    "(default 0: one per core on CPU, one on a GPU); records do not depend on it")


def _archive_args(ap) -> None:
    ap.add_argument("--with-checkpoints", action="store_true",
                    help="keep the runs' round checkpoints (left out by default: the audit never reads them; "
                         "their sha256 stay in each sealed manifest)")


def _audit_args(ap) -> None:
    ap.add_argument("--archive", default=None, help="an archive from `make archive` (default: the sealed tree)")
    ap.add_argument("--trust-family-modules", action="store_true",
                    help="import the task-family module an archive's tasks.yaml names even where this checkout's "
                         "registry does not list it (refused by default: the archive chose the name)")


COMMANDS = {  # name -> (argv -> exit status, one line of help)
    "pilot": (_command(cmd_pilot, "pilot", _jobs_args), "build the base as freeze will, measure the protocol on its calibration split"),
    "freeze": (_command(cmd_freeze, "freeze", _jobs_args), "validate, materialise sets, build the base, power analysis, then the lock"),
    "run": (cmd_run, "one arm x seed (Hydra: protocol=.. arm=.. seed=..); resumes after a crash"),
    "runs": (_command(cmd_runs, "runs", _runs_args), "every arm x seed via Hydra multirun; sealed runs are skipped"),
    "experiment": (_command(cmd_experiment, "experiment", _jobs_args), "freeze -> all arms x seeds -> readout (the main command)"),
    "readout": (_command(cmd_readout, "readout"), "ONE-SHOT: verify seals, apply the decision rule, write verdict + report"),
    "archive": (_command(cmd_archive, "archive", _archive_args), "pack protocol, lock, sealed runs and readout into one file"),
    "audit": (_command(cmd_audit, "audit", _audit_args), "re-run the analyzer on archived records, compare byte for byte"),
    "replicate": (_command(cmd_replicate, "replicate", _replicate_args),
                  "re-run one sealed run from the frozen inputs; `identical` or the first difference"),
    "deviation": (_command(cmd_deviation, "deviation", _deviation_args),
                  "log a deviation after freeze (date, what, why, who, outcome seen); the readout reports it"),
    "verify": (cmd_verify, "verify completions against tasks in the sandbox (one JSON verdict per line)"),
    "conformance": (cmd_conformance, "run the task-family conformance suite alone and print its report"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help}" for name, (_, help) in COMMANDS.items()]
    return ("usage: python -m harness <command> [args]   (python -m harness <command> --help for its own)\n\n"
            "commands:\n" + "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}\n{usage()}", file=sys.stderr)
        return 2
    return guarded(COMMANDS[argv[0]][0], argv[1:])

"""The experiment's commands: freeze, runs, experiment (the README's main command), readout,
archive, audit. Each is a plain function taking parsed arguments; `python -m harness <cmd>`."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from harness import PROJECT_ROOT


def add_common(p) -> None:
    p.add_argument("--protocol", default="smoke", help="protocols/<name>/ (default: smoke)")
    p.add_argument("--results-dir", default=str(PROJECT_ROOT / "results"), help="where sealed outputs live")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:0 ...")


def cmd_freeze(args) -> int:
    from harness.freeze import freeze
    freeze(args.protocol, Path(args.results_dir), device=args.device)
    return 0


def cmd_runs(args) -> int:
    """Every registered arm x seed through Hydra multirun (joblib locally; submitit on SLURM)."""
    from harness.protocol import load_protocol
    protocol = load_protocol(args.protocol)
    cmd = [sys.executable, "-m", "harness.run", "-m", f"protocol={args.protocol}",
           f"arm={','.join(protocol.arm_names)}", f"seed={','.join(map(str, protocol.run_seeds))}",
           f"results_dir={args.results_dir}", f"device={args.device}", f"hydra/launcher={args.launcher}",
           "progress=false", "torch_threads=1", *args.overrides]
    if args.launcher == "joblib":
        cmd.append(f"hydra.launcher.n_jobs={args.jobs}")
    print("[runs] " + " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=PROJECT_ROOT)


def cmd_experiment(args) -> int:
    """freeze -> every arm x seed -> readout, on one machine, with progress. Resumable: sealed runs
    are skipped, interrupted ones resume from their last completed round."""
    from harness import records
    from harness.analyzer import readout
    from harness.freeze import freeze
    from harness.protocol import load_protocol
    from harness.runner import run, run_dir
    results = Path(args.results_dir)
    t0 = time.perf_counter()
    protocol = load_protocol(args.protocol)
    readout_dir = results / protocol.name / "readout"
    if records.is_sealed(readout_dir):
        print(f"[experiment] {protocol.name} is already read out ({readout_dir}); `make audit` re-checks it")
        return 0
    freeze(protocol.name, results, device=args.device)
    for arm in protocol.arm_names:
        for seed in protocol.run_seeds:
            if records.is_sealed(run_dir(results, protocol.name, arm, seed)):
                print(f"[experiment] {arm} seed {seed}: already sealed, skipped")
                continue
            run(protocol.name, arm, seed, results, device=args.device)
    out = readout(protocol.name, results)
    verdict = _verdict_line(out)
    print(f"\n[experiment] done in {time.perf_counter() - t0:.0f} s")
    print(f"[experiment] report:  {out / 'report.md'}")
    print(f"[experiment] figures: {out}/*.png")
    print(f"[experiment] verdict: {verdict}")
    return 0


def _verdict_line(readout_dir: Path) -> str:
    import json
    v = json.loads((readout_dir / "verdict.json").read_text())
    verdict = v.get("verdict", v.get("analysis", {}).get("verdict", {}))
    return f"{verdict.get('outcome')} — {verdict.get('clause')}"


def cmd_readout(args) -> int:
    from harness.analyzer import readout
    out = readout(args.protocol, Path(args.results_dir))
    print(f"[readout] report: {out / 'report.md'}\n[readout] verdict: {_verdict_line(out)}")
    return 0


def cmd_archive(args) -> int:
    from harness.audit import pack
    path = pack(args.protocol, Path(args.results_dir))
    print(f"[archive] {path}\n[archive] sha256 in {path}.sha256")
    return 0


def cmd_audit(args) -> int:
    from harness.audit import audit
    ok, message = audit(args.protocol, Path(args.results_dir), Path(args.archive) if args.archive else None)
    print(message)
    return 0 if ok else 1


def _command(fn, name: str, help: str, extra=None):
    """Wrap cmd_* as a `python -m harness <name>` command: argv -> exit status."""
    def command(argv: list[str]) -> int:
        import argparse
        ap = argparse.ArgumentParser(prog=f"python -m harness {name}", description=help)
        add_common(ap)
        if extra:
            extra(ap)
        try:
            return fn(ap.parse_args(argv))
        except user_errors() as e:  # a refusal is an answer, not a crash: no traceback
            print(f"error: {e}", file=sys.stderr)
            return 2
    command.__doc__ = help
    return command


def user_errors() -> tuple[type, ...]:
    from harness.errors import HarnessError
    return (HarnessError,)


def _runs_args(ap) -> None:
    ap.add_argument("--launcher", default="joblib", help="hydra launcher: joblib | basic | submitit_local | submitit_slurm")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="parallel jobs (joblib)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides (how to run, never what)")


def _audit_args(ap) -> None:
    ap.add_argument("--archive", default=None, help="an archive from `make archive` (default: the sealed tree)")


COMMANDS = {
    "freeze": _command(cmd_freeze, "freeze", "validate, materialise sets, build/verify the base, power analysis, lock"),
    "runs": _command(cmd_runs, "runs", "every arm x seed via Hydra multirun", _runs_args),
    "experiment": _command(cmd_experiment, "experiment", "freeze -> all arms x seeds -> readout (the main command)"),
    "readout": _command(cmd_readout, "readout", "ONE-SHOT: verify seals, apply the decision rule, write verdict + report"),
    "archive": _command(cmd_archive, "archive", "pack protocol, lock, sealed runs and readout into one file"),
    "audit": _command(cmd_audit, "audit", "re-run the analyzer on archived records and compare byte for byte", _audit_args),
}

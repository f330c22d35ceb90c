"""`make freeze`, `make experiment` and `make readout` for a protocol about the recipe (decision.yaml
`recipe`): the registration frozen once, then look by look: the look's bases frozen, every registered
arm x seed run on each, the plan read; the readout once the plan has stopped. Resumable at every step:
a frozen base is verified, a sealed run skipped, a recorded look re-read and compared.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from harness.core import parallel, paths, records
from harness.core.timing import Progress, duration, heartbeat
from harness.spec.protocol import Protocol


def freeze(protocol: Protocol, st, out) -> None:
    from harness.freeze.recipe import freeze_recipe
    freeze_recipe(str(protocol.dir), st.results_dir, device=st.device, out=out, speed=st.speed, jobs=st.n_jobs)


def experiment(protocol: Protocol, st, out) -> Path:
    """freeze -> looks (bases, runs, the plan read) until the plan stops -> the sealed readout."""
    from harness.freeze.recipe import ensure_bases
    from harness.readout import recipe as readout
    t0 = time.perf_counter()
    target = paths.readout_dir(st.results_dir, protocol.name)
    if records.is_sealed(target):
        out(f"[experiment] {protocol.name} is already read out ({target})")
        return target
    freeze(protocol, st, out)
    out(f"[experiment] freeze: done in {duration(time.perf_counter() - t0)}")
    for j, n_bases in enumerate(protocol.decision.recipe.looks):
        t_look = time.perf_counter()
        ensure_bases(protocol, st.results_dir, range(1, n_bases + 1), st.device, out, st.speed, st.n_jobs)
        run_bases(protocol, st, range(1, n_bases + 1), out)
        seq = readout.take_look(protocol, st.results_dir, n_bases)
        labels = ", ".join(f"{c} {lab}" for c, lab in seq.labels.items())
        out(f"[experiment] look {j + 1}/{len(protocol.decision.recipe.looks)} on {n_bases} bases (z boundary "
            f"{seq.looks[-1].z_bound:.3f}): {labels}; "
            + ("the plan stops here" if seq.decided else f"not decided: the plan goes on to {seq.next_look} bases")
            + f" ({duration(time.perf_counter() - t_look)})")
        if seq.decided:
            break
    rdir = readout.readout(str(protocol.dir), st.results_dir, out=out)
    page = track(protocol, st, rdir)
    out(f"[experiment] done in {duration(time.perf_counter() - t0)}; report: {rdir / readout.REPORT_NAME}"
        + (f"; MLflow: {page}" if page else ""))
    return rdir


def run_bases(protocol: Protocol, st, indices, out) -> None:
    """Every registered arm x seed on each base in `indices` that is not sealed yet, st.n_jobs at a time."""
    from harness.spec.recipe import base_tree
    pending = []
    for k in indices:
        tree = base_tree(protocol, st.results_dir, k)
        for seed in protocol.run_seeds:
            for arm in protocol.arm_names:
                if not records.is_sealed(paths.run_dir(tree, protocol.name, arm, seed)):
                    pending.append((str(protocol.dir), arm, seed, dataclasses.replace(st, results_dir=tree)))
    if not pending:
        return
    jobs = min(st.n_jobs, len(pending))
    out(f"[experiment] {len(pending)} runs on bases {', '.join(protocol.seeds.bases.draw(k).label for k in indices)}, "
        f"{jobs} at a time")
    progress = Progress([call[1] for call in pending], jobs)

    def sealed(call, result):
        progress.done(pending.index(call), seconds=result[1])
        out(f"[experiment] {Path(call[3].results_dir).name} {call[1]} seed {call[2]}: sealed in {duration(result[1])} "
            f"(runs {progress.text()})")
    with heartbeat(out, "[experiment] runs", status=lambda: f"runs sealed {progress.text()}"):
        parallel.each(base_run, pending, jobs, on_done=sealed)


def base_run(protocol: str, arm: str, seed: int, settings) -> tuple[Path, float]:
    """One arm x seed on one base (settings.results_dir: the base's tree; a job): its directory and seconds."""
    from harness.running.runner import run
    t0 = time.perf_counter()
    return run(protocol, arm, seed, settings=settings), time.perf_counter() - t0


def readout(protocol: Protocol, st, out) -> Path:
    from harness.readout import recipe
    rdir = recipe.readout(str(protocol.dir), st.results_dir, out=out)
    page = track(protocol, st, rdir)
    if page:
        out(f"[readout] MLflow: {page}")
    return rdir


def track(protocol: Protocol, st, rdir: Path) -> str | None:
    """The sealed verdict about the recipe in MLflow: the experiment `<protocol>` (beside each base's
    `<protocol>/b<k>`), its run "readout" with the outcome and every file of the readout. Returns the runs
    page (tracking.runs_page), or None without tracking."""
    import json
    if not st.tracking:
        return None
    from harness.running import tracking
    v = json.loads((rdir / "verdict.json").read_text())
    made = json.loads((rdir / "manifest.json").read_text())
    tags = {"protocol": protocol.name, "lock_hash": str(made.get("lock_hash")), "bases_read": str(v["n_bases"]),
            "stopped_at_look": str(v["stopped_at_look"]), **tracking.source_tags(made.get("provenance") or {}, "readout")}
    clause = "; ".join(f"{c} {t['label']}" for c, t in v["contrasts"].items())
    uri = st.tracking_uri or tracking.default_tracking_uri(st.results_dir)
    _, experiment_id = tracking.log_readout(uri, protocol.name, rdir, {"verdict": {"outcome": v["outcome"], "clause": clause}},
                                            tags)
    return tracking.runs_page(experiment_id)


def audit(protocol: Protocol, st) -> tuple[bool, str]:
    """Recompute the verdict about the recipe from the sealed runs and looks and compare it, byte for
    byte, with the sealed readout's verdict.json: (True, "identical ...") or (False, the first difference)."""
    from harness.readout import recipe
    target = paths.readout_dir(st.results_dir, protocol.name)
    sealed = records.verify_sealed(target)
    got = (records.canonical_json(recipe.compute(protocol, st.results_dir)) + "\n").encode()
    want = (target / recipe.VERDICT_NAME).read_bytes()
    if records.sha256_bytes(want) != sealed["verdict_sha256"]:
        return False, f"[audit] {target / recipe.VERDICT_NAME}: differs from its manifest's verdict_sha256"
    if got == want:
        return True, (f"[audit] identical: the verdict about the recipe recomputed from the sealed runs of "
                      f"{protocol.name} matches {target / recipe.VERDICT_NAME} byte for byte")
    at = next(i for i, (a, b) in enumerate(zip(got + b"\0", want + b"\0")) if a != b)
    return False, (f"[audit] DIFFERS at byte {at}: recomputed ...{got[max(0, at - 60):at + 60].decode(errors='replace')}... "
                   f"sealed ...{want[max(0, at - 60):at + 60].decode(errors='replace')}...")

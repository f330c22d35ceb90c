"""`make freeze`: validate the protocol, materialise its task sets (harness.freeze.sets), build (or
verify) the base checkpoint (harness.freeze.base), calibrate with the pilot (harness.freeze.pilot),
run the power analysis (harness.stats.power), and write the lock.

Everything freeze writes lives under results/<protocol>/frozen/ (git-ignored); PREREGISTRATION.md
(the protocol read out in OSF Prereg / AsPredicted terms, harness.readout.prereg) is written just
before the lock, which hashes it:
    sets/{warmup,seed_set,probe,confirm,calibration}.jsonl   the materialised splits, expected outputs included
    base.pt                                      the base checkpoint, built deterministically
    FROZEN.lock                                  sha256 of every protocol file, set, the base and the source;
                                                 the environment (packages, git commit, CPU, torch, GPU) as information
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from harness.core import kernels, paths, records, timing
from harness.core.errors import HarnessError
from harness.core.settings import Speed
from harness.freeze import pilot
from harness.freeze.base import ensure_base, write_base_eval
from harness.freeze.sets import materialise_sets
from harness.readout import prereg, words
from harness.readout.design import (control_gain_line, control_gains, control_margin_line, find_pilot, protocol_design,
                                    registration)
from harness.sandbox import pool
from harness.spec import lock
from harness.spec.frozen import lock_entries, verify_frozen
from harness.spec.protocol import Protocol, load_protocol
from harness.stats.design.model import VarianceComponents
from harness.stats.design.summary import design_summary


def freeze(name: str, results_dir: Path, device: str = "cpu", out=print, progress: bool = True,
           speed: Speed | None = None, jobs: int = 1) -> dict:
    """Freeze protocol `name` into results_dir/<name>/frozen/. The lock is written last, after the
    sets, the base, its score in the sandbox and the power analysis: a freeze that fails or is
    killed leaves no lock, and running it again picks up where it stopped (a base already built by
    the same recipe is reused). A frozen protocol is verified, not frozen again."""
    protocol = load_protocol(name)
    name = protocol.name  # a path to a protocol dir names it by its folder
    kernels.pin(protocol.model.kernels(), f"freeze {name}")  # the base, the pilot and the base's evaluation
    results_dir = Path(results_dir).resolve()
    lock_path = paths.lock_path(results_dir, name)
    if lock_path.exists():
        locked = verify_frozen(protocol, results_dir)
        summary = json.loads(paths.freeze_summary_path(results_dir, name).read_text())
        out(f"[freeze] {name}: frozen, lock verified ({lock_path}, lock hash {locked['lock_hash'][:16]}); "
            f"base probe pass rate {summary['base_pass_rate']:.3f}")
        return {"lock": locked, **summary}
    with timing.timed(out, "[freeze] stage 1/5 sets: materialising the splits"):
        splits = materialise_sets(protocol, results_dir, out)
    with timing.timed(out, "[freeze] stage 2/5 base: the warm-up checkpoint"):
        base_path = ensure_base(protocol, results_dir, splits["warmup"], device, out, progress)
    for line in base_identity_lines(protocol, records.sha256_file(base_path)):
        out(line)
    with timing.timed(out, "[freeze] stage 3/5 pilot: measuring the protocol on its calibration split"):
        piloted = pilot.ensure_pilot(protocol, results_dir, splits, base_path, device, out, jobs)  # refuses a miscalibrated protocol

    pool.hide(results_dir)  # the materialised sets and their answers are there now
    with timing.timed(out, f"[freeze] stage 4/5 base evaluation: greedy on {len(splits['probe'])} probes, once for every run"), \
            timing.heartbeat(out, "[freeze] base evaluation"):
        scored = write_base_eval(protocol, results_dir, splits["probe"], base_path, device, speed)
    passed = [int(c) for c in scored["eval"]["probe_passed"]]
    base_rate = scored["eval"]["probe_pass_rate"]
    lo, hi = protocol.model.base_pass_range
    out(f"[freeze] base probe pass rate: {base_rate:.3f} ({sum(passed)}/{len(passed)}); registered range [{lo}, {hi}]")
    if not lo <= base_rate <= hi:
        out("!" * 78 + f"\n!! WARNING: the base's probe pass rate {base_rate:.3f} is outside the registered range "
            f"[{lo}, {hi}].\n!! At the floor or the ceiling every arm ties and the experiment says nothing.\n" + "!" * 78)
    with timing.timed(out, "[freeze] stage 5/5 design analysis: simulating the decision rule"), \
            timing.heartbeat(out, "[freeze] design analysis"):
        report = power_report(protocol, piloted)
    for line in report["lines"]:
        out(f"[freeze] {line}")
    if report["underpowered"]:
        out("!" * 78 + "\n" + "\n".join(f"!! WARNING: {w}" for w in report["underpowered"]) + "\n" + "!" * 78)
    check_registration(protocol, report, out)

    summary = {"base_pass_rate": base_rate, "base_sha256": records.sha256_file(base_path), "power": report}
    records.atomic_write_text(paths.freeze_summary_path(results_dir, name), records.canonical_json(summary) + "\n")
    prereg_path = paths.frozen_dir(results_dir, name) / paths.PREREG_NAME
    records.atomic_write_text(prereg_path, prereg.preregistration(protocol, report, piloted, base_rate))
    records.open_to_readers(prereg_path, results_dir)  # a document for readers, like the readout
    meta = {"protocol": name, "python": sys.version.split()[0], "torch": torch.__version__,
            "environment": lock.environment(device)}  # informational: audit names what differs from it
    locked = lock.write_lock(lock_path, lock_entries(protocol, results_dir), meta)
    out(f"[freeze] lock written: {lock_path} (lock hash {locked['lock_hash'][:16]})")
    return {"lock": locked, **summary}


def base_identity_lines(protocol: Protocol, sha256: str) -> list[str]:
    """What freeze prints about the base it built (sha256, hex) against model.yaml's `sized_on_base`: one
    line when it is that base, a loud warning when it is another (the registration's figures, measured on
    the named base, are then another base's), nothing when no base is named."""
    named = protocol.model.sized_on_base
    if named is None:
        return []
    if sha256.startswith(named):
        return [f"[freeze] base sha256 {sha256[:12]}: the base this registration was sized on (model.yaml sized_on_base)"]
    return ["!" * 78, f"!! WARNING: this freeze built base sha256 {sha256[:12]}, not the base the registration was sized on "
            f"({named[:12]}, {protocol.dir / 'model.yaml'} sized_on_base).",
            "!! Another recipe, warm-up split (probe count, task seed, split sizes), kernel path or torch builds another "
            "base, and every figure the protocol states about its base (pilot, design table, base spread) is that "
            "base's, not this one's: re-measure them (make pilot, tools.design_grid) before trusting the registration.",
            "!" * 78]


class RegistrationError(HarnessError):
    """The design misses the registered power and the protocol states no reason to register it anyway."""


def check_registration(protocol: Protocol, report: dict, out=print) -> None:
    """Refuse (RegistrationError, one line with the figures) a design whose P(keep_both | sesoi), positive
    control or joint probability, designed or pessimistic, is below decision.yaml's power, or whose
    positive control gained less than the sesoi over the base in the pilot (calibration split), unless
    decision.yaml states `underpowered_override`; then the reason goes into the report (and so into
    PREREGISTRATION.md and the readout's headline) and is printed."""
    short = report["registration"]["shortfalls"]
    if not short:
        return
    reason = protocol.decision.underpowered_override
    where = protocol.dir / "decision.yaml"
    if reason is None:
        raise RegistrationError(f"freeze {protocol.name}: the design misses the registered power "
                                f"{protocol.decision.power}: {'; '.join(short)}; enlarge it (python -m tools.design_grid "
                                f"--protocol {protocol.name}), give the positive control a training budget that reaches "
                                f"the sesoi in the pilot (arms.yaml), or state why it is registered anyway in {where} "
                                f"(underpowered_override: <reason>)")
    out(f"[freeze] registered below the power {protocol.decision.power} by the stated override in {where}: "
        f"{'; '.join(short)}. Reason: {reason}")


def power_report(protocol: Protocol, pilot: dict | None = None) -> dict:
    """The design analysis (harness.stats.power) at the protocol's registered size: the simulated
    operating characteristic of the decision rule and of C's confirm gate. Variance components
    come from `pilot` (pilot.json's dict; else protocols/<name>/pilot.json when present) or, failing
    both, from the registered assumptions, which the lines and warnings flag loudly."""
    if pilot is None:
        pilot = find_pilot(protocol)
    vc = VarianceComponents.from_pilot(pilot) if pilot is not None else None
    result = protocol_design(protocol, vc)
    gains = [f"positive control: {line}" for g in control_gains(protocol, pilot)
             for line in [control_gain_line(g), *(control_margin_line(g, s) for s in g["short"])]]
    return {"design": result.to_dict(), "design_summary": design_summary(result),
            "lines": gains + words.design_lines(result), "underpowered": result.warnings,
            "registration": registration(protocol, result, pilot)}

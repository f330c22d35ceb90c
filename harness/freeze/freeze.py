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
from harness.learning import numerics
from harness.learning.sizes import SIZES
from harness.readout import prereg, words
from harness.readout.design import (control_gain_line, control_gains, control_margin_line, find_pilot, protocol_design,
                                    registration, unexcused)
from harness.sandbox import pool
from harness.spec import deviations, lock
from harness.spec.frozen import lock_entries, verify_frozen
from harness.spec.protocol import Override, Protocol, load_protocol
from harness.stats.design.model import VarianceComponents
from harness.stats.design.summary import FIGURE_DIGITS, design_summary


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
        log_other_base(protocol, results_dir, summary["power"].get("registration") or {})  # a freeze killed before it
        return {"lock": locked, **summary}
    if device == "cpu":  # before anything is computed: the host's numerics, checked by every later process
        fp = numerics.freeze_fingerprint(results_dir, name, SIZES[protocol.model.size], protocol.model.size,
                                         [protocol.model.run_threads, protocol.model.base.torch_threads], out)
        for line in numerics_identity_lines(protocol, fp):  # another host's numerics: refused here, as another
            out(line)                                        # base would be, unless on_other_base says otherwise
    with timing.timed(out, "[freeze] stage 1/5 sets: materialising the splits"):
        splits = materialise_sets(protocol, results_dir, out)
    with timing.timed(out, "[freeze] stage 2/5 base: the warm-up checkpoint"):
        base_path = ensure_base(protocol, results_dir, splits["warmup"], device, out, progress)
    base_sha = records.sha256_file(base_path)
    for line in base_identity_lines(protocol, base_sha):  # another base: refused here, before the pilot, unless
        out(line)                                           # model.yaml's on_other_base says what to do
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
        report = power_report(protocol, piloted, {"sha256": base_sha, "pass_rate": base_rate})
    for line in report["lines"]:
        out(f"[freeze] {line}")
    if report["underpowered"]:
        out("!" * 78 + "\n" + "\n".join(f"!! WARNING: {w}" for w in report["underpowered"]) + "\n" + "!" * 78)
    check_registration(protocol, report, out)

    summary = {"base_pass_rate": base_rate, "base_sha256": base_sha, "power": report}
    records.atomic_write_text(paths.freeze_summary_path(results_dir, name), records.canonical_json(summary) + "\n")
    prereg_path = paths.frozen_dir(results_dir, name) / paths.PREREG_NAME
    records.atomic_write_text(prereg_path, prereg.preregistration(protocol, report, piloted, base_rate))
    records.open_to_readers(prereg_path, results_dir)  # a document for readers, like the readout
    meta = {"protocol": name, "python": sys.version.split()[0], "torch": torch.__version__,
            "environment": lock.environment(device),  # informational: audit names what differs from it
            "registration": lock_registration(report["registration"])}  # hashed too: freeze.json holds it
    locked = lock.write_lock(lock_path, lock_entries(protocol, results_dir), meta)
    out(f"[freeze] lock written: {lock_path} (lock hash {locked['lock_hash'][:16]})")
    log_other_base(protocol, results_dir, report["registration"], out)
    return {"lock": locked, **summary}


class RegistrationError(HarnessError):
    """A registration that does not hold as frozen: freeze built another base than the one it was sized
    on, or the design misses the registered power and no underpowered_override names those figures on
    this base."""


def base_identity_lines(protocol: Protocol, sha256: str) -> list[str]:
    """What freeze prints about the base it built (sha256, hex) against model.yaml's `sized_on_base`, right
    after building it and before the pilot: one line when it is that base or none is named. Another base is a
    registration event, handled as model.yaml's `on_other_base` registers:
        refuse     (the default) RegistrationError, one line naming both sha256: nothing is measured on it
        resize     loud lines, and freeze goes on to measure this base (the pilot, the design analysis);
                   check_registration then refuses, printing the registration to write for it: model.yaml's
                   sized_on_base and, where the design misses the power, the override with this base's
                   figures. Neither key enters the base's recipe or the pilot's inputs, so the freeze after
                   they are written reuses this base and its pilot, and locks the new registration
        deviation  loud lines, and freeze goes on and locks: the experiment runs on this base as a deviation
                   from the registration, logged in DEVIATIONS.jsonl with both sha256 (`log_other_base`),
                   and every output names both bases"""
    named = protocol.model.sized_on_base
    if named is None:
        return [f"[freeze] base sha256 {sha256[:12]}; model.yaml names no base this registration was sized on "
                "(sized_on_base: null)"]
    if sha256.startswith(named):
        return [f"[freeze] base sha256 {sha256[:12]}: the base this registration was sized on (model.yaml sized_on_base)"]
    where, mode = protocol.dir / "model.yaml", protocol.model.on_other_base
    if mode == "refuse":
        raise RegistrationError(
            f"freeze {protocol.name}: this host built base sha256 {sha256}, not the base the registration was sized on, "
            f"sha256 {named} ({where} sized_on_base); every figure the registration states was measured on that base, so "
            f"freeze stops before the pilot (on_other_base: refuse, the default): freeze on a host that builds "
            f"{named[:12]}, or register this base in {where} with on_other_base: resize (freeze measures it and prints "
            f"the registration to write) or on_other_base: deviation (the experiment runs on it, logged as a deviation)")
    head = (f"!! this freeze built base sha256 {sha256[:12]}, not the base the registration was sized on "
            f"({named[:12]}, {where} sized_on_base).")
    if mode == "resize":
        body = ("!! on_other_base: resize: the pilot and the design analysis are measured on this base; then freeze "
                "prints the registration to write for it and locks nothing until model.yaml names this base.")
    else:
        body = ("!! WARNING: on_other_base: deviation: the experiment runs on this base as a deviation from the "
                "registration, logged in DEVIATIONS.jsonl with both sha256. The figures the protocol itself states (its "
                "override's figures and reason, the base spread, the design tables its comments quote) are base "
                f"{named[:12]}'s; the pilot and the design analysis this freeze runs are this base's own.")
    return ["!" * 78, head, body, "!" * 78]


REGISTERED_NUMERICS = "sized_on_numerics.json"  # in a protocol's folder: the fingerprint of the host it was sized on


def numerics_identity_lines(protocol: Protocol, fp: numerics.Fingerprint) -> list[str]:
    """This host's numerics fingerprint against the one the registration was sized on (the protocol's
    sized_on_numerics.json, frozen/numerics.json of the freeze that sized it), before anything is built:
    a host whose fingerprint differs builds another base than sized_on_base, so it meets model.yaml's
    on_other_base here, minutes earlier: refuse (NumericsError, one line naming the first differing
    component and both CPUs), or loud lines and freeze goes on (resize, deviation: the base check decides).
    One line when they agree; nothing when the protocol registers none."""
    path = protocol.dir / REGISTERED_NUMERICS
    if not path.exists():
        return []
    try:
        sized = numerics.Fingerprint.from_dict(json.loads(path.read_text()), str(path))
    except ValueError as e:
        raise numerics.NumericsError(f"{path}: cannot be read as JSON ({e!s:.120})") from None
    for t in sorted(fp.by_threads, key=int):
        first = numerics.first_difference(sized.by_threads.get(t, {}), fp.by_threads[t])
        if first is None:
            continue
        account = (f"this host ({fp.cpu}) computes other bytes than the host the registration was sized on "
                   f"({sized.cpu}, {path.name}): they part first at {first}, {t} thread(s)")
        if protocol.model.on_other_base == "refuse":
            raise numerics.NumericsError(
                f"freeze {protocol.name}: {account}, so this host would build another base than sized_on_base; freeze "
                f"stops before building it (model.yaml on_other_base: refuse): freeze on a host whose fingerprint "
                f"matches (docs/reproducibility.md)")
        return ["!" * 78, f"!! WARNING: {account}: this host will build another base than sized_on_base "
                f"(model.yaml on_other_base: {protocol.model.on_other_base}).", "!" * 78]
    return [f"[freeze] numerics: this host computes the same bytes as the host the registration was sized on "
            f"({sized.cpu}, {path.name})"]


def check_registration(protocol: Protocol, report: dict, out=print) -> None:
    """Hold the registration to the figures it was sized with (report["registration"]:
    harness.readout.design.registration). Refuse (RegistrationError, one line), after printing the YAML to
    write, when
      - freeze measured another base under on_other_base: resize (the registration for this base: model.yaml
        sized_on_base, and the override with its figures when the design misses the power);
      - the design misses the registered power (P(keep_both | sesoi), the positive control's check or their
        joint probability, designed or pessimistic, below decision.yaml's power; a positive control that
        gained less than the sesoi over the base, or led an arm of its check by less than its margin, in the
        pilot) and decision.yaml's underpowered_override does not name those figures, at those values or
        better, on this base (harness.readout.design.unexcused).
    An override that excuses them is printed with its reason (PREREGISTRATION.md and the readout repeat
    both). On another base under on_other_base: deviation nothing is refused: what the override (about the
    base it was sized on) does not excuse here is printed and logged with the deviation."""
    reg = report["registration"]
    figures, texts = reg.get("figures") or [], reg["shortfalls"]
    built = (reg.get("base") or {}).get("sha256")
    decision, model = protocol.dir / "decision.yaml", protocol.dir / "model.yaml"
    override, power = protocol.decision.underpowered_override, protocol.decision.power
    if reg.get("other_base") and protocol.model.on_other_base == "resize":
        out(f"[freeze] the registration to write for base {built[:12]} (on_other_base: resize), in {model}:")
        out(f"sized_on_base: {built}")
        if figures:
            _print_override(protocol, figures, built, out)
        raise RegistrationError(
            f"freeze {protocol.name}: measured on base sha256 {built}, not the base the registration was sized on "
            f"({protocol.model.sized_on_base}); on_other_base: resize: write the registration printed above for this "
            f"base (model.yaml sized_on_base" + (f", and decision.yaml underpowered_override with its figures: "
                                                 f"{'; '.join(texts)}" if figures else "")
            + ") and freeze again: this base and its pilot are reused")
    if not figures:
        return
    problems = reg.get("unexcused")
    if problems is None:  # a report made without the base
        problems = unexcused(override, figures, built)
    if reg.get("other_base"):  # on_other_base: deviation (refuse stopped before the pilot, resize above)
        out("!" * 78 + f"\n!! WARNING: registered below the power {power} on base {built[:12]}, as a deviation: "
            f"{'; '.join(texts)}" + (f"\n!! the override, written for base {protocol.model.sized_on_base[:12]}, does "
                                     f"not excuse here: {'; '.join(problems)}" if problems else "")
            + "\n" + "!" * 78)
        return
    if problems:
        _print_override(protocol, figures, built, out)
        raise RegistrationError(
            f"freeze {protocol.name}: the design misses the registered power {power}: {'; '.join(texts)}; "
            f"{'; '.join(problems)}; to register it anyway write the underpowered_override printed above into "
            f"{decision} (a reason about these figures, on this base), else enlarge it (python -m tools.design_grid "
            f"--protocol {protocol.name}) or give the positive control a training budget that reaches the sesoi in "
            f"the pilot (arms.yaml)")
    excused = ("which excuses any shortfall on any base (a protocol not sized to decide anything)" if override.excuses_any
               else f"which names these figures on this base ({override.sized_on_base[:12]})")
    out(f"[freeze] registered below the power {power} by the stated override in {decision}, {excused}: "
        f"{'; '.join(texts)}. Reason: {override.reason}")


def override_yaml(figures: list[dict], built: str | None, reason: str) -> list[str]:
    """decision.yaml's underpowered_override naming `figures` ([{name, value, text}], values as freeze
    prints them) on base `built`, with `reason`, as lines to paste (YAML; each figure's sentence as a comment)."""
    lines = ["underpowered_override:", f"  reason: {json.dumps(reason)}", f"  sized_on_base: {built or '<sha256>'}",
             "  shortfalls:"]
    for f in figures:
        value = "null" if f["value"] is None else f"{f['value']:.{FIGURE_DIGITS}f}"
        lines.append(f"    {f['name']}: {value}  # {f['text'].split(' (')[0]}")
    return lines


def _print_override(protocol: Protocol, figures: list[dict], built: str | None, out) -> None:
    """Print the underpowered_override that would register `figures` on base `built`, keeping the stated
    reason when it was written for this base (else a placeholder: a reason is about its own figures)."""
    override = protocol.decision.underpowered_override
    same = isinstance(override, Override) and not override.excuses_any and bool(built) \
        and built.startswith(override.sized_on_base)
    reason = override.reason if same else (
        f"<why this design is registered below the power {protocol.decision.power}, about these figures on base "
        f"{(built or '?')[:12]}>")
    out(f"[freeze] the underpowered_override that registers these figures on this base, to write into "
        f"{protocol.dir / 'decision.yaml'} in place of the one there:")
    for line in override_yaml(figures, built, reason):
        out(line)


def lock_registration(reg: dict) -> dict:
    """What the lock's meta states of the registration (freeze.json, which the lock hashes, holds it in full):
    the base built, the base it was sized on, the shortfalls {name: value} and the override that excused them."""
    return {"base_sha256": (reg.get("base") or {}).get("sha256"), "sized_on_base": reg.get("sized_on_base"),
            "on_other_base": reg.get("on_other_base"),
            "shortfalls": {f["name"]: f["value"] for f in reg.get("figures") or []},
            "override": None if reg.get("override") is None else {
                "reason": reg["override"], "shortfalls": reg.get("override_figures"), "sized_on_base": reg.get("override_base")}}


def log_other_base(protocol: Protocol, results_dir: Path, reg: dict, out=None) -> None:
    """Under on_other_base: deviation, log (once) in DEVIATIONS.jsonl that this protocol was frozen on another
    base than the one its registration was sized on (harness.spec.deviations.record_other_base)."""
    built = (reg.get("base") or {}).get("sha256")
    if not (reg.get("other_base") and protocol.model.on_other_base == "deviation" and built):
        return
    entry = deviations.record_other_base(protocol, results_dir, built, protocol.model.sized_on_base,
                                         reg.get("unexcused") or [])
    if entry is not None and out is not None:
        out(f"[freeze] deviation logged in {deviations.deviations_path(results_dir, protocol.name)}: {entry['what']}")


def power_report(protocol: Protocol, pilot: dict | None = None, base: dict | None = None) -> dict:
    """The design analysis (harness.stats.power) at the protocol's registered size: the simulated
    operating characteristic of the decision rule and of C's confirm gate. Variance components
    come from `pilot` (pilot.json's dict; else protocols/<name>/pilot.json when present) or, failing
    both, from the registered assumptions, which the lines and warnings flag loudly. `base`: the base
    freeze built ({"sha256", "pass_rate"}), which the registration's figures are measured on."""
    if pilot is None:
        pilot = find_pilot(protocol)
    vc = VarianceComponents.from_pilot(pilot) if pilot is not None else None
    result = protocol_design(protocol, vc)
    gains = [f"positive control: {line}" for g in control_gains(protocol, pilot)
             for line in [control_gain_line(g), *(control_margin_line(g, s) for s in g["short"])]]
    return {"design": result.to_dict(), "design_summary": design_summary(result),
            "lines": gains + words.design_lines(result), "underpowered": result.warnings,
            "registration": registration(protocol, result, pilot, base)}

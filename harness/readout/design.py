"""The design analysis of a protocol: its decision rule, control checks and C's gate simulated at the
registered size (harness.stats.power), with variance components from the pilot (pilot.json) or, failing
one, the registered assumptions. Freeze prints it; the readout repeats it at the observed components."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.core import paths
from harness.readout.verdict import Design
from harness.spec.kinds import arms_with_role
from harness.spec.protocol import Override, override_reason
from harness.stats.decision import decision_spec
from harness.stats.units import pts
from harness.stats.design.records import DesignAnalysis
from harness.stats.design.model import VarianceComponents
from harness.stats.design.summary import Shortfall, figure_value, registration_figures
from harness.stats.power import DesignSettings, design_analysis, validate_design

PILOT_NAME = "pilot.json"


def control_checks_of(protocol) -> list[dict]:
    """The protocol's registered control checks as the design simulates them: one entry per control
    arm, {role: "positive" | "negative", arm, versus: [names], margin} (arms.yaml `check`)."""
    out = []
    for role, key in (("positive_control", "must_beat"), ("negative_control", "must_not_beat")):
        for arm in arms_with_role(protocol, role):
            check = protocol.arms[arm].check
            out.append({"role": role.split("_")[0], "arm": arm, "versus": list(getattr(check, key)),
                        "margin": float(check.margin)})
    return out


def find_pilot(protocol, results_dir=None) -> dict | None:
    """The pilot as a dict, or None: protocols/<name>/pilot.json (a protocol file: the lock hashes
    it), else <results>/<name>/frozen/pilot.json when results_dir is given."""
    paths = [protocol.dir / PILOT_NAME]
    if results_dir is not None:
        paths.append(Path(results_dir) / protocol.name / "frozen" / PILOT_NAME)
    for path in paths:
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except ValueError as err:
                raise ValueError(f"{path}: not valid JSON ({err})") from None
    return None


def protocol_design(protocol, components: VarianceComponents | None = None) -> DesignAnalysis:
    """The design analysis of a protocol at its registered size; components default to the
    registered assumptions."""
    design = DesignSettings.of(validate_design(protocol.decision.design))
    vc = components or VarianceComponents.from_moments(design.assumed, "assumed", "decision.yaml design.assumed")
    return design_analysis(decision_spec(protocol), design, vc, protocol.tasks.probe.size,
                           len(protocol.run_seeds), gate=protocol.gates.confirm,
                           n_confirm=protocol.tasks.confirm.per_round, control_checks=control_checks_of(protocol))


def frozen_base(results_dir, name: str) -> dict | None:
    """The base freeze built and scored, from frozen/base_eval.json: {"sha256", "pass_rate" (on the
    probes, fraction)}; None when there is none (a tree freeze did not write)."""
    path = paths.base_eval_path(Path(results_dir), name)
    if not path.is_file():
        return None
    scored = json.loads(path.read_text())
    return {"sha256": scored["base_sha256"], "pass_rate": scored["eval"]["probe_pass_rate"]}


def readout_design(protocol, items: pd.DataFrame, results_dir=None) -> Design:
    """The readout's two design analyses: `designed` (what freeze computed: the pilot's components,
    else the registered assumptions) and `observed` (the same at the variance components this
    experiment showed, the base at its own probe pass rate (frozen/base_eval.json): what it could have
    detected). `observed` holds only its `error` when the outcomes cannot give components (fewer than 2
    seeds, a missing arm)."""
    pilot = find_pilot(protocol, results_dir)
    designed = protocol_design(protocol, VarianceComponents.from_pilot(pilot) if pilot is not None else None)
    base = frozen_base(results_dir, protocol.name) if results_dir is not None else None
    try:
        vc = VarianceComponents.from_items(items, None if base is None else base["pass_rate"])
        observed = protocol_design(protocol, vc)
    except ValueError as err:  # outcomes no model can be fitted to: stated, never a crash of the readout
        observed = DesignAnalysis(error=f"no observed design analysis: {err}")
    return Design(designed=designed, observed=observed)


def control_gains(protocol, pilot: dict | None) -> list[dict]:
    """Each registered positive control's gain over the base in the pilot (calibration split, mean over
    the pilot's seeds, after its last round): [{arm, gain, round, seeds, sesoi, below_sesoi, short}]; []
    without a pilot or a positive control. A control the pilot did not run has gain None (below_sesoi
    True). `short`: each arm of its check's must_beat (not the base, which the sesoi already bounds) that
    it led in the pilot by less than the check's margin, [{arm, gap, margin}], gaps in pass-rate points."""
    if not pilot:
        return []
    sesoi, arms, out = float(protocol.decision.sesoi), pilot.get("arms") or {}, []
    for arm in arms_with_role(protocol, "positive_control"):
        a, check = arms.get(arm), protocol.arms[arm].check
        gain = None if a is None else float(a["vs_base"])
        short = [] if a is None else [
            {"arm": x, "gap": a["pass_rate_mean"] - arms[x]["pass_rate_mean"], "margin": float(check.margin)}
            for x in check.must_beat if x in arms and a["pass_rate_mean"] - arms[x]["pass_rate_mean"] < check.margin]
        out.append({"arm": arm, "gain": gain, "round": None if a is None else a["round"],
                    "seeds": 0 if a is None else len(a["seeds"]), "sesoi": sesoi,
                    "below_sesoi": gain is None or gain < sesoi, "short": short})
    return out


def control_gain_line(g: dict) -> str:
    """One positive control's pilot gain beside the sesoi, in points."""
    if g["gain"] is None:
        return f"the pilot did not run the positive control {g['arm']}: its gain over the base on the calibration split is unknown"
    return (f"pilot {g['arm']} - base on the calibration split {pts(g['gain'])} (after round {g['round']}, "
            f"mean of {g['seeds']} seeds), {'below' if g['below_sesoi'] else 'at least'} the sesoi {pts(g['sesoi'], signed=False)}")


def control_margin_line(g: dict, s: dict) -> str:
    """A positive control that led an arm of its check by less than the check's margin in the pilot."""
    return (f"pilot {g['arm']} - {s['arm']} on the calibration split {pts(s['gap'])} (after round {g['round']}, mean "
            f"of {g['seeds']} seeds), below its check's margin {pts(s['margin'], signed=False)}: the registered "
            f"check that {g['arm']} beats {s['arm']} is more likely to fail than the design's positive-control "
            f"power says")


def pilot_figures(protocol, pilot: dict | None) -> list[Shortfall]:
    """The pilot's positive-control shortfalls (`control_gains`) as registration figures: "pilot.<arm>-base"
    (its gain over the base, below the sesoi) and "pilot.<arm>-<versus>" (its lead, below its check's
    margin), each valued in pass-rate fractions as freeze prints them."""
    out = []
    for g in control_gains(protocol, pilot):
        if g["below_sesoi"]:
            out.append(Shortfall(f"pilot.{g['arm']}-base", figure_value(g["gain"]), g["sesoi"], control_gain_line(g)))
        out += [Shortfall(f"pilot.{g['arm']}-{s['arm']}", figure_value(s["gap"]), s["margin"], control_margin_line(g, s))
                for s in g["short"]]
    return out


def unexcused(override, figures: list[dict], built: str | None) -> list[str]:
    """What decision.yaml's underpowered_override (`override`: Override, an older protocol's reason alone,
    or None) does not excuse of the shortfalls `figures` ([{name, value, text}]) found on base `built`
    (sha256; None: unknown, not compared): no override; a reason that names no figures; figures named on
    another base; a shortfall it does not name (a new one); a value worse than the one it names (values
    compared as freeze prints them, FIGURE_DIGITS decimals). [] when it excuses every one, or there is
    none; an override whose shortfalls are "any" excuses every one on any base."""
    if not figures:
        return []
    if override is None:
        return ["decision.yaml states no underpowered_override"]
    if not isinstance(override, Override):
        return ["the underpowered_override states a reason but names no figures it excuses, nor the base they were "
                "measured on"]
    if override.excuses_any:
        return []
    out = []
    if built and not built.startswith(override.sized_on_base):
        out.append(f"they were measured on base {built[:12]}, and the override names its figures on base "
                   f"{override.sized_on_base[:12]}")
    for f in figures:
        if f["name"] not in override.shortfalls:
            out.append(f"{f['text']}: a shortfall the override does not name ({f['name']})")
            continue
        named, found = figure_value(override.shortfalls[f["name"]]), f["value"]
        if named is None or found is None:
            if named is not found:
                out.append(f"{f['text']}: the override names {f['name']} {named}, found {found}")
        elif found < named:
            out.append(f"{f['text']}: worse than the {named:.3f} the override names ({f['name']})")
    return out


def registration(protocol, designed: DesignAnalysis, pilot: dict | None, base: dict | None = None) -> dict:
    """What freeze refuses unless decision.yaml states an `underpowered_override` that names these figures
    on this base, and the readout repeats: the design's shortfalls against the registered power
    (harness.stats.design.summary's registration_figures) and every positive control whose pilot gain
    over the base is below the sesoi (such a control cannot show an effect of the size the rule asks
    about) or whose pilot lead over an arm of its check is below the check's margin (`pilot_figures`).
    `base`: the base freeze built ({"sha256", "pass_rate"}, `frozen_base`), None when unknown. Returns
        shortfalls       the sentences, in order
        figures          [{name, value, bound, text}] (Shortfall)
        override         the override's stated reason, or None
        override_figures the figures it names {name: value}, "any", or None (none, or a reason alone)
        override_base    the base sha256 (or prefix) it names them on, or None
        base             `base`
        sized_on_base    model.yaml's sized_on_base (None: none named)
        on_other_base    model.yaml's on_other_base
        other_base       True when the built base is not sized_on_base (None: either unknown)
        unexcused        what the override does not excuse of these figures on this base (`unexcused`)"""
    figures = registration_figures(designed) + pilot_figures(protocol, pilot)
    override, named = protocol.decision.underpowered_override, protocol.model.sized_on_base
    built = (base or {}).get("sha256")
    return {"shortfalls": [f.text for f in figures], "figures": [f.to_dict() for f in figures],
            "override": override_reason(override),
            "override_figures": override.shortfalls if isinstance(override, Override) else None,
            "override_base": override.sized_on_base if isinstance(override, Override) else None,
            "base": base, "sized_on_base": named, "on_other_base": protocol.model.on_other_base,
            "other_base": None if built is None or named is None else not built.startswith(named),
            "unexcused": unexcused(override, [f.to_dict() for f in figures], built)}

"""The readout of a verdict about the recipe: every registered arm x seed on each base read, the
sequential plan's looks, and one sealed readout (harness.stats.recipe is the statistics).

    load_bases   every sealed run of bases 1..K verified (harness.readout.analyzer.load_run, against its
                 base's lock, which names the registration's) -> outcomes (K, seeds, probes) per arm
    take_look    the plan read on the bases so far, recorded once in looks.jsonl (chained)
    readout      the verdict at the look the plan stopped: each contrast's recipe-level test, every base's
                 own label beside it (label stability), the outlier rule, the controls about the recipe,
                 the base spread; verdict.json and report.md, sealed under results/<protocol>/readout/

The controls are read about the recipe too: a positive control passes when the one-sided (1 -
control_alpha) lower bound of its recipe-level gap over each arm it must beat (or the base) clears its
margin, so at exactly the margin it passes with probability control_alpha; a negative control fails when
its gap over the arm it must not beat is `supported` beyond its margin at the verdict's level.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.core import paths, records
from harness.core.errors import HarnessError
from harness.readout.analyzer import load_run
from harness.readout.controls import INSENSITIVE, NEGATIVE_FAILED
from harness.spec import provenance
from harness.spec.frozen import code_version, load_base_eval, verify_frozen
from harness.spec.protocol import Protocol, load_protocol
from harness.spec.recipe import base_tree, read_plan, verify_registration
from harness.stats import recipe as rs

BASE = "base"  # the frozen base as a comparison arm (one "seed": its one evaluation)
VERDICT_NAME, REPORT_NAME = "verdict.json", "report.md"


class RecipeReadoutError(HarnessError):
    """A recipe protocol's runs or looks that cannot be read out (missing, unsealed, of another registration)."""


@dataclass(frozen=True)
class Bases:
    """What the runs of K bases hold. ids: base labels in registered order; outcomes: arm (and BASE) ->
    (K, seeds, n) 0/1 final-round probe outcomes; frozen: each base's freeze.json."""
    ids: list
    outcomes: dict
    frozen: list


def load_bases(protocol: Protocol, results_dir: Path, n_bases: int) -> Bases:
    """Every registered arm x seed of bases 1..n_bases, each run verified against its base's lock, each
    base's lock against the registration's (RecipeReadoutError naming the base, arm and seed)."""
    reg = verify_registration(protocol, results_dir)
    code, n = code_version(), protocol.tasks.probe.size
    ids, frozen, per_arm = [], [], {a: [] for a in [*protocol.arm_names, BASE]}
    for k in range(1, n_bases + 1):
        tree = base_tree(protocol, results_dir, k)
        lock = verify_frozen(protocol, tree)
        label = protocol.seeds.bases.draw(k).label
        if lock["meta"].get("registration_lock_hash") != reg["lock_hash"]:
            raise RecipeReadoutError(f"base {label} ({tree}): its lock names registration {lock['meta'].get('registration_lock_hash')}, "
                                     f"not this one ({reg['lock_hash']})")
        for arm in protocol.arm_names:
            rows = []
            for seed in protocol.run_seeds:
                if not records.is_sealed(paths.run_dir(tree, protocol.name, arm, seed)):
                    raise RecipeReadoutError(f"base {label}: run {arm} seed {seed} is not sealed "
                                             f"({paths.run_dir(tree, protocol.name, arm, seed)})")
                run = load_run(protocol, tree, arm, seed, lock["lock_hash"], n, code)
                rows.append([int(c) for c in run.rounds[-1].eval.probe_passed])
            per_arm[arm].append(rows)
        # the base's one evaluation, which load_run checked every start record against
        per_arm[BASE].append([[int(c) for c in load_base_eval(tree, protocol.name)["eval"]["probe_passed"]]])
        ids.append(label)
        frozen.append(json.loads(paths.freeze_summary_path(tree, protocol.name).read_text()))
    return Bases(ids, {a: np.asarray(v, dtype=np.int64) for a, v in per_arm.items()}, frozen)


def summaries(protocol: Protocol, bases: Bases) -> dict[str, rs.BaseSummary]:
    """Each decision contrast's per-base summary ("B-A": ...), registered order."""
    return {f"{hi}-{lo}": rs.base_summary(bases.outcomes[hi], bases.outcomes[lo]) for hi, lo in protocol.decision.contrasts}


def take_look(protocol: Protocol, results_dir: Path, n_bases: int) -> rs.SequentialVerdict:
    """The plan read on bases 1..n_bases (a registered look), recorded in looks.jsonl unless that look is
    there already (then it must read the same: RecipeReadoutError otherwise)."""
    plan = rs.obf_plan(protocol.decision.recipe.looks, protocol.decision.alpha)
    bases = load_bases(protocol, results_dir, n_bases)
    seq = rs.sequential_verdict(plan, summaries(protocol, bases), protocol.decision.sesoi)
    log = records.RecordLog(paths.looks_path(results_dir, protocol.name))
    entry = {"look": len(seq.looks), "n_bases": n_bases, "bases": [f["base_sha256"] for f in bases.frozen],
             "labels": dict(seq.labels), "decided": seq.decided, "next_look": seq.next_look}
    seen = [r for r in log.records() if r.get("n_bases") == n_bases]
    if seen:
        if {k: seen[0].get(k) for k in entry} != entry:
            raise RecipeReadoutError(f"{log.path}: look at {n_bases} bases was recorded as {seen[0]}, and reads {entry} now")
    else:
        log.append(entry)
    return seq


def control_checks(protocol: Protocol, bases: Bases, n_bases: int, alpha: float) -> list[dict]:
    """Every registered control's check about the recipe on the first n_bases bases (module docstring)."""
    rule, sesoi, out = protocol.decision.recipe, protocol.decision.sesoi, []
    for arm_name, arm in sorted(protocol.arms.items()):
        if arm.check is None:
            continue
        for other in arm.check.must_beat:
            t = rs.recipe_test(rs.base_summary(bases.outcomes[arm_name][:n_bases], bases.outcomes[other][:n_bases]),
                               rule.control_alpha, sesoi, f"{arm_name}-{other}")
            out.append({"arm": arm_name, "kind": "must_beat", "other": other, "margin": arm.check.margin,
                        "level": rule.control_alpha, "test": t.to_dict(),
                        "passed": t.low is not None and t.low >= arm.check.margin})
        for other in arm.check.must_not_beat:
            t = rs.recipe_test(rs.base_summary(bases.outcomes[arm_name][:n_bases], bases.outcomes[other][:n_bases]),
                               alpha, sesoi, f"{arm_name}-{other}")
            out.append({"arm": arm_name, "kind": "must_not_beat", "other": other, "margin": arm.check.margin,
                        "level": alpha, "test": t.to_dict(),
                        "passed": not (t.low is not None and t.low > arm.check.margin)})
    return out


def final_outcome(rule_outcome: str, controls: list[dict], negative_override: str | None) -> tuple[str, list[str]]:
    """The verdict after the controls (harness.readout.controls' order: positive, then negative) and the
    warnings beside it."""
    failed = [c for c in controls if not c["passed"]]
    warnings = [f"{c['arm']} {'must beat' if c['kind'] == 'must_beat' else 'must not beat'} {c['other']} by "
                f"{c['margin']:g}: failed (gap {c['test']['gap']:+.4f}, bound {c['test']['low']})" for c in failed]
    if any(c["kind"] == "must_beat" for c in failed):
        return INSENSITIVE, warnings
    if failed and negative_override is None:
        return NEGATIVE_FAILED, warnings
    return rule_outcome, warnings


def base_rows(protocol: Protocol, bases: Bases, n_bases: int) -> list[dict]:
    """One row per base read: its seeds, sha256, pass rate, and each contrast's (and each control's) gap
    and the base's own label (rs.own_labels at the rule's alpha)."""
    dec = protocol.decision
    pairs = [(hi, lo) for hi, lo in dec.contrasts] + [
        (a, o) for a, arm in sorted(protocol.arms.items()) if arm.check for o in (*arm.check.must_beat, *arm.check.must_not_beat)]
    rows = [{"base": bases.ids[b], **bases.frozen[b]["base"], "sha256": bases.frozen[b]["base_sha256"],
             "base_pass_rate": bases.frozen[b]["base_pass_rate"]} for b in range(n_bases)]
    for hi, lo in pairs:
        s = rs.base_summary(bases.outcomes[hi][:n_bases], bases.outcomes[lo][:n_bases])
        for row, gap, lab in zip(rows, s.gaps, rs.own_labels(s, dec.alpha, dec.sesoi)):
            row[f"{hi}-{lo}"] = {"gap": float(gap), "own_label": lab}
    return rows


def spread(summary: rs.BaseSummary) -> dict:
    """The observed spread of the base gaps (fraction): SD over bases (ddof 1), min and max."""
    g = np.asarray(summary.gaps, dtype=np.float64)
    return {"sd": float(g.std(ddof=1)) if len(g) > 1 else None, "min": float(g.min()), "max": float(g.max())}


def compute(protocol: Protocol, results_dir: Path) -> dict:
    """The verdict about the recipe at the look the plan stopped (every look recorded in looks.jsonl)."""
    dec, rule = protocol.decision, protocol.decision.recipe
    log = records.RecordLog(paths.looks_path(results_dir, protocol.name)).records()
    stopped = [r for r in log if r["decided"]]
    if not stopped:
        raise RecipeReadoutError(f"{paths.looks_path(results_dir, protocol.name)}: no look decided yet "
                                 f"({[r['n_bases'] for r in log]} bases read); the plan reads {list(rule.looks)}: "
                                 f"`{paths.command_hint('experiment', protocol.name, results_dir)}` takes the next look")
    n_bases = stopped[0]["n_bases"]
    bases = load_bases(protocol, results_dir, n_bases)
    summ = summaries(protocol, bases)
    plan = rs.obf_plan(rule.looks, dec.alpha)
    verdict = rs.recipe_verdict(plan, summ, bases.ids, dec.sesoi, rule.outlier_alpha)
    seq = verdict.sequential
    level = seq.looks[-1].nominal
    controls = control_checks(protocol, bases, n_bases, level)
    outcome, warnings = final_outcome(seq.outcome, controls, dec.negative_control_override)
    rows = base_rows(protocol, bases, n_bases)
    stability = rs.label_stability({r["base"]: {c: r[c]["own_label"] for c in summ} for r in rows}, seq.labels)
    boot = protocol.raw["bootstrap.yaml"]
    return {
        "protocol": protocol.name, "question": "the recipe", "outcome": outcome, "rule_outcome": seq.outcome,
        "warnings": warnings, "stopped_at_look": len(seq.looks), "n_bases": n_bases, "looks": log,
        "plan": read_plan(results_dir, protocol.name)["plan"],
        "contrasts": {c: {**seq.looks[-1].tests[c].to_dict(), "base_spread": spread(s),
                          "multi_bootstrap": rs.multi_bootstrap(s.first(n_bases), level, int(boot["n_resamples"]),
                                                                int(boot["rng_seed"])).to_dict()}
                      for c, s in summ.items()},
        "sequential": seq.to_dict(), "outliers": None if verdict.outliers is None else verdict.outliers.to_dict(),
        "controls": controls, "bases": rows,
        "label_stability": {"table": stability.table.to_dict(orient="records"), "share": stability.share},
    }


def readout(protocol_name, results_dir, out=None) -> Path:
    """Compute, write and seal results/<protocol>/readout/ once (RecipeReadoutError when it exists)."""
    protocol = load_protocol(protocol_name)
    results_dir = Path(results_dir)
    target = paths.readout_dir(results_dir, protocol.name)
    if target.exists():
        raise RecipeReadoutError(f"{target} exists: the readout runs once and its verdict is sealed")
    verdict = compute(protocol, results_dir)
    reg = verify_registration(protocol, results_dir)
    tmp = Path(tempfile.mkdtemp(prefix=".readout-", suffix=".tmp", dir=target.parent))
    try:
        data = (records.canonical_json(verdict) + "\n").encode()
        records.atomic_write_bytes(tmp / VERDICT_NAME, data)
        records.atomic_write_text(tmp / REPORT_NAME, render_report(verdict))
        records.write_manifest(tmp, {"kind": "readout", "protocol": protocol.name, "lock_hash": reg["lock_hash"],
                                     "verdict_sha256": records.sha256_bytes(data), "provenance": provenance.current()})
        records.seal(tmp)
        for f in tmp.iterdir():
            os.chmod(f, 0o444)
        os.chmod(tmp, 0o755)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out is not None:
        for line in verdict_lines(verdict):
            out(f"[readout] {line}")
    return target


def _sd(x) -> str:
    """An SD in percentage points, one decimal, unsigned."""
    return "-" if x is None else f"{100 * x:.1f}"


def _pts(x, high: bool = False) -> str:
    """Percentage points, one decimal; a missing bound (None) is the infinite end it stands for."""
    return ("+inf" if high else "-inf") if x is None else f"{100 * x:+.1f}"


def verdict_lines(v: dict) -> list[str]:
    """The verdict in a few lines: outcome, the look, each contrast's recipe-level interval and the bases'
    labels."""
    lines = [f"verdict about the recipe: {v['outcome']} (the rule alone: {v['rule_outcome']}), decided at look "
             f"{v['stopped_at_look']} of {len(v['plan']['looks'])}, on {v['n_bases']} bases"]
    for c, t in v["contrasts"].items():
        share = v["label_stability"]["share"][c]
        lines.append(f"{c}: {_pts(t['gap'])} pts, one-sided {1 - t['alpha']:.4f} bounds [{_pts(t['low'])}, "
                     f"{_pts(t['high'], True)}] -> {t['label']}; base gaps SD {_sd(t['base_spread']['sd'])} pts; bases "
                     f"agreeing: {share[t['label']]:.0%}")
    lines += [f"WARNING: {w}" for w in v["warnings"]]
    return lines


def render_report(v: dict) -> str:
    """report.md: the verdict, the plan's looks, the recipe-level intervals, every base's gaps and own
    labels (label stability), the outlier rule and the controls."""
    cs = list(v["contrasts"])
    ctrl = [k for k in v["bases"][0] if "-" in k and k not in cs]
    out = [f"# {v['protocol']}: a verdict about the recipe", "", *[f"- {x}" for x in verdict_lines(v)], "",
           "## The plan's looks", "", "| look | bases | z boundary | each bound's one-sided level | labels | decided |",
           "|---|---|---|---|---|---|"]
    read = v["sequential"]["looks"]  # the plan as read at the readout: one entry per recorded look
    out += [f"| {r['look']} | {r['n_bases']} | {x['z_bound']:.3f} | {x['nominal']:.4f} | "
            f"{', '.join(f'{c} {lab}' for c, lab in r['labels'].items())} | {'yes' if r['decided'] else 'no'} |"
            for r, x in zip(v["looks"], read)]
    out += ["", "## The recipe's effect", "", "| contrast | gap (pts) | low | high | label | SD over bases | "
            "Multi-Bootstrap (sensitivity) |", "|---|---|---|---|---|---|---|"]
    for c, t in v["contrasts"].items():
        mb = t["multi_bootstrap"]
        out.append(f"| {c} | {_pts(t['gap'])} | {_pts(t['low'])} | {_pts(t['high'], True)} | {t['label']} | "
                   f"{_sd(t['base_spread']['sd'])} | [{_pts(mb['low'])}, {_pts(mb['high'], True)}] |")
    out += ["", "## Every base (its own label: its gap over its probes alone)", "",
            "| base | init | data order | sha256 | base pass | " + " | ".join(cs + ctrl) + " |",
            "|---|---|---|---|---|" + "---|" * len(cs + ctrl)]
    for r in v["bases"]:
        cells = [f"{_pts(r[c]['gap'])} {r[c]['own_label']}" for c in cs + ctrl]
        out.append(f"| {r['base']} | {r['init_seed']} | {r['data_order_seed']} | {r['sha256'][:12]} | "
                   f"{r['base_pass_rate']:.3f} | " + " | ".join(cells) + " |")
    out += ["", "Share of bases per label: " + "; ".join(
        f"{c}: " + ", ".join(f"{lab} {s:.0%}" for lab, s in v["label_stability"]["share"][c].items() if s)
        for c in cs), ""]
    o = v["outliers"]
    out += ["## Outlier bases", ""]
    if o is None:
        out.append("Fewer than 3 bases read: the outlier rule does not apply.")
    else:
        out.append(f"Critical |t| {o['critical']:.3f} (Bonferroni at {o['outlier_alpha']} over the bases). Flagged: "
                   f"{', '.join(o['flagged']) or 'none'}." + "".join(
                       f" Without {b}: {', '.join(f'{c} {lab}' for c, lab in labs.items())}."
                       for b, labs in o["without"].items()))
    out += ["", "## Controls about the recipe", "", "| control | check | margin | level | gap | low | passed |",
            "|---|---|---|---|---|---|---|"]
    for c in v["controls"]:
        t = c["test"]
        out.append(f"| {c['arm']} | {c['kind'].replace('_', ' ')} {c['other']} | {c['margin']:g} | {c['level']:.4g} | "
                   f"{_pts(t['gap'])} | {_pts(t['low'])} | {'yes' if c['passed'] else 'no'} |")
    return "\n".join(out) + "\n"

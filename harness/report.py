"""The readout's report (Markdown) and figures (matplotlib, Agg, PNG), drawn from verdict.json alone.

`render_report(verdict, figures) -> str` is a pure function of the verdict dict, so an audit that
recomputes the verdict reproduces report.md byte for byte. The figures carry no timestamp or
software tag, but PNG bytes depend on the matplotlib build and fonts, so they are informational.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

FIGURE_DPI = 100
PNG_METADATA = {"Software": None}  # no matplotlib version tag in the file
ARM_COLOURS = {"A": "tab:gray", "B": "tab:blue", "C": "tab:orange", "P": "tab:green", "N": "tab:purple",
               "D": "tab:brown"}
OUTCOME_ORDER = ("keep_both", "drop_heircommit", "loop_earns_nothing", "not_resolved")
MONITOR_LABELS = {
    "monitor_within_entropy": "within-input entropy (eval, bits)",
    "monitor_cross_mi": "cross-input MI (eval, bits)",
    "within_input_entropy": "within-input entropy (solver, bits)",
    "cross_input_mi": "cross-input MI (solver, bits)",
    "completion_entropy": "completion entropy (solver, bits)",
    "zero_spread_fraction": "zero-spread group fraction",
    "cross_round_duplicate_rate": "cross-round duplicate rate",
}


# ---------------------------------------------------------------- number formatting

def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _pts(x) -> str:
    """A pass-rate difference in percentage points, signed."""
    return "n/a" if x is None else f"{100 * x:+.1f} pts"


def _num(x, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"


def _ok(flag: bool) -> str:
    return "PASS" if flag else "FAIL"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


# ---------------------------------------------------------------- the report

def render_report(verdict: dict, figures: list[str]) -> str:
    """report.md text. `figures` are the figure file names beside the report."""
    a = verdict["analysis"]
    v = verdict["verdict"]
    out = [f"# Readout: protocol `{verdict['protocol']}`", "",
           f"**Verdict: `{v['outcome']}`.** {v['clause']}", ""]
    out += _resolves(verdict)
    warnings = _warnings(verdict)
    if warnings:
        out += ["> **Warning:** " + w for w in warnings] + [""]
    out += _provenance(verdict) + _controls(verdict) + _primary(verdict) + _against_base(verdict)
    out += _contrasts(a) + _decision(a) + _design(verdict)
    out += _secondary(verdict) + _monitors(verdict) + verdict_reasons_section(verdict) + _heircommit(verdict)
    out += _budget(verdict["checks"]["budget"]) + _leakage(verdict["checks"]["leakage"])
    if figures:
        out += ["## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures] + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def verdict_reasons_section(verdict: dict) -> list[str]:
    """Markdown: per arm, the rate of each verifier reason that occurs (probe verdicts, then solver
    rollouts), the infrastructure rate and retries, and the registered balance check. Empty for a
    verdict without the "verdict_reasons" section."""
    vr = verdict.get("verdict_reasons")
    if not vr:
        return []
    infra = ", ".join(f"`{x}`" for x in vr["infrastructure_reasons"])
    out = ["## Verdict reasons", "",
           f"Every verdict's reason, as a share of the arm's verdicts. Infrastructure failures ({infra}) are "
           "retried once; the reason kept is the second run's.", ""]
    for name, title in (("probes", "Probe verdicts (base and every round, all seeds)"),
                        ("rollouts", "Solver rollouts (ledger)")):
        table = vr[name]
        if not table:
            continue
        seen = [x for x in next(iter(table.values()))["rates"]
                if any((row["rates"][x] or 0) > 0 for row in table.values())]
        rows = [[arm, str(row["n"])] + [_pct(row["rates"][x]) for x in seen]
                + [_pct(row["infrastructure"]), str(row["retried"]), str(row["unrecorded"])]
                for arm, row in sorted(table.items())]
        out += [f"**{title}**", ""] + _table(["arm", "n"] + [f"`{x}`" for x in seen]
                                             + ["infrastructure", "retried", "no reason recorded"], rows) + [""]
        b = vr["balance"][name]
        gap = "n/a (fewer than two arms with reasons)" if b["gap"] is None else \
            f"{_pts(b['gap'])} between {b['arms'][0]} and {b['arms'][1]}"
        out += [f"- {_ok(not b['flagged'])}: infrastructure-rate balance, largest gap {gap}, registered maximum "
                f"{_pts(b['max_rate_gap'])}", ""]
    return out


def _resolves(verdict: dict) -> list[str]:
    """One paragraph: which design ran and what it could resolve (designed and observed)."""
    d = verdict.get("design")
    if not d:
        return []
    des = d["designed"]
    s, sesoi = des["size"], des["sesoi"]
    if "error" in des["rule"]:
        return [f"**Design:** {s['n_items']} probes x {s['n_seeds']} seeds per arm: {des['rule']['error']}.", ""]
    parts = [f"**Design:** {s['n_items']} probes x {s['n_seeds']} seeds per arm. P(keep_both) when both contrasts "
             f"truly equal the sesoi ({_pts(sesoi)}): {des['rule']['keep_both_at_sesoi']['p']:.2f} as designed "
             f"({des['components']['source']} variance components)"]
    obs = d["observed"]
    if "error" not in obs and "error" not in obs["rule"]:
        parts.append(f"{obs['rule']['keep_both_at_sesoi']['p']:.2f} at the variance components observed here")
    text = ", ".join(parts) + f"; registered power {des['power']}."
    if des["rule"]["keep_both_at_sesoi"]["p"] < des["power"]:
        text += " This design cannot resolve its own sesoi: read `not_resolved` as \"too small to tell\", not as no effect."
    return [text, ""]


def _warnings(verdict: dict) -> list[str]:
    w = []
    budget, leak = verdict["checks"]["budget"], verdict["checks"]["leakage"]
    if not budget["ok"]:
        w.append("a registered budget equality failed (see Compute ledger); the arms did not run on equal terms.")
    if budget["wall_clock_exceeded"]:
        w.append(f"wall clock exceeded the registered {budget['wall_clock_limit_s']} s in "
                 f"{', '.join(budget['wall_clock_exceeded'])} (recorded only; no run was cut).")
    if not leak["ok"]:
        w.append("the leakage check failed (see Leakage): probe tasks reached training; the probe comparison is "
                 "compromised.")
    return w + list(verdict["verdict"]["warnings"])


def _provenance(verdict: dict) -> list[str]:
    inp, spec = verdict["inputs"], verdict["analysis"]["spec"]
    boot, rec = spec["bootstrap"], inp["lock_recorded"]
    out = ["## Provenance", "",
           f"- lock hash: `{inp['lock_hash']}`",
           f"- lock file sha256: `{inp['lock_file_sha256']}`",
           f"- code version (harness + arms source): `{inp['code_version']}`",
           f"- probe set sha256: `{inp['probe_set_sha256']}` ({inp['n_probes']} probes)",
           f"- seed set sha256: `{inp['seed_set_sha256']}`",
           f"- base checkpoint sha256: `{inp['base_sha256']}`",
           f"- versions as recorded in the lock: python {rec['python']}, torch {rec['torch']} (frozen {rec['created']})",
           f"- registered: arms {', '.join(inp['registered']['arms'])}; seeds "
           f"{', '.join(map(str, inp['registered']['seeds']))}; {inp['registered']['rounds']} rounds",
           f"- bootstrap: two-stage (each arm's seeds, then items shared by both arms), {boot['method']}, "
           f"{boot['n_resamples']} resamples, two-sided level {boot['confidence_level']} (each end a one-sided "
           f"bound at alpha), rng seed {boot['rng_seed']}",
           f"- decision rule: alpha {spec['alpha']} for every one-sided test, sesoi {_pts(spec['sesoi'])}, power "
           f"{spec['power']}; beyond the seed spread: {_spread_words(spec['spread_rule'])}", "",
           "Runs read (final round's probe outcomes):", ""]
    rows = [[f"`{k}`", f"`{r['manifest_sha256'][:16]}`", f"`{r['chain_heads'].get('records.jsonl', '')[:16]}`",
             f"`{r['chain_heads'].get('ledger.jsonl', '-')[:16]}`", r["final_round"]]
            for k, r in sorted(verdict["inputs"]["runs"].items())]
    return out + _table(["run", "manifest sha256", "records head", "ledger head", "final round"], rows) + [""]


def _spread_words(rule: dict) -> str:
    if rule["test"] == "welch":
        return "one-sided Welch t-test on the per-seed pass rates of both arms"
    return f"gap > {rule['multiplier']} x the larger seed range of the two arms"


def _primary(verdict: dict) -> list[str]:
    a = verdict["analysis"]
    seeds = [str(s) for s in a["seeds"]]
    out = [f"## Primary metric: probe pass rate (correct@{verdict['inputs']['max_bytes']}B)", "",
           "Pass rate per arm x seed (final round):", ""]
    base = _base_rates(verdict)
    rows = [["base (round -1)"] + [_pct(base.get(s)) for s in seeds]]
    rows += [[arm] + [_pct(a["per_seed"][arm][s]) for s in seeds] for arm in sorted(a["per_seed"])]
    out += _table(["arm"] + [f"seed {s}" for s in seeds], rows) + [""]
    level = a["spec"]["bootstrap"]["confidence_level"]
    out += [f"Per arm over items x seeds, {level:.0%} two-stage bootstrap interval (seeds, then items; seeds "
            f"averaged per item):", ""]
    rows = [[arm, f"{m['passed']}/{m['n']}", _pct(m["mean"]), f"[{_pct(m['ci_low'])}, {_pct(m['ci_high'])}]"]
            for arm, m in sorted(a["arms"].items())]
    return out + _table(["arm", "passed", "mean", "bootstrap interval"], rows) + [""]


def _seed_rule(c: dict) -> str:
    if c["spread_test"] == "welch":
        return f"Welch p {_num(c['welch_p'])} (t {c['welch_t'] if isinstance(c['welch_t'], str) else _num(c['welch_t'])})"
    return f"threshold {_pts(c['spread_threshold'])}"


def _base_rates(verdict: dict) -> dict:
    """seed -> the base's probe pass rate (the same frozen base in every run; the first arm's record)."""
    out: dict = {}
    for _, srs in sorted(verdict["series"].items()):
        out.setdefault(str(srs["seed"]), srs["base"]["probe_pass_rate"])
    return out


def _controls(verdict: dict) -> list[str]:
    """The control checks, before the decision: they say whether the contrasts can be read."""
    c, v = verdict["controls"], verdict["verdict"]
    out = ["## Control checks (before the decision)", ""]
    if c["positive_ok"] is None:
        out.append("- no positive control is registered: nothing shows the instrument can see an improvement")
    for role, rows, want in (("positive", c["positive"], "must beat"), ("negative", c["negative"], "must not beat")):
        for r in rows:
            out.append(f"- {_ok(r['ok'])}: {role} control {r['arm']} {want} {r['versus']} by {_pts(r['margin'])} "
                       f"(gap {_pts(r['gap'])}, items {r['hi_only']} for / {r['lo_only']} against of {r['n_items']}, "
                       f"one-sided sign p {_num(r['sign_p_greater'])} vs alpha {r['alpha']})")
    out += ["", "A control beats another arm when the mean gap over items x seeds is at least the registered margin "
            "and the one-sided exact sign test on the items' net differences gives p < alpha. If the positive control "
            "fails, the pre-registered outcome is `instrument_insensitive`.", "",
            f"Outcome decided by: {v['decided_by']} (the decision rule's own outcome: `{v['rule_outcome']}`)", ""]
    return out


def _against_base(verdict: dict) -> list[str]:
    """Every arm's final pass rate against the base, paired by probe item."""
    out = ["## Every arm against the base (round -1)", ""]
    rows = [[arm, _pct(b["mean_lo"]), _pct(b["mean_hi"]), _pts(b["gap"]), f"{b['hi_only']} / {b['lo_only']}",
             _num(b["sign_p_greater"]), _num(b["sign_p_less"]), b["reading"]]
            for arm, b in sorted(verdict["against_base"].items())]
    out += _table(["arm", "base", "final", "gap", "items above / below", "sign p (above)", "sign p (below)",
                   "reading"], rows)
    return out + ["", "An arm that ends below the base is damage, whatever the contrasts say.", ""]


def _contrasts(a: dict) -> list[str]:
    out = ["## Contrasts (paired by probe item)", "",
           "Sign test: exact one-sided binomial on the signs of each item's net difference across seeds. "
           "Interval: two-stage bootstrap. Seed rule: see Provenance. Every number is invariant to how seeds "
           "are labelled.", ""]
    rows = []
    for key, c in sorted(a["contrasts"].items()):
        rows.append([key, _pts(c["gap"]), f"[{_pts(c['ci_low'])}, {_pts(c['ci_high'])}]",
                     f"{c['n_items_hi']} / {c['n_items_lo']} / {c['n_items_tied']}", _num(c["sign_p"]),
                     _seed_rule(c), f"`{c['label']}`"])
    out += _table(["contrast", "gap", "interval", "items hi / lo / tied", "sign test p (one-sided)",
                   "seed rule", "label"], rows)
    out.append("")
    for key, c in sorted(a["contrasts"].items()):
        crit = ", ".join(f"{k} {'yes' if ok else 'no'}" for k, ok in sorted(c["criteria"].items()))
        out.append(f"- {key}: {crit}; seed pass rates {c['hi']} {[_pct(r) for r in c['seed_rates_hi']]}, "
                   f"{c['lo']} {[_pct(r) for r in c['seed_rates_lo']]}")
    return out + [""]


def _decision(a: dict) -> list[str]:
    v = a["verdict"]
    out = ["## Verdict", "", f"Outcome: **{v['outcome']}**", "", f"Deciding clause: {v['clause']}", "",
           "Clauses of the pre-registered rule:", ""]
    out += [f"- {name}: {'held' if held else 'did not hold'}" for name, held in v["clauses_held"].items()]
    out += ["", "What each contrast shows (labels: `supported`, `not_supported`, `ruled_out` = interval wholly "
            "below the sesoi, `reversed` = significantly lower):", ""]
    out += [f"- {key}: {c['says']}" for key, c in sorted(v["contrasts"].items())]
    return out + [""]


def _design(verdict: dict) -> list[str]:
    """The operating characteristic, designed (freeze's components) and observed (this experiment's)."""
    d = verdict.get("design")
    if not d:
        return []
    des = d["designed"]
    s = des["size"]
    out = ["## Design analysis: what this experiment could resolve", "",
           f"Design run: {s['n_items']} probes x {s['n_seeds']} seeds x arms {', '.join(s['arms'])}. The readout's own "
           f"decision rule applied to {des['replicates']} simulated experiments per cell (bootstrap "
           f"{des['bootstrap_resamples']} resamples inside the simulation, registered {des['registered_resamples']}); "
           "± is the Monte-Carlo standard error.", ""]
    for name, x in (("designed", des), ("observed", d["observed"])):
        if "error" in x:
            out += [f"Observed variance components unavailable: {x['error']}", ""]
            continue
        c = x["components"]
        what = {"assumed": "the registered ASSUMPTIONS (no pilot)", "pilot": "the pilot",
                "observed": "this experiment's outcomes"}[c["source"]]
        out += [f"### {name.capitalize()} (variance components from {what})", "",
                f"Item sd {c['item_sd']:.3f}, arm x item sd {c['arm_item_sd']:.3f}, run sd "
                + ", ".join(f"{a} {v:.3f}" for a, v in c["run_sd"].items()) + f" (logit); control pass rate "
                f"{_pct(c['control_rate'])}.", ""]
        if "error" in x["rule"]:
            out += [f"- {x['rule']['error']}", ""]
            continue
        rows = [[_pts(cell["effect_BA"]), _pts(cell["effect_CB"])]
                + [f"{cell['verdict'][o]:.3f} ± {cell['verdict_se'][o]:.3f}" for o in OUTCOME_ORDER]
                for cell in x["rule"]["cells"]]
        out += _table(["true B-A", "true C-B"] + list(OUTCOME_ORDER), rows) + [""]
        fp, at = x["rule"]["keep_both_false_positive"], x["rule"]["keep_both_at_sesoi"]
        out.append(f"- keep_both false-positive rate (worst cell with a zero true effect, at {[_pts(e) for e in fp['at']]}): "
                   f"{fp['p']:.3f} ± {fp['se']:.3f} (alpha {x['alpha']})")
        out.append(f"- P(keep_both) at the sesoi on both contrasts: {at['p']:.3f} ± {at['se']:.3f} "
                   f"(registered power {x['power']})")
        alt = x["rule"].get("alternative")
        if alt:
            out.append(f"- the other spread rule ({_spread_words(alt['spread_rule'])}) on the same simulated experiments: "
                       f"P(keep_both) at the sesoi {alt['keep_both_at_sesoi']:.3f}, false-positive rate "
                       f"{alt['keep_both_false_positive']:.3f}")
        if "positive_control" in x:
            pc = x["positive_control"]
            out.append("- one contrast against A, P(supported) by true effect: " + ", ".join(
                f"{_pts(p['effect'])}: {p['labels']['supported']:.3f}" for p in pc["curve"]))
        if "gate" in x:
            g = x["gate"]
            out.append(f"- C's confirm gate ({g['rule']}, margin {g['margin']}, {g['n_confirm']} probes per round), "
                       "P(commit) by true successor - root difference: "
                       + ", ".join(f"{_pts(p['diff'])}: {p['p_commit']:.2f}" for p in g["curve"]))
            if g["rule"] == "not_worse" and g["margin"] == 0:
                out.append("  (not_worse with margin 0 commits on ties: alpha plays no part in it)")
        out += [f"- **Warning:** {w}" for w in x["warnings"]] + [""]
    return out


def _secondary(verdict: dict) -> list[str]:
    bpb = verdict["secondary"]["heldout_bpb"]
    seeds = sorted({s for arm in bpb.values() for s in arm["final_per_seed"]}, key=int)
    out = ["## Secondary metric: held-out bits per byte (lower is better)", ""]
    rows = [[arm, _num(m["base"])] + [_num(m["final_per_seed"].get(s)) for s in seeds] + [_num(m["final_mean"])]
            for arm, m in sorted(bpb.items())]
    return out + _table(["arm", "base"] + [f"seed {s}" for s in seeds] + ["final mean"], rows) + [""]


def _monitors(verdict: dict) -> list[str]:
    mon = verdict["monitors_final"]
    keys = [k for k in MONITOR_LABELS if any(m.get(k) is not None for m in mon.values())]
    out = ["## Monitors (final round, mean over seeds)", ""]
    rows = [[MONITOR_LABELS[k]] + [_num(mon[arm].get(k)) for arm in sorted(mon)] for k in keys]
    return out + _table(["monitor"] + sorted(mon), rows) + [""]


def _heircommit(verdict: dict) -> list[str]:
    runs = {k: s for k, s in sorted(verdict["series"].items()) if any("heircommit" in r for r in s["rounds"])}
    if not runs:
        return []
    out = ["## The commit gate (C; D without recovery): commit / retain per round", ""]
    rows = []
    for key, s in runs.items():
        for r in s["rounds"]:
            h = r.get("heircommit")
            if h is None:
                continue
            screen = f"{h['screen'][0]} vs {h['screen'][1]} of {h['screen'][2]}" if h["screen"] else "none"
            recovery = (f"{h['recovery_steps']} steps" if h["recovery_ran"]
                        else f"no ({h['continued_steps']} steps continued the update)" if h["continued_steps"] else "no")
            rows.append([key, r["round"], h["decision"], screen, recovery,
                         f"{h['confirm'][0]} vs {h['confirm'][1]} of {h['confirm'][2]}", h["rule"],
                         _num(h["sign_test_p"]), _pts(h["mde"]) if h["rule"] == "superior" else "-"])
    out += _table(["run", "round", "decision", "screen succ vs root", "recovery", "confirm succ vs root", "rule",
                   "sign p", "MDE (superior rule only)"], rows)
    out += ["", "Retained rounds and the final model:", ""]
    rows = [[k, f"{t['retained']}/{t['rounds']}", ", ".join(map(str, t["committed"])) or "none",
             "yes (retained every round)" if t["final_is_base"] else "no",
             f"{t['final_equal_to_base']}/{t['n_probes']}"] for k, t in sorted(verdict["retained"].items())]
    out += _table(["run", "retained", "committed rounds", "final model is the base", "final outcomes equal to the base's"],
                  rows)
    return out + [""]


def _ledger_cell(values: list[int]) -> str:
    return str(values[0]) if len(set(values)) == 1 else " / ".join(map(str, values))


def _budget(b: dict) -> list[str]:
    """The whole compute ledger, side by side per arm (a cell lists seeds in order where they
    differ), then the registered equalities and the wall clock."""
    arms = sorted(b["per_arm"]["learner_steps"])
    out = ["## Compute ledger", "",
           "Totals per run (base evaluation + every round). Held equal by registration: "
           + ", ".join(b["held_equal"]) + "; every other row is what an arm's design spends.", ""]
    rows = [[k + (" (held equal)" if k in b["held_equal"] else "")] + [_ledger_cell(b["per_arm"][k][a]) for a in arms]
            for k in b["fields"]]
    out += _table(["ledger entry"] + arms, rows) + [""]
    out += [f"- {_ok(c['ok'])}: {c['check']}" + (f" ({c['detail']})" if c["detail"] else "") for c in b["checks"]]
    out.append("- (a failed equality is flagged, not refused: the runner refuses any round that breaks the "
               "registration or charges other than what it did, so only records written by other code can fail here)")
    over = b["wall_clock_exceeded"]
    out.append(f"- {'FLAG' if over else 'PASS'}: wall clock within the registered {_num(b['wall_clock_limit_s'], 6)} s "
               f"per run{': exceeded by ' + ', '.join(over) if over else ''} (recorded and reported, never used to cut a run)")
    out += ["", "Wall clock per run (s): " + ", ".join(f"{k} {_num(w, 6)}" for k, w in sorted(b["wall_clock_s"].items()))]
    return out + [""]


def _leakage(leak: dict) -> list[str]:
    out = ["## Leakage", "",
           f"- {_ok(not leak['probe_hashes_at_solver'])}: no probe task or program reached the solver "
           f"({leak['solver_tasks_checked']} solver tasks checked across the ledgers; "
           f"{leak['probe_collisions_stopped_before_solver']} probe collisions stopped before the solver)",
           f"- {_ok(leak['seed_set_probe_overlap'] == {'canonical': 0, 'program': 0})}: seed set holds no probe program "
           f"(overlap: {leak['seed_set_probe_overlap']['canonical']} canonical, {leak['seed_set_probe_overlap']['program']} program)",
           f"- confirm-set hashes at the solver: {leak['confirm_hashes_at_solver']}"]
    guard = leak.get("leak_guard") or {}
    if guard:
        out.append(f"- registered leak guard (tasks.yaml): no probe, confirm or calibration program is trained on; "
                   f"the same steps with other constants are "
                   f"{'trained on' if guard.get('same_ops_other_constants') == 'train' else 'held out too'}")
    out += [f"  - leak: `{x['ledger']}` line {x['line']} task `{x['task'][:16]}` matched by {', '.join(x['matched'])}"
            for x in leak["probe_hashes_at_solver"]]
    return out + [""]


# ---------------------------------------------------------------- figures

def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=FIGURE_DPI)
    FigureCanvasAgg(fig)
    return fig


def _integer_rounds(ax) -> None:
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig, path: Path) -> None:
    fig.savefig(path, format="png", dpi=FIGURE_DPI, metadata=PNG_METADATA)


def _by_arm(series: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for _, s in sorted(series.items()):
        out.setdefault(s["arm"], []).append(s)
    return out


def _pass_rate_figure(verdict: dict, path: Path) -> None:
    """Probe pass rate per round per arm: mean over seeds, band = min..max over seeds; x = -1 is the base."""
    fig = _figure(6.4, 4.0)
    ax = fig.add_subplot()
    for arm, runs in _by_arm(verdict["series"]).items():
        x = [-1] + [r["round"] for r in runs[0]["rounds"]]
        y = np.array([[s["base"]["probe_pass_rate"]] + [r["probe_pass_rate"] for r in s["rounds"]] for s in runs])
        colour = ARM_COLOURS.get(arm)
        ax.plot(x, y.mean(axis=0), marker="o", color=colour, label=f"{arm} (mean of {len(runs)} seeds)")
        ax.fill_between(x, y.min(axis=0), y.max(axis=0), color=colour, alpha=0.2, linewidth=0)
    _integer_rounds(ax)
    ax.set_xlabel("round (-1 = base)")
    ax.set_ylabel("probe pass rate")
    ax.set_title("Probe pass rate per round (band: seed min..max)")
    ax.legend()
    _save(fig, path)


def _contrast_figure(verdict: dict, path: Path) -> None:
    """Each contrast's gap with its bootstrap interval, the spread threshold and the sesoi."""
    contrasts = verdict["analysis"]["contrasts"]
    keys = sorted(contrasts)
    fig = _figure(6.0, 1.2 + 0.8 * len(keys))
    ax = fig.add_subplot()
    for i, key in enumerate(keys):
        c = contrasts[key]
        ax.errorbar([c["gap"]], [i], xerr=[[c["gap"] - c["ci_low"]], [c["ci_high"] - c["gap"]]], fmt="o",
                    color="black", capsize=4)
        if "spread_threshold" in c:
            ax.plot([c["spread_threshold"]], [i], marker="|", markersize=16, markeredgewidth=2, color="tab:red", zorder=3)
    ax.axvline(0.0, color="gray", linewidth=1)
    ax.axvline(verdict["analysis"]["spec"]["sesoi"], color="gray", linestyle="--", linewidth=1, label="sesoi")
    ax.set_yticks(range(len(keys)), [f"{k} ({contrasts[k]['label']})" for k in keys])
    ax.set_ylim(-0.7, len(keys) - 0.3)
    level = verdict["analysis"]["spec"]["bootstrap"]["confidence_level"]
    ax.set_xlabel("pass-rate gap" + (" (red tick: the range rule's threshold)" if "spread_threshold" in c else ""))
    ax.set_title(f"Contrasts with {level:.0%} two-stage bootstrap intervals")
    ax.legend(loc="lower right")
    fig.subplots_adjust(left=0.22, right=0.97, bottom=0.8 / fig.get_figheight(), top=1 - 0.45 / fig.get_figheight())
    _save(fig, path)


def _heircommit_figure(verdict: dict, path: Path) -> bool:
    """C's commit (filled) / retain (open) decision per round per seed. False if there is no C."""
    runs = [s for _, s in sorted(verdict["series"].items()) if any("heircommit" in r for r in s["rounds"])]
    if not runs:
        return False
    fig = _figure(6.0, 1.2 + 0.5 * len(runs))
    ax = fig.add_subplot()
    for i, s in enumerate(runs):
        for r in s["rounds"]:
            commit = r["heircommit"]["decision"] == "commit"
            ax.plot([r["round"]], [i], marker="o", markersize=10, color="tab:green" if commit else "tab:red",
                    fillstyle="full" if commit else "none")
    ax.set_yticks(range(len(runs)), [f"C seed {s['seed']}" for s in runs])
    ax.set_ylim(-0.7, len(runs) - 0.3)
    ax.set_xlim(-0.5, max(len(s["rounds"]) for s in runs) - 0.5)
    _integer_rounds(ax)
    ax.set_xlabel("round (filled green: commit, open red: retain)")
    ax.set_title("HeirCommit decisions")
    fig.subplots_adjust(left=0.16, right=0.97, bottom=0.7 / fig.get_figheight(), top=1 - 0.45 / fig.get_figheight())
    _save(fig, path)
    return True


def _commit_curve_figure(verdict: dict, path: Path) -> bool:
    """C's confirm gate: P(commit) against the true successor - root difference, designed and observed."""
    d = verdict.get("design") or {}
    curves = [(name, d[name]["gate"]) for name in ("designed", "observed") if "gate" in d.get(name, {})]
    if not curves:
        return False
    fig = _figure(6.0, 4.0)
    ax = fig.add_subplot()
    for (name, g), style in zip(curves, ("-", "--")):
        x = [100 * p["diff"] for p in g["curve"]]
        y = np.array([p["p_commit"] for p in g["curve"]])
        se = np.array([p["se"] for p in g["curve"]])
        ax.plot(x, y, style, marker="o", label=f"{name} ({d[name]['components']['source']} components)")
        ax.fill_between(x, y - 2 * se, y + 2 * se, alpha=0.2, linewidth=0)
    g = curves[0][1]
    ax.axvline(0.0, color="gray", linewidth=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("true successor - root pass-rate difference (pts)")
    ax.set_ylabel("P(commit)")
    ax.set_title(f"C's confirm gate: {g['rule']}, margin {g['margin']}, {g['n_confirm']} probes per round")
    ax.legend(loc="lower right")
    _save(fig, path)
    return True


def _seed_mean(values: list) -> float:
    """Mean over seeds of the values that were recorded (NaN when none was)."""
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else float("nan")


def _monitor_figure(verdict: dict, path: Path) -> None:
    """Every monitor per round, mean over seeds per arm."""
    by_arm = _by_arm(verdict["series"])
    keys = [k for k in MONITOR_LABELS
            if any(r.get(k) is not None for runs in by_arm.values() for s in runs for r in s["rounds"])]
    cols = 2
    rows = max(1, -(-len(keys) // cols))
    fig = _figure(9.0, 2.6 * rows)
    for i, key in enumerate(keys):
        ax = fig.add_subplot(rows, cols, i + 1)
        for arm, runs in by_arm.items():
            x = [r["round"] for r in runs[0]["rounds"]]
            y = [_seed_mean([s["rounds"][j].get(key) for s in runs]) for j in range(len(x))]
            if not np.all(np.isnan(y)):
                ax.plot(x, y, marker="o", color=ARM_COLOURS.get(arm), label=arm)
        _integer_rounds(ax)
        ax.set_title(MONITOR_LABELS[key], fontsize=9)
        ax.set_xlabel("round", fontsize=8)
        ax.legend(fontsize=7)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.5 / fig.get_figheight(), top=1 - 0.35 / fig.get_figheight(),
                        hspace=0.55, wspace=0.22)
    _save(fig, path)


def write_figures(verdict: dict, readout_dir) -> list[str]:
    """Draw the figures into readout_dir (beside report.md) with matplotlib's default style;
    returns their file names, in report order."""
    import matplotlib.style
    out_dir = Path(readout_dir)
    drawn = []
    with matplotlib.style.context("default"):
        _pass_rate_figure(verdict, out_dir / "probe_pass_rate.png")
        drawn.append("probe_pass_rate.png")
        _contrast_figure(verdict, out_dir / "contrasts.png")
        drawn.append("contrasts.png")
        if _heircommit_figure(verdict, out_dir / "heircommit.png"):
            drawn.append("heircommit.png")
        if _commit_curve_figure(verdict, out_dir / "commit_curve.png"):
            drawn.append("commit_curve.png")
        _monitor_figure(verdict, out_dir / "monitors.png")
        drawn.append("monitors.png")
    return drawn

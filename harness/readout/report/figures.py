"""The report's figures (PNG, matplotlib's default style, no timestamp or software tag: their bytes
depend on the matplotlib build and fonts, so they are informational) and their captions; every one
is drawn from verdict.json alone (`write_figures`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.readout.report.blocks import run_order
from harness.readout.verdict import Series, Verdict, as_verdict
from harness.stats.units import pts


FIGURE_DPI = 150
PNG_METADATA = {"Software": None}  # no matplotlib version tag in the file
ARM_COLOURS = {"A": "tab:gray", "B": "tab:blue", "C": "tab:orange", "P": "tab:green", "N": "tab:purple",
               "D": "tab:brown"}
BASE_COLOUR = "black"


MONITOR_LABELS = {
    "monitor_within_entropy": "within-input entropy (eval, bits)",
    "monitor_cross_mi": "cross-input MI (eval, bits)",
    "within_input_entropy": "within-input entropy (solver, bits)",
    "cross_input_mi": "cross-input MI (solver, bits)",
    "completion_entropy": "completion entropy (solver, bits)",
    "zero_spread_fraction": "zero-spread group fraction",
    "cross_round_duplicate_rate": "cross-round duplicate rate",
}


def figure_caption(name: str, verdict: Verdict | dict) -> str:
    """The caption of figure `name` (units as in the text: pass rates in %, gaps in points)."""
    verdict = as_verdict(verdict)
    level = verdict.analysis.spec.bootstrap.confidence_level
    sesoi = pts(verdict.sesoi)

    return {
        "probe_pass_rate.png": "probe pass rate (%) per round per arm, mean over seeds, band the seeds' min..max; "
                               "round -1 and the dashed black line are the base. The base and the last round score "
                               "every probe; the rounds between score the registered subset "
                               "(budget.intermediate_eval_probes), the same probes for every arm and seed.",
        "heldout_bpb.png": "held-out bits per byte per round per arm (lower is better), mean over seeds, band the "
                           "seeds' min..max; round -1 is the base.",
        "train_loss.png": "mean training loss of each round's learner steps per arm, mean over seeds, band min..max; "
                          "one panel per objective, each on its own y axis: the supervised arms' masked cross-entropy "
                          "(nats per byte) and the self-play arms' advantage-weighted surrogate (advantages centred within each "
                          "group, so it stays near 0), not comparable with each other.",
        "contrasts.png": f"each contrast's gap in points with its {level:.0%} two-stage bootstrap interval; dashed "
                         f"line the sesoi ({sesoi}), solid line 0.",
        "heircommit.png": "the commit gate's decision per round per run (C and D, each run labelled by its own arm "
                          "and seed): filled green commit, open red retain.",
        "commit_curve.png": "C's confirm gate, P(commit) against the true successor - root difference in points, "
                            "designed and observed (band ± 2 Monte-Carlo standard errors).",
        "monitors.png": "the collapse monitors per round per arm, mean over seeds, band the seeds' min..max; each "
                        "panel's y range is the monitor's own (a monitor stuck at one value is drawn flat).",
    }.get(name, name)


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


def _by_arm(series: dict[str, Series]) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = {}
    for _, s in sorted(series.items(), key=run_order):
        out.setdefault(s.arm, []).append(s)
    return out


def _run_label(s: Series) -> str:
    """A run's label in a figure: its own arm and seed (never another arm's)."""
    return f"{s.arm} seed {s.seed}"


def _curve_figure(verdict: Verdict, path: Path, key: str, ylabel: str, title: str, scale: float = 1.0,
                  with_base: bool = True) -> bool:
    """One metric per round per arm: mean over seeds, band = min..max over seeds; x = -1 is the base
    (drawn once, black, when `with_base`). Values x `scale`. False (nothing drawn) when no run records it."""
    by_arm = _by_arm(verdict.series)
    if not _recorded(by_arm, key):
        return False
    fig = _figure(7.6, 4.2)
    ax = fig.add_subplot()
    _draw_curves(ax, verdict, by_arm, key, scale, with_base)
    ax.set_xlabel("round (-1 = base)" if with_base else "round")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.subplots_adjust(left=0.1, right=0.74, bottom=0.13, top=0.9)
    _save(fig, path)
    return True


def _recorded(by_arm: dict[str, list[Series]], key: str) -> bool:
    return any(r.value(key) is not None for runs in by_arm.values() for s in runs for r in s.rounds)


def _draw_curves(ax, verdict: Verdict, by_arm: dict[str, list[Series]], key: str, scale: float,
                 with_base: bool) -> None:
    """Each arm's mean over seeds with its min..max band on `ax` (and the base at x = -1 and as a dashed line)."""
    for arm, runs in by_arm.items():
        x = [r.round for r in runs[0].rounds]
        y = np.array([[np.nan if r.value(key) is None else scale * r.value(key) for r in s.rounds] for s in runs],
                     float)
        if with_base:
            x = [-1] + x
            y = np.column_stack([[np.nan if s.base.get(key) is None else scale * s.base[key] for s in runs], y])
        colour = ARM_COLOURS.get(arm)
        ax.plot(x, np.nanmean(y, axis=0), marker="o", color=colour, label=f"{arm} (mean of {len(runs)} seeds)")
        ax.fill_between(x, np.nanmin(y, axis=0), np.nanmax(y, axis=0), color=colour, alpha=0.18, linewidth=0)
    if with_base:
        base = [scale * s.base[key] for s in verdict.series.values() if s.base.get(key) is not None]
        if base:
            ax.axhline(float(np.mean(base)), color=BASE_COLOUR, linestyle="--", linewidth=1, label="base (round -1)")
    _integer_rounds(ax)


LOSS_PANELS = (  # train_loss.png: one panel per objective, each on its own y axis
    ("sft", "supervised arms: masked cross-entropy (nats per byte)"),
    ("rollouts", "self-play arms: advantage-weighted surrogate (advantages centred per group: near 0)"),
)


def loss_groups(verdict: Verdict | dict) -> dict[str, list[str]]:
    """{"sft": arms trained on reference solutions, "rollouts": arms that learn from their own verified
    rollouts}, by each arm's registered kind (harness.spec.kinds: a kind that samples rollouts); arms
    whose kind is unknown here go with the supervised ones. Only arms with a recorded training loss."""
    from harness.spec.kinds import KINDS
    verdict = as_verdict(verdict)
    defs = verdict.inputs.registered.definitions or {}
    out: dict[str, list[str]] = {"sft": [], "rollouts": []}
    for arm, runs in _by_arm(verdict.series).items():
        if not _recorded({arm: runs}, "train_loss"):
            continue
        kind = KINDS.get(defs.get(arm, {}).get("kind"))
        out["rollouts" if kind is not None and kind.needs.rollouts else "sft"].append(arm)
    return out


def _loss_figure(verdict: Verdict, path: Path) -> bool:
    """Training loss per round per arm, one panel per objective (supervised, self-play) with its own
    y axis: the two losses are on different scales and not comparable. False when no run records one."""
    groups = {g: arms for g, arms in loss_groups(verdict).items() if arms}
    if not groups:
        return False
    by_arm = _by_arm(verdict.series)
    panels = [(g, title) for g, title in LOSS_PANELS if g in groups]
    fig = _figure(7.6, 0.6 + 3.0 * len(panels))
    for i, (g, title) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        _draw_curves(ax, verdict, {a: by_arm[a] for a in groups[g]}, "train_loss", 1.0, with_base=False)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("mean loss")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.axes[-1].set_xlabel("round")
    fig.subplots_adjust(left=0.1, right=0.74, bottom=0.5 / fig.get_figheight(), top=1 - 0.35 / fig.get_figheight(),
                        hspace=0.45)
    _save(fig, path)
    return True


def _contrast_figure(verdict: Verdict, path: Path) -> None:
    """Each contrast's gap (points) with its bootstrap interval, the spread threshold and the sesoi."""
    contrasts = verdict.analysis.contrasts
    keys = sorted(contrasts)
    fig = _figure(7.0, 1.4 + 0.8 * len(keys))
    ax = fig.add_subplot()
    ranged = False
    for i, key in enumerate(keys):
        c = contrasts[key]
        gap, lo, hi = 100 * c.gap, 100 * c.ci_low, 100 * c.ci_high
        ax.errorbar([gap], [i], xerr=[[gap - lo], [hi - gap]], fmt="o", color="black", capsize=4)
        if c.has("spread_threshold"):
            ranged = True
            ax.plot([100 * c.spread_threshold], [i], marker="|", markersize=16, markeredgewidth=2, color="tab:red",
                    zorder=3)
    ax.axvline(0.0, color="gray", linewidth=1)
    ax.axvline(100 * verdict.sesoi, color="gray", linestyle="--", linewidth=1, label=f"sesoi ({pts(verdict.sesoi)})")
    ax.set_yticks(range(len(keys)), [f"{k} ({contrasts[k].label})" for k in keys])
    ax.set_ylim(-0.7, len(keys) - 0.3)
    level = verdict.analysis.spec.bootstrap.confidence_level
    ax.set_xlabel("pass-rate gap (pts)" + (" (red tick: the range rule's threshold)" if ranged else ""))
    ax.set_title(f"Contrasts with {level:.0%} two-stage bootstrap intervals")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    width = max(len(f"{k} ({contrasts[k].label})") for k in keys)
    fig.subplots_adjust(left=min(0.45, 0.03 + 0.0115 * width), right=0.78, bottom=0.8 / fig.get_figheight(),
                        top=1 - 0.45 / fig.get_figheight())
    _save(fig, path)


def gate_runs(verdict: Verdict | dict) -> list[Series]:
    """The runs with a commit gate (C, D), in key order: what heircommit.png plots, one row each."""
    return [s for _, s in sorted(as_verdict(verdict).series.items(), key=run_order)
            if any(r.has("heircommit") for r in s.rounds)]


def gate_labels(verdict: Verdict | dict) -> list[str]:
    """heircommit.png's row labels, one per gate run, each its own arm and seed."""
    return [_run_label(s) for s in gate_runs(verdict)]


def _heircommit_figure(verdict: Verdict, path: Path) -> bool:
    """The commit gate's commit (filled) / retain (open) decision per round per run. False if no run has a gate."""
    runs = gate_runs(verdict)
    if not runs:
        return False
    fig = _figure(6.4, 1.3 + 0.45 * len(runs))
    ax = fig.add_subplot()
    for i, s in enumerate(runs):
        for r in s.rounds:
            if not r.has("heircommit"):
                continue
            commit = r.heircommit["decision"] == "commit"
            ax.plot([r.round], [i], marker="o", markersize=10, color="tab:green" if commit else "tab:red",
                    fillstyle="full" if commit else "none")
    ax.set_yticks(range(len(runs)), gate_labels(verdict))
    ax.set_ylim(-0.7, len(runs) - 0.3)
    ax.set_xlim(-0.5, max(len(s.rounds) for s in runs) - 0.5)
    _integer_rounds(ax)
    ax.set_xlabel("round (filled green: commit, open red: retain)")
    ax.set_title("Commit gate decisions per run")
    fig.subplots_adjust(left=0.16, right=0.97, bottom=0.7 / fig.get_figheight(), top=1 - 0.45 / fig.get_figheight())
    _save(fig, path)
    return True


def _commit_curve_figure(verdict: Verdict, path: Path) -> bool:
    """C's confirm gate: P(commit) against the true successor - root difference, designed and observed."""
    d = verdict.design
    results = [(name, getattr(d, name)) for name in ("designed", "observed")] if d else []
    curves = [(name, x.gate, x.components.source) for name, x in results if x.gate is not None]
    if not curves:
        return False
    fig = _figure(6.4, 4.0)
    ax = fig.add_subplot()
    for (name, g, source), style in zip(curves, ("-", "--")):
        x = [100 * p.diff for p in g.curve]
        y = np.array([p.p_commit for p in g.curve])
        se = np.array([p.se for p in g.curve])
        ax.plot(x, y, style, marker="o", label=f"{name} ({source} components)")
        ax.fill_between(x, y - 2 * se, y + 2 * se, alpha=0.2, linewidth=0)
    g = curves[0][1]
    ax.axvline(0.0, color="gray", linewidth=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("true successor - root pass-rate difference (pts)")
    ax.set_ylabel("P(commit)")
    ax.set_title(f"C's confirm gate: {g.rule}, margin {g.margin}, {g.n_confirm} probes per round")
    ax.legend(loc="lower right")
    _save(fig, path)
    return True


def _monitor_figure(verdict: Verdict, path: Path) -> bool:
    """Every monitor per round per arm: mean over seeds, band = min..max over seeds. A monitor that does
    not move gets a fixed +-0.5 y range around its value (no autoscaled V out of rounding noise)."""
    by_arm = _by_arm(verdict.series)
    keys = [k for k in MONITOR_LABELS if _recorded(by_arm, k)]
    if not keys:
        return False
    cols = 2
    rows = max(1, -(-len(keys) // cols))
    fig = _figure(10.0, 2.6 * rows + 0.6)
    for i, key in enumerate(keys):
        ax = fig.add_subplot(rows, cols, i + 1)
        seen = []
        for arm, runs in by_arm.items():
            x = [r.round for r in runs[0].rounds]
            y = np.array([[np.nan if r.value(key) is None else r.value(key) for r in s.rounds] for s in runs], float)
            if np.all(np.isnan(y)):
                continue
            seen.append(y[~np.isnan(y)])
            ax.plot(x, np.nanmean(y, axis=0), marker="o", markersize=3, color=ARM_COLOURS.get(arm), label=arm)
            ax.fill_between(x, np.nanmin(y, axis=0), np.nanmax(y, axis=0), color=ARM_COLOURS.get(arm), alpha=0.15,
                            linewidth=0)
        values = np.concatenate(seen) if seen else np.array([0.0])
        if np.ptp(values) < 1e-6:
            ax.set_ylim(values[0] - 0.5, values[0] + 0.5)
        _integer_rounds(ax)
        ax.set_title(MONITOR_LABELS[key], fontsize=9)
        ax.set_xlabel("round", fontsize=8)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.5 / fig.get_figheight(), top=1 - 0.6 / fig.get_figheight(),
                        hspace=0.6, wspace=0.2)
    _save(fig, path)
    return True


FIGURES = ("probe_pass_rate.png", "heldout_bpb.png", "train_loss.png", "contrasts.png", "heircommit.png",
           "commit_curve.png", "monitors.png")


def write_figures(verdict: Verdict | dict, out_dir) -> list[str]:
    """Draw the figures into out_dir (beside report.md) with matplotlib's default style;
    returns the file names drawn (a subset of FIGURES, in that order)."""
    import matplotlib.style
    verdict = as_verdict(verdict)
    out = Path(out_dir)

    drawers = {
        "probe_pass_rate.png": lambda p: _curve_figure(verdict, p, "probe_pass_rate", "probe pass rate (%)",
                                                       "Probe pass rate per round (band: seed min..max)", scale=100),
        "heldout_bpb.png": lambda p: _curve_figure(verdict, p, "heldout_bpb", "held-out bits per byte",
                                                   "Held-out bits per byte per round (lower is better)"),
        "train_loss.png": lambda p: _loss_figure(verdict, p),
        "contrasts.png": lambda p: _contrast_figure(verdict, p) or True,
        "heircommit.png": lambda p: _heircommit_figure(verdict, p),
        "commit_curve.png": lambda p: _commit_curve_figure(verdict, p),
        "monitors.png": lambda p: _monitor_figure(verdict, p),
    }
    with matplotlib.style.context("default"):
        return [name for name in FIGURES if drawers[name](out / name)]

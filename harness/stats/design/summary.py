"""A design analysis read: its six summary figures, how far to trust each label, the registration's
shortfalls and the warnings freeze prints and the readout repeats."""
from __future__ import annotations

from dataclasses import dataclass

from harness.stats.design.records import DesignAnalysis, mc_se
from harness.stats.design.records import rounded as _r
from harness.stats.units import pts


SUMMARY_KEYS = ("positive_control_power", "keep_both_at_sesoi", "keep_both_false_positive", "ruled_out_at_sesoi",
                "gate_commit_at_minus_sesoi", "gate_commit_at_plus_sesoi")


def design_summary(d: DesignAnalysis | dict) -> dict:
    """The design analysis in six flat numbers, seven with the joint power, eight with the base spread (None where
    the analysis has none, e.g. no positive control registered, a rule that cannot decide, or an observed analysis
    that could not be fitted):
        positive_control_power      P(every registered positive-control check passes) at its registered
                                    effect (the smallest over positive controls)
        keep_both_at_sesoi          P(keep_both | both contrasts at the sesoi)
        keep_both_false_positive    the largest P(keep_both) found over the null set
        ruled_out_at_sesoi          the largest over the contrasts of P(ruled_out | its effect = sesoi)
        gate_commit_at_minus_sesoi  P(C's gate commits | successor truly sesoi worse than its root)
        gate_commit_at_plus_sesoi   P(commit | sesoi better)
    and, where the analysis simulated a positive control's check with the rule (DesignAnalysis.joint):
        joint_power                 P(every positive control's check passes and keep_both) at the registered
                                    effects, on the same simulated experiments: what a run needs
    and, where decision.yaml registers the base spread (harness.stats.design.bases):
        label_level_about_the_recipe  the largest P(a label | the recipe's true effect where it is wrong),
                                    over the decision contrasts: how far the labels speak for the recipe"""
    d = DesignAnalysis.from_dict(d)
    if d.failed:
        return dict.fromkeys(SUMMARY_KEYS)
    pos = [c.p_pass_at_effect for c in d.positive_controls]
    rule, sesoi = d.rule, d.sesoi
    ro = [] if rule.error is not None else [c.labels[key]["ruled_out"] for c in rule.cells
                                            for key in ("B-A", "C-B") if c.effect(key) == _r(sesoi)]
    commit = {x.diff: x.p_commit for x in d.gate.curve} if d.gate else {}
    figures = (min(pos) if pos else None,
               None if rule.error is not None else rule.keep_both_at_sesoi.p,
               None if rule.error is not None else rule.keep_both_false_positive.p,
               max(ro) if ro else None, commit.get(_r(-sesoi)), commit.get(_r(sesoi)))
    out = dict(zip(SUMMARY_KEYS, figures))
    if d.joint is not None:  # only with a positive control: an older summary keeps its keys
        out["joint_power"] = d.joint.p
    if d.bases is not None:  # only where base spread is registered: an older summary keeps its six keys
        out["label_level_about_the_recipe"] = max(c.level for c in d.bases.contrasts)
    return out


@dataclass(frozen=True)
class Reliability:
    """How far to trust one contrast's label under a design analysis (`label_reliability`): its level
    (the largest P(label) where it is wrong, at true effect `level_at`) and power (the smallest P(label)
    where it is right, at `power_at`; None for reversed), each with its Monte-Carlo s.e., the nominal
    alpha, and whether the level exceeds alpha by more than 3 s.e."""
    label: str
    level: float
    level_se: float
    level_at: float
    power: float | None
    power_se: float | None
    power_at: float | None
    alpha: float
    above_alpha: bool


def label_reliability(d: DesignAnalysis | dict | None, key: str, label: str) -> Reliability | None:
    """How far to trust contrast `key`'s label ("B-A", "supported") under design analysis d: its
    level (the largest P(label) where the label is wrong: a true effect of 0 for supported and
    reversed, the sesoi for ruled_out), its power (the smallest P(label) where it is right: the sesoi
    for supported, 0 for ruled_out; None for reversed), each with its MC s.e., over the other
    contrast's simulated effects. None for not_supported or a design without a simulated rule."""
    if d is None or label not in ("supported", "ruled_out", "reversed"):
        return None
    d = DesignAnalysis.from_dict(d)
    if d.rule_failed:
        return None
    sesoi, R = _r(d.sesoi), d.replicates
    at = lambda e: [c.labels[key][label] for c in d.rule.cells if c.effect(key) == e]  # noqa: E731
    wrong, right = {"supported": (0.0, sesoi), "ruled_out": (sesoi, 0.0), "reversed": (0.0, None)}[label]
    level = max(at(wrong))
    power = min(at(right)) if right is not None else None
    return Reliability(label=label, level=level, level_se=_r(mc_se(level, R)), level_at=wrong, power=power,
                       power_se=None if power is None else _r(mc_se(power, R)), power_at=right, alpha=d.alpha,
                       above_alpha=level > d.alpha + 3 * mc_se(level, R))


LEVEL_WARNING = "level above alpha: "  # how every `level_warnings` line starts
_WRONG_WORDS = {"supported": "the gap is truly 0", "reversed": "the gap is truly 0",
                "ruled_out": "the gap truly equals the sesoi"}


def level_warnings(d: DesignAnalysis | dict) -> list[str]:
    """One line per label of each decision contrast (supported, ruled_out, reversed) whose level
    (`label_reliability`) exceeds alpha by more than 3 MC s.e., naming it and its level, whichever
    label the readout found; and the positive control's check when it passes at no effect above alpha
    (keep_both's false positives and the negative control's false alarm have lines of their own)."""
    d = DesignAnalysis.from_dict(d)
    out = []
    for key in ("B-A", "C-B"):
        for label in ("supported", "ruled_out", "reversed"):
            rel = label_reliability(d, key, label)
            if rel is not None and rel.above_alpha:
                out.append(f"{LEVEL_WARNING}{key} `{label}` arises with P {rel.level:.3f} (MC s.e. "
                           f"{rel.level_se:.3f}) when {_WRONG_WORDS[label]}, above alpha {rel.alpha}")
    for c in d.positive_controls:
        if c.p_pass_at_0 > d.alpha + 3 * c.p_pass_at_0_se:
            out.append(f"{LEVEL_WARNING}the positive control {c.arm}'s registered check passes with P "
                       f"{c.p_pass_at_0:.3f} (MC s.e. {c.p_pass_at_0_se:.3f}) when {c.arm} is truly not above "
                       f"A, above alpha {d.alpha}")
    return out


@dataclass(frozen=True)
class Shortfall:
    """One figure of a registration below what it is held to (`registration_figures`; the pilot's
    positive-control figures: harness.readout.design.registration): `name` a stable key (e.g.
    "pessimistic.keep_both"; what decision.yaml's underpowered_override names), `value` the figure
    (a probability, or a pilot gap as a fraction; None: not measured), `bound` what it falls below,
    `text` the sentence freeze prints. Every figure is better when higher."""
    name: str
    value: float | None
    bound: float
    text: str

    def to_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "bound": self.bound, "text": self.text}


FIGURE_DIGITS = 3  # a shortfall's value as printed, written in an override and compared: 3 decimals


def figure_value(x: float | None) -> float | None:
    """A shortfall's value as freeze prints it and an override names it (FIGURE_DIGITS decimals)."""
    return None if x is None else float(f"{x:.{FIGURE_DIGITS}f}")


# each power figure freeze holds against the registered power: its key and its words
POWER_FIGURES = (("keep_both", "P(keep_both | sesoi)"), ("positive_control", "P(positive control passes)"),
                 ("joint", "P(positive control passes and keep_both)"))


def registration_figures(d: DesignAnalysis | dict) -> list[Shortfall]:
    """Where a design misses its registered power, as freeze refuses it: P(keep_both | sesoi), the
    positive control's check and their joint probability (both on the same simulated experiments,
    harness.stats.power.joint_at), each as designed and at the pessimistic components. [] when every
    one meets it. An analysis of an older format without the joint figure takes the product of the two."""
    d = DesignAnalysis.from_dict(d)
    power, out = d.power, []
    if d.rule.error is not None:
        return [Shortfall("designed.rule", None, power, f"the decision rule cannot be simulated: {d.rule.error}")]
    pos = [c.p_pass_at_effect for c in d.positive_controls]
    figures = [("designed", d.rule.keep_both_at_sesoi.p, min(pos) if pos else None, d.joint)]
    if d.pessimistic:
        p = d.pessimistic
        figures.append(("pessimistic", p.keep_both_at_sesoi.p, p.positive_control_power, p.joint))
    for where, keep, control, joint in figures:
        values = {"keep_both": keep, "positive_control": control,
                  "joint": joint.p if joint is not None else None if control is None else keep * control}
        out += [Shortfall(f"{where}.{key}", figure_value(values[key]), power, f"{where} {words} {values[key]:.3f}")
                for key, words in POWER_FIGURES if values[key] is not None and values[key] < power]
    return out


def registration_shortfalls(d: DesignAnalysis | dict) -> list[str]:
    """`registration_figures` as the sentences freeze prints."""
    return [x.text for x in registration_figures(d)]


def design_warnings(d: DesignAnalysis | dict) -> list[str]:
    """Loud warnings: assumed components, power below the registered, a false-positive rate above alpha."""
    d = DesignAnalysis.from_dict(d)
    w, c = [], d.components
    if c.source == "assumed":
        w.append("no pilot: the variance components are the registered ASSUMPTIONS (decision.yaml design.assumed), "
                 "not measurements; run `make pilot` and freeze with its pilot.json")
    if c.misfit:
        w.append(f"the fitted model cannot reproduce the {c.source} outcomes: " + "; ".join(c.misfit)
                 + ": its power figures rest on components that do not match the data")
    rule, power, pess = d.rule, d.power, d.pessimistic
    if pess and pess.keep_both_at_sesoi.p < power:
        w.append(f"at the pessimistic components (seed SDs at their {pess.level:.0%} upper confidence limit over "
                 f"{pess.components.n_seeds} seeds{' or the pooled floor' if pess.spread_pool else ''}) "
                 f"P(keep_both) at the sesoi is {pess.keep_both_at_sesoi.p:.3f}, "
                 f"below the registered power {power}")
    if pess and pess.positive_control_power is not None and pess.positive_control_power < power:
        w.append(f"at the pessimistic components the positive control's registered check passes with P "
                 f"{pess.positive_control_power:.3f}, below the registered power {power}")
    if pess and pess.joint is not None and pess.joint.p < power:
        w.append(f"at the pessimistic components the positive control's check passes and the rule keeps both with "
                 f"P {pess.joint.p:.3f} at the registered effects, below the registered power {power}")
    if rule.error is not None:
        return w + [rule.error]
    at = rule.keep_both_at_sesoi
    if at.p < power:
        w.append(f"underpowered: P(keep_both) at the sesoi ({pts(d.sesoi, signed=False)} on both contrasts) is {at.p:.3f} "
                 f"(MC s.e. {at.se:.3f}), below the registered power {power}; this design cannot resolve its sesoi")
    if d.joint is not None and d.joint.p < power:
        w.append(f"underpowered: the positive control's check passes and the rule keeps both (what a run needs to "
                 f"reach a verdict of the rule) with P {d.joint.p:.3f} (MC s.e. {d.joint.se:.3f}) at the registered "
                 f"effects, below the registered power {power}")
    fp = rule.keep_both_false_positive
    if fp.p > d.alpha + 3 * fp.se:
        w.append(f"keep_both false-positive rate {fp.p:.3f} at effects {fp.at} exceeds alpha {d.alpha} "
                 f"by more than 3 MC s.e.")
    w += level_warnings(d)
    for c in d.controls or []:
        if c.positive and c.p_pass_at_effect < power:
            w.append(f"the positive control (+{pts(c.effect, signed=False)}) passes its registered check ({c.arm} beats "
                     f"{' and '.join(c.versus)} by {pts(c.margin, signed=False)}, sign test) with P {c.p_pass_at_effect:.3f}, "
                     f"below the registered power {power}")
        if not c.positive and c.p_fires_when_equal > d.alpha + 3 * c.p_fires_when_equal_se:
            w.append(f"the negative control's check ({c.arm} must not beat {' and '.join(c.versus)} by "
                     f"{pts(c.margin, signed=False)}) fires with P {c.p_fires_when_equal:.3f} when {c.arm} truly equals "
                     f"{c.versus[0]}: above alpha {d.alpha}")
    return w

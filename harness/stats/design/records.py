"""What the design analysis reads and writes, as frozen records.

Each record has one writer, `to_dict`, giving the JSON object freeze.json and verdict.json hold (the
same keys in the same order, floats rounded to 10 significant digits where the analysis rounds them),
and, where the object is read back from a file (the moments of pilot.json and decision.yaml, a design
analysis of verdict.json), one reader, `from_dict`, its inverse: `from_dict(x.to_dict())` equals x.
Probabilities are fractions in [0, 1]; pass rates and effects are fractions (0.05 = 5 points); SDs
named `*_sd` on the logit scale are logits, seed SDs of pass rates are fractions. Arms are "A", "B", "C".
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace

ARMS = ("A", "B", "C")
MOMENT_KEYS = {
    "n_items": "number of items the moments were measured on (int)",
    "pass_rates": "{arm: mean pass rate over items x seeds} for A, B, C (fractions)",
    "seed_sd": "{arm: SD (ddof 1) of the per-seed pass rates} for A, B, C (fractions)",
    "seed_agreement": "{arm: P(two seeds of the arm agree on an item)} for A, B, C",
    "arm_agreement": "P(two different arms agree on an item), averaged over arm pairs and seed pairs",
}


def rounded(x: float) -> float:
    """x to 10 significant digits: how every figure of the analysis is written."""
    return float(f"{float(x):.10g}")


def mc_se(p: float, R: int) -> float:
    """The Monte-Carlo standard error sqrt(p (1 - p) / R) of a probability p estimated from R experiments."""
    return math.sqrt(max(p * (1 - p), 0.0) / R)


def round_tree(x):
    """A JSON tree with its keys sorted and its floats `rounded`."""
    if isinstance(x, dict):
        return {k: round_tree(v) for k, v in sorted(x.items())}
    return rounded(x) if isinstance(x, float) else x


def _build(cls, d, where: str, **readers):
    """`cls` from the JSON object d: each field from d[name] (a field with a default may be absent and
    keeps its default), through readers[name] (value, where) when given, an empty or null section
    staying None; ValueError naming `where` and the field when d is no object or lacks a required one."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object ({cls.__name__}), got {type(d).__name__}")
    values = {}
    for f in fields(cls):
        if f.name not in d:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"{where}: lacks field '{f.name}' ({cls.__name__})")
            continue
        v, reader = d[f.name], readers.get(f.name)
        values[f.name] = v if reader is None else (reader(v, f"{where}.{f.name}") if v else None)
    return cls(**values)


def _each(reader):
    """A reader of a list of records."""
    return lambda xs, where: [reader(x, f"{where}[{i}]") for i, x in enumerate(xs)]


def _per_arm(reader):
    """A reader of {arm: record}."""
    return lambda xs, where: {a: reader(x, f"{where}.{a}") for a, x in xs.items()}


# ---- the moments the model is fitted to -------------------------------------------------------

@dataclass(frozen=True)
class Moments:
    """The observable moments the model's components are fitted to (MOMENT_KEYS): from a pilot
    (pilot.json "variance_components"), an experiment's outcomes or decision.yaml `design.assumed`.

    n_items: the items they were measured on; pass_rates, seed_sd, seed_agreement: {arm: fraction}
    for A, B, C (seed_sd: the SD, ddof 1, of an arm's per-seed pass rates, at most 0.5); arm_agreement:
    P(two different arms agree on an item) over arm pairs and seed pairs."""
    n_items: int
    pass_rates: dict
    seed_sd: dict
    seed_agreement: dict
    arm_agreement: float

    @classmethod
    def from_dict(cls, m, where: str = "moments") -> "Moments":
        """The moments of a mapping with exactly the MOMENT_KEYS; ValueError naming `where`, the key and
        what was expected. Only arms A, B, C are kept, each value as a float."""
        if isinstance(m, Moments):
            m = m.to_dict()
        if not isinstance(m, dict):
            raise ValueError(f"{where}: expected a mapping with keys {sorted(MOMENT_KEYS)}, got {type(m).__name__}")
        missing, extra = sorted(set(MOMENT_KEYS) - set(m)), sorted(set(m) - set(MOMENT_KEYS))
        if missing or extra:
            raise ValueError(f"{where}: " + (f"missing key(s) {missing}" if missing else f"unknown key(s) {extra}")
                             + f"; expected {', '.join(f'{k} ({v})' for k, v in MOMENT_KEYS.items())}")
        n = m["n_items"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{where}.n_items: expected an integer >= 1, got {n!r}")

        def frac(v, key, hi=1.0):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= hi:
                raise ValueError(f"{where}.{key}: expected a number in [0.0, {hi}], got {v!r}")
            return float(v)

        per_arm = {}
        for key in ("pass_rates", "seed_sd", "seed_agreement"):
            d = m[key]
            if not isinstance(d, dict) or not set(ARMS) <= set(d):
                raise ValueError(f"{where}.{key}: expected a mapping with arms {list(ARMS)}, got {d!r}")
            per_arm[key] = {a: frac(d[a], f"{key}.{a}", 0.5 if key == "seed_sd" else 1.0) for a in ARMS}
        for a in ARMS:
            if not 0.0 < per_arm["pass_rates"][a] < 1.0:
                raise ValueError(f"{where}.pass_rates.{a}: must lie strictly between 0 and 1, "
                                 f"got {per_arm['pass_rates'][a]}")
        return cls(n_items=n, arm_agreement=frac(m["arm_agreement"], "arm_agreement"), **per_arm)

    def rounded(self) -> "Moments":
        """These moments as they are written beside the components (every figure `rounded`)."""
        return Moments.from_dict(round_tree(self.to_dict()), "moments")

    def to_dict(self) -> dict:
        return {"n_items": self.n_items, "pass_rates": dict(self.pass_rates), "seed_sd": dict(self.seed_sd),
                "seed_agreement": dict(self.seed_agreement), "arm_agreement": self.arm_agreement}


# ---- the fit, the pooled run spread and the components as written -----------------------------

@dataclass(frozen=True)
class FitPair:
    """One moment as observed and as the fitted model gives it (both rounded)."""
    observed: float
    model: float

    @classmethod
    def from_dict(cls, d, where: str = "FitPair") -> "FitPair":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        return {"model": self.model, "observed": self.observed}


@dataclass(frozen=True)
class FitReport:
    """What the fitted model reproduces beside the observed moments: seed_agreement and seed_sd per
    arm, the arms' agreement, and `at_bound`, the components the fit pushed to a bound
    ("run_sd.<arm>", "tau", "item_sd"), sorted."""
    seed_agreement: dict  # {arm: FitPair}
    arm_agreement: FitPair
    seed_sd: dict         # {arm: FitPair}; seed SDs of pass rates (fractions)
    at_bound: list

    @classmethod
    def from_dict(cls, d, where: str = "fit") -> "FitReport":
        pairs = _per_arm(FitPair.from_dict)
        return _build(cls, d, where, seed_agreement=pairs, seed_sd=pairs, arm_agreement=FitPair.from_dict)

    def to_dict(self) -> dict:
        """Keys sorted, as every nested figure of the components is written."""
        return {"arm_agreement": self.arm_agreement.to_dict(), "at_bound": list(self.at_bound),
                "seed_agreement": {a: x.to_dict() for a, x in sorted(self.seed_agreement.items())},
                "seed_sd": {a: x.to_dict() for a, x in sorted(self.seed_sd.items())}}


@dataclass(frozen=True)
class SpreadPool:
    """The run SD (logit) pooled over groups of seeds (`pooled_run_spread`): its estimate `run_sd` and
    its one-sided `level` upper confidence limit `run_sd_upper`, on `df` degrees of freedom from
    `groups` (arm, round) groups covering `arms` and `rounds`."""
    df: int
    level: float
    run_sd: float
    run_sd_upper: float
    arms: list
    rounds: list
    groups: int

    @classmethod
    def from_dict(cls, d, where: str = "SpreadPool") -> "SpreadPool":
        return _build(cls, d, where)

    def rounded(self) -> "SpreadPool":
        """This pool as it is written (every figure `rounded`)."""
        return SpreadPool.from_dict(self.to_dict())

    def to_dict(self) -> dict:
        """Keys sorted, floats rounded."""
        return {"arms": list(self.arms), "df": self.df, "groups": self.groups, "level": rounded(self.level),
                "rounds": list(self.rounds), "run_sd": rounded(self.run_sd), "run_sd_upper": rounded(self.run_sd_upper)}


@dataclass(frozen=True)
class ComponentsReport:
    """A fitted model's components as the design analysis writes them (VarianceComponents.report):
    every figure rounded. source: "pilot", "observed", "assumed" or a pessimistic refit's description;
    control_rate, gate_rate, base_rate: pass rates; item_sd, arm_item_sd, run_sd {arm: sd}: logits;
    misfit, fit_notes: sentences; n_seeds: seeds the moments were measured over (None: unknown);
    rounds_read {arm: round (0-based)} and rounds: where the moments were read ({} / None: unknown)."""
    source: str
    control_rate: float
    gate_rate: float
    item_sd: float
    arm_item_sd: float
    run_sd: dict
    base_rate: float | None = None
    fit: FitReport | None = None
    misfit: list = field(default_factory=list)
    fit_notes: list = field(default_factory=list)
    n_seeds: int | None = None
    moments: Moments | None = None
    rounds_read: dict = field(default_factory=dict)
    rounds: int | None = None
    spread_pool: SpreadPool | None = None

    @classmethod
    def from_dict(cls, d, where: str = "components") -> "ComponentsReport":
        return _build(cls, d, where, fit=FitReport.from_dict, moments=Moments.from_dict,
                      spread_pool=SpreadPool.from_dict)

    def to_dict(self) -> dict:
        return {"source": self.source, "control_rate": self.control_rate, "gate_rate": self.gate_rate,
                "item_sd": self.item_sd, "arm_item_sd": self.arm_item_sd, "run_sd": dict(self.run_sd),
                "base_rate": self.base_rate, "fit": self.fit.to_dict() if self.fit else {},
                "misfit": list(self.misfit), "fit_notes": list(self.fit_notes), "n_seeds": self.n_seeds,
                "moments": round_tree(self.moments.to_dict()) if self.moments else {},
                "rounds_read": dict(self.rounds_read), "rounds": self.rounds,
                "spread_pool": self.spread_pool.to_dict() if self.spread_pool else None}


# ---- the rule's operating characteristic ------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """One cell of true effects (fractions) of the rule's operating characteristic: P(each verdict)
    {outcome: P} with its Monte-Carlo s.e. {outcome: se}, P(each label) {contrast: {label: P}}, the
    control's simulated pass rate, and P(keep_both) under the other spread rule (None: no other rule)."""
    effect_BA: float
    effect_CB: float
    control_rate: float
    verdict: dict
    labels: dict
    verdict_se: dict
    keep_both_alternative: float | None = None

    @property
    def keep_both(self) -> float:
        """P(keep_both) in this cell."""
        return self.verdict["keep_both"]

    @property
    def keep_both_se(self) -> float:
        return self.verdict_se["keep_both"]

    def effect(self, contrast: str) -> float:
        """The cell's true effect of contrast "B-A" or "C-B"."""
        return self.effect_BA if contrast == "B-A" else self.effect_CB

    @classmethod
    def from_dict(cls, d, where: str = "Cell") -> "Cell":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        alt = {} if self.keep_both_alternative is None else {"keep_both_alternative": self.keep_both_alternative}
        return {"effect_BA": self.effect_BA, "effect_CB": self.effect_CB, "control_rate": self.control_rate, **alt,
                "verdict": dict(self.verdict), "labels": {k: dict(v) for k, v in self.labels.items()},
                "verdict_se": dict(self.verdict_se)}


@dataclass(frozen=True)
class Estimate:
    """A simulated probability and its Monte-Carlo standard error sqrt(p (1 - p) / R)."""
    p: float
    se: float

    @classmethod
    def from_dict(cls, d, where: str = "Estimate") -> "Estimate":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        return {"p": self.p, "se": self.se}


@dataclass(frozen=True)
class FalsePositive:
    """keep_both's false-positive rate: the largest P(keep_both) found over the null set, its s.e., the
    true effects [B-A, C-B] where it was found, the grid's worst null cell {p, at} and how it was found."""
    p: float
    se: float
    at: list
    grid_worst: dict
    found_by: str

    @classmethod
    def from_dict(cls, d, where: str = "FalsePositive") -> "FalsePositive":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        return {"p": self.p, "se": self.se, "at": list(self.at), "grid_worst": dict(self.grid_worst),
                "found_by": self.found_by}


@dataclass(frozen=True)
class Alternative:
    """P(keep_both) under the other spread rule on the same simulated experiments: at the sesoi and
    its largest over the grid's null cells."""
    spread_rule: dict
    keep_both_at_sesoi: float
    keep_both_false_positive: float

    @classmethod
    def from_dict(cls, d, where: str = "Alternative") -> "Alternative":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        return {"spread_rule": dict(self.spread_rule), "keep_both_at_sesoi": self.keep_both_at_sesoi,
                "keep_both_false_positive": self.keep_both_false_positive}


@dataclass(frozen=True)
class RuleOC:
    """The decision rule's operating characteristic (`rule_oc`): the 3 x 3 cells of true effects
    {0, sesoi, 2 sesoi} of B-A x C-B in that order, keep_both's false positives, P(keep_both) at the sesoi
    and the other spread rule's. When the rule cannot be simulated only `error` is set."""
    cells: list = field(default_factory=list)  # [Cell]
    keep_both_false_positive: FalsePositive | None = None
    keep_both_at_sesoi: Estimate | None = None
    alternative: Alternative | None = None
    error: str | None = None

    @classmethod
    def from_dict(cls, d, where: str = "rule") -> "RuleOC":
        if isinstance(d, cls):
            return d
        if isinstance(d, dict) and "error" not in d:  # a simulated rule has all three
            _build(_Simulated, d, where)
        return _build(cls, d, where, cells=_each(Cell.from_dict), keep_both_false_positive=FalsePositive.from_dict,
                      keep_both_at_sesoi=Estimate.from_dict, alternative=Alternative.from_dict)

    def to_dict(self) -> dict:
        if self.error is not None:
            return {"error": self.error}
        return {"cells": [c.to_dict() for c in self.cells],
                "keep_both_false_positive": self.keep_both_false_positive.to_dict(),
                "keep_both_at_sesoi": self.keep_both_at_sesoi.to_dict(),
                "alternative": None if self.alternative is None else self.alternative.to_dict()}


@dataclass(frozen=True)
class _Simulated:
    """The fields a simulated rule (no `error`) must hold."""
    cells: list
    keep_both_false_positive: dict
    keep_both_at_sesoi: dict


# ---- one contrast, the control checks, C's gate -------------------------------------------------

@dataclass(frozen=True)
class CurvePoint:
    """P(each label) {label: P} of one contrast at one true effect, the control's simulated pass rate
    and the Monte-Carlo s.e. of P(supported)."""
    effect: float
    control_rate: float
    labels: dict
    supported_se: float

    @classmethod
    def from_dict(cls, d, where: str = "CurvePoint") -> "CurvePoint":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        return {"effect": self.effect, "control_rate": self.control_rate, "labels": dict(self.labels),
                "supported_se": self.supported_se}


@dataclass(frozen=True)
class PositiveControlCurve:
    """One contrast against A by true effect (`contrast_oc`), for a positive control sized for `effect`."""
    effect: float
    curve: list  # [CurvePoint], effects ascending

    @classmethod
    def from_dict(cls, d, where: str = "positive_control") -> "PositiveControlCurve":
        return _build(cls, d, where, curve=_each(CurvePoint.from_dict))

    def to_dict(self) -> dict:
        return {"effect": self.effect, "curve": [x.to_dict() for x in self.curve]}


@dataclass(frozen=True)
class ControlPower:
    """P(a registered control check passes or fires), simulated as the readout applies it (`control_oc`).
    Positive (role "positive"): P(pass) at no effect and at `effect` over A, with the control's and the
    base's simulated pass rates. Negative: P(fires) when the arm truly equals the one it must not beat
    (`effect` 0). Each probability with its Monte-Carlo s.e.; the other role's fields are None."""
    role: str
    arm: str
    versus: list
    margin: float
    effect: float
    control_rate: float | None = None
    base_rate: float | None = None
    p_pass_at_0: float | None = None
    p_pass_at_0_se: float | None = None
    p_pass_at_effect: float | None = None
    p_pass_at_effect_se: float | None = None
    p_fires_when_equal: float | None = None
    p_fires_when_equal_se: float | None = None

    @property
    def positive(self) -> bool:
        return self.role == "positive"

    @classmethod
    def from_dict(cls, d, where: str = "ControlPower") -> "ControlPower":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        head = {"role": self.role, "arm": self.arm, "versus": list(self.versus), "margin": self.margin}
        if self.positive:
            return {**head, "effect": self.effect, "control_rate": self.control_rate, "base_rate": self.base_rate,
                    "p_pass_at_0": self.p_pass_at_0, "p_pass_at_0_se": self.p_pass_at_0_se,
                    "p_pass_at_effect": self.p_pass_at_effect, "p_pass_at_effect_se": self.p_pass_at_effect_se}
        return {**head, "effect": self.effect, "p_fires_when_equal": self.p_fires_when_equal,
                "p_fires_when_equal_se": self.p_fires_when_equal_se}


@dataclass(frozen=True)
class GatePoint:
    """P(C's gate commits) at a true successor - root difference `diff`, with its Monte-Carlo s.e."""
    diff: float
    p_commit: float
    se: float

    @classmethod
    def from_dict(cls, d, where: str = "GatePoint") -> "GatePoint":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        return {"diff": self.diff, "p_commit": self.p_commit, "se": self.se}


@dataclass(frozen=True)
class GateOC:
    """C's registered confirm gate (rule, margin in probes, alpha, probes per round) and its P(commit)
    curve against the true successor - root difference (`gate_oc`)."""
    rule: str
    margin: int
    alpha: float
    n_confirm: int
    curve: list  # [GatePoint], diffs ascending

    @classmethod
    def from_dict(cls, d, where: str = "gate") -> "GateOC":
        return _build(cls, d, where, curve=_each(GatePoint.from_dict))

    def to_dict(self) -> dict:
        return {"rule": self.rule, "margin": self.margin, "alpha": self.alpha, "n_confirm": self.n_confirm,
                "curve": [x.to_dict() for x in self.curve]}


# ---- the pessimistic design and the whole analysis ---------------------------------------------

@dataclass(frozen=True)
class Pessimistic:
    """The design at the pessimistic components (VarianceComponents.pessimistic): the seed SDs at their
    `level` upper confidence limit (or the pooled floor `spread_pool`), the seed agreement fitted
    (`agreement`: "mean", "lowest" or "highest", the end with the lower power) and P(keep_both | sesoi)
    at each agreement tried; P(keep_both | sesoi) there, and the smallest P(positive control passes).
    `control_checked`: whether control checks were simulated (the figure is written then, None when
    no check is positive). `joint`: P(every positive control's check passes and keep_both) at the
    registered effects, on the same simulated experiments (`harness.stats.power.joint_at`); None
    without a positive control."""
    level: float
    components: ComponentsReport
    keep_both_at_sesoi: Estimate
    agreement: str = "mean"
    keep_both_by_agreement: dict = field(default_factory=dict)
    spread_pool: SpreadPool | None = None
    positive_control_power: float | None = None
    control_checked: bool = False
    joint: Estimate | None = None

    @classmethod
    def from_dict(cls, d, where: str = "pessimistic") -> "Pessimistic":
        x = _build(cls, d, where, components=ComponentsReport.from_dict, spread_pool=SpreadPool.from_dict,
                   keep_both_at_sesoi=Estimate.from_dict, joint=Estimate.from_dict)
        return replace(x, control_checked="positive_control_power" in d)

    def to_dict(self) -> dict:
        out = {"level": self.level, "components": self.components.to_dict(), "agreement": self.agreement,
               "keep_both_by_agreement": dict(self.keep_both_by_agreement),
               "spread_pool": None if self.spread_pool is None else self.spread_pool.to_dict(),
               "keep_both_at_sesoi": self.keep_both_at_sesoi.to_dict()}
        if self.control_checked:
            out["positive_control_power"] = self.positive_control_power
        if self.joint is not None:  # an analysis of an older format has none, and writes none
            out["joint"] = self.joint.to_dict()
        return out


@dataclass(frozen=True)
class BaseContrastOC:
    """One decision contrast about the recipe rather than the base (harness.stats.design.bases):
    base_sd the registered SD over bases of its true effect and base_sd_upper its upper confidence
    limit (fractions); per_base_se the simulated standard error of one base's gap about that base's own
    effect; the rule's P(label | the RECIPE's effect): supported and reversed at 0 and ruled_out at the
    sesoi (levels, each <= alpha only if bases did not move it), ruled_out at 0 and supported at the sesoi
    (power), level_se the MC s.e. of the largest level; bases_needed (and at base_sd_upper) the bases of
    this size a t-test over bases needs to rule out the sesoi with the registered power (None: > 1000),
    and the same at the fewest seeds per base."""
    contrast: str
    base_sd: float
    base_sd_upper: float
    per_base_se: float
    supported_at_0: float
    reversed_at_0: float
    ruled_out_at_sesoi: float
    ruled_out_at_0: float
    supported_at_sesoi: float
    level_se: float
    bases_needed: int | None
    bases_needed_upper: int | None
    per_base_se_few: float | None = None   # per_base_se and bases_needed at the fewest seeds per base the
    bases_needed_few: int | None = None    # rule reads (BaseOC.fewest_seeds); None: the design has no more

    @classmethod
    def from_dict(cls, d, where: str = "BaseContrastOC") -> "BaseContrastOC":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def level(self) -> float:
        """The largest P(a label | the recipe's effect where that label is wrong)."""
        return max(self.supported_at_0, self.reversed_at_0, self.ruled_out_at_sesoi)


@dataclass(frozen=True)
class BaseOC:
    """The design about the recipe (`bases.base_oc`): the bases the registered base SDs were measured
    over, the confidence level of their upper limits, the seeds per base (this design's and the fewest the
    rule reads), one BaseContrastOC per decision contrast."""
    bases_measured: int
    level: float
    seeds_per_base: int
    fewest_seeds: int
    contrasts: list  # [BaseContrastOC]

    @classmethod
    def from_dict(cls, d, where: str = "bases") -> "BaseOC":
        return _build(cls, d, where, contrasts=_each(BaseContrastOC.from_dict))

    def to_dict(self) -> dict:
        return {"bases_measured": self.bases_measured, "level": self.level, "seeds_per_base": self.seeds_per_base,
                "fewest_seeds": self.fewest_seeds, "contrasts": [c.to_dict() for c in self.contrasts]}


@dataclass(frozen=True)
class DesignSize:
    """The simulated experiment's size: probe items x seeds per arm, and the arms."""
    n_items: int
    n_seeds: int
    arms: list

    @classmethod
    def from_dict(cls, d, where: str = "DesignSize") -> "DesignSize":
        return _build(cls, d, where)

    def to_dict(self) -> dict:
        return {"n_items": self.n_items, "n_seeds": self.n_seeds, "arms": list(self.arms)}


@dataclass(frozen=True)
class DesignAnalysis:
    """One design analysis (`design_analysis`): the size, the simulation's settings (replicates per
    cell, its rng seed, its bootstrap resamples beside the registered), the registered rule's figures
    (spread test, alpha, sesoi, power), the components, the rule's operating characteristic, and when
    registered the positive control's curve, the control checks' power, the joint probability that
    every positive control's check passes and the rule keeps both at the registered effects (`joint`:
    the power criterion a run needs, harness.stats.power.joint_at), the pessimistic design and C's
    gate; its warnings. An analysis that could not run (no components could be fitted) holds only
    `error` (the readout's observed analysis)."""
    size: DesignSize | None = None
    replicates: int | None = None
    rng_seed: int | None = None
    bootstrap_resamples: int | None = None
    registered_resamples: int | None = None
    spread_test: str | None = None
    alpha: float | None = None
    sesoi: float | None = None
    power: float | None = None
    components: ComponentsReport | None = None
    rule: RuleOC | None = None
    positive_control: PositiveControlCurve | None = None
    controls: list | None = None          # [ControlPower]; None: no control check registered
    pessimistic: Pessimistic | None = None
    gate: GateOC | None = None
    bases: BaseOC | None = None           # the design about the recipe; None: no base spread registered
    joint: Estimate | None = None         # P(positive controls pass and keep_both | registered effects); None: no
                                          # positive control, a rule that cannot decide, or an older analysis
    warnings: list = field(default_factory=list)
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def rule_failed(self) -> bool:
        """No design, or the rule's simulation itself could not run."""
        return self.failed or self.rule.error is not None

    @property
    def keep_both_at_sesoi(self) -> float:
        return self.rule.keep_both_at_sesoi.p

    @property
    def positive_controls(self) -> list:
        """The positive control checks' power rows ([ControlPower])."""
        return [c for c in self.controls or [] if c.positive]

    @classmethod
    def from_dict(cls, d, where: str = "design") -> "DesignAnalysis":
        if isinstance(d, cls):
            return d
        if isinstance(d, dict) and "error" not in d:  # a design that ran has all three
            _build(_Ran, d, where)
        return _build(cls, d, where, size=DesignSize.from_dict, components=ComponentsReport.from_dict,
                      rule=RuleOC.from_dict, positive_control=PositiveControlCurve.from_dict,
                      controls=_each(ControlPower.from_dict), pessimistic=Pessimistic.from_dict, gate=GateOC.from_dict,
                      bases=BaseOC.from_dict, joint=Estimate.from_dict)

    def to_dict(self) -> dict:
        if self.failed:
            return {"error": self.error}
        out = {"size": self.size.to_dict(), "replicates": self.replicates, "rng_seed": self.rng_seed,
               "bootstrap_resamples": self.bootstrap_resamples, "registered_resamples": self.registered_resamples,
               "spread_test": self.spread_test, "alpha": self.alpha, "sesoi": self.sesoi, "power": self.power,
               "components": self.components.to_dict(), "rule": self.rule.to_dict()}
        if self.positive_control is not None:
            out["positive_control"] = self.positive_control.to_dict()
        if self.controls is not None:
            out["controls"] = [c.to_dict() for c in self.controls]
        if self.pessimistic is not None:
            out["pessimistic"] = self.pessimistic.to_dict()
        if self.gate is not None:
            out["gate"] = self.gate.to_dict()
        if self.bases is not None:
            out["bases"] = self.bases.to_dict()
        if self.joint is not None:
            out["joint"] = self.joint.to_dict()
        out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True)
class _Ran:
    """The fields a design analysis that ran (no `error`) must hold."""
    size: dict
    components: dict
    rule: dict

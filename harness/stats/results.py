"""The decision rule's spec and its results on one experiment, as typed records.

Each class has one writer, `to_dict`, which gives the JSON object the readout stores in verdict.json
(the same keys in the same order, numbers rounded to 10 significant digits where they are computed);
the readout's reader of that file is harness.readout.verdict. Units: pass-rate fractions (0.05 = 5
pts) for rates, gaps and bounds; p-values and alpha as probabilities. What each figure means is said
in harness.stats.contrasts.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


def sig(x: float) -> float:
    """Round to 10 significant digits (byte-stable JSON across platforms)."""
    return float(f"{float(x):.10g}")


# ---- the rule's spec ------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpreadRule:
    """How a gap must exceed the seed spread: test "welch" (one-sided Welch t-test on both arms' per-seed
    pass rates) or "range" (gap > multiplier x the larger of the two arms' seed ranges)."""
    test: str
    multiplier: float | None = None  # "range" only: a factor on the seed range (pass-rate fraction)

    def to_dict(self) -> dict:
        return {"test": "welch"} if self.test == "welch" else {"test": "range", "multiplier": self.multiplier}


@dataclass(frozen=True)
class BootstrapSpec:
    """The registered two-stage bootstrap."""
    n_resamples: int          # replicates B
    method: str               # "percentile" or "basic" (lower case)
    confidence_level: float   # two-sided level, 1 - 2 alpha (fraction)
    rng_seed: int             # seed of the one Generator all draws come from

    def to_dict(self) -> dict:
        return {"n_resamples": self.n_resamples, "method": self.method, "confidence_level": self.confidence_level,
                "rng_seed": self.rng_seed}


@dataclass(frozen=True)
class RuleSpec:
    """The decision spec as the stats code reads it (decision.yaml + bootstrap.yaml), checked and
    normalised by harness.stats.contrasts.RuleSpec.of / validate_spec."""
    power: float                           # power the design analysis must reach at the sesoi (fraction)
    alpha: float                           # size of every one-sided test (probability)
    sesoi: float                           # smallest effect size of interest (pass-rate fraction)
    contrasts: tuple[tuple[str, str], ...]  # the registered (hi, lo) pairs, in order
    spread_rule: SpreadRule
    bootstrap: BootstrapSpec

    def to_dict(self) -> dict:
        """The normalised spec dict (validate_spec's result; the analysis' "spec" once `recorded`)."""
        return {"power": self.power, "alpha": self.alpha, "sesoi": self.sesoi,
                "contrasts": [[hi, lo] for hi, lo in self.contrasts], "spread_rule": self.spread_rule.to_dict(),
                "bootstrap": self.bootstrap.to_dict()}

    def recorded(self) -> "RuleSpec":
        """The spec as the analysis records it: alpha, sesoi, power and the confidence level at 10 digits."""
        return replace(self, alpha=sig(self.alpha), sesoi=sig(self.sesoi), power=sig(self.power),
                       bootstrap=replace(self.bootstrap, confidence_level=sig(self.bootstrap.confidence_level)))


# ---- one contrast ---------------------------------------------------------------------------------

BOOTSTRAP_WORDS = "two-stage: each arm's seeds with replacement, then items shared by both arms"
SIGN_TEST_WORDS = "exact binomial, one-sided, on the signs of per-item net differences across seeds"
RUN_BOUND_WORDS = ("gap -+ sqrt(t(1 - alpha, k - 1)^2 x (s_hi^2/k + s_lo^2/k) + t(1 - alpha, n - 1)^2 x "
                   "sigma_items^2/n): run spread of both arms on one arm's seeds' degrees of freedom, "
                   "and item sampling on the items'")


@dataclass(frozen=True)
class WelchSummary:
    """The seed rule "welch" on one contrast."""
    t: float | str     # Welch's t; "inf" / "-inf" where it is infinite (as written)
    df: float          # Welch-Satterthwaite degrees of freedom (0 where degenerate)
    p: float           # one-sided p-value of hi > lo
    p_reverse: float   # one-sided p-value of lo > hi

    def to_dict(self) -> dict:
        return {"welch_t": self.t, "welch_df": self.df, "welch_p": self.p, "welch_p_reverse": self.p_reverse}


@dataclass(frozen=True)
class RangeSummary:
    """The seed rule "range" on one contrast."""
    multiplier: float  # the registered factor on the seed range
    threshold: float   # multiplier x the larger seed range (pass-rate fraction) the gap must exceed

    def to_dict(self) -> dict:
        return {"spread_multiplier": self.multiplier, "spread_threshold": self.threshold}


@dataclass(frozen=True)
class RunBoundSummary:
    """The run bound on one contrast; low, high and df are None where no arm shows seed spread."""
    informative: bool
    low: float | None   # one-sided (1 - alpha) low end on the gap (pass-rate fraction)
    high: float | None  # one-sided (1 - alpha) high end on the gap (pass-rate fraction)
    df: float | None    # degrees of freedom of the seeds' part (k - 1)

    def to_dict(self) -> dict:
        return {"run_bound": RUN_BOUND_WORDS, "run_bound_informative": self.informative,
                "run_bound_low": self.low, "run_bound_high": self.high, "run_bound_df": self.df}


@dataclass(frozen=True)
class ContrastResult:
    """The registered test of "arm hi beats arm lo" on one experiment (harness.stats.contrasts.paired_contrast)."""
    hi: str
    lo: str
    n_items: int
    n_seeds: int
    mean_hi: float                 # pass rate of hi over items x seeds (fraction)
    mean_lo: float                 # pass rate of lo over items x seeds (fraction)
    gap: float                     # mean_hi - mean_lo (pass-rate fraction)
    ci_low: float                  # two-stage bootstrap interval's low end on the gap (fraction)
    ci_high: float                 # its high end (fraction)
    confidence_level: float        # the interval's two-sided level, 1 - 2 alpha
    bootstrap_method: str
    n_resamples: int
    rng_seed: int
    n_items_hi: int                # items whose net difference across seeds favours hi
    n_items_lo: int                # ... favours lo
    n_items_tied: int              # ... is zero
    sign_p: float                  # exact one-sided sign test p-value, hi > lo
    sign_p_reverse: float          # ... lo > hi
    seed_rates_hi: list[float]     # hi's per-seed pass rates, ascending (fractions)
    seed_rates_lo: list[float]     # lo's per-seed pass rates, ascending (fractions)
    spread_test: str               # the seed rule: "welch" or "range"
    alpha: float
    sesoi: float                   # pass-rate fraction
    criteria: dict[str, bool]      # each criterion of the labels by name (harness.stats.contrasts)
    label: str                     # supported / not_supported / ruled_out / reversed
    run_bound: RunBoundSummary
    seed_test: WelchSummary | RangeSummary

    def to_dict(self) -> dict:
        return {"hi": self.hi, "lo": self.lo, "n_items": self.n_items, "n_seeds": self.n_seeds,
                "mean_hi": self.mean_hi, "mean_lo": self.mean_lo, "gap": self.gap, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "confidence_level": self.confidence_level,
                "bootstrap_method": self.bootstrap_method, "bootstrap": BOOTSTRAP_WORDS,
                "n_resamples": self.n_resamples, "rng_seed": self.rng_seed, "n_items_hi": self.n_items_hi,
                "n_items_lo": self.n_items_lo, "n_items_tied": self.n_items_tied, "sign_test": SIGN_TEST_WORDS,
                "sign_p": self.sign_p, "sign_p_reverse": self.sign_p_reverse,
                "seed_rates_hi": list(self.seed_rates_hi), "seed_rates_lo": list(self.seed_rates_lo),
                "spread_test": self.spread_test, "alpha": self.alpha, "sesoi": self.sesoi,
                "criteria": dict(self.criteria), "label": self.label,
                **self.run_bound.to_dict(), **self.seed_test.to_dict()}


# ---- the analysis of one experiment ---------------------------------------------------------------

@dataclass(frozen=True)
class ArmResult:
    """One arm's pass rate over items x seeds with its two-stage bootstrap interval."""
    mean: float               # passed / n (fraction)
    passed: int               # passes over items x seeds
    n: int                    # items x seeds
    ci_low: float             # interval's low end (fraction)
    ci_high: float            # interval's high end (fraction)
    seed_rates: list[float]   # per-seed pass rates, ascending (fractions)

    def to_dict(self) -> dict:
        return {"mean": self.mean, "passed": self.passed, "n": self.n, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "seed_rates": list(self.seed_rates)}


@dataclass(frozen=True)
class Labelled:
    """What the decision rule reads of a contrast: its arms and its label (a ContrastResult has both)."""
    hi: str
    lo: str
    label: str


@dataclass(frozen=True)
class ContrastSays:
    """One decision contrast's label and its sentence."""
    label: str
    says: str

    def to_dict(self) -> dict:
        return {"label": self.label, "says": self.says}


@dataclass(frozen=True)
class RuleDecision:
    """The decision rule's own outcome (harness.stats.contrasts.decide)."""
    outcome: str                           # keep_both / drop_heircommit / loop_earns_nothing / not_resolved
    clause: str                            # the clause that held, in words
    contrasts: dict[str, ContrastSays]     # "B-A", "C-B"
    clauses_held: dict[str, bool]          # each clause of the rule in words -> whether it held

    def to_dict(self) -> dict:
        return {"outcome": self.outcome, "clause": self.clause,
                "contrasts": {k: c.to_dict() for k, c in self.contrasts.items()},
                "clauses_held": dict(self.clauses_held)}


@dataclass(frozen=True)
class AnalysisResult:
    """The whole registered analysis of one experiment (harness.stats.contrasts.analyze)."""
    n_items: int
    seeds: list[int]
    arms: dict[str, ArmResult]
    per_seed: dict[str, dict[str, float]]   # arm -> seed (as a string) -> pass rate (fraction)
    contrasts: dict[str, ContrastResult]    # "hi-lo" -> its contrast, in registered order
    verdict: RuleDecision
    spec: RuleSpec                          # as recorded (RuleSpec.recorded)

    def to_dict(self) -> dict:
        return {"n_items": self.n_items, "seeds": list(self.seeds),
                "arms": {a: r.to_dict() for a, r in self.arms.items()},
                "per_seed": {a: dict(r) for a, r in self.per_seed.items()},
                "contrasts": {k: c.to_dict() for k, c in self.contrasts.items()},
                "verdict": self.verdict.to_dict(), "spec": self.spec.to_dict()}

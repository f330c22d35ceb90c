"""verdict.json as typed records: `Verdict.from_dict` is its one reader (the report, the command's
last lines, the audit), `Verdict.to_dict` its one writer (harness.readout.analyzer.verdict_bytes).

Reading then writing gives back the same dict (harness.core.typed), so verdict.json's bytes are what
they were, and a verdict of an older format reads: the sections it lacks (provenance, strata,
verifier reasons, deviations, the design analysis) are None. What each figure means is said where it
is computed: harness.stats.contrasts (the analysis), harness.stats.power (the design analysis),
harness.readout.controls (the control checks and the final verdict), harness.readout.analyzer (the rest).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core.typed import Typed
from harness.stats.design.records import DesignAnalysis

# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class RunInput(Typed):
    """One run read: its manifest's sha256, its chains' heads, its final round and checkpoint."""
    manifest_sha256: str
    chain_heads: dict
    final_round: int
    final_checkpoint: str | None = None


@dataclass(frozen=True)
class Registered(Typed):
    """What the protocol registers: arms, seeds, rounds, each arm's role and definition."""
    arms: list
    seeds: list
    rounds: int
    roles: dict
    definitions: dict | None = None


@dataclass(frozen=True)
class Inputs(Typed):
    """The hashes the verdict was computed from."""
    lock_hash: str
    lock_file_sha256: str
    lock_recorded: dict
    code_version: str
    probe_set_sha256: str | None
    seed_set_sha256: str | None
    base_sha256: str | None
    n_probes: int
    max_bytes: int
    registered: Registered
    runs: dict[str, RunInput]
    task_family: dict | None = None


# ---------------------------------------------------------------- the analysis


@dataclass(frozen=True)
class Contrast(Typed):
    """One paired contrast hi - lo (harness.stats.contrasts.contrast)."""
    hi: str
    lo: str
    gap: float
    ci_low: float
    ci_high: float
    sesoi: float
    label: str
    criteria: dict
    n_items_hi: int
    n_items_lo: int
    n_items_tied: int
    sign_p: float
    spread_test: str
    seed_rates_hi: list
    seed_rates_lo: list
    run_bound_low: float | None = None
    run_bound_high: float | None = None
    welch_p: Any = None
    welch_t: Any = None
    spread_threshold: float | None = None


@dataclass(frozen=True)
class ArmRate(Typed):
    """One arm's pass rate over items x seeds with its two-stage bootstrap interval."""
    passed: int
    n: int
    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class Says(Typed):
    """What the decision rule reads of one contrast: its label and its sentence."""
    label: str
    says: str


@dataclass(frozen=True)
class RuleVerdict(Typed):
    """The decision rule's own outcome: which clauses held and what each contrast says."""
    outcome: str
    clauses_held: dict
    contrasts: dict[str, Says]


@dataclass(frozen=True)
class BootstrapSpec(Typed):
    """The registered two-stage bootstrap (harness.stats.results.BootstrapSpec)."""
    n_resamples: int
    method: str
    confidence_level: float  # two-sided level, 1 - 2 alpha
    rng_seed: int


@dataclass(frozen=True)
class SpreadRule(Typed):
    """The seed rule: test "welch", or "range" with its multiplier (harness.stats.results.SpreadRule)."""
    test: str
    multiplier: float | None = None


@dataclass(frozen=True)
class AnalysisSpec(Typed):
    """The registered analysis: alpha, sesoi, power, the bootstrap and the seed-spread rule."""
    alpha: float
    sesoi: float
    power: float
    bootstrap: BootstrapSpec
    spread_rule: SpreadRule


@dataclass(frozen=True)
class Analysis(Typed):
    """harness.stats.contrasts.analyze's result."""
    spec: AnalysisSpec
    contrasts: dict[str, Contrast]
    arms: dict[str, ArmRate]
    per_seed: dict
    seeds: list
    verdict: RuleVerdict


# ---------------------------------------------------------------- the verdict and the control checks


@dataclass(frozen=True)
class Outcome(Typed):
    """The one verdict (harness.readout.controls.final_verdict): the outcome, its sentence, which check
    decided it, and what the rule alone would have said when a check overrode it."""
    outcome: str
    sentence: str
    warnings: list
    reason: str | None = None
    decided_by: str | None = None
    rule_alone: str | None = None
    overrides: dict | None = None

    @property
    def by_check(self) -> bool:
        """Whether a check, not the decision rule, decided (a verdict without `decided_by`: the rule)."""
        return (self.decided_by or "decision rule") != "decision rule"


@dataclass(frozen=True)
class ControlRow(Typed):
    """One registered control check: arm against versus, by the margin (harness.readout.controls)."""
    arm: str
    versus: str
    margin: float
    gap: float
    ok: bool
    hi_only: int
    lo_only: int
    n_items: int
    sign_p_greater: float | None
    alpha: float


@dataclass(frozen=True)
class Controls(Typed):
    """The control checks, before the decision; *_ok is None when no such control is registered."""
    positive: list[ControlRow]
    negative: list[ControlRow]
    positive_ok: bool | None = None
    negative_ok: bool | None = None


@dataclass(frozen=True)
class AgainstBase(Typed):
    """One arm's final pass rate against the base, paired by probe item."""
    mean_lo: float
    mean_hi: float
    gap: float
    hi_only: int
    lo_only: int
    sign_p_greater: float | None
    sign_p_less: float | None
    reading: str
    p_above: float | None = None  # the tests that read it (harness.readout.controls.mean_test); None: an older
    p_below: float | None = None  # verdict, read by the sign test


@dataclass(frozen=True)
class Retained(Typed):
    """A gated run's rounds: committed, retained, and whether its final model is the base."""
    rounds: int
    committed: list
    retained: int
    final_is_base: bool
    final_equal_to_base: int
    n_probes: int


# ---------------------------------------------------------------- the design analysis


@dataclass(frozen=True)
class Design(Typed):
    """The design analysis, designed (freeze's components) and observed (this experiment's): each
    harness.stats.power.design_analysis' record, read by its own reader (an observed analysis that
    could not run holds only its `error`)."""
    designed: DesignAnalysis
    observed: DesignAnalysis


@dataclass(frozen=True)
class Registration(Typed):
    """The registration as the readout read it (harness.readout.design.registration): the shortfalls
    below its power criterion (sentences; `figures`: each {name, value, bound, text}), the stated
    override's reason, the figures it names and the base it names them on; the base this experiment
    built ({sha256, pass_rate}), the base the registration was sized on (model.yaml sized_on_base),
    what freeze does on another (`on_other_base`), whether the two differ (`other_base`) and what the
    override does not excuse of the shortfalls on this base (`unexcused`). A verdict
    of an older format holds the shortfalls and the reason only."""
    shortfalls: list | None = None
    override: str | None = None
    figures: list | None = None
    override_figures: Any = None
    override_base: str | None = None
    base: dict | None = None
    sized_on_base: str | None = None
    on_other_base: str | None = None
    other_base: bool | None = None
    unexcused: list | None = None


# ---------------------------------------------------------------- checks, series, provenance


@dataclass(frozen=True)
class BudgetCheck(Typed):
    check: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Budget(Typed):
    """The compute ledger per run and per arm, the registered equalities and the wall clock."""
    fields: list
    per_arm: dict
    held_equal: list
    wall_clock_s: dict
    wall_clock_limit_s: float | None
    wall_clock_exceeded: list
    checks: list[BudgetCheck]
    ok: bool
    own_training: dict | None = None
    contenders_training: dict | None = None


@dataclass(frozen=True)
class Leakage(Typed):
    """No probe reached the solver; the seed set holds no probe program."""
    solver_tasks_checked: int
    probe_hashes_at_solver: list
    probe_collisions_stopped_before_solver: int
    confirm_hashes_at_solver: int
    seed_set_probe_overlap: dict
    ok: bool
    leak_guard: dict | None = None


@dataclass(frozen=True)
class Checks(Typed):
    budget: Budget
    leakage: Leakage


@dataclass(frozen=True)
class SeriesRound(Typed):
    """One round of a run's series (harness.readout.analyzer.run_series); the monitors by name (`value`)."""
    round: int
    probe_pass_rate: float | None = None
    heldout_bpb: float | None = None
    train_loss: float | None = None
    heircommit: dict | None = None  # the monitors are kept by name: `value(name)`


@dataclass(frozen=True)
class Series(Typed):
    """What the report and figures show of one run: the base, then each round."""
    arm: str
    seed: int
    base: dict
    rounds: list[SeriesRound]


@dataclass(frozen=True)
class BpbRow(Typed):
    base: float | None
    final_per_seed: dict
    final_mean: float | None


@dataclass(frozen=True)
class Secondary(Typed):
    heldout_bpb: dict[str, BpbRow]


@dataclass(frozen=True)
class ReasonRow(Typed):
    """One arm's verifier reasons: n, the rate of each reason, the infrastructure rate, retries."""
    n: int
    rates: dict
    infrastructure: float | None
    retried: int
    unrecorded: int


@dataclass(frozen=True)
class Balance(Typed):
    """The registered infrastructure-rate balance check over one table."""
    gap: float | None
    arms: list
    flagged: bool
    max_rate_gap: float


@dataclass(frozen=True)
class VerdictReasons(Typed):
    probes: dict[str, ReasonRow]
    rollouts: dict[str, ReasonRow]
    infrastructure_reasons: list
    balance: dict[str, Balance]


@dataclass(frozen=True)
class Strata(Typed):
    """Final pass rate per arm per probe stratum (and per program class, `classes`), and the base's."""
    names: list
    n_items: dict
    base: dict
    arms: dict
    classes: dict | None = None


@dataclass(frozen=True)
class MadeBy(Typed):
    """The git commit and environment digest that made the freeze or a run."""
    git_commit: str | None
    git_clean: bool | None
    environment_sha256: str


@dataclass(frozen=True)
class Provenance(Typed):
    freeze: MadeBy | None
    runs: dict[str, MadeBy | None]
    environments: dict
    differences: dict


@dataclass(frozen=True)
class Deviations(Typed):
    entries: list
    sha256: str | None = None


# ---------------------------------------------------------------- the whole verdict


@dataclass(frozen=True)
class Verdict(Typed):
    """verdict.json. The sections a verdict of an older format lacks are None."""
    format: int
    protocol: str
    inputs: Inputs
    verdict: Outcome
    controls: Controls
    against_base: dict[str, AgainstBase]
    retained: dict[str, Retained]
    analysis: Analysis
    secondary: Secondary
    monitors_final: dict
    checks: Checks
    series: dict[str, Series]
    strata: Strata | None = None
    design: Design | None = None
    design_summary: dict | None = None
    design_summary_observed: dict | None = None
    registration: Registration | None = None
    verdict_reasons: VerdictReasons | None = None
    deviations: Deviations | None = None
    provenance: Provenance | None = None

    @property
    def sesoi(self) -> float:
        return self.analysis.spec.sesoi


def as_verdict(verdict: Verdict | dict, where: str = "verdict.json") -> Verdict:
    """The typed verdict of a verdict dict (a Verdict is returned as is)."""
    return Verdict.from_dict(verdict, where)

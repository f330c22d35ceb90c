"""Protocols: the pre-registered experiment, one YAML file per concern, validated on load.

    protocols/<name>/seeds.yaml      task seed, run seeds
    protocols/<name>/tasks.yaml      the task family and its settings (the probe distribution), split sizes,
                                     the leak guard
    protocols/<name>/model.yaml      model size, base recipe, the base pass-rate range freeze expects
    protocols/<name>/budget.yaml     rounds, learner steps, rollouts, byte budget, wall clock
    protocols/<name>/arms.yaml       A/B/C, the control arms, and their settings (kinds: harness.spec.kinds)
    protocols/<name>/gates.yaml      determinism gate, difficulty band, C's confirm rule
    protocols/<name>/bootstrap.yaml  the readout's bootstrap spec
    protocols/<name>/decision.yaml   the decision rule

Every error names the file, the key and what was expected.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import PROJECT_ROOT
from harness.core import bounded, records
from harness.core.kernels import KernelRecipe
from harness.spec import kinds
from harness.spec.schema import ANY_SHORTFALL, LEAK_GUARDS, LEGACY_DEFAULTS, SCHEMAS, ProtocolError, _validate
from harness.stats import contrasts, power
from harness.tasks import registry
from harness.tasks.contract import TaskFamily

PROTOCOL_FILES = ("seeds.yaml", "tasks.yaml", "model.yaml", "budget.yaml", "arms.yaml", "gates.yaml",
                  "bootstrap.yaml", "decision.yaml")
# the keys that say what a registration was sized on and what to do on another base, not what is measured
REGISTRATION_KEYS = {"model.yaml": ("sized_on_base", "on_other_base"), "decision.yaml": ("underpowered_override",)}


def protocols_root() -> Path:
    return PROJECT_ROOT / "protocols"


# ---- typed views: one frozen dataclass per file (or sub-mapping), fields named as in the YAML --------
# `tests/test_protocol.py` proves every view's fields are exactly its schema's keys.

@dataclass(frozen=True)
class BaseDraws:
    """Bases as a registered random factor: base k (1-based) is trained from init seed init_seeds[k-1]
    (the weights and torch's global stream) on the warm-up set in the order data_order_seeds[k-1] draws.
    Separate seeds, so a report can say which of the two moves an effect."""
    init_seeds: tuple[int, ...]
    data_order_seeds: tuple[int, ...]

    def draw(self, k: int) -> "BaseDraw":
        return BaseDraw(k, self.init_seeds[k - 1], self.data_order_seeds[k - 1])

    @property
    def count(self) -> int:
        return len(self.init_seeds)


@dataclass(frozen=True)
class BaseDraw:
    """One registered base of a recipe protocol: its index (1-based) and its two seeds."""
    index: int
    init_seed: int
    data_order_seed: int

    @property
    def label(self) -> str:
        """Its folder and its name in every output: b01, b02, ..."""
        return f"b{self.index:02d}"

    def to_dict(self) -> dict:
        return {"index": self.index, "label": self.label, "init_seed": self.init_seed,
                "data_order_seed": self.data_order_seed}


@dataclass(frozen=True)
class Seeds:
    task_seed: int                   # draws every task split
    run_seeds: tuple[int, ...]       # the registered seeds of every arm (on every base)
    pilot_seeds: int                 # the pilot runs every arm at the first this many of run_seeds
    bases: BaseDraws | None = None   # None: one base (model.yaml base.seed); else the registered bases


@dataclass(frozen=True)
class PerRound:
    per_round: int


@dataclass(frozen=True)
class Sized:
    size: int


@dataclass(frozen=True)
class LeakGuard:
    same_ops_other_constants: str    # "train" or "hold_out" (LEAK_GUARDS)
    max_held_out_fraction: float


@dataclass(frozen=True)
class Tasks:
    family: dict                     # {name, [module,] ...settings}: the family (Protocol.family) is every split's
                                     # distribution, the probe distribution
    probe: Sized
    confirm: PerRound                # C's fresh probes per round (screen and confirm each)
    calibration: Sized               # the pilot's split (probe-sized)
    seed_set: Sized
    warmup: Sized
    leak_guard: LeakGuard


@dataclass(frozen=True)
class BaseRecipe:
    steps: int
    batch_size: int
    lr: float
    weight_decay: float
    seed: int
    torch_threads: int               # intra-op threads it is trained with, whatever the machine: part of the
                                     # recipe, since a float sum split across threads may change the bytes


@dataclass(frozen=True)
class Model:
    size: str                        # harness.learning.sizes.SIZES
    base: BaseRecipe                 # warm-up SFT from random init
    cpu_capability: str              # torch's CPU kernel path (harness.core.kernels): part of the recipe
    run_threads: int                 # intra-op threads of every run, the pilot and the base's evaluation
    base_pass_range: tuple[float, float]
    sized_on_base: str | None = None  # sha256 (prefix) of the base the registration's figures were measured on
                                      # (None: nothing to compare the built one with)
    on_other_base: str = "refuse"     # what freeze does when it builds another base (schema.ON_OTHER_BASE):
                                      # refuse before the pilot; resize: measure it and print the registration to
                                      # write; deviation: run on it, logged in DEVIATIONS.jsonl

    def kernels(self, threads: int | None = None) -> KernelRecipe:
        """The kernel recipe to pin (harness.core.kernels.pin): the run's threads, or `threads` (the base's)."""
        return KernelRecipe(self.cpu_capability, self.run_threads if threads is None else threads)


@dataclass(frozen=True)
class Budget:
    rounds: int
    learner_steps_per_round: int     # every optimizer step of a round, for every arm
    batch_size: int
    lr: float
    lr_warmup_steps: int             # linear warm-up of lr over a run's first optimizer steps (0: none)
    tasks_per_round: int             # tasks that reach the solver each round
    G: int                           # solver rollouts per task
    max_bytes: int                   # byte budget per completion
    temperature: float
    proposals_per_batch: int
    max_proposal_batches: int
    monitor_probes: int
    monitor_samples: int
    wall_clock_s_per_run: float      # recorded and checked at readout, never used to stop a run
    intermediate_eval_probes: int    # probes scored after every round but the last: a seeded subset, the same
                                     # for every arm, seed and round; the last round (the rule's) scores them all


@dataclass(frozen=True)
class Determinism:
    epsilon: float


@dataclass(frozen=True)
class Band:
    frontier: str                    # harness.learning.frontier.SCORES
    low: float
    high: float
    max_reuse_epochs: float

    def params(self) -> dict:
        """The frontier's keyword arguments (flat_top's band edges; the other scores take none)."""
        return {"lo": self.low, "hi": self.high} if self.frontier == "flat_top" else {}


@dataclass(frozen=True)
class ConfirmRule:
    rule: str                        # "not_worse" or "superior"
    margin: int
    alpha: float


@dataclass(frozen=True)
class InfrastructureBalance:
    """The readout's balance check on verdict reasons (harness.readout.analyzer.verdict_reasons): an arm
    whose rate of infrastructure failures (harness.sandbox.verifier.INFRASTRUCTURE) differs from another
    arm's by more than `max_rate_gap` (a fraction of its verdicts) is flagged."""
    max_rate_gap: float


@dataclass(frozen=True)
class Gates:
    determinism: Determinism
    band: Band
    confirm: ConfirmRule
    infrastructure: InfrastructureBalance


@dataclass(frozen=True)
class Bootstrap:
    n_resamples: int
    method: str
    confidence_level: float
    rng_seed: int


@dataclass(frozen=True)
class Override:
    """decision.yaml's underpowered_override as a mapping: why the design is registered below its power,
    and the figures that reason is about: `shortfalls` {name: value} (harness.stats.design.summary.Shortfall
    names, values as freeze printed them) measured on the base `sized_on_base` (sha256 or a prefix of it),
    or "any" (schema.ANY_SHORTFALL: a protocol not sized to decide anything, no base named)."""
    reason: str
    shortfalls: dict | str
    sized_on_base: str | None = None

    @property
    def excuses_any(self) -> bool:
        return self.shortfalls == ANY_SHORTFALL


def override_reason(override: "Override | str | None") -> str | None:
    """The stated reason of an underpowered_override (a mapping's `reason`, an older protocol's string)."""
    return override.reason if isinstance(override, Override) else override


@dataclass(frozen=True)
class Decision:
    alpha: float
    power: float
    sesoi: float
    contrasts: tuple[tuple[str, str], ...]
    spread_rule: dict                # checked by harness.stats.contrasts.validate_spread_rule
    design: dict                     # checked by harness.stats.power.validate_design
    underpowered_override: Override | str | None  # None: freeze refuses a design below `power`; else the stated
                                                   # reason with the figures it excuses (a string: an older
                                                   # protocol's reason alone, which freeze refuses)
    # What a failed check does to the verdict (harness.readout.controls.final_verdict). None: the
    # verdict is the check's registered outcome (`negative_control_failed`, `infrastructure_imbalanced`);
    # else the stated reason for letting the decision rule's verdict stand, with the failure as a warning.
    negative_control_override: str | None
    infrastructure_override: str | None
    recipe: "RecipeRule | None" = None  # None: the verdict is about one base; else about the recipe, over seeds.yaml's bases


@dataclass(frozen=True)
class RecipeRule:
    """The rule about the recipe (harness.stats.recipe): the bases read at each look of a group-sequential
    plan (O'Brien-Fleming alpha spending, the last look = every registered base), the one-sided level at
    which a control's gap must clear its margin, and the outlier rule's level over the bases."""
    looks: tuple[int, ...]
    control_alpha: float
    outlier_alpha: float


@dataclass(frozen=True)
class Check:
    """A control arm's registered check: it must (not) beat each named arm or 'base' by `margin`."""
    margin: float
    must_beat: tuple[str, ...] = ()
    must_not_beat: tuple[str, ...] = ()


@dataclass(frozen=True)
class Arm:
    """One arm of arms.yaml. Which settings an arm has is its kind's (harness.spec.kinds.KINDS); the
    ones its kind does not take are None."""
    name: str
    kind: str
    operators: tuple[str, ...] | None = None   # self-play kinds: the proposer's mutations
    advantage: str | None = None               # harness.learning.advantages.ADVANTAGES
    clip: float | None = None                  # clipped surrogate's epsilon
    recovery_steps: int | None = None          # heircommit: of the round's learner steps
    recovery_pool: int | None = None           # heircommit: verified rollouts re-checked
    check: Check | None = None                 # controls only
    learner_steps_per_round: int | None = None  # a positive control's own steps per round (None: budget.yaml's)
    lr: float | None = None                    # a positive control's own peak lr (None: budget.yaml's)


def _view(cls, data: dict):
    """The frozen dataclass `cls` from a validated mapping: sub-mappings become their annotated
    views, lists become tuples (of tuples)."""
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue  # a default (Arm's settings its kind does not take)
        v, t = data[f.name], hints[f.name]
        if dataclasses.is_dataclass(t):
            v = _view(t, v)
        elif isinstance(t, types.UnionType) and isinstance(v, dict) and any(map(dataclasses.is_dataclass, typing.get_args(t))):
            v = _view(next(a for a in typing.get_args(t) if dataclasses.is_dataclass(a)), v)
        elif isinstance(v, list):
            v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        kw[f.name] = v
    return cls(**kw)


VIEWS = {"seeds.yaml": Seeds, "tasks.yaml": Tasks, "model.yaml": Model, "budget.yaml": Budget, "gates.yaml": Gates,
         "bootstrap.yaml": Bootstrap, "decision.yaml": Decision}


@dataclass(frozen=True)
class Protocol:
    """A loaded, validated protocol: typed views of its files; `raw` keeps the parsed YAML (file
    name -> mapping) for hashing, MLflow parameters and the override refusal."""
    name: str
    dir: Path
    raw: dict[str, dict]
    seeds: Seeds
    tasks: Tasks
    model: Model
    budget: Budget
    arms: dict[str, Arm]
    gates: Gates
    bootstrap: Bootstrap
    decision: Decision
    family: TaskFamily               # tasks.yaml's family with its settings: every split's distribution
    base_draw: BaseDraw | None = None  # one registered base of a recipe protocol (for_base): what its base is built from

    @classmethod
    def from_raw(cls, name: str, d: Path, raw: dict[str, dict], family: TaskFamily) -> Protocol:
        views = {f.removesuffix(".yaml"): _view(v, raw[f]) for f, v in VIEWS.items()}
        arms = {a: _view(Arm, {"name": a, **spec}) for a, spec in raw["arms.yaml"].items()}
        return cls(name, d, raw, arms=arms, family=family, **views)

    def for_base(self, k: int) -> Protocol:
        """This protocol as it builds its registered base k (1-based; seeds.yaml bases)."""
        if self.seeds.bases is None:
            raise ProtocolError(f"{self.dir / 'seeds.yaml'}: registers no bases (key 'bases' is null)")
        if not 1 <= k <= self.seeds.bases.count:
            raise ProtocolError(f"{self.dir / 'seeds.yaml'}: base {k}: expected 1..{self.seeds.bases.count}")
        return dataclasses.replace(self, base_draw=self.seeds.bases.draw(k))

    @property
    def is_recipe(self) -> bool:
        """True when the verdict is about the recipe over registered bases (decision.yaml recipe)."""
        return self.decision.recipe is not None

    @property
    def arm_names(self) -> list[str]:
        return sorted(self.arms)

    @property
    def run_seeds(self) -> list[int]:
        return list(self.seeds.run_seeds)

    @property
    def guard(self) -> str:
        """The leak guard's unit for harness.tasks.splits ("program" or "ops"), from tasks.yaml leak_guard."""
        return LEAK_GUARDS[self.tasks.leak_guard.same_ops_other_constants]

    def split_sizes(self) -> dict[str, int]:
        """Split name -> number of tasks materialised at freeze (the confirm stream for every round)."""
        t = self.tasks
        return {"probe": t.probe.size, "confirm": self.confirm_stream_size(), "calibration": t.calibration.size,
                "seed_set": t.seed_set.size, "warmup": t.warmup.size}

    def confirm_stream_size(self) -> int:
        return 2 * self.tasks.confirm.per_round * self.budget.rounds

    def measured_sha256(self, fname: str) -> str:
        """sha256 of protocol file `fname` as the measurements read it: its parsed content (canonical JSON)
        without the keys that only say what the registration was sized on (REGISTRATION_KEYS). The base's
        recipe and the pilot's inputs hash this, so writing a registration's figures and its base into the
        protocol reuses the base and the pilot they were measured with."""
        data = {k: v for k, v in self.raw[fname].items() if k not in REGISTRATION_KEYS.get(fname, ())}
        return records.sha256_bytes(records.canonical_json(data).encode("ascii"))

    def flat(self) -> dict[str, Any]:
        """Every frozen value as 'file.key.sub' -> value (MLflow params, override refusal)."""
        out: dict[str, Any] = {}

        def walk(prefix, v):
            if isinstance(v, dict):
                for k, x in v.items():
                    walk(f"{prefix}.{k}", x)
            else:
                out[prefix] = v
        for fname, data in self.raw.items():
            walk(fname.removesuffix(".yaml"), data)
        return out


def load_protocol(name_or_dir: str | Path) -> Protocol:
    d = Path(name_or_dir)
    if not d.is_dir():
        d = protocols_root() / str(name_or_dir)
    if not d.is_dir():
        known = sorted(p.name for p in protocols_root().iterdir() if p.is_dir()) if protocols_root().is_dir() else []
        raise ProtocolError(f"protocol '{name_or_dir}' not found (looked for {d}); known protocols: {known}")
    raw: dict[str, dict] = {}
    for fname in PROTOCOL_FILES:
        path = d / fname
        if not path.is_file():
            raise ProtocolError(f"{path}: missing protocol file (a protocol needs {list(PROTOCOL_FILES)})")
        try:  # bounded: UTF-8, aliases expanded at most so far, short integers, finite numbers (an archive's)
            data = bounded.yaml_value(path.read_bytes(), str(path))
        except bounded.ParseError as e:
            raise ProtocolError(str(e)) from None
        if isinstance(data, dict):
            data = {**{k: fn(data) for k, fn in LEGACY_DEFAULTS.get(fname, {}).items()}, **data}
        raw[fname] = _validate(data, SCHEMAS.get(fname, {}), str(path)) if fname != "arms.yaml" else kinds.validate_arms(data, path)
    family = load_family(raw["tasks.yaml"]["family"], d / "tasks.yaml")
    _cross_checks(raw, d)
    check_operators(raw["arms.yaml"], family, d / "arms.yaml")
    return Protocol.from_raw(d.name, d, raw, family)


def load_family(spec: dict, where: Path) -> TaskFamily:
    """tasks.yaml's `family` mapping -> the registered family with its settings, each setting checked
    by the family's SETTINGS (missing, unknown or out-of-range keys refused naming the file and key)."""
    try:
        cls = registry.family_class(spec.get("name"), spec.get("module"))
    except ValueError as e:
        raise ProtocolError(f"{where}: {e}") from None
    settings = {k: v for k, v in spec.items() if k not in registry.RESERVED}
    _validate(settings, cls.SETTINGS, f"{where}: key 'family'")
    try:
        return cls.from_settings(settings)
    except ValueError as e:
        raise ProtocolError(f"{where}: {e}") from None


def check_operators(arms: dict, family: TaskFamily, where: Path) -> None:
    """Every proposer operator an arm registers is one of the task family's."""
    for arm, spec in arms.items():
        unknown = [op for op in spec.get("operators", []) if op not in family.operators]
        if unknown:
            raise ProtocolError(f"{where}: arm '{arm}': key 'operators': expected operators of the task family "
                                f"'{family.name}' from {list(family.operators)}, got {unknown}")


def _cross_checks(raw: dict, d: Path) -> None:
    band = raw["gates.yaml"]["band"]
    if band["low"] > band["high"]:
        raise ProtocolError(f"{d / 'gates.yaml'}: key 'band': low {band['low']} > high {band['high']}")
    tasks = raw["tasks.yaml"]
    if tasks["calibration"]["size"] != tasks["probe"]["size"]:
        raise ProtocolError(f"{d / 'tasks.yaml'}: key 'calibration.size': expected {tasks['probe']['size']} (the probe "
                            f"size: the pilot runs every arm with the calibration split in the probe set's place, "
                            f"under the same registered budget), got {tasks['calibration']['size']}")
    between = raw["budget.yaml"]["intermediate_eval_probes"]
    if between > tasks["probe"]["size"]:
        raise ProtocolError(f"{d / 'budget.yaml'}: key 'intermediate_eval_probes': expected at most the probe size "
                            f"{tasks['probe']['size']}, got {between}")
    _check_statistics(raw, d)
    if len(set(raw["seeds.yaml"]["run_seeds"])) != len(raw["seeds.yaml"]["run_seeds"]):
        raise ProtocolError(f"{d / 'seeds.yaml'}: key 'run_seeds': seeds must be distinct, got {raw['seeds.yaml']['run_seeds']}")
    seeds = raw["seeds.yaml"]
    if seeds["pilot_seeds"] > len(seeds["run_seeds"]):
        raise ProtocolError(f"{d / 'seeds.yaml'}: key 'pilot_seeds': expected at most the {len(seeds['run_seeds'])} "
                            f"run_seeds (the pilot runs the first pilot_seeds of them), got {seeds['pilot_seeds']}")
    kinds.cross_check(raw, d)
    _check_recipe(raw, d)


def _check_recipe(raw: dict, d: Path) -> None:
    """seeds.yaml bases and decision.yaml recipe come together: distinct (init, data order) pairs of equal
    length, at least 2 bases, looks increasing from 2 to every base."""
    bases, rule = raw["seeds.yaml"]["bases"], raw["decision.yaml"]["recipe"]
    seeds, decision = d / "seeds.yaml", d / "decision.yaml"
    if (bases is None) != (rule is None):
        raise ProtocolError(f"{seeds if bases is None else decision}: key '{'bases' if bases is None else 'recipe'}' "
                            f"is null while {decision if bases is None else seeds} registers "
                            f"'{'recipe' if bases is None else 'bases'}': a verdict about the recipe needs both")
    if bases is None:
        return
    ok = lambda v: isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)  # noqa: E731
    for key in ("init_seeds", "data_order_seeds"):
        if not ok(bases[key]):
            raise ProtocolError(f"{seeds}: key 'bases.{key}': expected a list of non-negative integers, got {bases[key]!r}")
    init, order = bases["init_seeds"], bases["data_order_seeds"]
    if len(init) != len(order) or len(init) < 2:
        raise ProtocolError(f"{seeds}: key 'bases': expected init_seeds and data_order_seeds of one length, at least 2 "
                            f"(one per base), got {len(init)} and {len(order)}")
    if len(set(zip(init, order))) != len(init):
        raise ProtocolError(f"{seeds}: key 'bases': every base's (init, data order) seed pair must be distinct, got "
                            f"{list(zip(init, order))}")
    looks = rule["looks"]
    if not (isinstance(looks, list) and all(type(x) is int for x in looks) and looks and looks[0] >= 2
            and all(a < b for a, b in zip(looks, looks[1:])) and looks[-1] == len(init)):
        raise ProtocolError(f"{decision}: key 'recipe.looks': expected increasing base counts from at least 2 to every "
                            f"registered base ({len(init)}, {seeds} bases), got {looks!r}")
    sd = ((raw["decision.yaml"]["design"].get("base_spread") or {}).get("sd") or {})
    missing = [f"{h}-{lo}" for h, lo in raw["decision.yaml"]["contrasts"] if f"{h}-{lo}" not in sd]
    if missing:
        raise ProtocolError(f"{decision}: key 'design.base_spread.sd': the plan is simulated at each contrast's registered "
                            f"base spread; missing {missing}")
    for key in ("control_alpha", "outlier_alpha"):
        v = rule[key]
        if type(v) not in (int, float) or not 0 < v < 1:
            raise ProtocolError(f"{decision}: key 'recipe.{key}': expected a level in (0, 1), got {v!r}")


def _check_statistics(raw: dict, d: Path) -> None:
    """The decision rule's spread rule, design block and the bootstrap level (1 - 2 alpha), with
    the checks the readout itself applies, so a protocol that would fail at readout fails at load."""
    dec, boot = raw["decision.yaml"], raw["bootstrap.yaml"]
    try:
        contrasts.validate_spread_rule(dec["spread_rule"])
    except ValueError as err:
        raise ProtocolError(f"{d / 'decision.yaml'}: {err}") from None
    n_seeds = len(raw["seeds.yaml"]["run_seeds"])
    if dec["spread_rule"]["test"] == "welch" and n_seeds < 2 and dec.get("recipe") is None:
        raise ProtocolError(f"{d / 'decision.yaml'}: key 'spread_rule': the Welch seed test needs >= 2 run seeds per "
                            f"arm, {d / 'seeds.yaml'} registers {n_seeds}; register more seeds or "
                            f"{{test: range, multiplier: m}}")
    try:
        power.validate_design(dec["design"])
    except ValueError as err:
        raise ProtocolError(f"{d / 'decision.yaml'}: {err}") from None
    try:
        contrasts.validate_spec({"alpha": dec["alpha"], "sesoi": dec["sesoi"], "power": dec["power"],
                             "contrasts": dec["contrasts"], "spread_rule": dec["spread_rule"], "bootstrap": dict(boot)})
    except ValueError as err:
        raise ProtocolError(f"{d / 'bootstrap.yaml'}: {err}") from None

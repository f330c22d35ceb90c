"""A protocol's schema: every YAML file's keys, each with its check and what was expected, and the
small validator that applies them. The registries it names are owned by the implementing modules
(advantages and frontiers: harness.learning, model sizes: harness.learning.sizes; arm kinds and their
settings: harness.spec.kinds; task families, their settings and their proposer operators:
harness.tasks.registry, checked in harness.spec.protocol once the family is known). No torch."""
from __future__ import annotations

import re

from typing import Any

from harness.core.errors import HarnessError
from harness.core.kernels import CAPABILITIES as CPU_CAPABILITIES
from harness.learning import advantages, frontier, sizes

# The schema names what the implementing modules register (one registry per kind, owned there;
# arm kinds: harness.spec.kinds).
ADVANTAGES = tuple(advantages.ADVANTAGES)
FRONTIERS = tuple(frontier.SCORES)
MODEL_SIZES = tuple(sizes.SIZES)
# tasks.yaml leak_guard.same_ops_other_constants -> harness.tasks.splits guard: "train" holds out every
# probe/confirm/calibration program (reference code with its constants); "hold_out" also holds out
# their op sequences, so no training task has a held-out task's steps, whatever the constants.
LEAK_GUARDS = {"train": "program", "hold_out": "ops"}


class ProtocolError(HarnessError, ValueError):
    pass


# ---- a small validator: each key -> (check, what was expected) --------------------------------

def _int(lo=None, hi=None):
    def ok(v):
        return type(v) is int and (lo is None or v >= lo) and (hi is None or v <= hi)
    return ok, f"an integer{'' if lo is None else f' >= {lo}'}{'' if hi is None else f' <= {hi}'}"


def _num(lo=None, hi=None):
    def ok(v):
        return type(v) in (int, float) and (lo is None or v >= lo) and (hi is None or v <= hi)
    return ok, f"a number{'' if lo is None else f' >= {lo}'}{'' if hi is None else f' <= {hi}'}"


def _choice(options):
    return (lambda v: v in options), f"one of {list(options)}"


def _list_of(check, desc, min_len=1):
    return (lambda v: isinstance(v, list) and len(v) >= min_len and all(check(x) for x in v)), f"a list of {desc} (at least {min_len})"


def _pair():
    return ((lambda v: isinstance(v, list) and len(v) == 2 and all(type(x) in (int, float) for x in v)
             and 0 <= v[0] <= v[1] <= 1), "[low, high] with 0 <= low <= high <= 1")


def _validate(data: Any, schema: dict, where: str) -> dict:
    if not isinstance(data, dict):
        raise ProtocolError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = set(data) - set(schema)
    if unknown:
        raise ProtocolError(f"{where}: unknown key(s) {sorted(unknown)}; expected only {sorted(schema)}")
    for key, spec in schema.items():
        if key not in data:
            raise ProtocolError(f"{where}: missing key '{key}'")
        if isinstance(spec, dict):
            _validate(data[key], spec, f"{where}: key '{key}'")
            continue
        check, desc = spec
        if not check(data[key]):
            raise ProtocolError(f"{where}: key '{key}': expected {desc}, got {data[key]!r}")
    return data


ON_OTHER_BASE = ("refuse", "resize", "deviation")  # model.yaml on_other_base: what freeze does with another base
ANY_SHORTFALL = "any"  # an underpowered_override's `shortfalls` for a protocol not sized to decide anything
OVERRIDE_KEYS = ("reason", "sized_on_base", "shortfalls")


def _is_reason(v) -> bool:
    """A stated reason: a sentence (five words or more), not the <placeholder> freeze prints for one."""
    return isinstance(v, str) and len(v.split()) >= 5 and not v.lstrip().startswith("<")


def _is_figure(v) -> bool:
    return v is None or (type(v) in (int, float) and -1 <= v <= 1)


def _override_ok(v) -> bool:
    """null; a reason alone (a protocol written before overrides named their figures: it loads for its
    audit, and freeze asks for the figures); or {reason, sized_on_base, shortfalls: {name: value}}; or
    {reason, shortfalls: any}."""
    if v is None or isinstance(v, str):
        return v is None or _is_reason(v)
    if not isinstance(v, dict) or set(v) - set(OVERRIDE_KEYS) or not {"reason", "shortfalls"} <= set(v):
        return False
    figures, base = v["shortfalls"], v.get("sized_on_base")
    if not _is_reason(v["reason"]):
        return False
    if figures == ANY_SHORTFALL:
        return base is None
    return (isinstance(figures, dict) and bool(figures) and all(isinstance(k, str) and _is_figure(x) for k, x in figures.items())
            and isinstance(base, str) and SHA256_PREFIX.fullmatch(base) is not None)


OVERRIDE = (_override_ok, "null, or the stated reason with the figures it excuses: {reason: <a sentence>, sized_on_base: "
                          "<sha256 of the base they were measured on>, shortfalls: {<name>: <value as freeze printed it>, "
                          "...}} (freeze prints the block to paste), or {reason: <a sentence>, shortfalls: any} for a "
                          "protocol not sized to decide anything")


def _reason_or_null(what: str):
    """null, or a stated reason of at least five words for `what` (the registered overrides)."""
    return ((lambda v: v is None or (isinstance(v, str) and len(v.split()) >= 5)),
            f"null, or the stated reason (a sentence) for {what}")


# tasks.yaml `family`: the registered name (and, for a family registered by the protocol, its module)
# with the family's own settings, which its SETTINGS check once the family is found (harness.spec.protocol)
FAMILY = ((lambda v: isinstance(v, dict) and isinstance(v.get("name"), str)),
          "a mapping {name: <task family>, ...its settings} (harness.tasks.registry)")
# seeds.yaml `bases` (null: one base, model.yaml base.seed) and decision.yaml `recipe` (null: the verdict is about that
# one base): bases as a registered random factor, checked in detail by harness.spec.protocol (_check_recipe)
BASES = ((lambda v: v is None or (isinstance(v, dict) and set(v) == {"init_seeds", "data_order_seeds"})),
         "null, or {init_seeds: [...], data_order_seeds: [...]}: base k is trained from init seed init_seeds[k] on the "
         "warm-up set in the order data_order_seeds[k] draws")
RECIPE = ((lambda v: v is None or (isinstance(v, dict) and set(v) == {"looks", "control_alpha", "outlier_alpha"})),
          "null, or {looks: [bases read at each look], control_alpha: <level of the controls' margins>, "
          "outlier_alpha: <the outlier rule's level over the bases>}")
# Keys a protocol written before they existed may omit, with the value that gives what it then meant
# (an archived protocol must still load for its audit): file -> key -> fn(the file's data) -> value.
LEGACY_DEFAULTS: dict[str, dict] = {
    "seeds.yaml": {"pilot_seeds": lambda d: min(2, len(d.get("run_seeds") or [])),  # the pilot ran 2 seeds
                   "bases": lambda d: None},  # one base
    "decision.yaml": {"recipe": lambda d: None},  # a verdict about that one base
    "model.yaml": {"sized_on_base": lambda d: None,  # no base named: nothing to compare the built one with
                   "on_other_base": lambda d: "refuse"},  # the default: another base is a new registration
}
SHA256_PREFIX = re.compile(r"[0-9a-f]{12,64}")
SCHEMAS: dict[str, dict] = {
    "seeds.yaml": {"task_seed": _int(0), "run_seeds": _list_of(lambda x: type(x) is int and x >= 0, "non-negative integers"),
                   "pilot_seeds": _int(1), "bases": BASES},
    "tasks.yaml": {"family": FAMILY, "probe": {"size": _int(1)}, "confirm": {"per_round": _int(1)}, "calibration": {"size": _int(1)},
                   "seed_set": {"size": _int(1)}, "warmup": {"size": _int(1)},
                   "leak_guard": {"same_ops_other_constants": _choice(tuple(LEAK_GUARDS)),
                                  "max_held_out_fraction": _num(0, 1)}},
    "model.yaml": {"size": _choice(MODEL_SIZES),
                   "base": {"steps": _int(1), "batch_size": _int(1), "lr": _num(0), "weight_decay": _num(0), "seed": _int(0),
                            "torch_threads": _int(1, 64)},
                   "cpu_capability": _choice(CPU_CAPABILITIES), "run_threads": _int(1, 64),
                   "base_pass_range": _pair(),
                   "sized_on_base": ((lambda v: v is None or (isinstance(v, str) and SHA256_PREFIX.fullmatch(v) is not None)),
                                     "null, or the sha256 (its first 12 to 64 hex digits, lower case) of the base the "
                                     "registration was sized on"),
                   "on_other_base": _choice(ON_OTHER_BASE)},
    "budget.yaml": {"rounds": _int(1), "learner_steps_per_round": _int(1), "batch_size": _int(1), "lr": _num(0),
                    "lr_warmup_steps": _int(0),
                    "tasks_per_round": _int(1), "G": _int(2), "max_bytes": _int(1, 4096), "temperature": _num(0.01, 5),
                    "proposals_per_batch": _int(1), "max_proposal_batches": _int(1), "monitor_probes": _int(1),
                    "monitor_samples": _int(2), "wall_clock_s_per_run": _num(1),
                    "intermediate_eval_probes": _int(1)},
    "gates.yaml": {"determinism": {"epsilon": _num(0, 1)},
                   "band": {"frontier": _choice(FRONTIERS), "low": _num(0, 1), "high": _num(0, 1),
                            "max_reuse_epochs": _num(0.01)},
                   "confirm": {"rule": _choice(("not_worse", "superior")), "margin": _int(0), "alpha": _num(0, 1)},
                   "infrastructure": {"max_rate_gap": _num(0, 1)}},
    "bootstrap.yaml": {"n_resamples": _int(99), "method": _choice(("percentile", "basic")),
                       "confidence_level": _num(0.5, 0.999), "rng_seed": _int(0)},
    "decision.yaml": {"alpha": _num(0.0001, 0.5), "power": _num(0.5, 0.999), "sesoi": _num(0, 1),
                      "contrasts": ((lambda v: v == [["C", "B"], ["B", "A"]]), "[[C, B], [B, A]] (the registered contrasts)"),
                      # spread_rule and design are checked in detail by harness.stats.contrasts / harness.stats.power
                      "spread_rule": ((lambda v: isinstance(v, dict)), "a mapping {test: welch} or {test: range, multiplier: m}"),
                      "design": ((lambda v: isinstance(v, dict)), "a mapping (harness.stats.power.validate_design)"),
                      "underpowered_override": OVERRIDE,
                      "negative_control_override": _reason_or_null("letting the decision rule's verdict stand when the "
                                                                   "negative control fails its check"),
                      "infrastructure_override": _reason_or_null("letting the decision rule's verdict stand when the "
                                                                 "infrastructure balance check fails"),
                      "recipe": RECIPE},
}

"""The registry of arm kinds: which module runs a kind, its arms.yaml settings, what it needs, its role.

An arm of a protocol (arms.yaml: `<name>: {kind: <kind>, ...settings}`) is run by the module its
kind names (a dotted module path, imported by the runner by that name: the library never imports
the arms). That module exposes `run_round(ctx, r) -> RoundResult` and, if it needs them, its own
`State` and `round_metrics` (harness.running.contract). What the round may use beyond the model,
optimizer, seed set and task bank is declared by the kind (`Needs`) and handed to it by the runner,
which knows no arm by name. A new arm is a new module plus one line in KINDS.

No torch: the protocol's validator and the readout read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from harness.spec.schema import ADVANTAGES, ProtocolError, _int, _list_of, _num, _validate

ROLES = ("arm", "positive_control", "negative_control", "decomposition")
# the decision rule's arms: name -> kind (harness.stats.contrasts contrasts C-B and B-A)
DECISION_ARMS = {"A": "sft", "B": "selfplay", "C": "heircommit"}
BASE = "base"  # what a control check may name besides arms: the frozen base (round -1)


@dataclass(frozen=True)
class Needs:
    """What an arm's round uses besides the model, optimizer, seed set and bank."""
    rollouts: bool = False     # samples and verifies its own rollouts: spends tasks_per_round x G solver rollouts
    experience: bool = False   # an experience store at <run>/experience.jsonl (ctx.experience)
    confirm: bool = False      # fresh confirm-stream batches each round (ctx.confirm_batches)
    anchor: bool = False       # the frozen previous-iteration model (ctx.anchor_model)


def _names():
    return (lambda v: isinstance(v, list) and len(v) >= 1 and all(isinstance(x, str) for x in v),
            "a non-empty list of registered arm names or 'base'")


# the operators' names are the task family's (harness.tasks.contract.TaskFamily.operators): checked once the
# family is known (harness.spec.protocol)
_SELFPLAY = {"operators": _list_of(lambda x: isinstance(x, str), "proposer operator names of the task family"),
             "advantage": ((lambda v: v in ADVANTAGES), f"one of {list(ADVANTAGES)}"), "clip": _num(0.01, 1)}
_POSITIVE = {"must_beat": _names(), "margin": _num(0, 1)}
_NEGATIVE = {"must_not_beat": _names(), "margin": _num(0, 1)}


@dataclass(frozen=True)
class ArmKind:
    """One registered kind: the module with its run_round, the arms.yaml settings besides `kind`
    (key -> (check, what was expected); a nested dict is a sub-mapping), the settings it may leave
    out (`optional`, same form), what it needs, and its role in the readout. The anchor need follows
    from the settings (see `needs_of`)."""
    module: str
    settings: dict
    needs: Needs
    role: str = "arm"
    optional: dict = field(default_factory=dict)

    @property
    def solver_rollouts(self) -> bool:
        """Whether arms of this kind spend the registered tasks_per_round x G solver rollouts."""
        return self.needs.rollouts


_HEIR = {**_SELFPLAY, "recovery_steps": _int(0), "recovery_pool": _int(1)}
# A positive control is a control, not a contender: its training may be registered apart from the
# contenders' (budget.yaml), sized so that the pilot shows it gaining at least the sesoi over the base.
_OWN_TRAINING = {"learner_steps_per_round": _int(1), "lr": _num(0)}
KINDS: dict[str, ArmKind] = {
    "sft": ArmKind("arms.a_sft", {}, Needs()),
    "selfplay": ArmKind("arms.b_selfplay", _SELFPLAY, Needs(rollouts=True)),
    "heircommit": ArmKind("arms.c_heircommit", _HEIR, Needs(rollouts=True, experience=True, confirm=True)),
    "fresh_sft": ArmKind("arms.p_fresh_sft", {"check": _POSITIVE}, Needs(), role="positive_control",
                         optional=_OWN_TRAINING),
    "shuffled_selfplay": ArmKind("arms.n_shuffled", {**_SELFPLAY, "check": _NEGATIVE}, Needs(rollouts=True),
                                 role="negative_control"),
    "commit_gate": ArmKind("arms.d_commit_gate", _SELFPLAY, Needs(rollouts=True, confirm=True), role="decomposition"),
}


def kind_of(protocol, arm: str) -> ArmKind:
    """The registered kind of `arm` in a loaded protocol."""
    return KINDS[protocol.arms[arm].kind]


def needs_of(protocol, arm: str) -> Needs:
    """What `arm` needs: its kind's needs, plus the anchor model when its advantage is 'anchor'."""
    settings = protocol.arms[arm]
    return replace(kind_of(protocol, arm).needs, anchor=settings.advantage == "anchor")


def arms_with_role(protocol, role: str) -> list[str]:
    return [a for a in protocol.arm_names if kind_of(protocol, a).role == role]


def learner_steps(protocol, arm: str) -> int:
    """The optimizer steps `arm` takes per round: its own registered figure (a positive control's
    arms.yaml `learner_steps_per_round`), else budget.yaml's, which every contender takes."""
    own = protocol.arms[arm].learner_steps_per_round
    return protocol.budget.learner_steps_per_round if own is None else own


def learning_rate(protocol, arm: str) -> float:
    """`arm`'s peak learning rate: its own registered `lr` (a positive control's), else budget.yaml's."""
    own = protocol.arms[arm].lr
    return protocol.budget.lr if own is None else own


def own_training(protocol) -> dict[str, dict]:
    """{arm: {"learner_steps_per_round", "lr"}} for every arm registered with a training budget of its
    own (arms.yaml), with both figures as it runs them; {} when every arm trains as budget.yaml says."""
    return {a: {"learner_steps_per_round": learner_steps(protocol, a), "lr": learning_rate(protocol, a)}
            for a in protocol.arm_names
            if protocol.arms[a].learner_steps_per_round is not None or protocol.arms[a].lr is not None}


def validate_arms(data: Any, path) -> dict:
    """arms.yaml: every arm a registered kind with its settings; A, B, C of the decision rule's
    kinds; a control's check names registered arms or 'base'. ProtocolError names file and key."""
    if not isinstance(data, dict) or not data:
        raise ProtocolError(f"{path}: expected a mapping of arm name -> settings")
    for arm, spec in data.items():
        if not isinstance(arm, str) or not arm.isidentifier() or len(arm) > 16 or arm == BASE:
            raise ProtocolError(f"{path}: arm name {arm!r}: expected an identifier of at most 16 characters, not 'base'")
        kind = spec.get("kind") if isinstance(spec, dict) else None
        if kind not in KINDS:
            raise ProtocolError(f"{path}: key '{arm}.kind': expected one of {sorted(KINDS)}, got {kind!r}")
        if arm in DECISION_ARMS and kind != DECISION_ARMS[arm]:
            raise ProtocolError(f"{path}: key '{arm}.kind': expected '{DECISION_ARMS[arm]}' (the decision rule's "
                                f"arm {arm}), got {kind!r}")
        optional = {k: v for k, v in KINDS[kind].optional.items() if k in spec}
        _validate(spec, {"kind": (lambda v: v in KINDS, "a registered kind"), **KINDS[kind].settings, **optional},
                  f"{path}: arm '{arm}'")
    missing = sorted(set(DECISION_ARMS) - set(data))
    if missing:
        raise ProtocolError(f"{path}: the decision rule needs arms A, B and C; missing {missing}")
    for arm, spec in data.items():
        for key in ("must_beat", "must_not_beat"):
            unknown = [x for x in spec.get("check", {}).get(key, []) if x != BASE and x not in data]
            if unknown:
                raise ProtocolError(f"{path}: key '{arm}.check.{key}': {unknown} are not registered arms "
                                    f"(expected names from {sorted(data)} or 'base')")
    return data


def cross_check(raw: dict, d) -> None:
    """Settings that must agree with the budget: C's recovery comes out of the round's steps."""
    steps = raw["budget.yaml"]["learner_steps_per_round"]
    for arm, spec in raw["arms.yaml"].items():
        if spec["kind"] == "heircommit" and spec["recovery_steps"] >= steps:
            raise ProtocolError(f"{d / 'arms.yaml'}: key '{arm}.recovery_steps': {spec['recovery_steps']} leaves no "
                                f"update step of the {steps} learner_steps_per_round (recovery comes out of them); "
                                f"expected < {steps}")

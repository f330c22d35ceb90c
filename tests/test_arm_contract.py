"""The arm contract (harness.running.contract): a new arm kind is one module and one registry line.

The kind here, tests/cursor_arm.py, exists in the tests alone: registered with one line, it is
validated with its protocol, frozen and piloted, run to its seal, stopped and resumed with its own
state restored, and charted by its own metrics. The runner reads no arm's state or sections, and a
module that breaks the contract is refused with one clear line."""
import ast
import shutil
import sys
import types

import pytest
import yaml

from arms import b_selfplay, c_heircommit, d_commit_gate, n_shuffled
from harness import PROJECT_ROOT
from harness.core import records
from harness.core.typed import RoundRecord
from harness.freeze.freeze import freeze
from harness.learning.checkpoint import read_checkpoint
from harness.learning.model import SIZES, Transformer
from harness.learning.training import make_optimizer
from harness.running import runner
from harness.running.contract import NoState, RunContext, RunError, load_arm
from harness.spec.kinds import KINDS, ArmKind, Needs
from harness.spec.frozen import load_sets
from harness.spec.protocol import load_protocol
from harness.spec.schema import _int
from tests.tiny_protocol import make_tiny_protocol

REGISTRY_LINE = ("cursor_sft", ArmKind("tests.cursor_arm", {"window": _int(1)}, Needs()))
WINDOW = 5


@pytest.fixture(scope="module")
def registered():
    """The one registry line, for this module's tests (the real registry is left as it was)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(KINDS, *REGISTRY_LINE)
        yield


@pytest.fixture(scope="module")
def frozen(registered, tmp_path_factory):
    parent = tmp_path_factory.mktemp("contract")
    # one seed and the controls N and D left out: a shorter pilot
    proto = make_tiny_protocol(parent, seeds={"run_seeds": [1]},
                               decision={"spread_rule": {"test": "range", "multiplier": 1.0}})
    arms = yaml.safe_load((proto / "arms.yaml").read_text())
    arms = {**{a: arms[a] for a in ("A", "B", "C", "P")}, "E": {"kind": "cursor_sft", "window": WINDOW}}
    (proto / "arms.yaml").write_text(yaml.safe_dump(arms, sort_keys=False))
    results = parent / "results"
    freeze(str(proto), results, out=lambda *a: None, jobs=1)  # one process: the pilot runs E where the line is
    return proto, results


def copy_frozen(frozen, dst):
    proto, results = frozen
    shutil.copytree(results / proto.name / "frozen", dst / proto.name / "frozen")
    return dst


@pytest.fixture(scope="module")
def sealed(frozen, tmp_path_factory):
    """E seed 1, uninterrupted, to its seal."""
    proto, _ = frozen
    results = copy_frozen(frozen, tmp_path_factory.mktemp("sealed"))
    return runner.run(str(proto), "E", 1, results, progress=False, tracking=False)


def test_a_kind_defined_in_the_tests_runs_to_its_seal(frozen, sealed):
    proto, results = frozen
    protocol = load_protocol(proto)
    assert records.is_sealed(sealed)
    seed_set = [t.canonical_hash for t in load_sets(results, protocol)["seed_set"]]
    recs = records.RecordLog(sealed / "records.jsonl").records()
    rounds = [r for r in recs if r["kind"] == "round"]
    assert [r["round"] for r in rounds] == list(range(protocol.budget.rounds))
    for r in rounds:  # the arm's own section, recorded as it returned it; its spend checked by the runner
        start = WINDOW * r["round"]
        assert r["cursor"]["start"] == start
        assert len(r["cursor"]["tasks"]) == WINDOW and len(seed_set) > start + WINDOW
        assert r["budget"]["learner_steps"] == protocol.budget.learner_steps_per_round
        assert r["budget"]["seed_tasks"] == WINDOW
        assert r["cursor"]["tasks"] == seed_set[start:start + WINDOW]  # the window slid by WINDOW each round
    meta = read_checkpoint(sealed / "checkpoints" / f"round{protocol.budget.rounds - 1}.pt")[1]
    assert meta["cursor"] == WINDOW * protocol.budget.rounds  # the arm's state, beside the runner's keys only
    assert set(meta) == set(runner.CHECKPOINT_KEYS) | {"cursor"}


def test_its_state_survives_a_resume(frozen, sealed, tmp_path):
    """Stopped after round 0 and resumed, E's records and checkpoints are the uninterrupted run's,
    byte for byte: round 1 starts where the checkpoint's state says (a state lost on resume would
    start round 1's window at 0 again)."""
    proto, _ = frozen
    results = copy_frozen(frozen, tmp_path)
    stopped = runner.run(str(proto), "E", 1, results, progress=False, tracking=False, stop_after_round=0)
    assert not records.is_sealed(stopped)
    resumed = runner.run(str(proto), "E", 1, results, progress=False, tracking=False)
    assert records.is_sealed(resumed)
    for name in ["records.jsonl", "checkpoints/round0.pt", "checkpoints/round1.pt"]:
        assert (resumed / name).read_bytes() == (sealed / name).read_bytes(), name


def test_its_metrics_are_charted_beside_the_runners(sealed):
    arm = load_arm("tests.cursor_arm")
    rec = [r for r in records.RecordLog(sealed / "records.jsonl").records() if r["kind"] == "round"][1]
    typed = RoundRecord.from_dict(rec, "records.jsonl")
    m = runner._round_metrics(typed, arm.round_metrics({"cursor": rec["cursor"]}))
    assert m["cursor/start"] == float(WINDOW) and m[runner.PRIMARY_METRIC] == rec["eval"]["probe_pass_rate"]
    assert {k.split("/")[0] for k in m} == {runner.PRIMARY_METRIC.split("/")[0], "eval", "budget", "cursor", "train"}
    with pytest.raises(RunError, match=r"round 1: the arm's round_metrics named \['eval/probe_pass_rate'\]"):
        runner._round_metrics(typed, {"eval/probe_pass_rate": 1.0})


def test_a_checkpoint_is_resumed_only_by_the_kind_whose_state_it_holds(sealed, frozen):
    """E's checkpoint holds E's state: an arm without state refuses it, naming the file."""
    proto, results = frozen
    protocol = load_protocol(proto)
    model = Transformer(SIZES[protocol.model.size])
    ctx = RunContext(protocol=protocol, arm="A", seed=1, device="cpu", model=model,
                     optimizer=make_optimizer(model, 1e-3, 0.0),
                     seed_set=[], probes=[], held_out={}, bank=None, run_dir=sealed, base_path=sealed)
    path = sealed / "checkpoints" / "round0.pt"
    with pytest.raises(RunError, match=rf"{path}: the arm's state \(arms.a_sft.State\) cannot be read back: "
                                       r"ValueError: an arm without state found state \['cursor'\]"):
        runner._load_checkpoint(ctx, load_arm("arms.a_sft"), path)


# ---------------------------------------------------------------- the contract's edges

def test_the_context_is_built_by_keyword():
    with pytest.raises(TypeError):
        RunContext(None, "A", 1, "cpu", None, None, [], [], {}, None, None, None)


def fake_module(monkeypatch, name: str, **attrs) -> str:
    mod = types.ModuleType(name)
    mod.__file__ = f"<{name}>"
    mod.__dict__.update(attrs)
    monkeypatch.setitem(sys.modules, name, mod)
    return name


class Stateful:
    def __init__(self, d=None):
        self.d = d or {}

    def to_dict(self):
        return self.d

    @classmethod
    def from_dict(cls, d, family):
        return cls(d)


def test_a_module_that_breaks_the_contract_is_refused(monkeypatch):
    def run_round(ctx, r):
        return None
    with pytest.raises(RunError, match=r"arm module no_round \(<no_round>\) has no run_round\(ctx, r\)"):
        load_arm(fake_module(monkeypatch, "no_round", State=Stateful))
    with pytest.raises(RunError, match=r"arm module bad_state: State must be a class .* missing \['from_dict'\]"):
        load_arm(fake_module(monkeypatch, "bad_state", run_round=run_round, State=types.SimpleNamespace(to_dict=dict)))
    arm = load_arm(fake_module(monkeypatch, "plain", run_round=run_round))
    assert arm.state is NoState and arm.round_metrics({"anything": 1}) == {}
    model = Transformer(SIZES["tiny"], seed=1)
    ctx = types.SimpleNamespace(arm="X", model=model, optimizer=make_optimizer(model, 1e-3, 0.0), bank=None,
                                state=Stateful({"bank": 3}))
    with pytest.raises(RunError, match=r"arm X: its state's key\(s\) \['bank'\] are the runner's part of the"):
        runner._checkpoint_payload(ctx)


def test_an_arm_without_state_records_what_every_checkpoint_recorded_before():
    """The checkpoints' bytes (which the round records hash) stay those of the runs on record."""
    assert NoState().to_dict() == {"admitted_parents": []} == b_selfplay.State().to_dict()
    assert NoState.from_dict({"admitted_parents": []}, None) == NoState()


def test_the_shipped_kinds_chart_their_own_sections():
    """B's sections give monitor/ and band/ metrics, C's gate adds heircommit/; the arms built on
    them keep their state and metrics."""
    sections = {"band": {"solver_tasks": 4, "admitted": 3, "zero_spread": 1},
                "monitors": {"within_input_entropy": 0.5, "note": "not a number"},
                "verdict_reasons": {"solver": {"reasons": {"fail": 3}, "retried": 0}},
                "heircommit": {"confirm": {"decision": "commit", "sign_test_p": 0.25}}}
    b = {"monitor/within_input_entropy": 0.5, "band/solver_tasks": 4, "band/admitted": 3, "band/zero_spread": 1}
    assert b_selfplay.round_metrics(sections) == b
    assert c_heircommit.round_metrics(sections) == {**b, "heircommit/commit": 1.0, "heircommit/sign_test_p": 0.25}
    assert d_commit_gate.round_metrics is c_heircommit.round_metrics
    assert n_shuffled.round_metrics is b_selfplay.round_metrics
    assert c_heircommit.State is d_commit_gate.State is n_shuffled.State is b_selfplay.State
    assert load_arm("arms.a_sft").state is load_arm("arms.p_fresh_sft").state is NoState


def test_the_runner_reads_no_arms_state_or_sections():
    """No string in runner.py names a shipped arm's state key or record section."""
    tree = ast.parse((PROJECT_ROOT / "harness" / "running" / "runner.py").read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    owned = {"admitted_parents", "band", "monitors", "verdict_reasons", "heircommit", "shuffle", "fresh", "cursor"}
    assert not strings & owned
    assert "admitted" not in {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}

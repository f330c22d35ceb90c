"""Protocol files are validated on load; every error names the file, the key and what was expected."""
import dataclasses
import shutil
import typing

import pytest
import yaml

from harness.cli.hydra_app import RunRefused, check_overrides
from harness.spec.kinds import _NEGATIVE, _POSITIVE, KINDS
from harness.spec.protocol import VIEWS, Arm, Check, ProtocolError, load_protocol, protocols_root
from harness.spec.schema import SCHEMAS


@pytest.fixture
def proto(tmp_path):
    d = tmp_path / "p"
    shutil.copytree(protocols_root() / "smoke", d)
    return d


def edit(path, fn):
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data))


@pytest.mark.parametrize("name", ["main", "smoke", "polygon"])
def test_shipped_protocols_load(name):
    p = load_protocol(name)
    assert p.arm_names == ["A", "B", "C", "D", "N", "P"]
    # both shipped protocols register the controls that test the instrument
    assert {a: p.arms[a].kind for a in ("P", "N", "D")} == {
        "P": "fresh_sft", "N": "shuffled_selfplay", "D": "commit_gate"}
    assert p.arms["P"].check.must_beat == ("base", "A") and p.arms["N"].check.must_not_beat == ("B",)
    assert p.tasks.probe.size == 128 if name == "polygon" else p.tasks.probe.size > 0
    assert p.budget.max_bytes == 256


def test_polygon_is_the_registered_experiment():
    p = load_protocol("polygon")
    assert p.model.size == "polygon" and len(p.run_seeds) == 3
    assert (p.gates.band.low, p.gates.band.high) == (0.4, 0.6)


@pytest.mark.parametrize("fname,mutate,expect", [
    ("budget.yaml", lambda d: d.update(rounds="three"), "budget.yaml: key 'rounds': expected an integer >= 1, got 'three'"),
    ("budget.yaml", lambda d: d.pop("G"), "budget.yaml: missing key 'G'"),
    ("budget.yaml", lambda d: d.update(roundz=3), "unknown key(s) ['roundz']"),
    ("gates.yaml", lambda d: d["band"].update(frontier="magic"), "key 'frontier': expected one of"),
    ("gates.yaml", lambda d: d["band"].update(low=0.9, high=0.1), "band': low 0.9 > high 0.1"),
    ("arms.yaml", lambda d: d["B"].update(operators=["teleport"]), "arm 'B': key 'operators'"),
    ("arms.yaml", lambda d: d["C"].update(kind="sft"), "key 'C.kind': expected 'heircommit'"),
    ("arms.yaml", lambda d: d.pop("A"), "needs arms A, B and C"),
    ("arms.yaml", lambda d: d["P"].update(kind="telepathy"), "key 'P.kind': expected one of"),
    ("arms.yaml", lambda d: d["P"]["check"].update(must_beat=["base", "Q"]), "key 'P.check.must_beat': ['Q']"),
    ("arms.yaml", lambda d: d["N"].pop("check"), "arm 'N': missing key 'check'"),
    ("arms.yaml", lambda d: d["C"].update(recovery_steps=24), "key 'C.recovery_steps': 24 leaves no update step"),
    ("seeds.yaml", lambda d: d.update(run_seeds=[1, 1]), "seeds must be distinct"),
    ("tasks.yaml", lambda d: d["family"].update(min_depth=4, max_depth=2), "key 'family.min_depth': min_depth 4 > max_depth 2"),
    ("tasks.yaml", lambda d: d["family"].update(max_const=100), "key 'family': key 'max_const': expected an integer >= 2 <= 99"),
    ("tasks.yaml", lambda d: d["family"].pop("alt_phrasing"), "key 'family': missing key 'alt_phrasing'"),
    ("tasks.yaml", lambda d: d["family"].update(name="regex"), "key 'family.name': expected one of ['code', 'loops']"),
    ("tasks.yaml", lambda d: d["probe"].update(min_depth=1), "key 'probe': unknown key(s) ['min_depth']"),
    ("decision.yaml", lambda d: d.update(contrasts=[["A", "C"]]), "key 'contrasts'"),
    ("decision.yaml", lambda d: d.update(negative_control_override="warn"),
     "key 'negative_control_override': expected null, or the stated reason (a sentence) for letting the decision "
     "rule's verdict stand when the negative control fails its check, got 'warn'"),
    ("decision.yaml", lambda d: d.pop("infrastructure_override"), "decision.yaml: missing key 'infrastructure_override'"),
    ("bootstrap.yaml", lambda d: d.update(method="jackknife"), "bootstrap.yaml: key 'method'"),
])
def test_malformed_files_give_clear_errors(proto, fname, mutate, expect):
    edit(proto / fname, mutate)
    with pytest.raises(ProtocolError) as e:
        load_protocol(proto)
    assert expect in str(e.value) and str(proto / fname) in str(e.value)


def test_missing_file_and_bad_yaml(proto):
    (proto / "gates.yaml").write_text("band: [unclosed\n")
    with pytest.raises(ProtocolError, match="gates.yaml: not valid YAML"):
        load_protocol(proto)
    (proto / "gates.yaml").unlink()
    with pytest.raises(ProtocolError, match="gates.yaml: missing protocol file"):
        load_protocol(proto)


def test_unknown_protocol_lists_known():
    with pytest.raises(ProtocolError, match="known protocols: .*smoke"):
        load_protocol("no-such-protocol")


def test_override_of_frozen_content_refused():
    with pytest.raises(RunRefused, match="'budget.rounds' is frozen in protocols/smoke/budget.yaml"):
        check_overrides(["protocol=smoke", "budget.rounds=5"])
    with pytest.raises(RunRefused, match="unknown run setting 'lr'"):
        check_overrides(["lr=0.1"])
    check_overrides(["protocol=smoke", "arm=B", "seed=2", "device=cpu", "hydra/launcher=joblib"])


def test_the_schema_names_exactly_what_the_implementing_modules_register(proto):
    """One registry per kind, owned by the module that implements it: the schema accepts each
    registered name and refuses any other (the proposer's operators are the task family's:
    tests/test_families.py)."""
    from harness.learning import advantages, frontier, sizes
    from harness.spec.schema import ADVANTAGES, FRONTIERS, MODEL_SIZES
    assert (ADVANTAGES, FRONTIERS, MODEL_SIZES) == (
        tuple(advantages.ADVANTAGES), tuple(frontier.SCORES), tuple(sizes.SIZES))
    for size in sizes.SIZES:
        edit(proto / "model.yaml", lambda d: d.update(size=size))
        assert load_protocol(proto).model.size == size
    edit(proto / "model.yaml", lambda d: d.update(size="huge"))
    with pytest.raises(ProtocolError, match="model.yaml"):
        load_protocol(proto)


def test_the_welch_seed_test_needs_two_seeds(proto):
    edit(proto / "seeds.yaml", lambda d: d.update(run_seeds=[1]))
    with pytest.raises(ProtocolError, match="decision.yaml: key 'spread_rule': the Welch seed test needs >= 2 run seeds"):
        load_protocol(proto)
    edit(proto / "decision.yaml", lambda d: d.update(spread_rule={"test": "range", "multiplier": 1.0}))
    with pytest.raises(ProtocolError, match="seeds.yaml: key 'pilot_seeds': expected at most the 1 run_seeds"):
        load_protocol(proto)
    edit(proto / "seeds.yaml", lambda d: d.update(pilot_seeds=1))
    assert load_protocol(proto).run_seeds == [1]


def test_a_protocol_from_before_pilot_seeds_loads_with_the_two_its_pilot_ran(proto):
    """An archived protocol must still load for its audit: seeds.yaml without pilot_seeds meant 2."""
    edit(proto / "seeds.yaml", lambda d: d.pop("pilot_seeds"))
    p = load_protocol(proto)
    assert p.seeds.pilot_seeds == 2 and "pilot_seeds" not in (proto / "seeds.yaml").read_text()
    edit(proto / "seeds.yaml", lambda d: d.update(run_seeds=[1]))
    edit(proto / "decision.yaml", lambda d: d.update(spread_rule={"test": "range", "multiplier": 1.0}))
    assert load_protocol(proto).seeds.pilot_seeds == 1


def test_the_calibration_split_is_probe_sized(proto):
    edit(proto / "tasks.yaml", lambda d: d["calibration"].update(size=d["probe"]["size"] + 1))
    with pytest.raises(ProtocolError, match="tasks.yaml: key 'calibration.size': expected"):
        load_protocol(proto)


def _schema_keys(schema: dict) -> dict:
    return {k: _schema_keys(v) if isinstance(v, dict) else None for k, v in schema.items()}


def _view_keys(cls) -> dict:
    hints = typing.get_type_hints(cls)
    return {f.name: _view_keys(hints[f.name]) if dataclasses.is_dataclass(hints[f.name]) else None
            for f in dataclasses.fields(cls)}


def test_every_typed_view_has_exactly_its_schemas_keys():
    """A key added to a schema but not to its view (or the reverse) would be validated and then dropped."""
    for fname, cls in VIEWS.items():
        assert _view_keys(cls) == _schema_keys(SCHEMAS[fname]), fname
    # an arm's view holds every setting any registered kind takes
    arm_fields = {f.name for f in dataclasses.fields(Arm)} - {"name"}
    for kind, spec in KINDS.items():
        assert set(spec.settings) | {"kind"} <= arm_fields, kind
    assert {f.name for f in dataclasses.fields(Check)} == set(_POSITIVE) | set(_NEGATIVE)


def test_views_carry_the_yaml_values(proto):
    edit(proto / "budget.yaml", lambda d: d.update(max_bytes=200, G=6))
    edit(proto / "arms.yaml", lambda d: d["C"].update(recovery_steps=3))
    p = load_protocol(proto)
    assert (p.budget.max_bytes, p.budget.G, p.arms["C"].recovery_steps) == (200, 6, 3)
    assert p.arms["A"].operators is None and p.arms["B"].operators == tuple(p.raw["arms.yaml"]["B"]["operators"])
    assert p.gates.band.params() == {"lo": p.gates.band.low, "hi": p.gates.band.high}
    assert p.decision.contrasts == (("C", "B"), ("B", "A")) and p.tasks.confirm.per_round == p.raw["tasks.yaml"]["confirm"]["per_round"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.budget.G = 2

"""Bases as a registered factor, end to end: the protocol's registration (seeds.yaml bases, decision.yaml
recipe), the base built from its own init and data-order seeds, freeze -> looks -> the readout about the
recipe on a tiny protocol, and the controls and labels the readout computes (harness.readout.recipe)."""
import json

import numpy as np
import pytest
import yaml

from harness.core import paths, records
from harness.core.settings import RunSettings
from harness.spec.protocol import load_protocol
from harness.spec.schema import ProtocolError
from tests.tiny_protocol import make_tiny_protocol

BASES = {"init_seeds": [11, 12, 13], "data_order_seeds": [21, 22, 23]}
RULE = {"looks": [2, 3], "control_alpha": 0.5, "outlier_alpha": 0.05}
SPREAD = {"base_spread": {"bases": 2, "sd": {"B-A": 0.07, "C-B": 0.015}}, "replicates": 20}  # a fast plan simulation


def recipe_protocol(parent, name="rtiny", bases=None, rule=None, design=None, arms=("A", "B", "C", "P")):
    """A tiny protocol about the recipe: one seed per arm, three bases of 20 warm-up steps, looks after 2
    and 3, runs of one round; only `arms`."""
    d = make_tiny_protocol(parent, name, seeds={"run_seeds": [1], "bases": bases or BASES},
                           decision={"recipe": rule or RULE, "design": design or SPREAD}, model={"base": {"steps": 20}},
                           budget={"rounds": 1})
    registered = yaml.safe_load((d / "arms.yaml").read_text())
    (d / "arms.yaml").write_text(yaml.safe_dump({a: registered[a] for a in arms}, sort_keys=False))
    return d


def _edit(d, fname, fn):
    data = yaml.safe_load((d / fname).read_text())
    fn(data)
    (d / fname).write_text(yaml.safe_dump(data, sort_keys=False))


# ---- the registration ----------------------------------------------------------------------------------

def test_a_recipe_protocol_loads_with_its_bases_and_rule(tmp_path):
    p = load_protocol(recipe_protocol(tmp_path))
    assert p.is_recipe and p.seeds.bases.count == 3 and p.decision.recipe.looks == (2, 3)
    draw = p.for_base(2).base_draw
    assert (draw.index, draw.init_seed, draw.data_order_seed, draw.label) == (2, 12, 22, "b02")
    with pytest.raises(ProtocolError, match="base 4: expected 1..3"):
        p.for_base(4)
    assert not load_protocol("main").is_recipe and load_protocol("main").seeds.bases is None


@pytest.mark.parametrize("change, message", [
    (lambda d: (_edit(d, "decision.yaml", lambda x: x.update(recipe=None)),
                _edit(d, "seeds.yaml", lambda x: x.update(run_seeds=[1, 2]))), "decision.yaml: key 'recipe' is null"),
    (lambda d: _edit(d, "seeds.yaml", lambda x: x["bases"].update(data_order_seeds=[21, 22])),
     "seeds.yaml: key 'bases': expected init_seeds and data_order_seeds of one length"),
    (lambda d: _edit(d, "seeds.yaml", lambda x: x["bases"].update(init_seeds=[11, 11, 13], data_order_seeds=[21, 21, 23])),
     "every base's \\(init, data order\\) seed pair must be distinct"),
    (lambda d: _edit(d, "decision.yaml", lambda x: x["recipe"].update(looks=[2, 4])), "key 'recipe.looks': expected"),
    (lambda d: _edit(d, "decision.yaml", lambda x: x["recipe"].update(looks=[3, 2])), "key 'recipe.looks': expected"),
    (lambda d: _edit(d, "decision.yaml", lambda x: x["recipe"].update(control_alpha=1.5)),
     "key 'recipe.control_alpha': expected a level"),
    (lambda d: _edit(d, "decision.yaml", lambda x: x["design"].pop("base_spread")), "design.base_spread.sd"),
    (lambda d: _edit(d, "seeds.yaml", lambda x: x.update(bases=[1, 2, 3])), "seeds.yaml: key 'bases': expected null"),
])
def test_a_malformed_registration_is_refused_naming_the_file_and_key(tmp_path, change, message):
    d = recipe_protocol(tmp_path)
    change(d)
    with pytest.raises(ProtocolError, match=message):
        load_protocol(d)


def test_the_shipped_recipe_protocol_registers_every_base_in_its_plan():
    p = load_protocol("recipe")
    assert p.is_recipe and p.decision.recipe.looks[-1] == p.seeds.bases.count == 8
    assert p.for_base(1).base_draw.init_seed == p.model.base.seed  # b01 is main's registered base's draw
    assert set(load_protocol("main").arms) - set(p.arms) == {"D"}


# ---- the base of each draw ---------------------------------------------------------------------------------

def test_each_base_is_built_from_its_own_init_and_data_order_seeds(tmp_path):
    """The two seeds each move the bytes on their own, and the draw (7, 7) builds exactly the one-base
    protocol's base of model.yaml seed 7: base.seed was both seeds before they were split."""
    from harness.freeze.base import build_base
    from harness.freeze.sets import materialise
    one = load_protocol(make_tiny_protocol(tmp_path, "one", model={"base": {"steps": 20}}))
    warmup = materialise(one)["warmup"]
    rp = load_protocol(recipe_protocol(tmp_path, bases={"init_seeds": [7, 7, 8], "data_order_seeds": [7, 8, 7]}))
    built = [build_base(rp.for_base(k), warmup, progress=False) for k in (1, 2, 3)]
    assert built[0] == build_base(one, warmup, progress=False)
    assert len({records.sha256_bytes(b) for b in built}) == 3


# ---- freeze -> looks -> readout ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """The tiny recipe protocol through `experiment` (in process, one job, no tracking): its tiny bases pass
    nothing, so look 1 (2 bases) shows no spread and decides nothing, and the plan goes on to look 2."""
    from harness.cli import recipe
    root = tmp_path_factory.mktemp("recipe")
    proto = recipe_protocol(root)
    results = root / "results"
    lines = []
    st = RunSettings(results_dir=results, tracking=False, progress="off", jobs=1)
    rdir = recipe.experiment(load_protocol(proto), st, lines.append)
    return proto, results, rdir, lines


def test_the_experiment_reads_every_look_and_seals_one_verdict_about_the_recipe(experiment):
    proto, results, rdir, lines = experiment
    v = json.loads((rdir / "verdict.json").read_text())
    assert records.is_sealed(rdir) and (rdir / "report.md").exists()
    assert (v["n_bases"], v["stopped_at_look"], [r["n_bases"] for r in v["looks"]]) == (3, 2, [2, 3])
    assert [r["decided"] for r in v["looks"]] == [False, True]
    assert any("look 1/2 on 2 bases" in line and "goes on to 3 bases" in line for line in lines)
    # every base of the plan, in registered order, each read with its own seeds, label and gaps
    assert [(b["base"], b["init_seed"], b["data_order_seed"]) for b in v["bases"]] == [
        ("b01", 11, 21), ("b02", 12, 22), ("b03", 13, 23)]
    assert {c for c in v["bases"][0] if "-" in c} == {"C-B", "B-A", "P-base", "P-A"}
    assert [r["base"] for r in v["label_stability"]["table"]] == ["b01", "b02", "b03"]
    assert set(v["contrasts"]) == {"C-B", "B-A"} and v["contrasts"]["B-A"]["n_bases"] == 3
    # the tiny bases pass nothing: P cannot clear its margin, so the instrument cannot see a gain
    assert v["outcome"] == "instrument_insensitive" and any("P must beat A" in w for w in v["warnings"])
    report = (rdir / "report.md").read_text()
    assert "| b02 | 12 | 22 |" in report and "Share of bases per label" in report


def test_every_base_lives_once_in_its_own_tree_locked_under_the_registration(experiment):
    from harness.spec.frozen import verify_frozen
    from harness.spec.recipe import base_tree, verify_registration
    proto, results, _, _ = experiment
    p = load_protocol(proto)
    reg = verify_registration(p, results)
    shas = []
    for k in (1, 2, 3):
        tree = base_tree(p, results, k)
        lock = verify_frozen(p, tree)
        assert lock["meta"]["registration_lock_hash"] == reg["lock_hash"]
        assert lock["meta"]["base"]["label"] == f"b{k:02d}"
        shas.append(records.sha256_file(paths.set_paths(tree, p.name)["base"]))
        for arm in p.arm_names:  # every arm's start record names this base's lock
            start = records.RecordLog(paths.run_dir(tree, p.name, arm, 1) / "records.jsonl").records()[0]
            assert start["lock_hash"] == lock["lock_hash"]
    assert len(set(shas)) == 3
    assert [r["bases"] for r in records.RecordLog(paths.looks_path(results, p.name)).records()] == [shas[:2], shas]


def test_a_look_taken_again_reads_the_same_and_records_nothing_new(experiment):
    from harness.readout.recipe import take_look
    proto, results, _, _ = experiment
    p = load_protocol(proto)
    before = paths.looks_path(results, p.name).read_bytes()
    assert take_look(p, results, 2).decided is False
    assert paths.looks_path(results, p.name).read_bytes() == before


def test_the_readout_runs_once_and_the_experiment_then_says_so(experiment):
    from harness.cli import recipe
    from harness.readout.recipe import RecipeReadoutError, readout
    proto, results, rdir, _ = experiment
    with pytest.raises(RecipeReadoutError, match="exists: the readout runs once"):
        readout(str(proto), results)
    ok, message = recipe.audit(load_protocol(proto), RunSettings(results_dir=results, tracking=False))
    assert ok and message.startswith("[audit] identical"), message
    said = []
    assert recipe.experiment(load_protocol(proto), RunSettings(results_dir=results, tracking=False, progress="off",
                                                               jobs=1), said.append) == rdir
    assert said and "already read out" in said[0]


def test_a_tampered_run_of_any_base_stops_the_readout(experiment, tmp_path):
    import shutil
    from harness.readout.analyzer import ReadoutError
    from harness.readout.recipe import load_bases
    proto, results, _, _ = experiment
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    p = load_protocol(proto)
    rec = paths.run_dir(paths.base_tree(copy, p.name, "b02"), p.name, "B", 1) / "records.jsonl"
    rec.chmod(0o644)
    rec.write_text(rec.read_text().replace('"seed":1', '"seed":2', 1))
    with pytest.raises(ReadoutError, match="B/seed1"):
        load_bases(p, copy, 3)


def test_a_run_on_one_base_replicates_to_the_same_bytes(experiment, capsys):
    from harness.cli.main import main
    proto, results, _, _ = experiment
    args = ["replicate", "--protocol", str(proto), "--results-dir", str(results), "--arm", "B", "--seed", "1"]
    assert main(args + ["--base", "2"]) == 0 and capsys.readouterr().out.strip().endswith("identical")
    assert main(args) == 2 and "name the base of the run, BASE=<1..3>" in capsys.readouterr().err
    assert main(args + ["--base", "4"]) == 2 and "base 4: expected 1..3" in capsys.readouterr().err


def test_a_recipe_protocol_is_run_by_experiment_only(experiment):
    from harness.cli.main import main
    from harness.running.runner import RunError, run
    proto, results, _, _ = experiment
    with pytest.raises(RunError, match="about the recipe"):
        run(str(proto), "A", 1, results, tracking=False, progress=False)
    assert main(["runs", "--protocol", str(proto), "--results-dir", str(results)]) == 2
    assert main(["archive", "--protocol", str(proto), "--results-dir", str(results)]) == 2


# ---- the controls and each base's own label, on outcomes made to order --------------------------------

def _bases(p, rates: dict, n=400, K=4, seed=0):
    """Bases whose arms pass each probe with the given rate per arm (arm -> K rates), one seed: on each base
    the probes are ranked at random and an arm of rate r passes the first r x n, so a gap is exact."""
    from harness.readout.recipe import Bases
    rng = np.random.default_rng(seed)
    u = ((np.stack([rng.permutation(n) for _ in range(K)]) + 0.5) / n)[:, None, :]
    out = {a: (u < np.asarray(r)[:, None, None]).astype(np.int64) for a, r in rates.items()}
    frozen = [{"base": {"label": f"b{k + 1:02d}"}, "base_sha256": f"{k:064x}", "base_pass_rate": 0.1} for k in range(K)]
    return Bases([f"b{k + 1:02d}" for k in range(K)], out, frozen)


def test_the_positive_control_clears_its_margin_about_the_recipe_or_the_verdict_says_insensitive(tmp_path):
    from harness.readout.recipe import control_checks, final_outcome
    p = load_protocol(recipe_protocol(tmp_path, arms=("A", "B", "C", "P", "N")))
    base, a = [0.10] * 4, [0.15] * 4
    ok = _bases(p, {"base": base, "A": a, "B": a, "C": a, "N": a, "P": [0.21, 0.19, 0.20, 0.20]})
    checks = {(c["arm"], c["other"]): c for c in control_checks(p, ok, 4, 0.05)}
    assert checks[("P", "A")]["passed"] and checks[("P", "base")]["passed"] and checks[("N", "B")]["passed"]
    assert checks[("P", "A")]["level"] == 0.5 and checks[("P", "A")]["test"]["gap"] == pytest.approx(0.05)
    assert final_outcome("keep_both", list(checks.values()), None) == ("keep_both", [])
    short = _bases(p, {"base": base, "A": a, "B": a, "C": a, "N": a, "P": [0.17, 0.17, 0.18, 0.17]})
    outcome, warnings = final_outcome("keep_both", control_checks(p, short, 4, 0.05), None)
    assert outcome == "instrument_insensitive" and warnings == [w for w in warnings if w.startswith("P must beat A")]


def test_a_negative_control_beating_its_arm_about_the_recipe_decides_unless_a_reason_is_registered(tmp_path):
    from harness.readout.recipe import control_checks, final_outcome
    p = load_protocol(recipe_protocol(tmp_path, arms=("A", "B", "C", "P", "N")))
    a = [0.15] * 4
    bases = _bases(p, {"base": [0.05] * 4, "A": a, "B": a, "C": a, "P": [0.25, 0.26, 0.24, 0.25], "N": [0.24, 0.26, 0.25, 0.25]})
    checks = control_checks(p, bases, 4, 0.05)
    assert [c["passed"] for c in checks if c["arm"] == "N"] == [False]
    assert final_outcome("keep_both", checks, None)[0] == "negative_control_failed"
    outcome, warnings = final_outcome("keep_both", checks, "a stated reason of at least five words")
    assert outcome == "keep_both" and warnings[0].startswith("N must not beat B")


def test_each_base_reads_its_own_label_from_its_probes_alone():
    from harness.stats.recipe import base_summary, own_labels
    rng = np.random.default_rng(1)
    u = rng.random((3, 1, 1000))
    lo = (u < 0.2).astype(np.int64)
    hi = (u < np.array([0.35, 0.2, 0.05])[:, None, None]).astype(np.int64)  # +15, 0, -15 pts
    assert own_labels(base_summary(hi, lo), 0.05, 0.05) == ["supported", "ruled_out", "reversed"]


@pytest.mark.long
def test_the_recipe_protocols_plan_holds_its_levels_at_its_registered_base_spread():
    """protocols/recipe's plan as freeze simulates it (2000 experiments a cell): `supported` at no effect and
    `ruled_out` at the sesoi within alpha + 3 MC s.e. under normal and one-outlier bases; within 2 alpha under
    skewed bases, the known excess (docs/statistics.md)."""
    from harness.freeze.recipe import plan_record
    p = load_protocol("recipe")
    alpha, n = p.decision.alpha, p.decision.design["replicates"]
    slack = 3 * (alpha * (1 - alpha) / n) ** 0.5
    for c, cells in plan_record(p)["operating_characteristics"].items():
        for cell in cells:
            wrong = {0.0: "supported", 1.0: "ruled_out"}.get(cell["effect_sesoi"])
            if wrong is None:
                continue
            bound = 2 * alpha if cell["law"] == "skewed" else alpha + slack
            assert cell["share"][wrong] <= bound, (c, cell)


def test_an_experiment_stopped_after_its_first_look_resumes_to_the_same_verdict_bytes(experiment, tmp_path):
    """The state a kill leaves after look 1 (its looks.jsonl line, bases b01-b02 and their runs; no b03,
    no readout): `experiment` again rebuilds b03 from its seeds, runs it, takes look 2 and reads out the
    verdict of the uninterrupted run, byte for byte."""
    import shutil
    from harness.cli import recipe
    proto, results, rdir, _ = experiment
    p = load_protocol(proto)
    copy = tmp_path / "results"
    shutil.copytree(results, copy, ignore=shutil.ignore_patterns("readout"))
    shutil.rmtree(paths.base_tree(copy, p.name, "b03"))
    looks = paths.looks_path(copy, p.name)
    looks.write_bytes(looks.read_bytes().splitlines(keepends=True)[0])
    said = []
    again = recipe.experiment(p, RunSettings(results_dir=copy, tracking=False, progress="off", jobs=1), said.append)
    assert (again / "verdict.json").read_bytes() == (rdir / "verdict.json").read_bytes()
    assert any("bases b03: building 1" in line for line in said)

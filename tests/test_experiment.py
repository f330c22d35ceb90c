"""End to end on a tiny protocol: freeze -> every registered arm (A, B, C and the controls P, N, D)
x 2 seeds -> readout -> archive -> audit, with the MLflow index. An integration break anywhere in
the pipeline shows here."""
import json
import shutil
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT
from harness.cli import main
from harness.core import parallel
from harness.core.paths import run_dir
from harness.core.settings import RunSettings
from harness.freeze.freeze import freeze
from harness.readout.analyzer import ReadoutError, readout
from harness.readout.audit import audit, pack
from harness.running.runner import run
from harness.spec.protocol import load_protocol
from tests.tiny_protocol import make_tiny_protocol
from tools.compare_runs import compare_run


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    base = tmp_path_factory.mktemp("experiment")
    # B also registers unsorted_set (never a solver task: the shipped protocols leave it out), so the
    # ledgers show the determinism gate stopping it in a real run
    proto = make_tiny_protocol(base, arms={"B": {"operators": ["phrasing", "op", "depth", "unsorted_set"]}})
    results = base / "results"
    uri = f"sqlite:///{results / 'mlflow.db'}"
    freeze(str(proto), results, out=lambda *a: None)
    for arm in load_protocol(proto).arm_names:
        for seed in (1, 2):
            run(str(proto), arm, seed, results, tracking_uri=uri, progress=False)
    return proto, results, uri


def test_readout_writes_a_sealed_verdict_report_and_figures(experiment):
    proto, results, _ = experiment
    out = readout(str(proto), results)
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"]["rule_outcome"] in ("keep_both", "drop_heircommit", "loop_earns_nothing", "not_resolved")
    # the registered checks decide, in order, whether the rule's outcome is read at all (smoke registers no override)
    balance = verdict["verdict_reasons"]["balance"]
    decided = ("infrastructure_imbalanced" if balance["probes"]["flagged"] or balance["rollouts"]["flagged"] else
               "instrument_insensitive" if verdict["controls"]["positive_ok"] is False else
               "negative_control_failed" if verdict["controls"]["negative_ok"] is False else
               verdict["verdict"]["rule_outcome"])
    assert verdict["verdict"]["outcome"] == decided
    assert sorted(verdict["against_base"]) == ["A", "B", "C", "D", "N", "P"]
    assert sorted(verdict["retained"]) == ["C/seed1", "C/seed2", "D/seed1", "D/seed2"]
    report = (out / "report.md").read_text()
    for must in ("two-stage bootstrap interval", "Design analysis", "Compute ledger", "leak", "commit", "Control checks",
                 "against the base", "| base (round -1) |"):
        assert must.lower() in report.lower(), f"report.md lacks {must!r}"
    assert {p.name for p in out.glob("*.png")} >= {"probe_pass_rate.png", "contrasts.png", "heircommit.png", "monitors.png"}
    with pytest.raises(ReadoutError, match="make audit"):
        readout(str(proto), results)


def test_audit_reproduces_from_the_tree_and_from_an_archive(experiment):
    proto, results, _ = experiment
    if not (results / proto.name / "readout" / "SEALED").exists():
        readout(str(proto), results)
    ok, message = audit(str(proto), results)
    assert ok, message
    archive = pack(str(proto), results)
    ok, message = audit(str(proto), results, archive)
    assert ok and "reproduced" in message, message


def test_mlflow_holds_one_run_per_arm_and_seed_with_per_round_metrics(experiment):
    proto, results, uri = experiment
    from mlflow.tracking import MlflowClient
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(proto.name)
    runs = [r for r in client.search_runs([exp.experiment_id]) if "seed" in r.data.tags]
    assert sorted((r.data.tags["arm"], r.data.tags["seed"]) for r in runs) == [
        (a, s) for a in "ABCDNP" for s in ("1", "2")]
    arms = {r.info.run_name: r for r in client.search_runs([exp.experiment_id], "tags.kind = 'arm'")}
    for r in runs:
        history = client.get_metric_history(r.info.run_id, "0_primary/probe_pass_rate")
        assert sorted(m.step for m in history) == [0, 1, 2]  # the base, then after each of the 2 rounds
        assert r.info.run_name == f"{r.data.tags['arm']}/seed{r.data.tags['seed']}" and r.info.status == "FINISHED"
        assert r.data.tags["mlflow.parentRunId"] == arms[r.data.tags["arm"]].info.run_id
    for arm, r in arms.items():  # each arm's run: the mean over its two seeds at every step
        seeds = [{m.step: m.value for m in client.get_metric_history(s.info.run_id, "0_primary/probe_pass_rate")}
                 for s in runs if s.data.tags["arm"] == arm]
        mean = {m.step: m.value for m in client.get_metric_history(r.info.run_id, "0_primary/probe_pass_rate")}
        assert mean == {k: pytest.approx((seeds[0][k] + seeds[1][k]) / 2) for k in (0, 1, 2)} and r.info.status == "FINISHED"
    [protocol_run] = client.search_runs([exp.experiment_id], "tags.kind = 'protocol'")
    assert protocol_run.data.params["budget.rounds"] == "2"  # every frozen value, once


def test_cli_refuses_a_second_readout_without_a_traceback(experiment):
    proto, results, _ = experiment
    if not (results / proto.name / "readout" / "SEALED").exists():
        readout(str(proto), results)
    p = subprocess.run([sys.executable, "-m", "harness", "readout", "--protocol", str(proto), "--results-dir", str(results)],
                       cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "make audit" in p.stderr and "Traceback" not in p.stderr


def test_ledgers_show_the_gate_and_the_bank_at_work(experiment):
    proto, results, _ = experiment
    from harness.core.records import RecordLog
    ledger = RecordLog(results / proto.name / "B" / "seed1" / "ledger.jsonl").records()
    nondet = [e for e in ledger if e["mutation"] == "unsorted_set"]
    assert nondet and any(e["gate_reason"] == "nondeterministic" and not e["gate"] for e in nondet)
    solver = [e for e in ledger if e["solver"]]
    assert len(solver) == 2 * 4 and all(e["bank"] == "new" and e["G"] == 4 for e in solver)
    assert all({"k", "win_rate", "frontier_score", "admitted", "temperature"} <= set(e) for e in solver)


def test_runs_side_by_side_record_exactly_what_runs_one_after_another_record(experiment, tmp_path):
    """`make experiment` runs jobs in parallel: a record must not depend on it (seeds, one thread each)."""
    proto, results, _ = experiment
    name = load_protocol(proto).name
    twin = tmp_path / "results"
    shutil.copytree(results / name / "frozen", twin / name / "frozen")
    st = RunSettings(results_dir=twin, tracking=False, progress="off", jobs=2)
    calls = [(str(proto), arm, seed, st) for arm in ("C", "P") for seed in (1, 2)]  # C runs B's round inside its own
    out = parallel.each(main._experiment_run, calls, jobs=st.n_jobs)
    for (_, arm, seed, _), (rdir, seconds) in zip(calls, out):
        assert rdir == run_dir(twin, name, arm, seed) and seconds > 0
        same, lines = compare_run(run_dir(results, name, arm, seed), rdir)
        assert same, "\n".join(lines)

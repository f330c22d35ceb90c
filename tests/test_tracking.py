"""MLflow tracking on the embedded SQLite store: concurrent jobs, resume into one run; the experiment
as its users expect it (the model-training view, the arms first with fixed colours and their seeds
nested, steps in whole rounds from the base at 0, the base as a reference, MLflow's own source tags,
only what differs, the protocol once, the readout as a run, artifacts at their results-folder paths,
checkpoints referenced, a run cut short marked); the artifact location relative to the store, so a
moved results folder still shows its artifacts; the UI `make ui` serves."""
import importlib.metadata
import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from types import SimpleNamespace

import matplotlib.colors
import mlflow
import pytest

from harness.cli.main import track_readout
from harness import PROJECT_ROOT
from harness.core import paths, records
from harness.core.settings import RunSettings
from harness.readout.analyzer import readout
from harness.running import runner, tracking
from harness.readout.report import ARM_COLOURS
from harness.running.tracking import ArmRun, Tracker, default_tracking_uri, log_protocol, open_experiment
from harness.spec import provenance
from harness.spec.frozen import code_version
from harness.spec.lock import read_lock
from harness.spec.protocol import load_protocol
from tests.fixtures_runs import build_tree
from tests.tiny_protocol import freeze_tiny

ROUNDS = 20


ARM_B = ArmRun("smoke/B", 4, ROUNDS - 1, ("probe_pass",))


BASE_PARAMS = {"base_sha256": "c8e6", "code_version": "313a", "n_probes": 512}


def _job(uri: str, k: int, barrier) -> None:
    """One arm x seed job: all four start together on a fresh store to provoke lock contention, each
    opening the experiment (its layout made once) and logging into arm B's run."""
    barrier.wait()
    open_experiment(uri, "smoke", ["A", "B"], 4, ROUNDS - 1)
    barrier.wait()  # then all at once into the shared base run, as every run's first job does (log_base)
    Tracker(uri, "smoke").start(tracking.run_key("smoke", "base"), tags={"kind": "base"}, params=BASE_PARAMS,
                                run_name="base")
    t = Tracker(uri, "smoke")
    t.start(f"arm=B/seed={k}", tags={"arm": "B", "seed": str(k)}, params={"seed": k, "train": {"lr": 1e-3}},
            arm_run=ARM_B)
    for r in range(ROUNDS):
        t.log_step(r, {"probe_pass": (r + k) / 100, "dup_rate": 0.5, "loss": 1.0 / (r + 1)})
    t.finish()


def _metric_steps(client, run_id, key):
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_default_tracking_uri(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert default_tracking_uri(tmp_path / "results") == f"sqlite:///{(tmp_path / 'results').resolve()}/mlflow.db"
    assert default_tracking_uri("results").startswith("sqlite:////")  # always absolute
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert default_tracking_uri(tmp_path) == "http://tracking.example:5000"
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true" and os.environ["DO_NOT_TRACK"] == "true"


def test_concurrent_jobs_share_one_sqlite_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_job, args=(uri, k, barrier)) for k in range(4)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
    finally:
        for p in procs:
            if p.is_alive():  # a hung job must not outlive the test
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]

    t = Tracker(uri, "smoke")
    runs = t.client.search_runs([t.experiment_id], "tags.arm = 'B' and tags.seed != ''")
    assert sorted(r.data.tags["run_key"] for r in runs) == [f"arm=B/seed={k}" for k in range(4)]
    layout = t.client.search_runs([t.experiment_id], "tags.kind != ''")
    assert [r.info.run_name for r in layout] == ["A", "B", "base", "readout", "protocol"]  # made once, newest first
    [arm_b] = [r for r in layout if r.info.run_name == "B"]
    assert arm_b.info.status == "FINISHED"
    [base] = [r for r in layout if r.info.run_name == "base"]
    assert base.data.params == {k: str(v) for k, v in BASE_PARAMS.items()}  # four twins, each param once
    # one mean per step, over the four seeds, however the jobs interleaved
    means = [(m.step, m.value) for m in t.client.get_metric_history(arm_b.info.run_id, "probe_pass")]
    assert sorted(means) == [(r, pytest.approx((r + 1.5) / 100)) for r in range(ROUNDS)] and len(means) == ROUNDS
    for run in runs:
        assert run.data.tags["mlflow.parentRunId"] == arm_b.info.run_id
        k = int(run.data.tags["seed"])
        assert run.info.status == "FINISHED"
        assert run.data.params == {"seed": str(k), "train.lr": "0.001"}
        for key in ("probe_pass", "dup_rate", "loss"):
            assert _metric_steps(t.client, run.info.run_id, key) == list(range(ROUNDS))
        assert run.data.metrics["probe_pass"] == pytest.approx((ROUNDS - 1 + k) / 100)
    with open(tmp_path / "mlflow.db", "rb") as f:
        assert f.read(20)[18:20] == b"\x02\x02"  # WAL journal mode is recorded in the header


def test_resumed_job_keeps_one_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params = {"arm": "C", "seed": 1}
    first = Tracker(uri, "smoke")
    first.start("arm=C/seed=1", tags={"arm": "C"}, params=params)
    first.log_step(1, {"probe_pass": 0.25, "bpb": float("nan"), "gate": None})
    first.log_step(2, {"probe_pass": 0.5})
    # the job is killed here (no finish); a new process resumes with the same key
    second = Tracker(uri, "smoke")
    second.start("arm=C/seed=1", tags={"arm": "C"}, params=params)
    assert second.run_id == first.run_id
    second.log_step(2, {"probe_pass": 0.5})  # the interrupted round is redone: no duplicate point
    second.log_step(3, {"probe_pass": 0.75, "bpb": 2.5})
    rec = tmp_path / "records"
    rec.mkdir()
    (rec / "rounds.jsonl").write_text("{}\n")
    second.log_artifacts(rec)
    second.finish()

    runs = second.client.search_runs([second.experiment_id])
    assert len(runs) == 1
    run_id = runs[0].info.run_id
    assert [(m.step, m.value) for m in sorted(second.client.get_metric_history(run_id, "probe_pass"), key=lambda m: m.step)] \
        == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert _metric_steps(second.client, run_id, "bpb") == [3]  # NaN and None were skipped
    assert runs[0].data.params == {"arm": "C", "seed": "1"}
    assert runs[0].info.status == "FINISHED"
    assert [a.path for a in second.artifacts().list_artifacts()] == ["rounds.jsonl"]
    assert (tmp_path / "mlartifacts" / "smoke" / run_id / "artifacts" / "rounds.jsonl").is_file()  # beside the database

    # a finished run found again is reopened; a changed param is refused
    third = Tracker(uri, "smoke")
    with pytest.raises(ValueError, match="param 'seed' was logged as '1', now '2'"):
        third.start("arm=C/seed=1", tags={}, params={"arm": "C", "seed": 2})
    assert third.run_id is None and second.client.get_run(run_id).info.status == "FINISHED"  # refused: untouched
    with pytest.raises(RuntimeError, match="call start"):
        third.log_step(4, {"probe_pass": 1.0})
    with pytest.raises(TypeError, match="metric 'probe_pass' at step 4: expected a number"):
        second.log_step(4, {"probe_pass": "high"})
    for bad in (0.5, -1, True):
        with pytest.raises(TypeError, match="expected a whole number of rounds"):
            second.log_step(bad, {"probe_pass": 1.0})
    third.start("arm=C/seed=1", tags={}, params=params)  # a finished run found again is reopened
    assert third.run_id == run_id and third.client.get_run(run_id).info.status == "RUNNING"
    with pytest.raises(ValueError, match="run_key"):
        third.start("arm C seed 1", tags={}, params={})


def test_retry_backs_off_only_on_a_locked_database(monkeypatch):
    waits = []
    monkeypatch.setattr(tracking.time, "sleep", waits.append)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            try:
                raise sqlite3.OperationalError("database is locked")
            except sqlite3.OperationalError as e:  # MLflow wraps the driver error, as here
                raise RuntimeError("SQLAlchemy database error") from e
        return "done"

    assert tracking._retry(flaky) == "done" and len(calls) == 3
    assert 0.025 <= waits[0] <= 0.075 and 0.05 <= waits[1] <= 0.15  # 0.05 s doubling, jitter x[0.5, 1.5)

    def broken():
        raise ValueError("no such table: runs")

    waits.clear()
    with pytest.raises(ValueError, match="no such table"):
        tracking._retry(broken)
    assert waits == []

    def always_locked():
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError):
        tracking._retry(always_locked)
    assert len(waits) == tracking._RETRIES - 1


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """A tiny frozen protocol with arm A seed 1 run to its seal, mirrored to MLflow."""
    tmp = tmp_path_factory.mktemp("tracked")
    proto, results = freeze_tiny(tmp, seeds={"run_seeds": [1]}, decision={"spread_rule": {"test": "range", "multiplier": 1.0}})
    rdir = runner.run(str(proto), "A", 1, results, progress=False)
    t = Tracker(default_tracking_uri(results), "tiny")
    return SimpleNamespace(proto=proto, results=results, rdir=rdir, client=t.client, exp=t.experiment_id,
                           runs={r.info.run_name: r for r in t.client.search_runs([t.experiment_id])})


def test_arm_colours_are_the_reports():
    assert tracking.ARM_COLOURS == {a: matplotlib.colors.to_hex(c) for a, c in ARM_COLOURS.items()}
    arms = ["A", "B", "C", "E", "F"]
    assert [tracking.arm_colour(a, arms) for a in arms] == ["#7f7f7f", "#1f77b4", "#ff7f0e", "#d62728", "#e377c2"]


def _repo(tracked, run):
    return tracking.artifact_repository(default_tracking_uri(tracked.results), run.info.artifact_uri)


def _artifacts(repo, path=None):
    out = []
    for a in repo.list_artifacts(path):
        out += _artifacts(repo, a.path) if a.is_dir else [(a.path, a.file_size)]
    return out


def test_the_experiment_lists_the_arms_first_with_their_seeds_nested(tracked):
    exp = tracked.client.get_experiment(tracked.exp)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert "Step k is the state after k rounds; step 0 is the base" in exp.tags["mlflow.note.content"]
    runs = tracked.client.search_runs([tracked.exp])  # the UI's default order: newest first
    top = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]  # the rows the UI lists, seeds folded in
    assert [r.info.run_name for r in top] == ["A", "B", "C", "D", "N", "P", "base", "readout", "protocol"]
    assert [r.info.run_name for r in runs if r not in top] == ["A/seed1"]
    run_a, arm_a = tracked.runs["A/seed1"], tracked.runs["A"]
    assert run_a.data.tags["mlflow.parentRunId"] == arm_a.info.run_id
    assert run_a.info.status == "FINISHED" and run_a.data.tags["arm"] == "A" and run_a.data.tags["seed"] == "1"
    # colours fixed per arm, the report's
    for r in top + [run_a]:
        want = {"base": "#000000", "readout": "#c7c7c7", "protocol": "#c7c7c7"}.get(r.info.run_name)
        assert r.data.tags["mlflow.runColor"] == (want or matplotlib.colors.to_hex(ARM_COLOURS[r.data.tags["arm"]]))
    assert tracked.runs["B"].info.status == "SCHEDULED" and tracked.runs["readout"].info.status == "SCHEDULED"
    lock = read_lock(paths.lock_path(tracked.results, "tiny"))
    assert run_a.data.params == {"arm": "A", "seed": "1", "arm.kind": "sft", "protocol": "tiny",
                                 "lock_hash": lock["lock_hash"], "code_version": code_version()}
    assert "eval/probe_pass_rate" not in run_a.data.metrics
    assert sorted(run_a.data.metrics)[0] == "0_primary/probe_pass_rate"  # its section is the first chart
    assert [k for k in run_a.data.metrics if k.startswith("0_primary/")] == ["0_primary/probe_pass_rate"]


def _history(client, run, key="0_primary/probe_pass_rate"):
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]


def test_steps_are_whole_rounds_from_the_base_and_the_base_is_a_reference(tracked):
    base = json.loads((paths.base_eval_path(tracked.results, "tiny")).read_text())["eval"]["probe_pass_rate"]
    recs = records.RecordLog(tracked.rdir / "records.jsonl").records()
    rates = [r["eval"]["probe_pass_rate"] for r in recs if r["kind"] == "round"]
    assert _history(tracked.client, tracked.runs["A/seed1"]) == [(0, base), (1, rates[0]), (2, rates[1])]
    assert _history(tracked.client, tracked.runs["A"]) == [(0, base), (1, rates[0]), (2, rates[1])]  # one seed: its mean
    assert tracked.runs["A"].info.status == "FINISHED"
    assert _history(tracked.client, tracked.runs["base"]) == [(0, base), (1, base), (2, base)]
    base_run = tracked.runs["base"]
    files = dict(_artifacts(_repo(tracked, base_run)))
    assert set(files) == {"tiny/frozen/base_eval.json", "checkpoints.json"}
    local = _repo(tracked, base_run).download_artifacts("checkpoints.json", str(tracked.results.parent))
    [(rel, digest)] = json.loads(Path(local).read_text())["checkpoints"].items()
    assert rel == "tiny/frozen/base.pt" and records.sha256_file(tracked.results / rel) == digest


def test_runs_carry_mlflow_source_tags_and_the_environment_digest(tracked):
    run_a = tracked.runs["A/seed1"]
    made = records.verify_sealed(tracked.rdir)["provenance"]
    assert run_a.data.tags["mlflow.source.git.commit"] == made["git"]["commit"] == provenance.current()["git"]["commit"]
    assert run_a.data.tags["mlflow.source.name"] == "python -m harness run"
    assert run_a.data.tags["mlflow.source.type"] == "LOCAL"
    assert run_a.data.tags["environment_sha256"] == made["environment"]["sha256"]
    frozen = provenance.record(read_lock(paths.lock_path(tracked.results, "tiny"))["meta"]["environment"])
    for name in ("protocol", "base", "A"):  # registered by the freeze: its commit and environment
        tags = tracked.runs[name].data.tags
        assert tags["mlflow.source.git.commit"] == frozen["git"]["commit"]
        assert tags["environment_sha256"] == frozen["environment"]["sha256"]
        assert tags["mlflow.source.name"] == "python -m harness freeze"


def test_the_ui_link_opens_the_model_training_view():
    """MLflow 3's UI picks its navigation from the link's workflowType (else a per-browser setting
    that starts at GenAI), not from the experiment: the link carries it, and this MLflow's bundle
    still reads it from there."""
    page = tracking.runs_page("7")
    assert page == "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning&compareRunsMode=CHART"
    bundle = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    text = "".join(p.read_text(errors="replace") for p in bundle.glob("main.*.js"))
    assert 'MACHINE_LEARNING="machine_learning"' in text and '.get("workflowType")' in text
    assert '"mlflow.runColor"' in text  # the tag that fixes a run's colour


def test_the_full_protocol_is_logged_once(tracked):
    proto_run = tracked.runs["protocol"]
    flat = load_protocol(tracked.proto).flat()
    assert len(proto_run.data.params) == len(flat) and proto_run.data.params["budget.rounds"] == str(flat["budget.rounds"])
    names = [p for p, _ in _artifacts(_repo(tracked, proto_run))]
    assert "tiny/frozen/FROZEN.lock" in names and "protocols/tiny/budget.yaml" in names and "protocols/tiny/arms.yaml" in names
    log_protocol(default_tracking_uri(tracked.results), "tiny", tracked.proto,
                 paths.lock_path(tracked.results, "tiny"), flat, {})  # a second job: nothing new
    t = Tracker(default_tracking_uri(tracked.results), "tiny")
    assert len(t.client.search_runs([t.experiment_id], "tags.kind = 'protocol'")) == 1


def test_artifacts_sit_at_their_results_folder_paths_and_checkpoints_are_referenced(tracked):
    repo = _repo(tracked, tracked.runs["A/seed1"])
    files = dict(_artifacts(repo))
    assert {"tiny/A/seed1/records.jsonl", "tiny/A/seed1/manifest.json", "checkpoints.json"} <= set(files)
    for rel in files:
        if rel != "checkpoints.json":
            assert (tracked.results / rel).is_file(), rel  # each one names its sealed original
    assert not [p for p in files if "/checkpoints/" in p]
    local = repo.download_artifacts("checkpoints.json", str(tracked.results.parent))
    refs = json.loads(Path(local).read_text())["checkpoints"]
    assert sorted(refs) == ["tiny/A/seed1/checkpoints/round0.pt", "tiny/A/seed1/checkpoints/round1.pt"]
    for rel, digest in refs.items():
        assert records.sha256_file(tracked.results / rel) == digest  # relative to the results folder
    assert sum(size for _, size in files.items()) < 1 << 20


@pytest.mark.parametrize("error, status", [(KeyboardInterrupt, "KILLED"), (RuntimeError, "FAILED")])
def test_a_run_cut_short_is_marked(tracked, monkeypatch, error, status):
    import arms.a_sft

    def boom(ctx, r):
        raise error("cut short")
    monkeypatch.setattr(arms.a_sft, "run_round", boom)
    proto = tracked.proto
    results = tracked.results.parent / f"results-{status}"
    shutil.copytree(tracked.results / "tiny" / "frozen", results / "tiny" / "frozen")
    with pytest.raises(error):
        runner.run(str(proto), "A", 1, results, progress=False)
    t = Tracker(default_tracking_uri(results), "tiny")
    [run_a] = t.client.search_runs([t.experiment_id], "tags.arm = 'A' and tags.seed = '1'")
    assert run_a.info.status == status


def test_the_readout_is_a_run_of_its_own(tmp_path):
    tree = build_tree(tmp_path)
    out = readout(tree.protocol_dir, tree.results_dir)
    verdict = json.loads((out / "verdict.json").read_text())
    page = track_readout(RunSettings(results_dir=tree.results_dir), out)
    t = Tracker(default_tracking_uri(tree.results_dir), tree.name)
    assert page == tracking.runs_page(t.experiment_id)  # printed: the UI lands elsewhere
    [ro] = t.client.search_runs([t.experiment_id], "tags.kind = 'readout'")
    assert ro.info.run_name == "readout" and ro.info.status == "FINISHED"
    assert ro.data.tags["outcome"] == verdict["verdict"]["outcome"] == ro.data.params["outcome"]
    assert ro.data.tags["lock_hash"] == verdict["inputs"]["lock_hash"]
    made = json.loads((out / "manifest.json").read_text())["provenance"]  # the process that read it out
    assert ro.data.tags["mlflow.source.git.commit"] == made["git"]["commit"]
    assert ro.data.tags["mlflow.source.name"] == "python -m harness readout"
    assert ro.data.tags["environment_sha256"] == made["environment"]["sha256"]
    assert ro.data.tags["freeze_git_commit"] == verdict["provenance"]["freeze"]["git_commit"]
    paths = [p for p, _ in _artifacts(tracking.artifact_repository(t.tracking_uri, ro.info.artifact_uri))]
    assert {f"{tree.name}/readout/verdict.json", f"{tree.name}/readout/report.md", f"{tree.name}/readout/items.html",
            "design.json"} <= set(paths) and any(p.endswith(".png") for p in paths)


def test_the_artifact_location_is_relative_so_a_moved_results_folder_keeps_its_artifacts(tracked, tmp_path):
    for run in tracked.runs.values():
        assert run.info.artifact_uri == f"mlflow-artifacts:/tiny/{run.info.run_id}/artifacts"
    moved = tmp_path / "elsewhere" / "results"
    shutil.copytree(tracked.results, moved)
    con = sqlite3.connect(moved / "mlflow.db")
    try:
        dump = "\n".join(con.iterdump())
    finally:
        con.close()
    for machine_path in (tracked.results.parent, PROJECT_ROOT, Path.cwd()):  # where it was made, and from where
        assert str(machine_path) not in dump
    assert {e.name: e.artifact_location for e in tracked.client.search_experiments()} == {
        "tiny": "mlflow-artifacts:/tiny", "Default": "mlflow-artifacts:/0"}  # MLflow's own too, unused
    uri = default_tracking_uri(moved)
    run = Tracker(uri, "tiny").client.get_run(tracked.runs["A/seed1"].info.run_id)
    got = dict(_artifacts(tracking.artifact_repository(uri, run.info.artifact_uri)))
    assert got == dict(_artifacts(_repo(tracked, tracked.runs["A/seed1"]))) and "tiny/A/seed1/records.jsonl" in got
    local = tracking.artifact_repository(uri, run.info.artifact_uri).download_artifacts("tiny/A/seed1/records.jsonl")
    assert Path(local).is_relative_to(moved / "mlartifacts")  # read from the copy, not the original


def test_make_ui_serves_the_store_its_artifacts_and_the_model_training_view(tracked, tmp_path, monkeypatch):
    """`make ui`'s command names this project's server app and the store's artifact folder; that app
    (MLflow's server) lists and serves a moved results folder's artifacts and its page stores the
    model-training view as the browser's default before MLflow's script runs."""
    [ep] = importlib.metadata.entry_points(group="mlflow.app", name="harness")
    assert ep.value == "harness.running.mlflow_ui:app"
    made = subprocess.run(["make", "-n", "ui", "RESULTS=/data/r1", "PORT=5077"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, check=True).stdout
    [command] = [line for line in made.replace("\\\n", " ").splitlines() if "mlflow ui" in line]
    assert command.split()[1:] == ["ui", "--app-name", "harness", "--backend-store-uri", "sqlite:////data/r1/mlflow.db",
                                   "--artifacts-destination", f"/data/r1/{tracking.ARTIFACTS_DIR}", "--port", "5077"]

    # MLflow's server sets MLFLOW_TRACKING_URI in os.environ as it starts; registered here, it is undone
    # after the test, so later tests' subprocesses do not log into this copy
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from mlflow.server import handlers
    from harness.running import mlflow_ui
    moved = tmp_path / "served"
    shutil.copytree(tracked.results, moved)
    for name, value in (("_MLFLOW_SERVER_FILE_STORE", default_tracking_uri(moved)), ("_MLFLOW_SERVER_SERVE_ARTIFACTS", "true"),
                        ("_MLFLOW_SERVER_ARTIFACT_DESTINATION", str(moved / tracking.ARTIFACTS_DIR))):
        monkeypatch.setenv(name, value)  # what `mlflow ui` hands its server (mlflow.server._run_server)
    for cached in ("_tracking_store", "_artifact_repo"):
        monkeypatch.setattr(handlers, cached, None)
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", None)  # the server sets it
    web = mlflow_ui.flask_app.test_client()
    run_id = tracked.runs["A/seed1"].info.run_id
    listed = web.get(f"/ajax-api/2.0/mlflow/artifacts/list?run_id={run_id}&path=tiny/A/seed1").get_json()
    assert "tiny/A/seed1/records.jsonl" in [f["path"] for f in listed["files"]]
    served = web.get(f"/get-artifact?path=tiny/A/seed1/records.jsonl&run_uuid={run_id}")
    assert served.status_code == 200 and served.data == (moved / "tiny" / "A" / "seed1" / "records.jsonl").read_bytes()

    index = web.get("/").get_data(as_text=True)
    assert index.index(mlflow_ui.defaults_script()) < index.index('<script defer="defer" src="static-files/static/js/main.')
    stored = json.loads(index.split("var d=", 1)[1].split(";", 1)[0])
    assert json.loads(stored["mlflow.workflowType_v1"]) == "machine_learning"
    assert json.loads(stored["mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"]) is True
    # the keys are this MLflow's: its UI keeps each as `${key}_v${version}` in local storage, JSON
    bundle = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    text = "".join(p.read_text(errors="replace") for p in bundle.glob("main.*.js"))
    assert 'key:"mlflow.workflowType",version:1' in text and 'key:"mlflow.assistant.fab.autoOpenedOnFirstLoad",version:1' in text
    assert "`${e}_v${t}`" in text and "JSON.parse(e)" in text
    with pytest.raises(ValueError, match="index.html has no <head>"):
        mlflow_ui.page("<html><body></body></html>")

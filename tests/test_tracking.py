"""MLflow tracking on the embedded SQLite store: concurrent jobs, resume into one run."""
import multiprocessing as mp
import os
import sqlite3

import pytest

from harness.running import tracking
from harness.running.tracking import Tracker, default_tracking_uri

ROUNDS = 20


def _job(uri: str, k: int, barrier) -> None:
    """One arm x seed job: all four start together on a fresh store to provoke lock contention."""
    barrier.wait()
    t = Tracker(uri, "smoke")
    t.start(f"arm=B/seed={k}", tags={"arm": "B", "seed": str(k)}, params={"seed": k, "train": {"lr": 1e-3}})
    for r in range(ROUNDS):
        t.log_round(r, {"probe_pass": (r + k) / 100, "dup_rate": 0.5, "loss": 1.0 / (r + 1)})
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
    runs = t.client.search_runs([t.experiment_id])
    assert sorted(r.data.tags["run_key"] for r in runs) == [f"arm=B/seed={k}" for k in range(4)]
    for run in runs:
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
    first.log_round(1, {"probe_pass": 0.25, "bpb": float("nan"), "gate": None})
    first.log_round(2, {"probe_pass": 0.5})
    # the job is killed here (no finish); a new process resumes with the same key
    second = Tracker(uri, "smoke")
    second.start("arm=C/seed=1", tags={"arm": "C"}, params=params)
    assert second.run_id == first.run_id
    second.log_round(2, {"probe_pass": 0.5})  # the interrupted round is redone: no duplicate point
    second.log_round(3, {"probe_pass": 0.75, "bpb": 2.5})
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
    assert [a.path for a in second.client.list_artifacts(run_id)] == ["rounds.jsonl"]
    assert (tmp_path / "mlartifacts" / "smoke").is_dir()  # artifacts live beside the database

    # a finished run found again is reopened; a changed param is refused
    third = Tracker(uri, "smoke")
    with pytest.raises(ValueError, match="param 'seed' was logged as '1', now '2'"):
        third.start("arm=C/seed=1", tags={}, params={"arm": "C", "seed": 2})
    assert third.run_id is None and second.client.get_run(run_id).info.status == "FINISHED"  # refused: untouched
    with pytest.raises(RuntimeError, match="call start"):
        third.log_round(4, {"probe_pass": 1.0})
    with pytest.raises(TypeError, match="metric 'probe_pass' at round 4: expected a number"):
        second.log_round(4, {"probe_pass": "high"})
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

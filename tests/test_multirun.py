"""Scale-out: every arm x seed through Hydra multirun — joblib locally (`make runs`), and the
submitit launcher that a SLURM cluster uses, exercised here with submitit_local — all jobs
against one tracking store."""
import os
import subprocess
import sys

from harness import PROJECT_ROOT
from harness.core import records
from harness.running.runner import run_dir
from harness.spec.protocol import load_protocol
from tests.tiny_protocol import freeze_tiny


def _env():
    """This process's environment without a tracking URI: the jobs log into the results folder's store."""
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _mlflow_runs(results, name):
    """The experiment's arm x seed runs (besides them: its layout, made once whatever the jobs, checked here)."""
    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id])
    layout = [r.info.run_name for r in runs if "seed" not in r.data.tags]
    assert layout == [*load_protocol(results.parent / name).arm_names, "base", "readout", "protocol"]
    return [r for r in runs if "seed" in r.data.tags]


def test_make_runs_launches_every_arm_and_seed_with_joblib(tmp_path):
    proto, results = freeze_tiny(tmp_path, seeds={"run_seeds": [1]},
                                 decision={"spread_rule": {"test": "range", "multiplier": 1.0}})
    p = subprocess.run([sys.executable, "-m", "harness", "runs", "--protocol", str(proto), "--results-dir", str(results),
                        "--jobs", "2"], cwd=PROJECT_ROOT, capture_output=True, text=True, env=_env(), timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    arms = load_protocol(proto).arm_names  # every registered arm, the controls included
    for arm in arms:
        assert records.is_sealed(run_dir(results, proto.name, arm, 1))
        assert f"[run] tiny {arm} seed 1: started" in p.stdout and f"[run] tiny {arm} seed 1: sealed in" in p.stdout
    assert sorted(r.data.tags["arm"] for r in _mlflow_runs(results, proto.name)) == arms
    assert "\r" not in p.stdout + p.stderr  # no progress-bar frames where nobody watches a terminal
    assert "INFO" not in p.stdout + p.stderr  # MLflow's schema chatter is silenced
    again = subprocess.run([sys.executable, "-m", "harness", "runs", "--protocol", str(proto), "--results-dir",
                            str(results)], cwd=PROJECT_ROOT, capture_output=True, text=True, env=_env(), timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("sealed already, skipped") == len(arms) and "every registered run of tiny is sealed" in again.stdout


def test_submitit_launcher_runs_jobs(tmp_path):
    proto, results = freeze_tiny(tmp_path)
    cmd = [sys.executable, "-m", "harness", "run", "-m", f"protocol={proto}", "arm=A", "seed=1,2",
           f"results_dir={results}", "progress=false", "hydra/launcher=submitit_local"]
    p = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, env=_env(), timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for seed in (1, 2):
        assert records.is_sealed(run_dir(results, proto.name, "A", seed))
    assert len(_mlflow_runs(results, proto.name)) == 2


def test_a_frozen_override_is_refused_before_any_job(tmp_path):
    p = subprocess.run([sys.executable, "-m", "harness", "run", "protocol=smoke", "budget.rounds=5"], cwd=PROJECT_ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 2 and "'budget.rounds' is frozen in protocols/smoke/budget.yaml" in p.stderr

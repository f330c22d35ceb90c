"""MLflow mirror of the experiment, for people to browse: the sealed files are the record, MLflow
an index of them.

The experiment holds, from its first job on, one run per registered arm (named by the arm: the mean
over its seeds), the base as a reference, the protocol and the readout; each arm x seed is a run
named "<arm>/seed<k>" nested under its arm's run. They are created once, oldest first: protocol,
readout, base, then the arms in reverse registered order, so the UI's default order (newest first)
lists A, B, C, the controls, base, readout, protocol, and its charts (the first ten rows) show every
arm. Each run carries a fixed colour (`mlflow.runColor`: an arm's, the report's), MLflow's own source
tags (`mlflow.source.git.commit` and `.name`, harness.spec.provenance's commit) and the digest of
its environment (`environment_sha256`).

Steps are whole rounds: step k is the state after k rounds, step 0 the base (every run's round -1,
frozen/base_eval.json), so the x axis runs 0..rounds. An arm's run logs the mean over its seeds of
the aggregated metrics at a step once every seed has logged it; the base's run logs its one
evaluation at every step, a flat reference line. (MLflow's charts leave the axis ticks to Plotly,
which spaces them by the chart's width: a wide chart of a few rounds labels 0.5 between the whole
steps logged; MLflow offers no setting for it.) The primary metric, `0_primary/probe_pass_rate`,
sorts first (the UI makes one chart section per prefix, sorted by name). Artifacts sit at their path
under the results folder ("<protocol>/A/seed1/records.jsonl", "<protocol>/readout/report.html"; the
protocol's files at "protocols/<protocol>/..."); round checkpoints are not copied: a small
`checkpoints.json` names each one by that path and its sha256.

MLflow 3's UI chooses its navigation per browser (GenAI unless switched), not per experiment: the
experiment's kind tag (`mlflow.experimentKind`) is set (the model-training view lists only the
experiments of its kind), the server `make ui` starts (harness.running.mlflow_ui) makes the
model-training view the browser's default, and every link the harness prints (`runs_page`) carries
`workflowType=machine_learning`, which opens that view from any MLflow server.

The experiment's artifact location on an SQLite store is `mlflow-artifacts:/<experiment>`, a path
relative to the store's artifact folder (<db dir>/mlartifacts, `artifacts_root`): nothing in the
database names the machine or the folder it was made in, so a results folder moved or copied
elsewhere still shows its artifacts. MLflow's client resolves such a location only through a
server, so the harness writes and lists artifacts itself (`artifact_repository`), and `make ui`
serves that folder (`mlflow ui --artifacts-destination <results>/mlartifacts`).

The default store is an embedded SQLite file (`results/mlflow.db`); `MLFLOW_TRACKING_URI` points at
a server instead. Many jobs share one SQLite file. Left alone, jobs that open a fresh store at the
same moment each run MLflow's schema migrations and all but one fail ("duplicate column name"). So:
the database is created (schema migrations) and the experiment and its runs created under an
exclusive file lock, the database is switched to WAL journalling (readers no longer block the
writer), and every call retries with backoff on SQLite's "database is locked" (raised at once,
whatever the busy timeout, when a read transaction must be upgraded to a write while another process
holds the write lock).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import numbers
import os
import random
import re
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

# Nothing reaches the network: MLflow 3 sends usage telemetry unless told not to.
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"

from mlflow import MlflowClient  # noqa: E402  (after the environment is set)
from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository  # noqa: E402
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # noqa: E402

# The store's schema set-up talks at INFO on every new database ("Creating initial MLflow database
# tables...", alembic's migration steps): noise in a run's output, so only warnings get through.
for _name in ("mlflow.store.db.utils", "mlflow.store.db", "alembic", "alembic.runtime.migration"):
    logging.getLogger(_name).setLevel(logging.WARNING)

_RUN_KEY = re.compile(r"^[A-Za-z0-9_.:=/@+-]+$")
ARTIFACTS_DIR = "mlartifacts"  # an SQLite store's artifacts, beside the database (what `make ui` serves)
PROXIED = "mlflow-artifacts:"  # the scheme of a location relative to the served artifact folder
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # the UI's runs-and-charts view
WORKFLOW_TYPE = "machine_learning"  # MLflow 3's model-training navigation (its ?workflowType=)
# fixed colours (mlflow.runColor): each arm the report's (matplotlib's tab: colours, harness.readout.report)
ARM_COLOURS = {"A": "#7f7f7f", "B": "#1f77b4", "C": "#ff7f0e", "P": "#2ca02c", "N": "#9467bd", "D": "#8c564b"}
OTHER_ARM_COLOURS = ("#d62728", "#e377c2", "#bcbd22", "#17becf")  # other arms', by their registered position
BASE_COLOUR, RECORD_COLOUR = "#000000", "#c7c7c7"  # the base's reference line; the protocol and readout runs
NOTE = "mlflow.note.content"  # a run's (and the experiment's) description in the UI
_STATUSES = ("FINISHED", "FAILED", "KILLED")
_RETRIES = 12  # backoff 0.05 s doubling to 2 s: about 13 s of waiting in all before giving up
_MAX_PARAM_LEN = 6000  # MLflow's limit on a param value
_BATCH = 100  # MLflow's limit on params (and a comfortable size for metrics) per log_batch
EXPERIMENT_NOTE = (
    "One run per arm (the mean over its seeds; its seeds are nested under it), the base as a reference "
    "line, the protocol and the readout. Step k is the state after k rounds; step 0 is the base. "
    "Artifacts sit at their path under the results folder. The sealed files in the results folder are the "
    "record; this is an index of them.")


def default_tracking_uri(results_dir) -> str:
    """`MLFLOW_TRACKING_URI` if set, else an SQLite store at <results_dir>/mlflow.db (absolute path)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def _sqlite_path(uri: str) -> Path | None:
    """The database file of an sqlite:/// URI, or None for any other store."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    if not path or path == ":memory:":
        raise ValueError(f"tracking URI {uri!r}: an SQLite store must be a file path, e.g. sqlite:////abs/path/mlflow.db")
    return Path(path)


def artifacts_root(db_path: Path) -> Path:
    """The folder an SQLite store's `mlflow-artifacts:` locations are relative to: <db dir>/mlartifacts."""
    return Path(db_path).parent / ARTIFACTS_DIR


def artifact_repository(tracking_uri: str, artifact_uri: str):
    """MLflow's artifact repository for a run's (or an experiment's) `artifact_uri`. On an SQLite
    store an `mlflow-artifacts:/<path>` location is the folder artifacts_root/<path> (MLflow's client
    would need a server to resolve it); anything else is resolved by MLflow."""
    db_path = _sqlite_path(tracking_uri)
    if db_path is not None and artifact_uri.startswith(PROXIED):
        artifact_uri = (artifacts_root(db_path) / urlparse(artifact_uri).path.lstrip("/")).as_uri()
    return get_artifact_repository(artifact_uri, tracking_uri=tracking_uri)


def _is_locked_error(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if "database is locked" in str(exc) or "database table is locked" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _retry(fn, *args, **kwargs):
    """Call fn, retrying with exponential backoff (and jitter) while SQLite reports the database locked."""
    jitter = random.Random(os.getpid())  # spreads colliding processes apart; never affects results
    delay = 0.05
    for attempt in range(_RETRIES):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if attempt == _RETRIES - 1 or not _is_locked_error(e):
                raise
            time.sleep(delay * (0.5 + jitter.random()))
            delay = min(2 * delay, 2.0)


@contextlib.contextmanager
def _store_lock(db_path: Path | None):
    """Exclusive lock across processes for one-time set-up on an SQLite store (no-op for a server)."""
    if db_path is None:
        yield
        return
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{db_path}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _flatten(params: dict, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b": "value"} with values as MLflow stores them (strings, capped in length)."""
    out = {}
    for k, v in params.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, f"{key}."))
        else:
            out[key] = str(v)[:_MAX_PARAM_LEN]
    return out


def _sqlite_ready(db_path: Path) -> bool:
    """True when the database exists, journals in WAL mode and holds MLflow's (stamped) schema."""
    if not db_path.exists():
        return False
    con = sqlite3.connect(db_path, timeout=30)
    try:
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
        stamped = con.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='alembic_version'").fetchone()[0]
        return mode == "wal" and bool(stamped) and con.execute("SELECT count(*) FROM alembic_version").fetchone()[0] > 0
    finally:
        con.close()


def prepare_store(tracking_uri: str, experiment: str) -> tuple[MlflowClient, str]:
    """Create the store and the experiment if needed; return (client, experiment id).

    Safe to call from many processes at once: for SQLite, creating the schema (MLflow runs its
    migrations on first use) and creating the experiment happen under an exclusive file lock; a
    store that is already set up is opened without waiting on the lock. An experiment made here on
    an SQLite store keeps its artifacts at `mlflow-artifacts:/<experiment>`, i.e. next to the
    database in <db dir>/mlartifacts/<experiment> (one made earlier keeps the location it has).
    """
    db_path = _sqlite_path(tracking_uri)
    if db_path is not None:
        with _store_lock(db_path):
            if not _sqlite_ready(db_path):
                con = sqlite3.connect(db_path, timeout=30)
                try:
                    con.execute("PRAGMA journal_mode=WAL")  # persistent: stored in the database file
                finally:
                    con.close()
                # creating the store runs the schema's migrations and makes MLflow's "Default"
                # experiment, given a relative location too (else <the first job's cwd>/mlruns/0)
                _retry(SqlAlchemyStore, tracking_uri, f"{PROXIED}/")
    client = _retry(MlflowClient, tracking_uri)
    tags = dict([EXPERIMENT_KIND, (NOTE, EXPERIMENT_NOTE)])
    exp = _retry(client.get_experiment_by_name, experiment)
    if exp is not None:
        for key, value in tags.items():
            if exp.tags.get(key) != value:
                _retry(client.set_experiment_tag, exp.experiment_id, key, value)
        return client, exp.experiment_id
    with _store_lock(db_path):
        exp = _retry(client.get_experiment_by_name, experiment)  # another job may have won the race
        if exp is not None:
            return client, exp.experiment_id
        location = f"{PROXIED}/{experiment}" if db_path is not None else None  # a server picks its own
        try:
            return client, _retry(client.create_experiment, experiment, artifact_location=location, tags=tags)
        except Exception as e:  # a server store: a job on another machine created it first
            if "RESOURCE_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
                raise
            return client, _retry(client.get_experiment_by_name, experiment).experiment_id


def run_key(experiment: str, name: str) -> str:
    """The tag a run is found again by: "<experiment>/<name>" (name: protocol, readout, base, an arm, or
    "<arm>/seed<k>")."""
    return f"{experiment}/{name}"


def arm_colour(arm: str, arms: list[str]) -> str:
    """An arm's fixed colour: ARM_COLOURS' for the shipped arms' names, else OTHER_ARM_COLOURS by the
    arm's position among the registered arms that have none."""
    if arm in ARM_COLOURS:
        return ARM_COLOURS[arm]
    others = [a for a in arms if a not in ARM_COLOURS]
    return OTHER_ARM_COLOURS[others.index(arm) % len(OTHER_ARM_COLOURS)]


def runs_page(experiment_id: str, host: str = "http://127.0.0.1:5000") -> str:
    """The experiment's runs, as charts, in MLflow 3's model-training navigation (the UI's default
    is GenAI, chosen per browser: the query string chooses it per link)."""
    return f"{host}/#/experiments/{experiment_id}/runs?workflowType={WORKFLOW_TYPE}&compareRunsMode=CHART"


def source_tags(record: dict, command: str) -> dict[str, str]:
    """MLflow's own source tags from a provenance record (harness.spec.provenance.record): the git
    commit (the UI's "Version"), the command (its "Source"), and the environment's digest."""
    git, env = record.get("git") or {}, record.get("environment") or {}
    return {"mlflow.source.name": f"python -m harness {command}", "mlflow.source.type": "LOCAL",
            "mlflow.source.git.commit": str(git.get("commit") or ""), "git_clean": str(git.get("clean")),
            "environment_sha256": str(env.get("sha256") or "")}


@dataclass(frozen=True)
class ArmRun:
    """An arm's run: the mean over its `n_seeds` seeds' runs (nested under it) of `keys`, logged at
    each step of 0..`last_step` once every seed has logged that step."""
    run_key: str
    n_seeds: int
    last_step: int
    keys: tuple[str, ...]


def layout(arms: list[str], n_seeds: int, rounds: int) -> list[tuple[str, dict]]:
    """(run name, tags) of the runs an experiment holds from its first job on, in creation order
    (oldest first): protocol, readout, base, then the arms in reverse, so that newest first lists the
    arms in registered order, then base, readout, protocol."""
    out = [("protocol", {"kind": "protocol", "mlflow.runColor": RECORD_COLOUR,
                         NOTE: "Every frozen value of the protocol as a param; its files and its lock as artifacts."}),
           ("readout", {"kind": "readout", "mlflow.runColor": RECORD_COLOUR,
                        NOTE: "The one-shot readout: its outcome (tag and param), verdict.json, the reports and the "
                              "figures. Scheduled until the readout runs."}),
           ("base", {"kind": "base", "mlflow.runColor": BASE_COLOUR,
                     NOTE: "The frozen base, scored once at freeze (frozen/base_eval.json), at every step: the "
                           "reference line every arm starts from at step 0."})]
    for arm in reversed(arms):
        out.append((arm, {"kind": "arm", "arm": arm, "mlflow.runColor": arm_colour(arm, arms),
                          NOTE: f"Arm {arm}: the mean over its {n_seeds} seeds at each step once every seed has "
                                f"reached it (steps 0-{rounds}: step k after k rounds, 0 the base); its seeds are "
                                f"the runs nested under it."}))
    return out


def open_experiment(tracking_uri: str, experiment: str, arms: list[str], n_seeds: int, rounds: int,
                    tags: dict | None = None) -> "Tracker":
    """The experiment with its layout's runs, created once, oldest first, each with `tags` besides its
    own (the protocol's name, the freeze's source tags) and SCHEDULED until it is logged (a later job
    finds them and creates nothing). Returns a Tracker on the experiment."""
    t = Tracker(tracking_uri, experiment)
    with _store_lock(t._db_path):
        now = int(time.time() * 1000)
        extra = {str(k): str(v) for k, v in (tags or {}).items()}
        for i, (name, own) in enumerate(layout(arms, n_seeds, rounds)):
            if t._find_run(run_key(experiment, name)) is None:
                # one millisecond apart: creation times order the UI's list, and a tie would not
                run = _retry(t.client.create_run, t.experiment_id, run_name=name, start_time=now + i,
                             tags={**(extra or {}), "run_key": run_key(experiment, name), **own})
                _retry(t.client.update_run, run.info.run_id, status="SCHEDULED")
    return t


class Tracker:
    """One MLflow run, found again by its `run_key` tag when a job resumes."""

    def __init__(self, tracking_uri: str, experiment: str):
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self._db_path = _sqlite_path(tracking_uri)
        self.client, self.experiment_id = prepare_store(tracking_uri, experiment)
        self.run_id: str | None = None
        self.arm_run: ArmRun | None = None
        self._logged_steps: dict[str, set[int]] = {}
        self._repo = None  # the run's artifact repository, once asked for

    def artifacts(self):
        """The run's artifact repository (see artifact_repository): what is logged to it, and listed."""
        if self._repo is None:
            run = _retry(self.client.get_run, self._require_run())
            self._repo = artifact_repository(self.tracking_uri, run.info.artifact_uri)
        return self._repo

    def _find_run(self, run_key: str):
        runs = _retry(self.client.search_runs, [self.experiment_id], filter_string=f"tags.run_key = '{run_key}'",
                      order_by=["attributes.start_time ASC"], max_results=10)
        return runs[0] if runs else None  # more than one only if created outside Tracker: take the first

    def start(self, run_key: str, tags: dict, params: dict, run_name: str | None = None,
              arm_run: ArmRun | None = None) -> bool:
        """Resume the run tagged run_key (finished or not) or create it (named run_name, default
        run_key), nested under `arm_run`'s run when given (open_experiment made it); set tags; log
        params not yet logged. Returns True when the run was created now.

        A param already logged with a different value raises ValueError (the frozen config changed).
        """
        if not _RUN_KEY.match(run_key):
            raise ValueError(f"run_key {run_key!r}: expected letters, digits and _.:=/@+- only")
        tags = dict(tags)
        if arm_run is not None:
            parent = self._find_run(arm_run.run_key)
            if parent is None:
                raise ValueError(f"MLflow run {run_key}: its arm's run {arm_run.run_key} does not exist "
                                 f"(tracking.open_experiment creates it)")
            tags["mlflow.parentRunId"] = parent.info.run_id
            if parent.info.status == "SCHEDULED":
                _retry(self.client.update_run, parent.info.run_id, status="RUNNING")
        flat = _flatten(params)
        # find-or-create and the params' check and first logging, as one step: twin jobs (two seeds
        # opening the shared "base" run at once) would otherwise both insert the same params
        with _store_lock(self._db_path):
            run = self._find_run(run_key)
            created = run is None
            if created:
                run = _retry(self.client.create_run, self.experiment_id, run_name=run_name or run_key,
                             tags={"run_key": run_key})
            run_id, have = run.info.run_id, run.data.params
            changed = [k for k, v in flat.items() if k in have and have[k] != v]
            if changed:
                k = changed[0]
                raise ValueError(f"MLflow run {run_key}: param {k!r} was logged as {have[k]!r}, now {flat[k]!r} "
                                 f"({len(changed)} differ); a changed config is a new run")
            new_params = [Param(k, v) for k, v in sorted(flat.items()) if k not in have]
            new_tags = [RunTag(str(k), str(v)) for k, v in sorted(tags.items())]
            for i in range(0, max(len(new_params), len(new_tags)), _BATCH):
                _retry(self.client.log_batch, run_id, params=new_params[i:i + _BATCH], tags=new_tags[i:i + _BATCH])
        # metrics already logged before a crash: log_step skips them so a resumed job adds no duplicates
        logged_steps = {key: {m.step for m in _retry(self.client.get_metric_history, run_id, key)}
                        for key in run.data.metrics}
        self.run_id, self._logged_steps, self.arm_run, self._repo = run_id, logged_steps, arm_run, None
        if run.info.status != "RUNNING":
            _retry(self.client.update_run, run_id, status="RUNNING")
        return created

    def _require_run(self) -> str:
        if self.run_id is None:
            raise RuntimeError("Tracker: call start(run_key, tags, params) first")
        return self.run_id

    def log_step(self, step: int, metrics: dict) -> None:
        """Log metrics at `step` (a whole number of rounds: 0 the base, k after k rounds). None and
        non-finite values are skipped, as are (metric, step) pairs this run already holds (a resumed
        job re-running a round). Then the arm's run, if any, gets the steps its seeds have completed."""
        run_id = self._require_run()
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise TypeError(f"step {step!r}: expected a whole number of rounds (0 for the base)")
        ts = int(time.time() * 1000)
        batch = []
        for key, value in sorted(metrics.items()):
            if value is None:
                continue
            if not isinstance(value, numbers.Real):
                raise TypeError(f"metric {key!r} at step {step}: expected a number, got {type(value).__name__} {value!r}")
            value = float(value)
            if not math.isfinite(value) or step in self._logged_steps.get(key, ()):
                continue
            batch.append(Metric(key, value, ts, int(step)))
        for i in range(0, len(batch), _BATCH):
            _retry(self.client.log_batch, run_id, metrics=batch[i:i + _BATCH])
        for m in batch:
            self._logged_steps.setdefault(m.key, set()).add(m.step)
        if self.arm_run is not None:
            self._log_arm_means()

    def _log_arm_means(self) -> None:
        """The arm's run: the mean over its seeds' runs of each aggregated metric at every step all of
        them hold and it does not yet; FINISHED once it holds the last step of every one."""
        arm = self.arm_run
        with _store_lock(self._db_path):  # two seeds finishing one step together log its mean once
            parent = self._find_run(arm.run_key)
            seeds = _retry(self.client.search_runs, [self.experiment_id],
                           filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'", max_results=1000)
            if len(seeds) < arm.n_seeds:
                return
            ts, done = int(time.time() * 1000), True
            for key in arm.keys:
                have = {m.step for m in _retry(self.client.get_metric_history, parent.info.run_id, key)}
                values = [{m.step: m.value for m in _retry(self.client.get_metric_history, r.info.run_id, key)}
                          for r in seeds]
                steps = sorted(set.intersection(*(set(v) for v in values)) - have)
                batch = [Metric(key, sum(v[s] for v in values) / len(values), ts, s) for s in steps]
                for i in range(0, len(batch), _BATCH):
                    _retry(self.client.log_batch, parent.info.run_id, metrics=batch[i:i + _BATCH])
                done = done and arm.last_step in have | set(steps)
            if done and parent.info.status != "FINISHED":
                _retry(self.client.set_terminated, parent.info.run_id, "FINISHED")

    def log_artifacts(self, path, artifact_path: str | None = None, leave_out: tuple[str, ...] = ()) -> None:
        """Copy a file or a directory tree (e.g. the sealed run directory) into the run's artifacts
        (under artifact_path); files whose path relative to a directory starts with one of the
        `leave_out` prefixes (e.g. "checkpoints/") are not copied."""
        repo, path = self.artifacts(), Path(path)
        if path.is_dir():
            for f in sorted(q for q in path.rglob("*") if q.is_file()):
                rel = f.relative_to(path)
                if rel.as_posix().startswith(tuple(leave_out)) if leave_out else False:
                    continue
                sub = "/".join(p for p in (artifact_path, rel.parent.as_posix()) if p and p != ".") or None
                repo.log_artifact(str(f), sub)
        elif path.is_file():
            repo.log_artifact(str(path), artifact_path)
        else:
            raise FileNotFoundError(f"artifact path {path} does not exist")

    def log_dict(self, data: dict, name: str) -> None:
        """A small JSON artifact `name` (e.g. checkpoints.json) in the run's artifacts, written as
        MLflow's log_dict writes it (indent 2)."""
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / Path(name).name
            local.write_text(json.dumps(data, indent=2, default=str))
            self.artifacts().log_artifact(str(local), Path(name).parent.as_posix() if "/" in name else None)

    def finish(self, status: str = "FINISHED", quiet: bool = False) -> None:
        """End the run: FINISHED, or FAILED (an exception) / KILLED (Ctrl-C) for a run cut short.
        quiet: a failure to reach the store is swallowed (the run is ending on another error)."""
        if status not in _STATUSES:
            raise ValueError(f"finish status {status!r}: expected one of {_STATUSES}")
        try:
            _retry(self.client.set_terminated, self._require_run(), status)
        except Exception:
            if not quiet:
                raise


def _fill_once(tracking_uri: str, experiment: str, name: str) -> Tracker | None:
    """A Tracker on the layout's run `name` to log it, or None when an earlier job finished it
    (reopening it would only move its end time)."""
    t = Tracker(tracking_uri, experiment)
    existing = t._find_run(run_key(experiment, name))
    if existing is not None and existing.info.status == "FINISHED":
        return None
    return t


def log_protocol(tracking_uri: str, experiment: str, protocol_dir, lock_path, params: dict, tags: dict) -> None:
    """The experiment's "protocol" run, once: every frozen value as a param, the protocol's files at
    protocols/<name>/ and its lock at <name>/frozen/ (their paths in the checkout and under the results
    folder). A second call finds it finished and logs nothing."""
    t = _fill_once(tracking_uri, experiment, "protocol")
    if t is None:
        return
    t.start(run_key(experiment, "protocol"), tags={**tags, "kind": "protocol"}, params=params, run_name="protocol")
    if not t.artifacts().list_artifacts():
        t.log_artifacts(protocol_dir, f"protocols/{experiment}", leave_out=("__pycache__",))
        if Path(lock_path).is_file():
            t.log_artifacts(lock_path, f"{experiment}/frozen")
    t.finish()


def log_base(tracking_uri: str, experiment: str, steps: int, metrics: dict, params: dict, tags: dict,
             base_eval_path, checkpoint: dict) -> None:
    """The experiment's "base" run, once: the base's one evaluation (`metrics`) at every step 0..`steps`
    (the reference line), `params` (its sha256, ...), frozen/base_eval.json at <name>/frozen/ and
    `checkpoint` ({"<name>/frozen/base.pt": sha256}) as checkpoints.json."""
    t = _fill_once(tracking_uri, experiment, "base")
    if t is None:
        return
    t.start(run_key(experiment, "base"), tags={**tags, "kind": "base"}, params=params, run_name="base")
    for step in range(steps + 1):
        t.log_step(step, metrics)
    if not t.artifacts().list_artifacts():
        t.log_artifacts(base_eval_path, f"{experiment}/frozen")
        t.log_dict({"relative_to": "the results folder (RESULTS=, default results/)", "checkpoints": checkpoint},
                   "checkpoints.json")
    t.finish()


def log_readout(tracking_uri: str, experiment: str, readout_dir, verdict: dict, tags: dict) -> tuple[str, str]:
    """The readout, in the experiment's "readout" run: the verdict's outcome and clause (tags and
    params), the design summary when the verdict holds one (design.json), and every file of the
    sealed readout at <name>/readout/. Returns (the MLflow run id, the experiment id)."""
    t = Tracker(tracking_uri, experiment)
    outcome = verdict.get("verdict", {})
    t.start(run_key(experiment, "readout"), tags={**tags, "kind": "readout", "outcome": str(outcome.get("outcome"))},
            params={"outcome": outcome.get("outcome"), "clause": outcome.get("clause")}, run_name="readout")
    if verdict.get("design"):
        t.log_dict(verdict["design"], "design.json")
    t.log_artifacts(readout_dir, f"{experiment}/readout")
    t.finish()
    return t.run_id, t.experiment_id

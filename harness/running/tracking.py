"""MLflow mirror of the runs: one MLflow run per arm x seed, for people to browse.

The experiment is tagged as model development (`mlflow.experimentKind`), so the UI opens on runs
and charts. Runs are named "<arm>/seed<k>" and tagged `arm`, so they sort and group by arm; each
logs only what differs between runs (the arm's settings, its seed) plus the protocol's name, lock
hash and code version. The full protocol is logged once, in a run named "protocol"; the readout
in a run named "readout" (verdict, design summary, report, figures). The primary metric is
`0_primary/probe_pass_rate`: the UI makes one chart section per prefix, sorted by name, so it is
the first chart. Checkpoints are not copied: a small
`checkpoints.json` artifact names each one by its path under the results folder and its sha256.

The sealed files are the record the analyzer reads; MLflow is only an index. The default store is
an embedded SQLite file (`results/mlflow.db`); `MLFLOW_TRACKING_URI` points at a server instead.

Many jobs share one SQLite file. Left alone, jobs that open a fresh store at the same moment each
run MLflow's schema migrations and all but one fail ("duplicate column name"). So: the database is
created (schema migrations) and the experiment created under an exclusive file lock, the database is switched to WAL
journalling (readers no longer block the writer), and every call retries with backoff on SQLite's
"database is locked" (raised at once, whatever the busy timeout, when a read transaction must be
upgraded to a write while another process holds the write lock).
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import numbers
import os
import random
import re
import sqlite3
import time
from pathlib import Path

# Nothing reaches the network: MLflow 3 sends usage telemetry unless told not to.
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"

from mlflow import MlflowClient  # noqa: E402  (after the environment is set)
from mlflow.entities import Metric, Param, RunTag  # noqa: E402

# The store's schema set-up talks at INFO on every new database ("Creating initial MLflow database
# tables...", alembic's migration steps): noise in a run's output, so only warnings get through.
for _name in ("mlflow.store.db.utils", "mlflow.store.db", "alembic", "alembic.runtime.migration"):
    logging.getLogger(_name).setLevel(logging.WARNING)

_RUN_KEY = re.compile(r"^[A-Za-z0-9_.:=/@+-]+$")
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # the UI's runs-and-charts view
_STATUSES = ("FINISHED", "FAILED", "KILLED")
_RETRIES = 12  # backoff 0.05 s doubling to 2 s: about 13 s of waiting in all before giving up
_MAX_PARAM_LEN = 6000  # MLflow's limit on a param value
_BATCH = 100  # MLflow's limit on params (and a comfortable size for metrics) per log_batch


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
    store that is already set up is opened without waiting on the lock. Artifacts of an SQLite
    store go next to the database, in <db dir>/mlartifacts/<experiment>.
    """
    db_path = _sqlite_path(tracking_uri)
    client = None
    if db_path is not None:
        with _store_lock(db_path):
            if not _sqlite_ready(db_path):
                con = sqlite3.connect(db_path, timeout=30)
                try:
                    con.execute("PRAGMA journal_mode=WAL")  # persistent: stored in the database file
                finally:
                    con.close()
                client = _retry(MlflowClient, tracking_uri)  # opening the store creates the schema
    client = client or _retry(MlflowClient, tracking_uri)
    exp = _retry(client.get_experiment_by_name, experiment)
    if exp is not None:
        if exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
            _retry(client.set_experiment_tag, exp.experiment_id, *EXPERIMENT_KIND)
        return client, exp.experiment_id
    with _store_lock(db_path):
        exp = _retry(client.get_experiment_by_name, experiment)  # another job may have won the race
        if exp is not None:
            return client, exp.experiment_id
        location = (db_path.parent / "mlartifacts" / experiment).as_uri() if db_path is not None else None
        try:
            return client, _retry(client.create_experiment, experiment, artifact_location=location,
                                  tags=dict([EXPERIMENT_KIND]))
        except Exception as e:  # a server store: a job on another machine created it first
            if "RESOURCE_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
                raise
            return client, _retry(client.get_experiment_by_name, experiment).experiment_id


class Tracker:
    """One MLflow run per arm x seed, found again by its `run_key` tag when a job resumes."""

    def __init__(self, tracking_uri: str, experiment: str):
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self._db_path = _sqlite_path(tracking_uri)
        self.client, self.experiment_id = prepare_store(tracking_uri, experiment)
        self.run_id: str | None = None
        self._logged_steps: dict[str, set[int]] = {}

    def _find_run(self, run_key: str):
        runs = _retry(self.client.search_runs, [self.experiment_id], filter_string=f"tags.run_key = '{run_key}'",
                      order_by=["attributes.start_time ASC"], max_results=10)
        return runs[0] if runs else None  # more than one only if created outside Tracker: take the first

    def start(self, run_key: str, tags: dict, params: dict, run_name: str | None = None) -> bool:
        """Resume the run tagged run_key (finished or not) or create it (named run_name, default
        run_key); set tags; log params not yet logged. Returns True when the run was created now.

        A param already logged with a different value raises ValueError (the frozen config changed).
        """
        if not _RUN_KEY.match(run_key):
            raise ValueError(f"run_key {run_key!r}: expected letters, digits and _.:=/@+- only")
        with _store_lock(self._db_path):  # find-or-create must not race with a twin job
            run = self._find_run(run_key)
            created = run is None
            if created:
                run = _retry(self.client.create_run, self.experiment_id, run_name=run_name or run_key,
                             tags={"run_key": run_key})
        run_id = run.info.run_id
        # metrics already logged before a crash: log_round skips them so a resumed job adds no duplicates
        logged_steps = {key: {m.step for m in _retry(self.client.get_metric_history, run_id, key)}
                        for key in run.data.metrics}
        have = run.data.params
        flat = _flatten(params)
        changed = [k for k, v in flat.items() if k in have and have[k] != v]
        if changed:
            k = changed[0]
            raise ValueError(f"MLflow run {run_key}: param {k!r} was logged as {have[k]!r}, now {flat[k]!r} "
                             f"({len(changed)} differ); a changed config is a new run")
        self.run_id, self._logged_steps = run_id, logged_steps
        if run.info.status != "RUNNING":
            _retry(self.client.update_run, run_id, status="RUNNING")
        new_params = [Param(k, v) for k, v in sorted(flat.items()) if k not in have]
        new_tags = [RunTag(str(k), str(v)) for k, v in sorted(tags.items())]
        for i in range(0, max(len(new_params), len(new_tags)), _BATCH):
            _retry(self.client.log_batch, self.run_id, params=new_params[i:i + _BATCH], tags=new_tags[i:i + _BATCH])
        return created

    def _require_run(self) -> str:
        if self.run_id is None:
            raise RuntimeError("Tracker: call start(run_key, tags, params) first")
        return self.run_id

    def log_round(self, round: int, metrics: dict) -> None:
        """Log metrics at step=round. None and non-finite values are skipped, as are (metric, round)
        pairs this run already holds (a resumed job re-running a round)."""
        run_id = self._require_run()
        ts = int(time.time() * 1000)
        batch = []
        for key, value in sorted(metrics.items()):
            if value is None:
                continue
            if not isinstance(value, numbers.Real):
                raise TypeError(f"metric {key!r} at round {round}: expected a number, got {type(value).__name__} {value!r}")
            value = float(value)
            if not math.isfinite(value) or round in self._logged_steps.get(key, ()):
                continue
            batch.append(Metric(key, value, ts, int(round)))
        for i in range(0, len(batch), _BATCH):
            _retry(self.client.log_batch, run_id, metrics=batch[i:i + _BATCH])
        for m in batch:
            self._logged_steps.setdefault(m.key, set()).add(m.step)

    def log_artifacts(self, path, artifact_path: str | None = None, leave_out: tuple[str, ...] = ()) -> None:
        """Copy a file or a directory tree (e.g. the sealed run directory) into the run's artifacts
        (under artifact_path); files whose path relative to a directory starts with one of the
        `leave_out` prefixes (e.g. "checkpoints/") are not copied."""
        run_id, path = self._require_run(), Path(path)
        if path.is_dir():
            for f in sorted(q for q in path.rglob("*") if q.is_file()):
                rel = f.relative_to(path)
                if rel.as_posix().startswith(tuple(leave_out)) if leave_out else False:
                    continue
                sub = "/".join(p for p in (artifact_path, rel.parent.as_posix()) if p and p != ".") or None
                _retry(self.client.log_artifact, run_id, str(f), sub)
        elif path.is_file():
            _retry(self.client.log_artifact, run_id, str(path), artifact_path)
        else:
            raise FileNotFoundError(f"artifact path {path} does not exist")

    def log_dict(self, data: dict, name: str) -> None:
        """A small JSON artifact `name` (e.g. checkpoints.json) in the run's artifacts."""
        _retry(self.client.log_dict, self._require_run(), data, name)

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


def log_protocol(tracking_uri: str, experiment: str, protocol_dir, lock_path, params: dict, tags: dict) -> None:
    """The experiment's "protocol" run, once: every frozen value as a param and the protocol's files
    and its lock as artifacts (protocol/, FROZEN.lock). A second call finds it and logs nothing new."""
    t = Tracker(tracking_uri, experiment)
    existing = t._find_run(f"{experiment}/protocol")
    if existing is not None and existing.info.status == "FINISHED":
        return  # logged by an earlier job: reopening it would only move its end time
    t.start(f"{experiment}/protocol", tags={**tags, "kind": "protocol"}, params=params, run_name="protocol")
    if not _retry(t.client.list_artifacts, t.run_id):
        t.log_artifacts(protocol_dir, "protocol", leave_out=("__pycache__",))
        if Path(lock_path).is_file():
            t.log_artifacts(lock_path)
    t.finish()


def log_readout(tracking_uri: str, experiment: str, readout_dir, verdict: dict, tags: dict) -> tuple[str, str]:
    """The readout as a run of its own, named "readout": the verdict's outcome and clause (tags and
    params), the design summary when the verdict holds one (design.json), verdict.json, report.md
    and the figures as artifacts. Returns (the MLflow run id, the experiment id)."""
    t = Tracker(tracking_uri, experiment)
    outcome = verdict.get("verdict", {})
    t.start(f"{experiment}/readout", tags={**tags, "kind": "readout", "outcome": str(outcome.get("outcome"))},
            params={"outcome": outcome.get("outcome"), "clause": outcome.get("clause")}, run_name="readout")
    if verdict.get("design"):
        t.log_dict(verdict["design"], "design.json")
    t.log_artifacts(readout_dir)
    t.finish()
    return t.run_id, t.experiment_id

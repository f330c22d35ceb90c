"""The deviations log: what happened after freeze that the pre-registration did not say (a rerun after
a crash, another machine, a changed thread count), in the terms of OSF's "Transparent Changes" and
CONSORT 2010 items 3b / 6b: date, what, why, who, and whether any outcome had been seen.

It lives at results/<protocol>/DEVIATIONS.jsonl, beside frozen/ and outside everything the lock
hashes, as a hash-chained record log (harness.core.records.RecordLog: an edited or removed line fails
its chain). `python -m harness deviation` appends an entry; the readout reads the log, reports it
("none" when empty) and records its sha256 and entries in verdict.json, so the audit, which
recomputes verdict.json byte for byte, sees any change made after the readout. A deviation is only
written for a frozen protocol whose lock verifies, and only before the readout; a change of frozen
content is refused by the lock as before.

The runner logs one deviation by itself (`record_resume`): a registered run that is run again after
an interruption, resumed from its last completed round (or started over when none had completed).
Several processes may append at once (runs side by side), so every append holds an exclusive lock
on the log file.
"""
from __future__ import annotations

import datetime
import fcntl
import os
from pathlib import Path

from harness.core import paths, records
from harness.core.errors import HarnessError
from harness.core.paths import DEVIATIONS_NAME
from harness.spec.frozen import verify_frozen
from harness.spec.protocol import Protocol

FIELDS = ("date", "what", "why", "who", "outcome_seen")
OUTCOME_SEEN = ("yes", "no")
AUTOMATIC = "the harness (automatic, by the registered rule)"  # `who` of the entries the runner writes
RESUME_WHY = ("the run was interrupted before it was sealed (a crash, a kill or Ctrl-C) and run again; resuming is "
              "the registered rule (PREREGISTRATION.md, Deviations), decided before any outcome existed: the rounds "
              "on record are kept, the round in progress is run again from the last checkpoint, and the run ends "
              "with the same records as an uninterrupted one")


class DeviationError(HarnessError):
    """A deviation cannot be logged (not frozen, already read out, or a field is empty or invalid)."""


def deviations_path(results_dir, name: str) -> Path:
    """results/<protocol>/DEVIATIONS.jsonl."""
    return Path(results_dir) / name / DEVIATIONS_NAME


def read_deviations(results_dir, name: str) -> dict:
    """{"entries": [...], "sha256": of the file or None when there is none}; the chain is verified
    (records.TamperError names the line that fails)."""
    path = deviations_path(results_dir, name)
    if not path.exists():
        return {"entries": [], "sha256": None}
    entries = records.RecordLog(path).records()
    for i, e in enumerate(entries, 1):
        missing = [k for k in FIELDS if not isinstance(e.get(k), str) or not e[k]]
        if missing:
            raise DeviationError(f"{path}:{i}: field(s) {missing} missing or empty; expected {list(FIELDS)}")
    return {"entries": [{k: e[k] for k in FIELDS} for e in entries], "sha256": records.sha256_file(path)}


def add_deviation(protocol: Protocol, results_dir, what: str, why: str, who: str, outcome_seen: str,
                  now: datetime.datetime | None = None) -> dict:
    """Append one entry to the protocol's deviations log and return it. Refuses unless the protocol is
    frozen with a verifying lock and not yet read out, and every field is non-empty."""
    results_dir = Path(results_dir)
    for key, value in (("what", what), ("why", why), ("who", who)):
        if not isinstance(value, str) or not value.strip():
            raise DeviationError(f"deviation: --{key} is empty; say {key} in words")
    if outcome_seen not in OUTCOME_SEEN:
        raise DeviationError(f"deviation: --outcome-seen must be one of {list(OUTCOME_SEEN)}, got {outcome_seen!r}")
    verify_frozen(protocol, results_dir)  # LockError: never frozen, or frozen content changed
    return _append(protocol, results_dir, {"what": what.strip(), "why": why.strip(), "who": who.strip(),
                                           "outcome_seen": outcome_seen}, now)


def record_resume(protocol: Protocol, results_dir, arm: str, seed: int, from_round: int,
                  now: datetime.datetime | None = None) -> dict:
    """Log that registered run arm x seed was run again after an interruption and resumed from round
    `from_round` (0: no round had completed, it started over). Called by the runner once it has verified
    the lock and rolled the run back to its last completed round; who is AUTOMATIC, outcome seen "no"."""
    what = (f"{arm} seed {seed} resumed from round {from_round} after an interruption" if from_round else
            f"{arm} seed {seed} started over from round 0 after an interruption before its first round completed")
    return _append(protocol, Path(results_dir), {"what": what, "why": RESUME_WHY, "who": AUTOMATIC,
                                                 "outcome_seen": "no"}, now)


def _append(protocol: Protocol, results_dir: Path, fields: dict, now: datetime.datetime | None) -> dict:
    """Append one entry (the date first) under an exclusive lock on the log: writers in several processes
    each chain onto the line the last one wrote. Refuses once the readout exists."""
    out = paths.readout_dir(results_dir, protocol.name)
    if out.exists():
        raise DeviationError(f"{out} is sealed: a deviation logged now would not be in its report; the deviations "
                             f"log is closed at the readout")
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).replace(microsecond=0).isoformat()
    entry = {"date": stamp, **fields}
    path = deviations_path(results_dir, protocol.name)
    records.private_dirs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        records.RecordLog(path).append(entry)  # a fresh log object: its head is read under the lock
    finally:
        os.close(fd)  # releases the lock
    return entry

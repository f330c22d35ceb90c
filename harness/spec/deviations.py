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

The log is anchored where something sealed exists: every sealed run's manifest records the log's head
at its seal (`head`: the number of entries and the chain hash of the last one), and the readout refuses
a log that does not extend every recorded head (`read_deviations(..., anchors)`), naming the run and the
missing entries; a chain that verifies cannot be shortened behind a sealed run's back. An entry added
after the last run was sealed has no sealed anchor until the readout seals the log's sha256.
"""
from __future__ import annotations

import datetime
import fcntl
import json
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


def read_deviations(results_dir, name: str, anchors: dict[str, dict] | None = None) -> dict:
    """{"entries": [...], "sha256": of the file or None when there is none}; the chain is verified
    (records.TamperError names the line that fails), and so is every anchor: `anchors` maps a sealed
    run ("A/seed1") to the head its manifest recorded (`head`), which the log must extend
    (DeviationError naming the run and the missing entries)."""
    path = deviations_path(results_dir, name)
    entries = records.RecordLog(path).records() if path.exists() else []
    for i, e in enumerate(entries, 1):
        missing = [k for k in FIELDS if not isinstance(e.get(k), str) or not e[k]]
        if missing:
            raise DeviationError(f"{path}:{i}: field(s) {missing} missing or empty; expected {list(FIELDS)}")
    check_anchors(path, _line_hashes(path), anchors or {})
    if not path.exists():
        return {"entries": [], "sha256": None}
    return {"entries": [{k: e[k] for k in FIELDS} for e in entries], "sha256": records.sha256_file(path)}


def head(results_dir, name: str) -> dict:
    """The log's head as a sealed run's manifest records it: {"entries": how many, "hash": the chain hash
    of the last entry (records.GENESIS when there is none)}. Verifies the chain (records.TamperError)."""
    path = deviations_path(results_dir, name)
    if path.exists():
        records.RecordLog(path).records()
    hashes = _line_hashes(path)
    return {"entries": len(hashes), "hash": hashes[-1] if hashes else records.GENESIS}


def _line_hashes(path: Path) -> list[str]:
    """Each entry's chain hash, in order, of a log whose chain verified (none when there is no log)."""
    if not path.exists():
        return []
    return [json.loads(line)["hash"] for line in path.read_bytes().split(b"\n") if line]


def check_anchors(path: Path, hashes: list[str], anchors: dict[str, dict]) -> None:
    """Refuse (DeviationError) unless the log whose entries hash to `hashes` extends every run's recorded
    head: at least as many entries, the same hash at the recorded entry. Names the run that recorded the
    most entries among those the log fails, and the entries missing or rewritten."""
    failed = []
    for run, anchor in sorted(anchors.items()):
        n, h = _anchor(run, anchor)
        if n > len(hashes):
            gone = f"entry {n} is" if n == len(hashes) + 1 else f"entries {len(hashes) + 1} to {n} are"
            failed.append((n, f"holds {len(hashes)} entries, but run {run} was sealed when it held {n} "
                              f"(head {h[:12]}...): {gone} missing (the log was shortened)"))
        elif (hashes[n - 1] if n else records.GENESIS) != h:
            failed.append((n, f"entry {n} hashes to {(hashes[n - 1] if n else records.GENESIS)[:12]}..., but run {run} "
                              f"was sealed when the log's head was {h[:12]}...: entries up to {n} were rewritten"))
    if failed:
        n, what = max(failed, key=lambda f: f[0])
        others = f" ({len(failed) - 1} other sealed run(s) too)" if len(failed) > 1 else ""
        raise DeviationError(f"{path}: {what}{others}; a sealed run's head is never undone")


def _anchor(run: str, anchor) -> tuple[int, str]:
    """(entries, hash) of a run's recorded head; DeviationError when it is not {"entries": int >= 0, "hash": str}."""
    n = anchor.get("entries") if isinstance(anchor, dict) else None
    h = anchor.get("hash") if isinstance(anchor, dict) else None
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 0 and isinstance(h, str) and len(h) == 64):
        raise DeviationError(f"run {run}: manifest 'deviations_head' is {str(anchor)[:120]}; expected "
                             f"{{\"entries\": <count>, \"hash\": <sha256 of the last entry>}}")
    return n, h


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


def record_other_numerics(protocol: Protocol, results_dir, where: str, account: str,
                          now: datetime.datetime | None = None) -> dict:
    """Log that `where` (a run) computed on a host whose numerics fingerprint differs from the frozen one,
    run anyway by HARNESS_ALLOW_OTHER_NUMERICS=1 (harness.learning.numerics): its bytes are not the ones
    the registered host computes. `account` is the check's one line (the component, both CPUs)."""
    return _append(protocol, Path(results_dir), {"what": f"{where} ran on another host's numerics: {account}",
                                                 "why": "HARNESS_ALLOW_OTHER_NUMERICS=1 was set for it",
                                                 "who": AUTOMATIC, "outcome_seen": "no"}, now)


def record_other_base(protocol: Protocol, results_dir, built: str, named: str, unexcused: list[str],
                      now: datetime.datetime | None = None) -> dict | None:
    """Log, once, that freeze locked this protocol on base `built` (sha256), not on the base `named` that
    model.yaml's sized_on_base says the registration was sized on, as its on_other_base: deviation
    registers; `unexcused`: the shortfalls found on this base that the override (about the named base)
    does not excuse. Called by freeze right after the lock (and again by a freeze that finds the lock, so
    a freeze killed in between still logs it). Returns the entry, or None when it is logged already."""
    what = (f"frozen on base sha256 {built}, not on the base the registration was sized on, sha256 {named} "
            f"(model.yaml sized_on_base)")
    if any(e["what"] == what for e in read_deviations(results_dir, protocol.name)["entries"]):
        return None
    why = ("model.yaml on_other_base: deviation, registered before any run, runs the experiment on the base this host "
           "builds; the figures the protocol states (its override's figures and reason, the base spread, the quoted "
           f"design tables) were measured on {named[:12]}, the pilot and the design analysis in the lock on this base"
           + (f"; on this base the override does not excuse: {'; '.join(unexcused)}" if unexcused else ""))
    return _append(protocol, Path(results_dir), {"what": what, "why": why, "who": AUTOMATIC, "outcome_seen": "no"}, now)


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

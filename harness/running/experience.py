"""C's experience store: append-only JSONL of verified material, kept from every round.

(Named apart from `make archive`, the audit tarball.) Only the run's own verified rollouts enter it:
the seed set's references (arm A's data) never do, so C's recovery trains on nothing A trains on.

One line per verified (task, solution) pair, appended to a chained record log (harness.core.records:
canonical JSON, each line carrying the hash of the one before, flushed + fsynced):

    {"kept":false,"round":3,"solution":"    s = s[::-1]\\n    return s\\n","task":{...},"task_hash":"...","win_rate":0.5}

Rejected rounds' material stays (HeirCommit keeps experience whatever the parameter decision), and
`recovery_candidates` serves one verified solution per distinct task, most recent first, for
EvoHeir-style recovery. Extra keys on a line (e.g. a chain hash) are allowed and ignored.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from harness.core.records import RecordLog
from harness.tasks.contract import Task, TaskFamily

REQUIRED_KEYS = ("task", "task_hash", "solution", "round", "win_rate", "kept")


class Experience:
    """An append-only experience store at `path` (created on the first `add`; an existing file is appended to)
    of tasks of `family`, which reads them back."""

    def __init__(self, path: str | os.PathLike, family: TaskFamily):
        self.path = Path(path)
        self.family = family

    def add(self, task: Task, solution: str, round: int, win_rate: float, kept: bool) -> None:
        """Append one verified solution of `task`, found in `round` (-1 for material that predates
        the loop) with solver `win_rate` in [0, 1]; `kept` says
        whether that round's successor was committed."""
        if not isinstance(solution, str) or not solution:
            raise ValueError(f"Experience.add: solution must be a non-empty str, got {solution!r:.80}")
        if isinstance(round, bool) or not isinstance(round, int) or round < -1:
            raise ValueError(f"Experience.add: round must be an int >= -1 (-1: material from before the first round), got {round!r}")
        if isinstance(win_rate, bool) or not isinstance(win_rate, (int, float)) or not 0.0 <= win_rate <= 1.0:
            raise ValueError(f"Experience.add: win_rate must be a number in [0, 1], got {win_rate!r}")
        if not isinstance(kept, bool):
            raise ValueError(f"Experience.add: kept must be a bool, got {kept!r}")
        record = {"task": task.to_dict(), "task_hash": task.canonical_hash, "solution": solution,
                  "round": round, "win_rate": float(win_rate), "kept": kept}
        RecordLog(self.path).append(record)

    def entries(self) -> list[dict]:
        """Every record in file order ([] if the file does not exist yet). A line that is not a JSON
        object with the required fields raises ValueError naming path:line."""
        if not self.path.exists():
            return []
        out = []
        with open(self.path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                out.append(self._parse(line, lineno))
        return out

    def _parse(self, line: str, lineno: int) -> dict:
        where = f"{self.path}:{lineno}"
        if not line.endswith("\n"):
            raise ValueError(f"{where}: truncated line (no newline at end); expected one JSON object per line")
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        missing = [k for k in REQUIRED_KEYS if k not in rec]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}; expected {list(REQUIRED_KEYS)}")
        rnd, rate = rec["round"], rec["win_rate"]
        ok = (isinstance(rec["solution"], str) and isinstance(rec["kept"], bool)
              and isinstance(rnd, int) and not isinstance(rnd, bool)
              and isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate))
        if not ok:
            raise ValueError(f"{where}: field types wrong (solution str, round int, win_rate number, kept bool): "
                             f"{ {k: rec[k] for k in ('round', 'win_rate', 'kept')} }")
        return rec

    def recovery_candidates(self, limit: int | None = None) -> list[tuple[Task, str]]:
        """One verified solution per distinct task (canonical hash): the task's most recent record,
        ordered most recent first; at most `limit` pairs. Deterministic given the file. A record
        whose task no longer hashes to its `task_hash` raises ValueError naming path:line."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"Experience.recovery_candidates: limit must be None or an int >= 0, got {limit!r}")
        seen: set[str] = set()
        out: list[tuple[Task, str]] = []
        if limit == 0:
            return out
        records = self.entries()
        for lineno in range(len(records), 0, -1):
            rec = records[lineno - 1]
            if rec["task_hash"] in seen:
                continue
            try:
                task = self.family.task_from_dict(rec["task"])
            except ValueError as e:
                raise ValueError(f"{self.path}:{lineno}: {e}") from None
            if task.canonical_hash != rec["task_hash"]:
                raise ValueError(f"{self.path}:{lineno}: task hashes to {task.canonical_hash[:12]}, "
                                 f"record says {rec['task_hash'][:12]}")
            seen.add(rec["task_hash"])
            out.append((task, rec["solution"]))
            if limit is not None and len(out) >= limit:
                break
        return out

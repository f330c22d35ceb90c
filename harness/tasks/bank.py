"""The dedup bank with the leak guard, persistent across rounds.

`check(task)` classifies a proposal, leak checks first:

    leak_probe / leak_confirm / leak_calibration
                                the task's program (its reference code with its constants, whatever
                                the docstring) is a held-out task's program; with the "ops" guard,
                                also when its op sequence is a held-out task's (harness.tasks.splits.held_out_keys)
    duplicate                   same canonical hash as a known task: a seed-set task or one admitted
                                earlier (this round or before); a re-tested copy (other inputs) included
    shape_duplicate             same shape hash (same task up to constants) as a known task
    new                         none of the above

The bank knows the seed set from the start (`known`, recorded as admitted in round -1): the
proposer's parents are seed tasks, and a mutation that gives one back is not new.

`add(task, round)` records an admitted task. `round_report(round)` counts the verdicts of that
round's checks and the cross-round duplicate rate: the fraction of the round's checked proposals
whose canonical or shape hash matches a task admitted in an EARLIER round (a recycling monitor).
The whole state is plain JSON (`to_dict` / `from_dict`) so a run can resume.
"""
from __future__ import annotations

from collections.abc import Iterable

from harness.tasks.contract import Task
from harness.tasks.splits import held_out_keys

HELD_OUT = ("probe", "confirm", "calibration")  # leak checks run in this order
VERDICTS = ("new", "duplicate", "shape_duplicate", "leak_probe", "leak_confirm", "leak_calibration")
KNOWN_ROUND = -1  # the round the seed set counts as admitted in
_STATE_VERSION = 2  # 2: the calibration split is guarded too


def held_out_hashes(tasks: Iterable[Task], guard: str = "program") -> set[str]:
    """The forbidden set for one held-out split under the leak guard `guard` ("program" or "ops")."""
    return held_out_keys(list(tasks), guard)


def _empty_counts() -> dict[str, int]:
    return {**{v: 0 for v in VERDICTS}, "checked": 0, "cross_round": 0, "admitted": 0}


class Bank:
    """Admitted tasks by canonical and shape hash (each mapped to the round it was first admitted),
    the held-out hashes, and per-round check counts."""

    def __init__(self, forbidden: dict[str, set[str]], known: Iterable[Task] = ()):
        unknown = sorted(set(forbidden) - set(HELD_OUT))
        if unknown:
            raise ValueError(f"Bank: unknown held-out set name(s) {unknown}; expected names from {list(HELD_OUT)}")
        self.forbidden: dict[str, set[str]] = {name: set(forbidden.get(name, ())) for name in HELD_OUT}
        self.canonical: dict[str, int] = {}  # canonical hash -> first admission round (KNOWN_ROUND: seed set)
        self.shape: dict[str, int] = {}  # shape hash -> first admission round
        self.counts: dict[int, dict[str, int]] = {}  # round -> verdict counts etc.
        self.current_round = 0
        for task in known:
            verdict = self.classify(task)
            if verdict.startswith("leak_"):
                raise ValueError(f"Bank: known task {task.canonical_hash[:12]} is a held-out program ({verdict})")
            self.canonical.setdefault(task.canonical_hash, KNOWN_ROUND)
            self.shape.setdefault(task.shape_hash, KNOWN_ROUND)

    @classmethod
    def for_run(cls, probe: list[Task], confirm: list[Task], seed_set: list[Task], guard: str = "program",
                calibration: list[Task] = ()) -> "Bank":
        """The bank a run starts with: probe, confirm and calibration programs forbidden under
        `guard`, the seed set known."""
        return cls({"probe": held_out_hashes(probe, guard), "confirm": held_out_hashes(confirm, guard),
                    "calibration": held_out_hashes(calibration, guard)}, known=seed_set)

    def _enter_round(self, round: int | None, caller: str) -> int:
        if round is None:
            return self.current_round
        if isinstance(round, bool) or not isinstance(round, int) or round < self.current_round:
            raise ValueError(f"Bank.{caller}: round must be an int >= the current round {self.current_round}, got {round!r}")
        self.current_round = round
        return round

    def classify(self, task: Task) -> str:
        """The verdict for `task` without recording anything."""
        canon, shape = task.canonical_hash, task.shape_hash
        keys = {canon, task.program_hash, task.ops_hash}
        for name in HELD_OUT:
            if keys & self.forbidden[name]:
                return f"leak_{name}"
        if canon in self.canonical:
            return "duplicate"
        if shape in self.shape:
            return "shape_duplicate"
        return "new"

    def check(self, task: Task, round: int | None = None) -> str:
        """Classify `task` and count it in `round`. Rounds only move forward; without a round the
        check counts in the open round: the latest round passed to check/add, or the round after
        the last one reported by `round_report`, whichever is later. Returns one of VERDICTS."""
        round = self._enter_round(round, "check")
        verdict = self.classify(task)
        counts = self.counts.setdefault(round, _empty_counts())
        counts[verdict] += 1
        counts["checked"] += 1
        earlier = self.canonical.get(task.canonical_hash, round) < round or self.shape.get(task.shape_hash, round) < round
        counts["cross_round"] += int(earlier)
        return verdict

    def add(self, task: Task, round: int) -> None:
        """Record `task` as admitted in `round`. Refuses a held-out leak or an exact duplicate:
        those must never be admitted."""
        verdict = self.classify(task)
        if verdict.startswith("leak_") or verdict == "duplicate":
            raise ValueError(f"Bank.add: refusing task {task.canonical_hash[:12]} in round {round}: verdict {verdict!r}")
        round = self._enter_round(round, "add")
        self.canonical[task.canonical_hash] = round
        self.shape.setdefault(task.shape_hash, round)
        self.counts.setdefault(round, _empty_counts())["admitted"] += 1

    def round_report(self, round: int) -> dict:
        """{round, checked, admitted, <verdict>: count for each verdict, cross_round_duplicate_rate}.
        The rate is 0.0 when nothing was checked in `round` (`checked` says so). Reporting a round
        closes it: later checks and adds belong to a later round."""
        self.current_round = max(self.current_round, round + 1)
        c = self.counts.get(round, _empty_counts())
        rate = c["cross_round"] / c["checked"] if c["checked"] else 0.0
        return {"round": round, "checked": c["checked"], "admitted": c["admitted"],
                **{v: c[v] for v in VERDICTS}, "cross_round_duplicate_rate": rate}

    def to_dict(self) -> dict:
        """JSON-ready state, sorted so that the same state always serialises to the same bytes."""
        return {"version": _STATE_VERSION,
                "forbidden": {name: sorted(self.forbidden[name]) for name in HELD_OUT},
                "canonical": dict(sorted(self.canonical.items())),
                "shape": dict(sorted(self.shape.items())),
                "counts": {str(r): dict(c) for r, c in sorted(self.counts.items())},
                "current_round": self.current_round}

    @classmethod
    def from_dict(cls, d: dict) -> "Bank":
        """Inverse of `to_dict`; raises ValueError naming the field that is missing or malformed."""
        if not isinstance(d, dict) or d.get("version") != _STATE_VERSION:
            raise ValueError(f"Bank.from_dict: expected a dict with version {_STATE_VERSION}, got {str(d)[:120]}")
        try:
            bank = cls({name: set(hashes) for name, hashes in d["forbidden"].items()})
            bank.canonical = {str(h): int(r) for h, r in d["canonical"].items()}
            bank.shape = {str(h): int(r) for h, r in d["shape"].items()}
            bank.counts = {}
            for r, c in d["counts"].items():
                if set(c) != set(_empty_counts()):
                    raise ValueError(f"Bank.from_dict: counts[{r!r}] has keys {sorted(c)}, expected {sorted(_empty_counts())}")
                bank.counts[int(r)] = {k: int(v) for k, v in c.items()}
            bank.current_round = int(d["current_round"])
        except KeyError as e:
            raise ValueError(f"Bank.from_dict: missing field {e}") from None
        except (TypeError, AttributeError) as e:
            raise ValueError(f"Bank.from_dict: malformed state ({e})") from None
        return bank

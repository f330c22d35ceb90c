"""The conformance suite's own sample of a family and its fingerprint, light enough to import in a
second interpreter (no sandbox, no torch): `python -c` runs `main` there under another hash seed, and
harness.freeze.conformance compares its answer with this process's."""
from __future__ import annotations

import json
import random
import sys

from harness.tasks import registry
from harness.tasks.contract import Task, TaskFamily

SAMPLE_PER_STRATUM = 4   # tasks drawn in every stratum
SAMPLE_POOL = 16         # tasks drawn from the distribution (`sample`)


def draw_sample(family: TaskFamily, seed: int) -> list[Task]:
    """SAMPLE_PER_STRATUM tasks in every stratum, then SAMPLE_POOL from the distribution, without
    expected outputs, from `random.Random("conformance/<seed>")`: never the protocol's splits."""
    rng = random.Random(f"conformance/{seed}")
    tasks = [family.draw(rng, s) for s in family.strata() for _ in range(SAMPLE_PER_STRATUM)]
    return tasks + [family.sample(rng, i) for i in range(SAMPLE_POOL)]


def fingerprint(family: TaskFamily, tasks: list[Task]) -> list[list]:
    """Per task: its canonical, program and op-structure hashes, program class and stratum (JSON-ready)."""
    return [[t.canonical_hash, t.program_hash, t.ops_hash, family.program_class(t), list(t.stratum)] for t in tasks]


def of_spec(spec: dict) -> list[list]:
    """The sample's fingerprint for spec {name, module, settings, seed}: the family found by name."""
    family = registry.family_class(spec["name"], spec["module"]).from_settings(spec["settings"])
    return fingerprint(family, draw_sample(family, spec["seed"]))


def main(argv: list[str]) -> None:
    print(json.dumps(of_spec(json.loads(argv[0]))))


if __name__ == "__main__":
    main(sys.argv[1:])
